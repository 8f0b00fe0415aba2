/**
 * The SQLite writer thread: it owns the process's one write connection and group-commits ingest.
 * Everything that arrives while a commit is running is committed together in the next one, and each
 * request is acknowledged (by the main thread) when its transaction has committed.
 *
 * Lock waits happen here, not on the event loop: busy_timeout is set per batch to the time left
 * before the oldest request's deadline (HOOKBUCKET_LOCK_TIMEOUT, 2 s by default), and items already
 * past their deadline fail with store_busy instead of waiting again.
 */
import { statSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { createBatchWriter } from './ingest-batch.js';
import { JOURNAL_SIZE_LIMIT, openSqlite } from './open.js';
import { sqliteStorageErrorCode } from './sqlite-error.js';
import {
  mergeRejection,
  type FromWriter,
  type IngestItem,
  type RejectionCount,
  type ToWriter,
  type WriterInit,
} from './writer-protocol.js';

const port = parentPort!;
const init = workerData as WriterInit;
const db = openSqlite(init.path, { durability: init.durability, busyTimeoutMs: 0 });
// Checkpoints run on their own thread (checkpoint-thread.ts), so commits never pay for them.
db.pragma('wal_autocheckpoint = 0');
// 64 MiB page cache: the index pages that every batch touches stay in memory.
db.pragma('cache_size = -65536');
const writeBatch = createBatchWriter(db);

let queue: IngestItem[] = [];
let rejections = new Map<string, RejectionCount>();
let scheduled = false;
let closing = false;
let currentBusyMs = -1;

const post = (msg: FromWriter) => port.postMessage(msg);

/**
 * Checkpoint starvation: under steady ingest the checkpoint thread's PASSIVE checkpoints never
 * catch up with the writer (new frames land while one copies), so the WAL is never restarted and
 * grows for as long as the load lasts (reliability case 9: 173 MiB in 4 s, 1.6 GB after 20 s).
 * So once the WAL passes the journal size limit, the writer itself runs a PASSIVE checkpoint
 * between two batches, when no frame of ours can land meanwhile: it backfills everything (unless
 * another process writes or an old reader pins the WAL), and the next commit restarts the WAL
 * from its start and truncates it to the limit. PASSIVE never waits on a lock, so a long reader
 * elsewhere costs one cheap call per interval, not an ingest stall. Looked at every 100 ms.
 */
const CATCH_UP_EVERY_MS = 100;
const walPath = `${init.path}-wal`;
let nextCatchUpAt = 0;

function catchUpCheckpoint(): void {
  const now = Date.now();
  if (now < nextCatchUpAt) return;
  nextCatchUpAt = now + CATCH_UP_EVERY_MS;
  try {
    if (statSync(walPath).size <= JOURNAL_SIZE_LIMIT) return;
    setBusyTimeout(0);
    const [row] = db.pragma('wal_checkpoint(PASSIVE)') as Array<{ busy: number }>;
    // The checkpoint thread was checkpointing: try again after the next batch, not a whole interval later.
    if (row?.busy) nextCatchUpAt = 0;
  } catch {
    // SQLITE_BUSY (another checkpoint is running) or no WAL file: look again after the next batch
    nextCatchUpAt = 0;
  }
}

function schedule(): void {
  if (scheduled) return;
  scheduled = true;
  setImmediate(flush);
}

function setBusyTimeout(ms: number): void {
  if (ms === currentBusyMs) return;
  db.pragma(`busy_timeout = ${ms}`);
  currentBusyMs = ms;
}

function flush(): void {
  scheduled = false;
  if (queue.length === 0 && rejections.size === 0) return;
  const now = Date.now();
  const items: IngestItem[] = [];
  const expired: number[] = [];
  let oldestDeadline = Infinity;
  for (const it of queue) {
    if (it.deadline <= now) expired.push(it.seq);
    else {
      items.push(it);
      if (it.deadline < oldestDeadline) oldestDeadline = it.deadline;
    }
  }
  queue = [];
  if (expired.length > 0) {
    post({ type: 'failed', seqs: expired, code: 'store_busy', message: 'write lock not obtained in time' });
  }
  if (items.length === 0 && rejections.size === 0) return;
  const counts = [...rejections.values()];
  setBusyTimeout(items.length > 0 ? Math.max(1, Math.floor(oldestDeadline - now)) : 50);
  const started = performance.now();
  try {
    const missing = writeBatch(items, counts);
    rejections = new Map();
    const gone = new Set(missing);
    const stored = items.filter((i) => !gone.has(i.seq)).map((i) => i.seq);
    if (stored.length > 0) post({ type: 'committed', seqs: stored, ms: performance.now() - started });
    if (missing.length > 0)
      post({ type: 'failed', seqs: missing, code: 'unknown_bucket', message: 'bucket deleted while the request was in flight' });
  } catch (e) {
    const code = sqliteStorageErrorCode(e) ?? 'storage_error';
    const message = e instanceof Error ? e.message : String(e);
    // Rejection counts stay buffered and go out with the next batch that commits.
    if (items.length > 0) post({ type: 'failed', seqs: items.map((i) => i.seq), code, message });
  }
  // After the batch's answers are posted, so no ack waits for it.
  catchUpCheckpoint();
  if (queue.length > 0 || (closing && rejections.size > 0)) schedule();
}

port.on('message', (msg: ToWriter) => {
  switch (msg.type) {
    case 'ingest':
      for (const it of msg.items) queue.push(it);
      schedule();
      break;
    case 'rejections':
      for (const r of msg.counts) mergeRejection(rejections, r);
      schedule();
      break;
    case 'close':
      closing = true;
      flush();
      try {
        // A clean stop leaves no WAL behind when nothing else has the file open.
        db.pragma('wal_checkpoint(TRUNCATE)');
      } catch {
        // another process may hold the database; its own checkpoints continue
      }
      db.close();
      post({ type: 'closed' });
      port.close();
      break;
  }
});

post({ type: 'ready' });
