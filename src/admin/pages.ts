/**
 * The admin listener's two small HTML pages until the inspector lands: the login form and an
 * honest index of what exists. No script, no inline style (the CSP allows neither), nothing from
 * a request echoed.
 */

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>${title}</title><link rel="icon" href="data:,"></head>
<body>
${body}
</body>
</html>
`;
}

export function loginPage(failed: boolean): string {
  return page(
    'hookbucket admin: log in',
    `<h1>hookbucket admin</h1>
${failed ? '<p><strong>Wrong token.</strong></p>\n' : ''}<form method="post" action="/login">
<p><label for="token">Admin token (HOOKBUCKET_ADMIN_TOKEN)</label><br>
<input id="token" name="token" type="password" autocomplete="current-password" required minlength="32" autofocus></p>
<p><button type="submit">Log in</button></p>
</form>
<p>The session lasts 12 hours, in an HttpOnly cookie.</p>`,
  );
}

/** `/`: what this listener serves today. The web inspector is not built yet, and this page says so. */
export function indexPage(o: { api: boolean; metrics: boolean; auth: boolean }): string {
  const items = [
    o.api ? '<li><a href="/api/openapi.json">/api/openapi.json</a>: the JSON API, described as OpenAPI 3.1</li>' : '',
    o.metrics ? '<li><a href="/metrics">/metrics</a>: Prometheus metrics</li>' : '',
    '<li><a href="/healthz">/healthz</a>: health, without auth</li>',
  ].filter(Boolean);
  return page(
    'hookbucket admin',
    `<h1>hookbucket admin</h1>
<p>This is the admin listener. There is no web inspector yet; what it serves:</p>
<ul>
${items.join('\n')}
</ul>
${o.auth ? '<form method="post" action="/logout"><p><button type="submit">Log out</button></p></form>' : '<p>No admin token is set, so this listener is open and bound to loopback only.</p>'}`,
  );
}
