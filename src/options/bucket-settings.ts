/**
 * A bucket's settings as `bucket create|update` takes them, shared with the admin API's bucket
 * routes: the same parsers and the same merge, so that both accept the same values and limits.
 */
import { InvalidArgumentError } from 'commander';
import { DEFAULT_PRUNE_STATES, parsePruneStates } from '../retention/rules.js';
import { AppError } from '../shared/errors.js';
import { NO_PROVIDER } from '../store/provider-row.js';
import type { BucketPatch, DrainSettings, PrunableState, ProviderSettings } from '../store/store.js';
import { drainPatchFrom, type DeliveryOpts } from './drain-settings.js';
import { providerPatchFrom, type ProviderOpts } from './provider-settings.js';

/** `--state delivered,failed`: only terminal states; pending, retrying, delivering and held are refused. */
export function pruneStatesArg(value: string): PrunableState[] {
  const r = parsePruneStates(value);
  if (!r.ok) throw new InvalidArgumentError(r.message);
  return r.states;
}

/** What `bucket create|update` flags (or the admin API's bucket body) give, parsed; `false`: the --no-* form. */
export interface BucketSettingsOpts extends DeliveryOpts, ProviderOpts {
  destination?: string | false;
  maxBody?: number;
  ackStatus?: number;
  ackBody?: string | false;
  ackContentType?: string | false;
  retain?: number | false;
  retainState?: PrunableState[];
}

/**
 * The patch the options describe; drain settings merge onto `current` (DEFAULT_DRAIN for a new
 * bucket), provider settings onto `provider` (NO_PROVIDER for a new bucket); `warn` receives what
 * is allowed but likely not meant.
 */
export function bucketPatchFrom(
  o: BucketSettingsOpts,
  current: DrainSettings,
  provider: ProviderSettings = NO_PROVIDER,
  warn?: (message: string) => void,
): BucketPatch {
  if ((o.ackStatus === 204 || o.ackStatus === 205) && typeof o.ackBody === 'string') {
    throw new AppError('invalid_option', `--ack-status ${o.ackStatus} answers without a body; drop --ack-body`);
  }
  const p: BucketPatch = {};
  const drain = drainPatchFrom(o, current);
  if (Object.keys(drain).length > 0) p.drain = drain;
  if (o.destination !== undefined) p.destination = o.destination === false ? null : o.destination;
  if (o.maxBody !== undefined) p.maxBody = o.maxBody;
  if (o.ackStatus !== undefined) p.ackStatus = o.ackStatus;
  if (o.ackBody !== undefined) p.ackBody = o.ackBody === false ? null : o.ackBody;
  if (o.ackContentType !== undefined) p.ackContentType = o.ackContentType === false ? null : o.ackContentType;
  if (o.retain === false && o.retainState !== undefined)
    throw new AppError('invalid_option', '--no-retain turns retention off; drop --retain-state');
  if (o.retain !== undefined) p.retainMs = o.retain === false ? null : o.retain;
  if (o.retain === false) p.retainStates = [...DEFAULT_PRUNE_STATES];
  if (o.retainState !== undefined) p.retainStates = o.retainState;
  const prov = providerPatchFrom(o, provider, warn);
  if (Object.keys(prov).length > 0) p.provider = prov;
  return p;
}
