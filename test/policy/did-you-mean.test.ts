import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { didYouMean, editDistance, similarNames } from '../../src/policy/did-you-mean.js';
import { bucketUrlText, ingestBaseUrl, parsePublicUrl, recordedUrl } from '../../src/policy/public-url.js';

describe('editDistance (optimal string alignment)', () => {
  const cases: Array<[string, string, number]> = [
    ['stripe', 'stripe', 0],
    ['strpe', 'stripe', 1],
    ['stirpe', 'stripe', 1],
    ['stripe', 'stripe-live', 5],
    ['', 'abc', 3],
    ['github', 'gitlab', 2],
  ];
  for (const [a, b, d] of cases) it(`${a} → ${b}: ${d}`, () => assert.equal(editDistance(a, b), d));
});

describe('similarNames / didYouMean', () => {
  const names = ['stripe', 'github', 'gitlab', 'slack', 'shop'];
  const cases: Array<[string, string[]]> = [
    ['strpe', ['stripe']],
    ['githb', ['github']],
    ['gitxab', ['gitlab']],
    ['gitl', ['gitlab']],
    ['sl', []],
    ['zzzzzz', []],
    ['stripe', []],
    ['shpo', ['shop']],
  ];
  for (const [word, want] of cases) it(`${word} → ${want.join(',') || 'none'}`, () => assert.deepEqual(similarNames(word, names), want));
  it('names every candidate at the best distance', () => {
    assert.deepEqual(similarNames('gitxub', ['github', 'gitlub', 'x']), ['github', 'gitlub']);
    assert.equal(didYouMean('gitxub', ['github', 'gitlub']), '; did you mean one of github, gitlub?');
    assert.equal(didYouMean('strpe', names), '; did you mean stripe?');
    assert.equal(didYouMean('strpe', []), '');
  });
});

describe('the printed bucket URL', () => {
  it('HOOKBUCKET_PUBLIC_URL first, then what a serve recorded, then a labelled placeholder', () => {
    assert.deepEqual(ingestBaseUrl('https://hooks.example.com', ['http://127.0.0.1:8787']), {
      base: 'https://hooks.example.com',
      source: 'public_url',
    });
    assert.deepEqual(ingestBaseUrl(undefined, ['http://10.0.0.5:9000', 'http://127.0.0.1:8787']), {
      base: 'http://10.0.0.5:9000',
      source: 'serve',
    });
    assert.deepEqual(ingestBaseUrl(undefined, []), { base: 'http://HOST:8787', source: 'placeholder' });
  });
  it('labels the placeholder and a loopback address', () => {
    assert.equal(bucketUrlText(ingestBaseUrl(undefined, []), 'x'), 'http://HOST:8787/b/x (placeholder: set HOOKBUCKET_PUBLIC_URL)');
    assert.equal(
      bucketUrlText(ingestBaseUrl(undefined, ['http://127.0.0.1:9000']), 'x'),
      "http://127.0.0.1:9000/b/x (serve's local address; senders elsewhere: set HOOKBUCKET_PUBLIC_URL)",
    );
    assert.equal(bucketUrlText(ingestBaseUrl(undefined, ['http://10.0.0.5:9000']), 'x'), 'http://10.0.0.5:9000/b/x');
    assert.equal(bucketUrlText(ingestBaseUrl('https://hooks.example.com/in', []), 'x'), 'https://hooks.example.com/in/b/x');
  });
  it('parses HOOKBUCKET_PUBLIC_URL and recorded infos', () => {
    assert.equal(parsePublicUrl('https://hooks.example.com/'), 'https://hooks.example.com');
    assert.equal(parsePublicUrl(' http://h:8080/prefix/ '), 'http://h:8080/prefix');
    for (const bad of ['hooks.example.com', 'ftp://h', 'https://u:p@h', 'https://h/?a=1', 'https://h/#x', ''])
      assert.equal(parsePublicUrl(bad), undefined, bad);
    assert.equal(recordedUrl('{"url":"http://127.0.0.1:8787","started_at":"x"}'), 'http://127.0.0.1:8787');
    assert.equal(recordedUrl('{"lease_ms":60000}'), undefined);
    assert.equal(recordedUrl('not json'), undefined);
    assert.equal(recordedUrl('{"url":"javascript:alert(1)"}'), undefined);
  });
});
