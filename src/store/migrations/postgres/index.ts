import type { Migration, MigrationProvider } from 'kysely';
import * as initial from './2026-12-02T00-initial.js';
import * as drain from './2026-12-02T01-drain.js';
import * as replay from './2026-12-02T02-replay.js';
import * as stats from './2026-12-02T04-stats.js';
import * as history from './2026-12-02T05-history.js';
import * as claimOrder from './2026-12-02T06-claim-order.js';
import * as bucketTombstone from './2026-12-03T00-bucket-tombstone.js';
import * as requestTrailers from './2026-12-03T01-request-trailers.js';
import * as forwardRawPath from './2026-12-03T02-forward-raw-path.js';
import * as bucketDue from './2026-12-03T03-bucket-due.js';
import * as orphanDeliveries from './2026-12-03T04-orphan-deliveries.js';
import * as requestsBucketSize from './2026-12-03T05-requests-bucket-size.js';
import * as sharedPacing from './2026-12-05T00-shared-pacing.js';
import * as deferralCounts from './2026-12-05T02-deferral-counts.js';
import * as provider from './2026-12-07T00-provider.js';
import * as settings from './2026-12-07T02-settings.js';

/** PostgreSQL migrations in code, with the same version names as ../sqlite/index.ts (README.md here). */
export const migrationProvider: MigrationProvider = {
  async getMigrations(): Promise<Record<string, Migration>> {
    return {
      '2026-12-02T00-initial': initial,
      '2026-12-02T01-drain': drain,
      '2026-12-02T02-replay': replay,
      '2026-12-02T04-stats': stats,
      '2026-12-02T05-history': history,
      '2026-12-02T06-claim-order': claimOrder,
      '2026-12-03T00-bucket-tombstone': bucketTombstone,
      '2026-12-03T01-request-trailers': requestTrailers,
      '2026-12-03T02-forward-raw-path': forwardRawPath,
      '2026-12-03T03-bucket-due': bucketDue,
      '2026-12-03T04-orphan-deliveries': orphanDeliveries,
      '2026-12-03T05-requests-bucket-size': requestsBucketSize,
      '2026-12-05T00-shared-pacing': sharedPacing,
      '2026-12-05T02-deferral-counts': deferralCounts,
      '2026-12-07T00-provider': provider,
      '2026-12-07T02-settings': settings,
    };
  },
};
