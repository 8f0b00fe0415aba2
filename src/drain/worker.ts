/**
 * The drain worker: claims due deliveries, forwards them, records every attempt, and sleeps until
 * the next thing can happen. The policy lives in pure modules (pacer, outcome, schedule, classify);
 * this file is the I/O around them.
 *
 * - `drainOnce()` is one pass: recover expired leases, ask the store which unpaused buckets have
 *   work due (one indexed query, src/store/sqlite/bucket-due.ts), then for each of those (in the
 *   rotating order of src/policy/pass-order.ts) claim what its concurrency, Retry-After block,
 *   retry budget and rate allow, and start those attempts. A bucket with nothing due costs a pass
 *   nothing: no claim transaction, no due query. Tests drive it directly with a manual clock;
 *   `settle()` waits for the attempts.
 * - `start()` runs passes until `stop()`, under the single-worker lease (one active worker per
 *   database, or every rate limit would double), waking early for new requests (`wake()`, or a
 *   change another process committed, heard through the store's change feed: onChange()).
 * - `stop()` stops claiming, lets in-flight attempts finish within a grace period, then aborts the
 *   rest and releases them (recorded as `released`, not counted), and gives up the worker lease.
 */
import { hostname } from 'node:os';
import type { Dispatcher } from 'undici';
import type { Clock } from '../shared/clock.js';
import { AppError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import type { Logger } from '../shared/logger.js';
import {
  pausedMsAt,
  type AttemptResult,
  type Bucket,
  type ClaimedAttempt,
  type DrainStore,
  type ProcessBeat,
  type StoreChanges,
  type WorkerHolder,
} from '../store/store.js';
import type { Outcome } from '../policy/classify.js';
import { Aborter, forward, forwardHeaders, type ForwardResult } from './forward.js';
import { decideAttempt, RETRY_AFTER_STATUSES } from '../policy/outcome.js';
import { DEFAULT_SCHEDULE } from '../policy/schedule.js';
import { pacerConfigOf, type ClaimVerdict } from '../policy/admission.js';
import { block, newPacer, type DeferReason, type PacerState } from '../policy/pacer.js';
import { intervalMs, takeToken } from '../policy/token-bucket.js';
import { MAX_BUCKETS_PER_PASS, passOrder } from '../policy/pass-order.js';
import type { DrainObserver } from './drain-observer.js';
import { DeliveryLog } from './delivery-log.js';
import { afterLeaseExpiry } from '../policy/admission.js';
import { signPlan, verifiedHeader } from '../policy/resign.js';
import { signatureHeaders } from '../verify/sign.js';
import { formatDestinationPolicy } from '../policy/destination-policy.js';
import { destinationPolicyOf } from '../settings/settings.js';
import type { DestinationGuard } from './destination-guard.js';

export { DEFAULT_LEASE_MS } from '../policy/lease-fit.js';
import { DEFAULT_LEASE_MS } from '../policy/lease-fit.js';
/** The single-worker lease: renewed every third of this; a dead worker's lease is taken after it. */
export const WORKER_LEASE_TTL_MS = 15_000; // 15s
/**
 * How long the settings read from the store are trusted: a `settings set` applies within this
 * (there is no change feed for them; one indexed read of a tiny table per this is nothing).
 */
export const SETTINGS_FRESH_MS = 5_000; // 5s
/** The longest sleep between passes when nothing is due. */
const IDLE_PASS_MS = 5_000;
/** Expired leases are looked for at most this often. */
const RECOVER_EVERY_MS = 1_000;
/** How long the next-due time read from the database is trusted when nothing else changed. */
const NEXT_DUE_FRESH_MS = 1_000;
/** Why an attempt claimed ahead went back unsent (its attempt row's reason). */
type ReleaseReason =
  | 'released_on_pause'
  | 'released_on_shutdown'
  | 'released_on_lease'
  | 'released_on_retry_after'
  | 'released_on_standby'
  | 'released_on_rate';
/** The longest finished results wait for the next claim transaction while a queue keeps slots fed. */
const HOLD_RESULTS_MS = 100;
/** Room left on a lease when an attempt claimed ahead starts, at most (see #fill). */
const LEASE_MARGIN_MS = 1_000;
/** Pause before the completion batch is written again after a storage error. */
const COMPLETE_RETRY_MS = 200;
/** When another worker holds a bucket's pacer row (sharedClaims), the next look at that bucket comes this much later. */
const BUSY_RETRY_MS = 5;
/**
 * With shared claims, rate tokens coming up within this many ms are claimed now and their attempts
 * sent at the tokens' times (ClaimPolicyState.horizonMs). Several workers take turns on a bucket's
 * pacer row, and a claim is a dozen round trips: with burst 1, a token nobody claimed within an
 * interval of its time was lost, and the rate sagged (48.9-98.1/s for 100/s under test load). A
 * bucket is claimed again as its next token comes within the horizon, so a claim up to a horizon
 * late loses none. A worker killed with -9 costs the bucket the tokens it had taken, a horizon's
 * worth at most. Capped per bucket by its concurrency (#horizonFor).
 */
export const CLAIM_HORIZON_MS = 100;

export interface DrainWorkerDeps {
  store: DrainStore;
  dispatcher: Dispatcher;
  clock: Clock;
  logger: Logger;
  /** A number in [0, 1) for jitter; Math.random in production, seeded in tests. */
  random?: () => number;
  /** The lease on a claimed delivery (`--lease`); must exceed every bucket's attempt timeout. */
  leaseMs?: number;
  workerLeaseTtlMs?: number;
  /** Identifies this worker in the lease row, the workers table, its attempt rows and messages. */
  holder?: string;
  /** What this process registers as (`serve` with its worker: both). Default: worker. */
  roles?: ReadonlyArray<'receiver' | 'worker'>;
  /** More for its workers row's info (`serve`: the ingest `url` it bound, which `bucket create` prints). */
  beatInfo?: Readonly<Record<string, string>>;
  /** Due buckets one pass visits at most (src/policy/pass-order.ts); the rest go to the next pass, at once. */
  bucketsPerPass?: number;
  /**
   * Fault injection for the reliability suite: called after a response arrived and before its
   * outcome is recorded (a crash here must cost at most a duplicate, never a loss).
   */
  afterResponse?: (a: ClaimedAttempt) => void;
  /** Told about attempts and deferrals once the store has recorded them (metrics); default: nobody. */
  observer?: DrainObserver;
  /** What the worker logs about deliveries (failures, Retry-After blocks, a summary an interval); default: one on `logger`, every 1m. */
  deliveryLog?: DeliveryLog;
  /**
   * The connect-time check of the `destinations` setting, the one `dispatcher` was made with
   * (createDeliveryAgent): the worker reads the setting every SETTINGS_FRESH_MS and hands it over.
   * Absent: the setting is not read (tests of other things; the dispatcher then checks nothing).
   */
  destinations?: DestinationGuard;
}

export interface PassResult {
  /** Attempts started in this pass. */
  started: number;
  /** Deliveries held back (rate, budget, Retry-After, a replay's own rate), by reason. */
  deferred: Partial<Record<DeferReason | 'replay_rate', number>>;
  /** When the next pass has something to do; null when nothing is waiting. */
  wakeAt: number | null;
}

export type StartMode = 'standby' | 'refuse';

type ResolvedDeps = Required<Omit<DrainWorkerDeps, 'afterResponse' | 'observer' | 'beatInfo' | 'destinations'>> &
  Pick<DrainWorkerDeps, 'afterResponse' | 'observer' | 'beatInfo' | 'destinations'>;

/** An attempt sent, as the observer and the delivery log are told about it once the store has recorded it. */
interface Observed {
  bucket: string;
  durationMs: number;
  requestId: string;
  number: number;
}

interface Inflight {
  bucket: string;
  promise: Promise<void>;
}

export class DrainWorker {
  readonly #d: ResolvedDeps;
  /**
   * Each bucket's pacer as this worker's last claim left it, in its clock: a hint only (the state
   * is the store's, and other workers move it), used to skip a claim that could start nothing and
   * to hold attempts claimed ahead during a Retry-After block this worker heard.
   */
  readonly #pacers = new Map<string, PacerState>();
  readonly #inflightByBucket = new Map<string, number>();
  readonly #inflight = new Map<string, Inflight>();
  /**
   * Claimed ahead, waiting for a free slot, by bucket (the running loop only, for buckets without
   * a rate cap): a finished attempt's slot is refilled at once instead of after a claim round trip.
   */
  readonly #ready = new Map<string, { createdAt: number; items: ClaimedAttempt[] }>();
  /** Buckets whose last claim left a delivery paced by its replay's own rate for a free slot: no claiming ahead until one is taken. */
  readonly #noAhead = new Set<string>();
  /** Claiming ahead is on in the running loop only (start()); drainOnce alone claims for free slots. */
  #claimAhead = false;
  /** Rate tokens taken ahead of their time, ms (CLAIM_HORIZON_MS): the running loop with shared claims only. */
  #horizonMs = 0;
  /** Buckets whose last claim here took rate tokens ahead: this worker leads their pacing (#leadFor). */
  readonly #leading = new Set<string>();
  /** When each attempt taken ahead of its rate token may go, in this worker's clock (the claim's return + its sendAfterMs). */
  readonly #sendAt = new Map<string, number>();
  /** Per bucket, this worker's attempts waiting for their rate token. */
  readonly #waiting = new Map<string, number>();
  /** Ends every wait for a rate token when the worker stops: those attempts go back unsent. */
  readonly #stopWaits = new AbortController();
  /** When the results now held back for the next claim (see drainOnce) were first held. */
  #heldSince: number | undefined;
  readonly #abort = new Aborter();
  #buckets = new Map<string, Bucket>();
  #bucketList: Bucket[] = [];
  #bucketsLoaded = false;
  /** listBuckets() is under way: a refill must not trust #buckets until it is done. */
  #reloadingBuckets = false;
  /**
   * What the store's change feed reported since the last pass took it: a refill between passes
   * polls the feed too (#bucketsChanged), and what it hears waits here for the next pass.
   */
  #pendingChanged = false;
  #pendingBucketsChanged = false;
  #passes = 0;
  /** Where the next pass starts when the last one left due buckets for it (pass-order.ts). */
  #resumeAfter: string | undefined;
  #dueCache: { at: number | null; readAt: number } | undefined;
  /** Per bucket, the Retry-After block whose deferral has been recorded. */
  readonly #blockRecorded = new Map<string, number>();
  #results: AttemptResult[] = [];
  /** What the observer and the delivery log are told about each result once the store has recorded it, by attempt id (sent attempts only). */
  readonly #observed = new Map<string, Observed>();
  #flushing: Promise<void> | undefined;
  #lastRecoverAt = -Infinity;
  #settingsReadAt = -Infinity;
  #stopping = false;
  #loop: Promise<void> | undefined;
  #wakeUp: (() => void) | undefined;
  #wokenEarly = false;
  #heartbeat: NodeJS.Timeout | undefined;
  #holdsLease = false;

  constructor(deps: DrainWorkerDeps) {
    this.#d = {
      ...deps,
      random: deps.random ?? Math.random,
      leaseMs: deps.leaseMs ?? DEFAULT_LEASE_MS,
      workerLeaseTtlMs: deps.workerLeaseTtlMs ?? WORKER_LEASE_TTL_MS,
      holder: deps.holder ?? `${hostname()}:${process.pid}:${newId().slice(-8)}`,
      bucketsPerPass: deps.bucketsPerPass ?? MAX_BUCKETS_PER_PASS,
      roles: deps.roles ?? ['worker'],
      deliveryLog: deps.deliveryLog ?? new DeliveryLog({ logger: deps.logger, clock: deps.clock }),
    };
  }

  get holder(): string {
    return this.#d.holder;
  }

  /** Passes run so far (drainOnce calls): how often the loop woke. */
  get passes(): number {
    return this.#passes;
  }

  /** What this worker logs about deliveries (serve tells it about received requests too). */
  get deliveryLog(): DeliveryLog {
    return this.#d.deliveryLog;
  }

  /** Attempts in flight now. */
  get inflight(): number {
    return this.#inflight.size;
  }

  /**
   * The `destinations` setting, read at most every SETTINGS_FRESH_MS and handed to the guard. A read
   * that fails keeps the setting in force (the claims that follow meet the same storage trouble).
   */
  async #readSettings(now: number): Promise<void> {
    const guard = this.#d.destinations;
    if (guard === undefined || now - this.#settingsReadAt < SETTINGS_FRESH_MS) return;
    this.#settingsReadAt = now;
    try {
      const policy = destinationPolicyOf(await this.#d.store.getSettings());
      if (guard.update(policy)) this.#d.logger.info({ destinations: formatDestinationPolicy(policy) }, 'destinations setting applied');
    } catch (e) {
      this.#d.logger.warn({ err: e }, 'reading the settings failed; the destinations setting in force stays');
    }
  }

  /** One pass: recover expired leases, claim and start what every bucket with work due allows now. */
  async drainOnce(): Promise<PassResult> {
    const { store, clock } = this.#d;
    const now = clock.now();
    this.#passes++;
    await this.#readSettings(now);
    // Bucket settings are re-read only when the change feed says a bucket changed (bucket writes
    // come from the CLI or serve's own connection, never this one): on SQLite a pass with nothing
    // new reads one pragma.
    const changes = await this.#takeChanges();
    if (!this.#bucketsLoaded || changes.bucketsChanged) {
      this.#reloadingBuckets = true;
      try {
        this.#bucketList = await store.listBuckets();
      } catch (e) {
        // Not read: the next pass tries again.
        this.#pendingBucketsChanged = true;
        this.#pendingChanged = true;
        throw e;
      } finally {
        this.#reloadingBuckets = false;
      }
      this.#buckets = new Map(this.#bucketList.map((b) => [b.name, b]));
      this.#bucketsLoaded = true;
    }
    // A deleted (or deleted and made again) bucket's queue goes with its rows.
    for (const [name, q] of this.#ready) if (this.#buckets.get(name)?.createdAt !== q.createdAt) this.#ready.delete(name);
    // A claim (or lease recovery) moves due times this connection wrote itself, which the change
    // feed does not report: a bucket due now can become due later, at a time no cache holds.
    let movedDue = false;
    if (now - this.#lastRecoverAt >= RECOVER_EVERY_MS) {
      this.#lastRecoverAt = now;
      movedDue = (await this.#recover(now)) > 0;
    }
    const result: PassResult = { started: 0, deferred: {}, wakeAt: null };
    // Attempts finished since the last pass are recorded in the first claim transaction: one
    // commit instead of two. A pass that claims nothing writes them on their own at the end.
    let finished = this.#flushing ? [] : this.#results.splice(0);
    let wakeAt = Infinity;
    let flowing = false;
    // Only buckets with work due, and those holding attempts claimed ahead (a paused one gives
    // them back here): idle buckets cost nothing, however many there are.
    const queued: string[] = [];
    for (const [name, q] of this.#ready) if (q.items.length > 0) queued.push(name);
    const pass = passOrder([...(await store.dueBuckets(now)), ...queued], this.#resumeAfter, this.#d.bucketsPerPass);
    this.#resumeAfter = pass.resumeAfter;
    if (pass.more) wakeAt = now;
    for (const name of pass.order) {
      if (this.#stopping) break;
      const b = this.#buckets.get(name);
      if (b === undefined) continue;
      if (b.paused) {
        this.#releaseReady(b.name, 'released_on_pause');
        continue;
      }
      if (!this.#timeoutFits(b)) continue;
      // A bucket with a rate is never claimed ahead: a queue here was claimed before its rate was
      // set, and goes back, to be claimed again under its tokens.
      if (b.drain.rate !== null) this.#releaseReady(b.name, 'released_on_rate');
      const queued = this.#ready.get(b.name)?.items.length ?? 0;
      const slots = b.drain.concurrency - (this.#inflightByBucket.get(b.name) ?? 0) - queued;
      // Claiming ahead (up to another `concurrency`) only where no rate paces the bucket: what waits
      // in the queue goes out as slots free, which a token bucket would not allow.
      // A queued attempt waits at most one attempt timeout for its slot, then runs for at most
      // another: its lease must cover both, or this very worker would expire it mid-attempt.
      const ahead =
        this.#claimAhead && b.drain.rate === null && !this.#noAhead.has(b.name) && this.#d.leaseMs > 2 * b.drain.timeoutMs + LEASE_MARGIN_MS
          ? b.drain.concurrency
          : 0;
      const room = slots + ahead;
      // At its concurrency limit a bucket waits for a completion, which wakes the worker.
      if (room <= 0) continue;
      // While at least half a concurrency's worth waits claimed ahead, the slots stay fed: claim
      // later, in a bigger batch (fewer commits), and keep this pass's results for that claim.
      if (ahead > 0 && queued >= Math.ceil(b.drain.concurrency / 2)) {
        flowing = true;
        result.started += this.#fill(b); // slots a raised concurrency just opened
        continue;
      }
      const pacer = this.#pacers.get(b.name) ?? newPacer();
      const config = pacerConfigOf(b);
      const horizon = this.#horizonFor(b);
      // Nothing can start now: skip the claim transaction. A Retry-After block is still recorded
      // on the head of the line once per block; a rate wait is recorded when a walk runs out of
      // tokens (the pass that did claim).
      if (pacer.blockedUntilMs > now) {
        if (pacer.blockedUntilMs < wakeAt) wakeAt = pacer.blockedUntilMs;
        if (this.#blockRecorded.get(b.name) === pacer.blockedUntilMs) continue;
        this.#blockRecorded.set(b.name, pacer.blockedUntilMs);
      } else if (config.rate !== null) {
        const lead = this.#leadFor(b.name, horizon);
        const peek = takeToken(config.rate, pacer.tokens, now + lead);
        if (!peek.taken) {
          if (peek.nextAvailableAtMs - lead < wakeAt) wakeAt = peek.nextAvailableAtMs - lead;
          continue;
        }
      }
      const complete = finished;
      finished = [];
      if (complete.length > 0) this.#heldSince = undefined;
      let claimed: ClaimedAttempt[];
      let verdict: ClaimVerdict;
      let busy: boolean | undefined;
      let full: boolean | undefined;
      movedDue = true;
      try {
        ({ claimed, verdict, busy, full } = await store.claim(
          b,
          { complete, nowMs: now, limit: room, leaseUntilMs: now + this.#d.leaseMs, workerId: this.#d.holder },
          { aheadFrom: Math.max(0, slots), ...this.#aheadPolicy(b, horizon) },
        ));
      } catch (e) {
        this.#results = complete.concat(this.#results);
        throw e;
      }
      // Every claim that returns has recorded its completions (a busy one on their own).
      this.#recorded(complete);
      if (busy) {
        // Another worker is claiming this bucket right now: look again shortly (its claim decides
        // what is left, and the next one here finds the pacer as it left it).
        const again = now + Math.max(BUSY_RETRY_MS, horizon / 3);
        if (again < wakeAt) wakeAt = again;
        continue;
      }
      // The bucket's concurrency is other workers' now: their completions do not wake this one, and
      // if they died, their leases would hold it until they expire. A bucket paced ahead looks
      // again shortly (its rate is what the other workers must keep); others wait as before.
      if (full && horizon > 0 && (this.#inflightByBucket.get(b.name) ?? 0) === 0) {
        const again = now + Math.max(BUSY_RETRY_MS, intervalMs(b.drain.rate!)); // an interval: the next token
        if (again < wakeAt) wakeAt = again;
      }
      // A Retry-After block heard while the claim was under way is kept (the store has it too).
      this.#pacers.set(b.name, block(verdict.pacer, this.#pacers.get(b.name)?.blockedUntilMs ?? 0));
      // An attempt taken ahead goes sendAfterMs after the claim returned, on this worker's clock:
      // never before its token, whatever this pass's clock reading or the database's clock said.
      const returnedAt = this.#d.clock.now();
      for (const a of claimed) {
        if (a.sendAfterMs <= 0) continue;
        this.#sendAt.set(a.attemptId, returnedAt + a.sendAfterMs);
        this.#waiting.set(b.name, (this.#waiting.get(b.name) ?? 0) + 1);
      }
      if (horizon > 0 && claimed.length > 0) this.#leading.add(b.name);
      else this.#leading.delete(b.name);
      // Held by the rate only: back when the next token is this worker's lead away (#leadFor).
      const rateOnly = horizon > 0 && Object.keys(verdict.deferred).every((k) => k === 'rate') && Number.isFinite(verdict.rateAt);
      const comeBack = rateOnly ? Math.max(now, verdict.rateAt - this.#leadFor(b.name, horizon)) : verdict.wakeAt;
      if (comeBack < wakeAt) wakeAt = comeBack;
      for (const [reason, n] of Object.entries(verdict.deferred)) {
        const k = reason as keyof PassResult['deferred'];
        result.deferred[k] = (result.deferred[k] ?? 0) + n;
        if (n > 0) {
          this.#d.observer?.deferred(b.name, k, n);
          this.#d.deliveryLog.deferred(b.name, k, n);
        }
      }
      // A delivery paced by its replay's own rate was left for a free slot: claim only for free
      // slots next time, or a busy bucket would leave it waiting for ever.
      if (verdict.skippedAhead > 0) this.#noAhead.add(b.name);
      else this.#noAhead.delete(b.name);
      const q = this.#ready.get(b.name) ?? { createdAt: b.createdAt, items: [] };
      q.items.push(...claimed);
      this.#ready.set(b.name, q);
      result.started += this.#fill(b);
    }
    // Results wait for the next claim while the queue keeps the slots fed, but never long: a held
    // result's lease keeps running (its delivery would be recovered as lease_expired).
    if (finished.length > 0 && flowing && now - (this.#heldSince ??= now) < HOLD_RESULTS_MS) {
      this.#results = finished.concat(this.#results);
    } else if (finished.length > 0) {
      this.#heldSince = undefined;
      try {
        await store.complete(finished);
      } catch (e) {
        this.#results = finished.concat(this.#results);
        throw e;
      }
      this.#recorded(finished);
    }
    const due = await this.#nextDue(now, movedDue || changes.changed);
    if (due !== null && due < wakeAt) wakeAt = due;
    result.wakeAt = Number.isFinite(wakeAt) ? wakeAt : null;
    return result;
  }

  /**
   * When something next falls due, from the database at most once a second, or sooner when another
   * connection committed (new requests, a replay), the known time has passed, or this pass claimed
   * or recovered (a claim sets its bucket's next due time, perhaps to a retry the due bucket hid).
   * This worker's own retries lower the cached time as they are recorded (#record), so none is
   * missed in between.
   */
  async #nextDue(now: number, moved: boolean): Promise<number | null> {
    const c = this.#dueCache;
    if (!moved && c !== undefined && now - c.readAt < NEXT_DUE_FRESH_MS && (c.at === null || c.at > now)) return c.at;
    const at = await this.#d.store.nextDueAt(now);
    this.#dueCache = { at, readAt: now };
    return at;
  }

  /** Asks the change feed what other connections committed, adding it to what waits for the next pass. */
  async #pollChanges(): Promise<void> {
    const c = await this.#d.store.takeChanges();
    if (c.changed) this.#pendingChanged = true;
    if (c.bucketsChanged) this.#pendingBucketsChanged = true;
  }

  /** Everything the feed reported since the last pass took it (refills' polls included). */
  async #takeChanges(): Promise<StoreChanges> {
    await this.#pollChanges();
    const out = { changed: this.#pendingChanged, bucketsChanged: this.#pendingBucketsChanged };
    this.#pendingChanged = false;
    this.#pendingBucketsChanged = false;
    return out;
  }

  /** Waits until every attempt started so far has finished and its record is written. */
  async settle(): Promise<void> {
    while (this.#inflight.size > 0 || this.#results.length > 0 || this.#flushing) {
      await Promise.all([...this.#inflight.values()].map((i) => i.promise));
      await this.#flush();
    }
  }

  /** A pass, then waits for its attempts: the run-once for tests and `worker --once`. */
  async runOnce(): Promise<PassResult> {
    const r = await this.drainOnce();
    await this.settle();
    return r;
  }

  /** Ends a sleep early: a request was stored, or a bucket changed. */
  wake(): void {
    this.#wokenEarly = true;
    this.#wakeUp?.();
  }

  /**
   * Runs passes until stop(), under the single-worker lease. With `refuse`, a live lease held by
   * another worker is an error naming it; with `standby`, this worker waits and takes over when
   * that lease lapses. Resolves once the loop is running (or standing by).
   */
  async start(mode: StartMode = 'standby', options: { loop?: boolean } = {}): Promise<void> {
    const { store, clock, logger } = this.#d;
    const startedAt = new Date(clock.now()).toISOString();
    const leaseInfo = JSON.stringify({ host: hostname(), pid: process.pid, lease_ms: this.#d.leaseMs, started_at: startedAt });
    const beat: ProcessBeat = {
      id: this.#d.holder,
      roles: this.#d.roles,
      host: hostname(),
      pid: process.pid,
      info: JSON.stringify({ ...this.#d.beatInfo, lease_ms: this.#d.leaseMs, started_at: startedAt }),
      leaseMs: this.#d.leaseMs,
    };
    await store.heartbeat(beat, clock.now(), this.#d.workerLeaseTtlMs);
    if (store.sharedClaims) {
      // Any number of workers claim at once; each bucket's limits live in the rows they lock.
      this.#holdsLease = true;
      logger.info({ worker: this.#d.holder }, 'drain worker active (shared claims: other workers may run beside it)');
    } else {
      const first = await store.acquireWorkerLease(this.#d.holder, leaseInfo, clock.now(), this.#d.workerLeaseTtlMs);
      if (!first.ok && mode === 'refuse') {
        await store.markStopped(this.#d.holder, clock.now()).catch(() => undefined);
        throw new AppError('worker_active', describeHolder(first.current));
      }
      if (!first.ok)
        logger.warn({ worker: this.#d.holder, holder: first.current.holder }, `drain worker standing by: ${describeHolder(first.current)}`);
      else logger.info({ worker: this.#d.holder, holder: this.#d.holder }, 'drain worker active');
      this.#holdsLease = first.ok;
    }
    this.#heartbeat = setInterval(() => void this.#renew(leaseInfo, beat), Math.max(50, Math.floor(this.#d.workerLeaseTtlMs / 3)));
    this.#heartbeat.unref();
    if (options.loop !== false) {
      // Claiming ahead holds slots another worker could use: on a store with shared claims it is
      // off, and rate tokens are taken a little ahead of their time instead.
      this.#claimAhead = !store.sharedClaims;
      this.#horizonMs = store.sharedClaims ? CLAIM_HORIZON_MS : 0;
      this.#d.deliveryLog.start();
      this.#loop = this.#run();
    }
  }

  /** Whether this worker may claim now: it holds the single-worker lease, or claims are shared. */
  get active(): boolean {
    return this.#holdsLease;
  }

  async #renew(info: string, beat: ProcessBeat): Promise<void> {
    if (this.#stopping) return;
    // The lease first (on SQLite it decides whether this worker may claim), then the heartbeat,
    // apart: a failed beat never costs a renewal.
    if (!this.#d.store.sharedClaims) {
      try {
        const r = await this.#d.store.acquireWorkerLease(this.#d.holder, info, this.#d.clock.now(), this.#d.workerLeaseTtlMs);
        if (r.ok !== this.#holdsLease) {
          if (r.ok) this.#d.logger.info({ worker: this.#d.holder }, 'drain worker took over the lease: active');
          else
            this.#d.logger.error(
              { worker: this.#d.holder, holder: r.current.holder },
              `drain worker lost its lease, standing by: ${describeHolder(r.current)}`,
            );
          this.#holdsLease = r.ok;
          this.wake();
        }
      } catch (e) {
        this.#d.logger.warn({ err: e }, 'drain worker lease renewal failed');
      }
    }
    try {
      await this.#d.store.heartbeat(beat, this.#d.clock.now(), this.#d.workerLeaseTtlMs);
    } catch (e) {
      this.#d.logger.warn({ err: e }, 'drain worker heartbeat failed');
    }
  }

  async #run(): Promise<void> {
    while (!this.#stopping) {
      let wakeAt: number | null = null;
      if (this.#holdsLease) {
        try {
          wakeAt = (await this.drainOnce()).wakeAt;
        } catch (e) {
          this.#d.logger.error({ err: e }, 'drain pass failed; trying again in 1 s');
          wakeAt = this.#d.clock.now() + 1000;
        }
      } else if (this.#results.length > 0) {
        // Standing by (the lease was lost): the attempts this worker made are still its to record;
        // the lease_attempt guard keeps a record from touching a delivery claimed since.
        await this.#flush();
      }
      if (this.#stopping) break;
      // A commit heard while the pass ran ended no sleep (none was subscribed yet): the feed
      // kept it, so ask it before sleeping, or new work would wait for the idle pass.
      try {
        await this.#pollChanges();
      } catch {
        // the store is closing; the sleep's timer ends the loop
      }
      const now = this.#d.clock.now();
      const heard = this.#holdsLease && this.#pendingChanged;
      await this.#sleep(heard ? 0 : Math.max(0, Math.min(wakeAt ?? Infinity, now + IDLE_PASS_MS) - now));
      // Let the other attempts finishing in this turn of the event loop join the next pass: one
      // transaction records them all and refills their slots together.
      await new Promise((r) => setImmediate(r));
    }
  }

  /** Sleeps up to `ms`, ending early on wake() or a commit by another connection. */
  #sleep(ms: number): Promise<void> {
    if (this.#wokenEarly || ms <= 0) {
      this.#wokenEarly = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      let unsubscribe: (() => void) | undefined;
      const done = () => {
        clearTimeout(timer);
        unsubscribe?.();
        this.#wakeUp = undefined;
        this.#wokenEarly = false;
        resolve();
      };
      const timer = setTimeout(done, ms);
      try {
        unsubscribe = this.#d.store.onChange(done);
      } catch {
        // the store is closing; the timer ends the sleep
      }
      this.#wakeUp = done;
    });
  }

  /**
   * Stops claiming, lets in-flight attempts finish for up to `graceMs`, then aborts the rest and
   * releases them (their attempt rows say `released`; the delivery is due again at once and the
   * attempt does not count). Writes every record, then gives up the worker lease.
   */
  async stop(graceMs = 10_000): Promise<void> {
    this.#stopping = true;
    this.#stopWaits.abort();
    clearInterval(this.#heartbeat);
    this.#wakeUp?.();
    await this.#loop;
    for (const bucket of [...this.#ready.keys()]) this.#releaseReady(bucket, 'released_on_shutdown');
    const all = Promise.all([...this.#inflight.values()].map((i) => i.promise));
    let timer: NodeJS.Timeout | undefined;
    const graceOver = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), graceMs)));
    if ((await Promise.race([all.then(() => 'done' as const), graceOver])) === 'timeout') {
      this.#d.logger.warn({ inflight: this.#inflight.size }, 'grace period over: releasing in-flight attempts');
      this.#abort.abort();
    }
    clearTimeout(timer);
    await this.settle();
    if (this.#holdsLease && !this.#d.store.sharedClaims) await this.#d.store.releaseWorkerLease(this.#d.holder).catch(() => undefined);
    await this.#d.store.markStopped(this.#d.holder, this.#d.clock.now()).catch(() => undefined);
    this.#holdsLease = false;
    this.#d.deliveryLog.stop();
  }

  /**
   * How far ahead the bucket's rate tokens are taken: CLAIM_HORIZON_MS, but no more tokens than the
   * concurrency less one (attempts waiting for their tokens hold leases, which the concurrency
   * counts, whichever worker holds them). Each worker also holds at most half the concurrency in
   * tokens taken ahead (#aheadPolicy): if it died, their leases would hold them until they
   * expired, and the other workers must still have room to go on at the bucket's rate.
   */
  #horizonFor(b: Bucket): number {
    if (this.#horizonMs === 0 || b.drain.rate === null) return 0;
    return Math.min(this.#horizonMs, intervalMs(b.drain.rate) * (b.drain.concurrency - 1));
  }

  /** The claim's horizon and this worker's room for more tokens taken ahead. */
  #aheadPolicy(b: Bucket, horizonMs: number): { horizonMs?: number; aheadLimit?: number } {
    if (horizonMs === 0) return {};
    return { horizonMs, aheadLimit: Math.max(0, Math.ceil(b.drain.concurrency / 2) - (this.#waiting.get(b.name) ?? 0)) };
  }

  /**
   * How far before a bucket's next rate token this worker claims again. The worker whose last claim
   * took tokens leads: two thirds of the horizon, so each of its claims takes about a third of a
   * horizon of tokens and may come up to two thirds late without losing one. The others stand by
   * at a third, so one of them takes over when the leader stalls or dies, without every worker
   * claiming every token's worth (a dozen round trips each, on the same cores).
   */
  #leadFor(bucket: string, horizon: number): number {
    return this.#leading.has(bucket) ? (2 * horizon) / 3 : horizon / 3;
  }

  /**
   * A bucket whose attempt timeout this lease does not cover is skipped: its deliveries wait. It is
   * logged by the composition root's stuck-bucket watcher (main.ts), at start and once a minute.
   */
  #timeoutFits(b: Bucket): boolean {
    return b.drain.timeoutMs < this.#d.leaseMs;
  }

  async #recover(now: number): Promise<number> {
    const expired = await this.#d.store.recoverExpired(now, this.#bucketList);
    for (const e of expired) {
      this.#d.observer?.attemptRecorded(e.bucket, 'lease_expired', null);
      // The store decided as afterLeaseExpiry does: a retry, or exhausted on the schedule's last attempt.
      const gaveUp = afterLeaseExpiry(this.#buckets.get(e.bucket), e.attempts, now).kind === 'exhausted';
      this.#d.deliveryLog.attemptEnded(
        e.bucket,
        gaveUp ? 'exhausted' : 'lease_expired',
        gaveUp
          ? {
              requestId: null,
              deliveryId: e.deliveryId,
              number: e.attempts,
              status: null,
              errorClass: 'lease_expired',
              reason: 'lease_expired',
            }
          : undefined,
      );
    }
    if (expired.length > 0)
      this.#d.logger.warn({ count: expired.length }, 'closed attempts whose lease expired (lease_expired); their deliveries are due again');
    return expired.length;
  }

  /**
   * Whether a bucket was written since the last pass read the buckets (the claim-ahead queue is
   * stale), asking the change feed now; while a pass re-reads them, and when the feed cannot be
   * read (the store closing), the answer is yes: the next pass decides.
   */
  async #bucketsChanged(): Promise<boolean> {
    if (this.#reloadingBuckets) return true;
    try {
      await this.#pollChanges();
    } catch {
      return true;
    }
    return this.#reloadingBuckets || this.#pendingBucketsChanged;
  }

  /** Starts queued attempts of the bucket while it has free slots; returns how many started. */
  #fill(b: Bucket): number {
    const ready = this.#ready.get(b.name)?.items;
    if (!ready || ready.length === 0) return 0;
    // A bucket-wide Retry-After holds every attempt, and a worker that lost its lease to another
    // starts none: what waits goes back unsent.
    if ((this.#pacers.get(b.name)?.blockedUntilMs ?? 0) > this.#d.clock.now()) {
      this.#releaseReady(b.name, 'released_on_retry_after');
      return 0;
    }
    if (this.#claimAhead && !this.#holdsLease) {
      this.#releaseReady(b.name, 'released_on_standby');
      return 0;
    }

    let started = 0;
    while (ready.length > 0 && (this.#inflightByBucket.get(b.name) ?? 0) < b.drain.concurrency) {
      const a = ready.shift()!;
      // Its lease would run out before the attempt could time out (the bucket's timeout was raised
      // while it waited, or the event loop stalled): give it back rather than risk a second claim.
      // (#timeoutFits keeps timeout < lease, so an attempt started as it is claimed always fits.)
      const margin = Math.min(LEASE_MARGIN_MS, (this.#d.leaseMs - b.drain.timeoutMs) / 2);
      if (this.#d.clock.now() + b.drain.timeoutMs + margin > a.startedAt + this.#d.leaseMs) {
        this.#releaseUnsent([a], 'released_on_lease');
        continue;
      }
      this.#start(b, a);
      started++;
    }
    return started;
  }

  /** Releases the bucket's whole queue of attempts claimed ahead, for `reason`. */
  #releaseReady(bucket: string, reason: ReleaseReason): void {
    const q = this.#ready.get(bucket);
    if (!q) return;
    this.#ready.delete(bucket);
    this.#releaseUnsent(q.items, reason);
  }

  /** Gives back attempts claimed ahead that never went out: recorded `released`, not counted, the delivery due again at once. */
  #releaseUnsent(attempts: readonly ClaimedAttempt[], reason: ReleaseReason): void {
    const now = this.#d.clock.now();
    for (const a of attempts) {
      this.#results.push({
        attemptId: a.attemptId,
        deliveryId: a.deliveryId,
        finishedAt: now,
        durationMs: 0,
        status: null,
        errorClass: null,
        errorMessage: 'not sent: claimed ahead, then released',
        responseHeaders: null,
        responseBody: null,
        responseTruncated: false,
        outcome: 'released',
        reason,
        nextAttemptAt: now,
        nextWhy: 'released',
      });
    }
  }

  #start(b: Bucket, a: ClaimedAttempt): void {
    this.#inflightByBucket.set(b.name, (this.#inflightByBucket.get(b.name) ?? 0) + 1);
    const promise = this.#attempt(b, a)
      .catch((e: unknown) => this.#d.logger.error({ err: e, attempt: a.attemptId }, 'attempt bookkeeping failed'))
      .finally(() => {
        this.#inflight.delete(a.attemptId);
        this.#inflightByBucket.set(b.name, (this.#inflightByBucket.get(b.name) ?? 1) - 1);
        return this.#refill(b.name);
      });
    this.#inflight.set(a.attemptId, { bucket: b.name, promise });
  }

  /**
   * A freed slot takes the next attempt claimed ahead, without waiting for a pass, unless a bucket
   * changed since the pass that claimed it (a pause, a delete's tombstone, a new destination): then
   * the next pass, woken here, re-reads the buckets and decides. The change feed is asked first,
   * before any claimed-ahead attempt starts.
   */
  async #refill(name: string): Promise<void> {
    try {
      const current = (await this.#bucketsChanged()) ? undefined : this.#buckets.get(name);
      if (current && current.drain.rate !== null) this.#releaseReady(current.name, 'released_on_rate');
      else if (current && !current.paused && !this.#stopping) this.#fill(current);
    } finally {
      this.wake();
    }
  }

  async #attempt(b: Bucket, a: ClaimedAttempt): Promise<void> {
    // A rate token taken ahead: the attempt goes at its token's time, not before. A stop, or a
    // pause or delete this worker heard meanwhile, sends it back unsent; so does a Retry-After
    // block this worker heard (one only another worker heard is in the store, not here: what this
    // worker took ahead, a horizon at most, still goes).
    const sendAt = this.#sendAt.get(a.attemptId);
    if (sendAt !== undefined) {
      this.#sendAt.delete(a.attemptId);
      const go = await this.#waitToSend(sendAt - this.#d.clock.now());
      this.#waiting.set(a.bucket, (this.#waiting.get(a.bucket) ?? 1) - 1);
      if (!go) {
        this.#releaseUnsent([a], 'released_on_shutdown');
        return;
      }
      const current = this.#buckets.get(a.bucket);
      if (current === undefined || current.createdAt !== b.createdAt || current.paused) {
        this.#releaseUnsent([a], 'released_on_pause');
        return;
      }
    }
    if ((this.#pacers.get(a.bucket)?.blockedUntilMs ?? 0) > this.#d.clock.now()) {
      this.#releaseUnsent([a], 'released_on_retry_after');
      return;
    }
    // Re-signing and x-hookbucket-verified on the bucket's settings as this worker last read them
    // (src/policy/resign.ts); the signature's timestamp is this attempt's send time.
    const latest = this.#buckets.get(a.bucket);
    const provider = (latest !== undefined && latest.createdAt === b.createdAt ? latest : b).provider;
    const plan = signPlan(provider, { id: a.requestId, verdict: a.verdict, dedupKey: a.dedupKey });
    let signature: string[] | undefined;
    let refusal: { reason: string; message: string } | undefined;
    if (plan.kind === 'refuse') refusal = plan;
    else if (plan.kind === 'sign') {
      try {
        signature = await signatureHeaders(plan.id, this.#d.clock.now(), a.body, plan.secrets);
      } catch (e) {
        // A signing secret the bucket settings should have refused: a configuration fix, then a replay.
        refusal = { reason: 'sign_failed', message: `not sent: signing failed: ${(e as Error).message}` };
      }
    }
    let result: AttemptResult;
    if (refusal !== undefined) {
      result = this.#refused(a, refusal.reason, refusal.message);
    } else {
      const res = await forward(this.#d.dispatcher, {
        target: a.target,
        method: a.method,
        headers: forwardHeaders(
          a.rawHeaders,
          { requestId: a.requestId, generation: a.generation, attempt: a.number },
          b.drain.forwardHeaders,
          { verified: verifiedHeader(provider, a.verdict), ...(signature !== undefined ? { signature } : {}) },
        ),
        body: a.body,
        timeoutMs: b.drain.timeoutMs,
        aborter: this.#abort,
      });
      this.#d.afterResponse?.(a);
      // Recorded by the next pass, in its claim transaction (or by settle()).
      result = this.#record(a, res);
    }
    this.#observed.set(result.attemptId, { bucket: a.bucket, durationMs: result.durationMs, requestId: a.requestId, number: a.number });
    this.#results.push(result);
  }

  /** Waits `ms` (a real timer: the token's time is real time); false when the worker stops meanwhile. */
  #waitToSend(ms: number): Promise<boolean> {
    const stopped = this.#stopWaits.signal;
    if (this.#abort.aborted || stopped.aborted) return Promise.resolve(false);
    if (ms <= 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const end = (go: boolean) => {
        clearTimeout(timer);
        remove();
        stopped.removeEventListener('abort', onStop);
        resolve(go);
      };
      const onStop = () => end(false);
      const timer = setTimeout(() => end(true), ms);
      const remove = this.#abort.add(onStop);
      stopped.addEventListener('abort', onStop, { once: true });
    });
  }

  /**
   * An attempt not sent because the request may not go out as the bucket would send it (a request
   * a re-signing bucket does not vouch for): `failed` at once, with the reason as evidence, like an
   * `unsendable` one; sending it again would be refused again, until its verdict changes and a
   * replay sends it.
   */
  #refused(a: ClaimedAttempt, reason: string, message: string): AttemptResult {
    return {
      attemptId: a.attemptId,
      deliveryId: a.deliveryId,
      finishedAt: this.#d.clock.now(),
      durationMs: 0,
      status: null,
      errorClass: reason,
      errorMessage: message,
      responseHeaders: null,
      responseBody: null,
      responseTruncated: false,
      outcome: 'failed',
      reason,
      nextAttemptAt: null,
      nextWhy: null,
    };
  }

  /** The attempt row and the delivery's next state, from the result and the bucket's current settings. */
  #record(a: ClaimedAttempt, res: ForwardResult): AttemptResult {
    const now = this.#d.clock.now();
    const response = res.kind === 'response' ? res : undefined;
    const error = res.kind === 'error' ? res : undefined;
    const row = (
      outcome: AttemptResult['outcome'],
      reason: string,
      nextAttemptAt: number | null,
      nextWhy: string | null,
      errorClass?: string,
    ): AttemptResult => ({
      attemptId: a.attemptId,
      deliveryId: a.deliveryId,
      finishedAt: now,
      durationMs: res.durationMs,
      status: response?.status ?? null,
      errorClass: errorClass ?? error?.errorClass ?? null,
      errorMessage: error ? `${error.code ?? 'error'}: ${error.message}` : (response?.bodyError ?? null),
      responseHeaders: response?.headers ?? null,
      responseBody: response?.body ?? null,
      responseTruncated: response?.truncated ?? false,
      outcome,
      reason,
      nextAttemptAt,
      nextWhy,
    });
    if (res.kind === 'error' && res.aborted) return row('released', 'released_on_shutdown', now, 'released', 'shutdown');
    // Settings as they are now: a bucket changed mid-attempt decides with its new schedule.
    const b = this.#buckets.get(a.bucket);
    const drain = b?.drain;
    const outcome: Outcome =
      res.kind === 'response' ? { kind: 'response', status: res.status } : { kind: 'error', errorClass: res.errorClass };
    const retryAfter =
      res.kind === 'response' && RETRY_AFTER_STATUSES.has(res.status) ? headerValue(res.headers, 'retry-after') : undefined;
    const pausedSinceFirst = b ? pausedMsAt(b, now) - a.pausedMsAtFirst : 0;
    // A bucket deleted mid-attempt is decided on the defaults (its rows go with it anyway).
    const decision = decideAttempt(drain?.schedule ?? DEFAULT_SCHEDULE, drain?.retryOn ?? null, {
      outcome,
      retryAfter,
      attempt: a.number,
      elapsedActiveMs: Math.max(0, now - a.firstAttemptAt - pausedSinceFirst),
      nowMs: now,
      random: this.#d.random(),
    });
    if (decision.state === 'retrying') {
      if (this.#dueCache !== undefined && (this.#dueCache.at === null || decision.atMs < this.#dueCache.at))
        this.#dueCache.at = decision.atMs;
      const r = row('retry', decision.reason, decision.atMs, decision.why);
      if (decision.bucketBlockedUntilMs !== undefined) {
        // The store keeps the block in the bucket's pacer row, for every worker; this one holds
        // its queue at once.
        this.#pacers.set(a.bucket, block(this.#pacers.get(a.bucket) ?? newPacer(), decision.bucketBlockedUntilMs));
        r.block = { bucket: a.bucket, untilMs: decision.bucketBlockedUntilMs };
      }
      return r;
    }
    if (decision.state === 'exhausted') return row('exhausted', `${decision.reason}; gave up: ${decision.why}`, null, null);
    return row(decision.state, decision.reason, null, null);
  }

  /** Tells the observer about results the store has just recorded (those claimed ahead and given back unsent are not in #observed). */
  #recorded(batch: readonly AttemptResult[]): void {
    const { observer, deliveryLog } = this.#d;
    for (const r of batch) {
      const o = this.#observed.get(r.attemptId);
      if (o === undefined) continue;
      this.#observed.delete(r.attemptId);
      observer?.attemptRecorded(o.bucket, r.outcome, o.durationMs);
      const ended = {
        requestId: o.requestId,
        deliveryId: r.deliveryId,
        number: o.number,
        status: r.status,
        errorClass: r.errorClass,
        reason: r.reason,
      };
      deliveryLog.attemptEnded(o.bucket, r.outcome, ended);
      if (r.block) deliveryLog.blocked(r.block.bucket, r.block.untilMs, ended);
    }
  }

  /** Writes the completed attempts in one transaction; on a storage error keeps them and tries again. */
  #flush(): Promise<void> {
    if (this.#flushing) return this.#flushing;
    if (this.#results.length === 0) return Promise.resolve();
    this.#flushing = (async () => {
      try {
        while (this.#results.length > 0) {
          // Let the attempts finishing in this turn join the batch.
          await new Promise((r) => setImmediate(r));
          const batch = this.#results;
          this.#results = [];
          try {
            await this.#d.store.complete(batch);
            this.#recorded(batch);
          } catch (e) {
            this.#results = batch.concat(this.#results);
            this.#d.logger.error({ err: e, count: batch.length }, 'writing attempt results failed; retrying');
            await new Promise((r) => setTimeout(r, COMPLETE_RETRY_MS));
          }
        }
      } finally {
        this.#flushing = undefined;
      }
    })();
    return this.#flushing;
  }
}

function headerValue(flat: readonly string[], name: string): string | undefined {
  for (let i = 0; i < flat.length; i += 2) if (flat[i]!.toLowerCase() === name) return flat[i + 1];
  return undefined;
}

export function describeHolder(h: WorkerHolder): string {
  let who = h.holder;
  try {
    const info = JSON.parse(h.info) as { host?: string; pid?: number };
    if (info.host !== undefined && info.pid !== undefined) who = `pid ${info.pid} on ${info.host} (${h.holder})`;
  } catch {
    // info is free text from another version: show the holder id alone
  }
  return `another drain worker is active on this database: ${who}, since ${new Date(h.acquiredAt).toISOString()}, lease until ${new Date(h.expiresAt).toISOString()}`;
}
