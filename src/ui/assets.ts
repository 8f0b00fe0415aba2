/**
 * The inspector's stylesheet and its one script, served as same-origin files (/ui/style.css,
 * /ui/app.js): the admin CSP (`script-src 'self'`, `style-src 'self'`) allows them and no inline
 * code. No build step: this is the file the browser runs.
 */

export const STYLE_CSS = `
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328;background:#fff}
header{background:#24292f;padding:.4rem 1rem}
header nav{display:flex;gap:1rem;align-items:center;flex-wrap:wrap}
header a{color:#fff;text-decoration:none}
header .brand{font-weight:600}
header .logout{margin-left:auto}
main{padding:1rem;max-width:1400px}
h1{font-size:1.4rem;margin:.3rem 0 .8rem;overflow-wrap:anywhere}
h2{font-size:1.15rem;margin:1.6rem 0 .5rem;border-bottom:1px solid #d0d7de}
h3{font-size:1rem;margin:1rem 0 .3rem}
table{border-collapse:collapse}
th,td{text-align:left;vertical-align:top;padding:.25rem .5rem;border-bottom:1px solid #eaeef2}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.scroll{overflow-x:auto;max-width:100%}
.url,.path,.headers td,.headers th,.meta td{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;overflow-wrap:anywhere}
.headers th{white-space:nowrap;font-weight:600}
pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;background:#f6f8fa;padding:.6rem;overflow:auto;max-height:32rem;white-space:pre-wrap;overflow-wrap:anywhere;margin:.3rem 0}
pre.hex{white-space:pre}
pre.excerpt{max-height:8rem;max-width:28rem;padding:.2rem;margin:0}
.muted{color:#656d76}
.error{color:#cf222e;font-weight:600}
.tag{display:inline-block;font-size:.8rem;padding:0 .4rem;margin-left:.4rem;border-radius:1rem;background:#eaeef2}
.tag.paused{background:#fff8c5}
.count{margin-right:1rem}
.filters,.replay-form{display:grid;grid-template-columns:repeat(auto-fill,minmax(14rem,1fr));gap:.5rem 1rem;align-items:end}
.filters label span,.replay-form label span{display:block;font-size:.85rem;color:#656d76}
.filters input,.replay-form input{width:100%;padding:.3rem}
.actions,.wide{grid-column:1/-1;margin:0}
button{padding:.3rem .8rem;cursor:pointer}
progress{width:20rem;max-width:100%}
.timeline{padding-left:1.2rem}
.pager a{margin-right:1rem}
.spark{vertical-align:middle}
.live ul{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;padding-left:1.2rem}
@media (max-width:800px){main{padding:.5rem}}
`;

