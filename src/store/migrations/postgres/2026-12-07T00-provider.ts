import { sql, type Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// Provider-ready buckets (README "Verifying senders"):
// - buckets: how a bucket verifies senders (verify_scheme; verify_secrets, a JSON list of the
//   secrets as given; verify_tolerance_ms, null: the default; on_invalid: quarantine or reject), the
//   URL handshakes it answers besides its scheme's own (handshakes, a comma list), Meta's
//   verify_token and Graph's graph_client_state, the methods it accepts (methods, a comma list;
//   null: any), duplicate detection (dedup_key in its text form, dedup_window_ms) and re-signing
//   (sign_scheme, sign_secrets a JSON list). Null everywhere means off, so existing buckets are
//   unchanged.
// - requests: what became of each request at ingest (disposition: accepted, quarantined,
//   duplicate or handshake; only accepted ones get deliveries), the sender verdict kept as evidence
//   (verify_scheme, verify_result, verify_reason; null: the bucket did not verify), the dedup key
//   the request carried and, for a duplicate, the request it repeats (duplicate_of). A partial index
//   over the requests that are not accepted lets `requests list --state quarantined` page without
//   reading the accepted ones (which are most rows, and cost the index nothing).
// - dedup_keys: the keys seen per bucket, each until expires_at (received_at + the window),
//   independent of request retention. Checked and written in the ingest commit.

export async function up(db: Kysely<any>): Promise<void> {
  const bucketColumns: Array<[string, 'text' | 'bigint']> = [
    ['verify_scheme', 'text'],
    ['verify_secrets', 'text'],
    ['verify_tolerance_ms', 'bigint'],
    ['handshakes', 'text'],
    ['verify_token', 'text'],
    ['graph_client_state', 'text'],
    ['methods', 'text'],
    ['dedup_key', 'text'],
    ['dedup_window_ms', 'bigint'],
    ['sign_scheme', 'text'],
    ['sign_secrets', 'text'],
  ];
  for (const [name, type] of bucketColumns) await db.schema.alterTable('buckets').addColumn(name, type).execute();
  await db.schema
    .alterTable('buckets')
    .addColumn('on_invalid', 'text', (c) => c.notNull().defaultTo('quarantine'))
    .execute();
  await db.schema
    .alterTable('requests')
    .addColumn('disposition', 'text', (c) => c.notNull().defaultTo('accepted'))
    .execute();
  for (const name of ['verify_scheme', 'verify_result', 'verify_reason', 'dedup_key', 'duplicate_of']) {
    await db.schema.alterTable('requests').addColumn(name, 'text').execute();
  }
  await db.schema
    .createIndex('requests_by_disposition')
    .on('requests')
    .columns(['bucket', 'disposition', 'id'])
    .where(sql.ref('disposition'), '<>', 'accepted')
    .execute();
  await db.schema
    .createTable('dedup_keys')
    .addColumn('bucket', 'text', (c) => c.notNull())
    .addColumn('key', 'text', (c) => c.notNull())
    .addColumn('request_id', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('dedup_keys_pk', ['bucket', 'key'])
    .execute();
  await db.schema.createIndex('dedup_keys_by_expiry').on('dedup_keys').column('expires_at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('dedup_keys').execute();
  await db.schema.dropIndex('requests_by_disposition').execute();
  for (const name of ['disposition', 'verify_scheme', 'verify_result', 'verify_reason', 'dedup_key', 'duplicate_of']) {
    await db.schema.alterTable('requests').dropColumn(name).execute();
  }
  for (const name of [
    'verify_scheme',
    'verify_secrets',
    'verify_tolerance_ms',
    'on_invalid',
    'handshakes',
    'verify_token',
    'graph_client_state',
    'methods',
    'dedup_key',
    'dedup_window_ms',
    'sign_scheme',
    'sign_secrets',
  ]) {
    await db.schema.alterTable('buckets').dropColumn(name).execute();
  }
}
