import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  classify,
  DEFAULT_RETRY_ON,
  formatRetryOn,
  OUTCOME_TABLE,
  parseRetryOn,
  type Outcome,
  type Verdict,
} from '../../src/policy/classify.js';

const status = (s: number): Outcome => ({ kind: 'response', status: s });

describe('classify: every row of the outcome table', () => {
  for (const row of OUTCOME_TABLE) {
    for (const o of row.examples) {
      const label = o.kind === 'response' ? String(o.status) : o.errorClass;
      it(`${row.outcome}: ${label} → ${row.verdict}`, () => assert.equal(classify(o).verdict, row.verdict));
    }
  }

  const reasons: Array<[Outcome, Verdict, string]> = [
    [status(200), 'delivered', 'status_200'],
    [status(503), 'retry', 'status_503'],
    [status(429), 'retry', 'status_429'],
    [status(301), 'failed', 'redirect_not_followed'],
    [status(404), 'failed', 'status_404'],
    [{ kind: 'error', errorClass: 'tls' }, 'retry', 'error_tls'],
    [{ kind: 'error', errorClass: 'timeout' }, 'retry', 'error_timeout'],
    [{ kind: 'error', errorClass: 'unsendable' }, 'failed', 'error_unsendable'],
  ];
  for (const [o, verdict, reason] of reasons) {
    it(`reason ${reason}`, () => assert.deepEqual(classify(o), { verdict, reason }));
  }
});

describe('parseRetryOn', () => {
  it("the issue's example adds 4xx to the default set", () => {
    const r = parseRetryOn('5xx,429,408,425,network,timeout,tls,4xx')!;
    assert.equal(classify(status(404), r).verdict, 'retry');
    assert.equal(classify(status(503), r).verdict, 'retry');
    assert.equal(classify(status(301), r).verdict, 'failed');
    assert.equal(classify(status(200), r).verdict, 'delivered');
    assert.equal(classify({ kind: 'error', errorClass: 'dns' }, r).verdict, 'retry');
  });

  it('replaces the set rather than adding to it', () => {
    const r = parseRetryOn('503')!;
    assert.equal(classify(status(503), r).verdict, 'retry');
    assert.equal(classify(status(500), r).verdict, 'failed');
    assert.equal(classify(status(429), r).verdict, 'failed');
    assert.equal(classify({ kind: 'error', errorClass: 'refused' }, r).verdict, 'failed');
  });

  it('destination_refused is retried on the schedule whatever --retry-on says', () => {
    const refused: Outcome = { kind: 'error', errorClass: 'destination_refused' };
    assert.deepEqual(classify(refused), { verdict: 'retry', reason: 'error_destination_refused' });
    assert.equal(classify(refused, parseRetryOn('503')!).verdict, 'retry');
  });

  it('3xx can be retried if asked, and single error classes work', () => {
    const r = parseRetryOn('3xx, refused ,TLS')!;
    assert.equal(classify(status(302), r).verdict, 'retry');
    assert.equal(classify({ kind: 'error', errorClass: 'refused' }, r).verdict, 'retry');
    assert.equal(classify({ kind: 'error', errorClass: 'tls' }, r).verdict, 'retry');
    assert.equal(classify({ kind: 'error', errorClass: 'reset' }, r).verdict, 'failed');
  });

  const bad = ['', '2xx', '200', '600', '6xx', 'foo', '5xx,,429', 'network;tls'];
  for (const text of bad) it(`refuses ${JSON.stringify(text)}`, () => assert.equal(parseRetryOn(text), undefined));

  const roundTrips: Array<[string, string]> = [
    ['5xx,429,408,425,network,timeout,tls', '5xx,408,425,429,network,timeout,tls'],
    ['5xx,429,408,425,network,timeout,tls,4xx', '4xx,5xx,408,425,429,network,timeout,tls'],
    ['dns,503', '503,dns'],
  ];
  for (const [text, canonical] of roundTrips) {
    it(`${text} → ${canonical}`, () => assert.equal(formatRetryOn(parseRetryOn(text)!), canonical));
  }

  it('no --retry-on list retries a request the HTTP client refused to send', () => {
    const unsendable: Outcome = { kind: 'error', errorClass: 'unsendable' };
    for (const text of ['network', 'network,timeout,tls,refused,reset,dns', '3xx,4xx,5xx', '5xx,429,408,425,network,timeout,tls,4xx']) {
      assert.deepEqual(classify(unsendable, parseRetryOn(text)!), { verdict: 'failed', reason: 'error_unsendable' }, text);
    }
    for (const word of ['unsendable', 'invalid', 'network,unsendable']) assert.equal(parseRetryOn(word), undefined, word);
  });

  it('the default set is what the table says', () => {
    assert.deepEqual(parseRetryOn('5xx,429,408,425,network,timeout,tls'), DEFAULT_RETRY_ON);
  });
});
