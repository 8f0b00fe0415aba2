import { after, before, describe, it } from 'node:test';
import { bucketsContract } from './buckets-contract.js';
import { DIALECTS, SKIPPED_DIALECTS } from './dialects.js';
import { drainContract } from './drain-contract.js';
import { useStoreSet } from './harness.js';
import { ingestContract } from './ingest-contract.js';
import { listContract } from './list-contract.js';
import { pacingContract } from './pacing-contract.js';
import { providerContract } from './provider-contract.js';
import { replayContract } from './replay-contract.js';
import { statsContract } from './stats-contract.js';
import { settingsContract } from './settings-contract.js';
import { verdictsContract } from './verdicts-contract.js';

// One suite over every dialect (Kysely's `for (const dialect of DIALECTS)`): the same calls, the
// same assertions, through the store contract only (src/store/store.ts).

for (const dialect of DIALECTS) {
  describe(`store contract: ${dialect.name}`, () => {
    if (dialect.setUp) before(() => dialect.setUp!());
    if (dialect.tearDown) after(() => dialect.tearDown!());
    const ctx = useStoreSet(dialect);
    ingestContract(ctx);
    listContract(ctx);
    bucketsContract(ctx);
    drainContract(ctx);
    pacingContract(ctx);
    replayContract(ctx);
    statsContract(ctx);
    providerContract(ctx);
    settingsContract(ctx);
    verdictsContract(ctx);
  });
}

for (const s of SKIPPED_DIALECTS) {
  it(`store contract: ${s.name}`, { skip: s.reason }, () => {});
}
