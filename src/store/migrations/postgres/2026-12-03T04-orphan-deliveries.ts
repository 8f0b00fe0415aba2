// Frozen: never edit a migration that has shipped; add a new dated one instead (README.md here).
// ../sqlite/2026-12-03T04-orphan-deliveries.ts settled deliveries an earlier release left behind
// when a bucket name was deleted and made again. No PostgreSQL database predates the tombstone,
// and foreign keys keep a delivery from outliving its bucket, so this version changes nothing: it
// exists so that both dialects reach the same schema version by name.

export async function up(): Promise<void> {}

export async function down(): Promise<void> {}
