import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig, settings } from '../../src/config/config.js';
import { readFileSync } from 'node:fs';

describe('loadConfig', () => {
  it('uses the documented defaults', () => {
    const c = loadConfig({}, {});
    assert.equal(c.db, 'data/hookbucket.db');
    assert.equal(c.port, 8787);
    assert.equal(c.host, '0.0.0.0');
    assert.equal(c.durability, 'full');
    assert.equal(c.trustProxy, false);
    assert.equal(c.maxInflightBytes, 256 * 1024 * 1024);
    assert.equal(c.minFreeDisk, 1024 ** 3);
    assert.equal(c.lockTimeoutMs, 2000);
    assert.ok(Object.isFrozen(c));
  });

  it('orders precedence flags > environment > .env > defaults', () => {
    const env = { HOOKBUCKET_PORT: '9001', HOOKBUCKET_DURABILITY: 'normal' };
    const dotenv = { HOOKBUCKET_PORT: '9002', HOOKBUCKET_HOST: '127.0.0.1', HOOKBUCKET_DURABILITY: 'full' };
    const c = loadConfig(env, dotenv, { port: '9003' });
    assert.equal(c.port, 9003, 'flag wins');
    assert.equal(c.durability, 'normal', 'environment beats .env');
    assert.equal(c.host, '127.0.0.1', '.env beats the default');
  });

  it('rejects bad values with the variable named', () => {
    assert.throws(() => loadConfig({ HOOKBUCKET_DURABILITY: 'fast' }, {}), /HOOKBUCKET_DURABILITY/);
    assert.throws(() => loadConfig({}, { HOOKBUCKET_PORT: 'x' }), /HOOKBUCKET_PORT in \.env/);
    assert.throws(() => loadConfig({}, {}, { maxInflightBytes: '0' }), /--max-inflight-bytes/);
  });

  it('documents every setting in .env.example with its default', () => {
    const example = readFileSync(new URL('../../../.env.example', import.meta.url), 'utf8');
    for (const s of settings) {
      assert.match(example, new RegExp(`^#?\\s*${s.env}=${s.default.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'm'), s.env);
    }
  });
});