export const APP_JS = `'use strict';
// hookbucket inspector: pause/resume, replay with progress, and live requests over SSE.
// Every write is a same-origin fetch with a JSON body (the admin guard refuses anything else).
// Stored text is only ever set with textContent, never as HTML.
(function () {
  function postJson(url, body) {
    return fetch(url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body || {}),
      credentials: 'same-origin',
    }).then(function (res) {
      return res.text().then(function (text) {
        var data = null;
        try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
        if (!res.ok) {
          var err = new Error((data && data.error) || ('HTTP ' + res.status));
          err.code = data && data.code;
          throw err;
        }
        return data;
      });
    });
  }
  function bucketPath(name) { return '/api/buckets/' + encodeURIComponent(name); }

  function setupPause(section) {
    var name = section.getAttribute('data-bucket');
    var status = section.querySelector('.js-pause-status');
    section.querySelectorAll('.js-pause').forEach(function (button) {
      button.addEventListener('click', function () {
        var action = button.getAttribute('data-action');
        status.textContent = action === 'pause' ? 'pausing…' : 'resuming…';
        postJson(bucketPath(name) + '/' + action, {}).then(function () {
          location.reload();
        }, function (e) {
          status.textContent = 'refused: ' + e.message;
        });
      });
    });
  }

  function selectionBody(section) {
    var sel = {};
    try { sel = JSON.parse(section.getAttribute('data-selection') || '{}'); } catch (e) { sel = {}; }
    var body = {};
    var any = false;
    Object.keys(sel).forEach(function (k) {
      if (sel[k]) { body[k] = sel[k]; any = true; }
    });
    if (!any) body.all = true;
    var form = section.querySelector('.replay-form');
    var to = form.elements.namedItem('to').value.trim();
    var rate = form.elements.namedItem('rate').value.trim();
    if (to) body.to = to;
    if (rate) body.rate = rate;
    return body;
  }

  function setupReplay(section) {
    var name = section.getAttribute('data-bucket');
    var countButton = section.querySelector('.js-replay-count');
    var confirmButton = section.querySelector('.js-replay-confirm');
    var status = section.querySelector('.js-replay-status');
    var bar = section.querySelector('.js-replay-progress');
    var barText = section.querySelector('.js-replay-progress-text');
    var asked = null;
    section.querySelector('.replay-form').addEventListener('input', function () {
      confirmButton.hidden = true;
      asked = null;
    });
    countButton.addEventListener('click', function () {
      var body = selectionBody(section);
      body.dry_run = true;
      status.textContent = 'counting…';
      confirmButton.hidden = true;
      postJson(bucketPath(name) + '/replays', body).then(function (r) {
        var count = r && typeof r.count === 'number' ? r.count : 0;
        status.textContent = count === 0 ? 'Nothing to replay: no request matches.' : count + ' request(s) would be sent again.';
        if (count > 0) {
          asked = selectionBody(section);
          confirmButton.textContent = 'Replay ' + count + ' request(s)';
          confirmButton.hidden = false;
        }
      }, function (e) {
        status.textContent = 'refused: ' + e.message;
      });
    });
    confirmButton.addEventListener('click', function () {
      if (!asked) return;
      var body = asked;
      body.confirm = true;
      asked = null;
      confirmButton.hidden = true;
      status.textContent = 'starting…';
      postJson(bucketPath(name) + '/replays', body).then(function (r) {
        if (!r || !r.id) {
          status.textContent = 'Nothing to replay.';
          return;
        }
        status.textContent = 'Replay ' + r.id + ' started.';
        follow(r.id);
      }, function (e) {
        status.textContent = 'refused: ' + e.message;
      });
    });
    function follow(id) {
      bar.hidden = false;
      var tick = function () {
        fetch('/api/replays/' + encodeURIComponent(id), { credentials: 'same-origin' })
          .then(function (res) { return res.json(); })
          .then(function (r) {
            var p = r.progress || {};
            var total = p.total || 0;
            var settled = total - (p.remaining || 0);
            bar.max = Math.max(total, 1);
            bar.value = settled;
            var parts = [settled + ' of ' + total + ' settled'];
            ['delivered', 'failed', 'exhausted', 'superseded', 'pending', 'retrying', 'delivering', 'held'].forEach(function (k) {
              if (p[k]) parts.push(k + ' ' + p[k]);
            });
            if (r.settled) {
              barText.textContent = 'settled: ' + parts.join(', ');
              bar.setAttribute('data-settled', 'true');
              return;
            }
            barText.textContent = parts.join(', ');
            setTimeout(tick, 500);
          }, function () {
            barText.textContent = 'could not read the progress; retrying…';
            setTimeout(tick, 2000);
          });
      };
      tick();
    }
  }

  function setupLive(box) {
    if (typeof EventSource === 'undefined') return;
    var name = box.getAttribute('data-bucket');
    var list = box.querySelector('.js-live-list');
    var status = box.querySelector('.js-live-status');
    var source = new EventSource('/api/events?bucket=' + encodeURIComponent(name));
    box.hidden = false;
    source.addEventListener('open', function () { status.textContent = '(connected)'; });
    source.addEventListener('error', function () { status.textContent = '(reconnecting…)'; });
    source.addEventListener('request', function (ev) {
      var e;
      try { e = JSON.parse(ev.data); } catch (x) { return; }
      var li = document.createElement('li');
      var a = document.createElement('a');
      a.href = '/requests/' + encodeURIComponent(e.id);
      a.textContent = e.at + ' ' + e.method + ' ' + e.path + ' (' + e.size + ' bytes)';
      li.appendChild(a);
      list.insertBefore(li, list.firstChild);
      while (list.children.length > 50) list.removeChild(list.lastChild);
    });
    window.addEventListener('pagehide', function () { source.close(); });
  }

  document.addEventListener('DOMContentLoaded', function () {
    document.querySelectorAll('.controls[data-bucket]').forEach(setupPause);
    document.querySelectorAll('.replay[data-bucket]').forEach(setupReplay);
    document.querySelectorAll('.live[data-bucket]').forEach(setupLive);
  });
})();
`;
