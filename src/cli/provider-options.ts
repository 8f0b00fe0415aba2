/**
 * The provider flags of `bucket create|update` (verification, handshakes, methods, dedup,
 * re-signing) and the edge of their secret sources: `--verify-secret-file`, the
 * HOOKBUCKET_VERIFY_SECRET_<BUCKET> variable and `--sign-secret generate`. The merge and its checks
 * are src/options/provider-settings.ts.
 *
 * Secrets are taken without a commander parser on purpose: commander echoes a refused argument in
 * its error, and a secret must never reach a terminal or a log.
 */
import { readFileSync, statSync } from 'node:fs';
import { type Command, Option } from 'commander';
import { DEFAULT_DEDUP_WINDOW_MS } from '../policy/dedup.js';
import type { HandshakeName } from '../policy/handshake.js';
import { DEFAULT_TOLERANCE_MS, PROVIDER_SCHEMES } from '../policy/verify.js';
import {
  dedupKeyArg,
  handshakeArg,
  MAX_SECRET_LENGTH,
  MAX_SECRETS,
  methodsArg,
  NAMED_HANDSHAKES,
  onInvalidArg,
  type ProviderOpts,
  signSchemeArg,
  verifySchemeArg,
  wholeSecondsArg,
} from '../options/provider-settings.js';
import { AppError } from '../shared/errors.js';
import { formatDuration } from '../shared/format-duration.js';
import { generateSigningSecret } from '../verify/sign.js';
import type { CliIo } from './io.js';

/** The raw flags as commander gives them (secret flags unparsed). */
export interface ProviderFlags extends Omit<ProviderOpts, 'verifySecrets' | 'signSecrets'> {
  verifySecret?: string[];
  verifySecretFile?: string;
  signSecret?: string[];
}

const collect = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), value];
const collectHandshake = (value: string, previous: HandshakeName[] | undefined): HandshakeName[] => [
  ...(previous ?? []),
  handshakeArg(value),
];

export function addProviderOptions(cmd: Command, forUpdate: boolean): Command {
  cmd
    .option(
      '--verify <scheme>',
      `check each sender's signature at ingest: ${PROVIDER_SCHEMES.join(', ')}, or hmac:<header>:<sha256|sha1>:<hex|base64>[:<prefix>]`,
      verifySchemeArg,
    )
    .option(
      '--verify-secret <secret>',
      "a secret of the --verify scheme, in the provider's own format; repeatable (any one matching passes); the list given replaces the bucket's",
      collect,
    )
    .option('--verify-secret-file <path>', 'read the verify secrets from a file, one per line (not readable by other users: chmod 600)')
    .option(
      '--verify-tolerance <duration>',
      `how far a signed timestamp may be from the arrival, for stripe, slack and standard (default ${formatDuration(DEFAULT_TOLERANCE_MS)})`,
      wholeSecondsArg,
    )
    .option(
      '--on-invalid <action>',
      'a request that fails verification: quarantine (stored, answered as usual, never delivered; the default) or reject (401, not stored)',
      onInvalidArg,
    )
    .option(
      '--handshake <name>',
      `also answer this URL handshake: ${NAMED_HANDSHAKES.join(', ')}; repeatable, the list given replaces the bucket's (the --verify scheme's own handshake is always answered)`,
      collectHandshake,
    )
    .option('--verify-token <token>', "Meta's hub.verify_token, which the meta handshake must match (else 403)")
    .option('--graph-client-state <state>', "Microsoft Graph's clientState, checked in each notification")
    .option('--methods <list>', 'accept only these methods, like POST,PUT; others get 405 (default: any method)', methodsArg)
    .option(
      '--dedup <key>',
      "store a repeated event as a duplicate and never deliver it: provider (the scheme's event id), header:<name> or json:<dotted.path>",
      dedupKeyArg,
    )
    .option(
      '--dedup-window <duration>',
      `how long a key is remembered (default ${formatDuration(DEFAULT_DEDUP_WINDOW_MS)}, at most 30d)`,
      wholeSecondsArg,
    )
    .option('--sign <scheme>', 're-sign every delivery attempt: standard (Standard Webhooks headers)', signSchemeArg)
    .option(
      '--sign-secret <secret>',
      'a Standard Webhooks secret (whsec_…) to sign with, or generate (a new one, printed once); repeatable: one signature each, for rotation',
      collect,
    );
  if (forUpdate) {
    cmd
      .option('--no-verify', 'stop verifying senders')
      .addOption(
        // Like --no-forward-header: with --handshake given too, the handshakes given are the whole list.
        new Option('--no-handshake', "answer only the --verify scheme's own handshake")
          .preset(true)
          .argParser((_: unknown, previous: HandshakeName[] | undefined): HandshakeName[] => previous ?? []),
      )
      .option('--no-verify-token', 'remove the Meta verify token')
      .option('--no-graph-client-state', 'stop checking Graph clientState')
      .option('--no-methods', 'accept any method again (the default)')
      .option('--no-dedup', 'stop de-duplicating')
      .option('--no-sign', 'stop re-signing deliveries');
  }
  return cmd;
}

/** HOOKBUCKET_VERIFY_SECRET_<BUCKET>: the bucket name upper-cased, each character other than A-Z and 0-9 as `_`. */
export function verifySecretVariable(bucket: string): string {
  return `HOOKBUCKET_VERIFY_SECRET_${bucket.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`;
}

/**
 * The verify secrets a file holds: one per line; blank lines are skipped and each line's
 * surrounding whitespace (a trailing newline, a CR) goes. A file that other users may read is
 * refused, as ssh refuses such a key: the secret would already be out.
 */
export function readSecretFile(path: string): string[] {
  let text: string;
  try {
    const st = statSync(path);
    if (st.isFile() && (st.mode & 0o004) !== 0) {
      throw new AppError(
        'invalid_option',
        `--verify-secret-file ${path} is readable by other users (mode ${(st.mode & 0o777).toString(8).padStart(4, '0')}): chmod 600 it first`,
      );
    }
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if (e instanceof AppError) throw e;
    throw new AppError('invalid_option', `--verify-secret-file ${path}: ${(e as NodeJS.ErrnoException).code ?? 'unreadable'}`);
  }
  const lines = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');
  if (lines.length === 0) throw new AppError('secret_required', `--verify-secret-file ${path} holds no secret`);
  if (lines.length > MAX_SECRETS)
    throw new AppError('invalid_option', `--verify-secret-file ${path}: at most ${MAX_SECRETS} secrets, one per line`);
  for (const l of lines) {
    if (l.length > MAX_SECRET_LENGTH)
      throw new AppError('invalid_secret', `--verify-secret-file ${path}: a line is longer than ${MAX_SECRET_LENGTH} characters`);
  }
  return lines;
}

/**
 * The flags with their secret sources read: `verifySecrets` from --verify-secret and
 * --verify-secret-file together, else (only when --verify is given) HOOKBUCKET_VERIFY_SECRET_<BUCKET>
 * from the environment or .env; `signSecrets` with `generate` replaced by a new secret, returned
 * in `generated` for the command to print once.
 */
export function resolveProviderSecrets(flags: ProviderFlags, bucket: string, io: CliIo): { opts: ProviderOpts; generated: string | null } {
  const { verifySecret, verifySecretFile, signSecret, ...rest } = flags;
  const opts: ProviderOpts = { ...rest };
  if (verifySecret !== undefined || verifySecretFile !== undefined) {
    opts.verifySecrets = [...(verifySecret ?? []), ...(verifySecretFile !== undefined ? readSecretFile(verifySecretFile) : [])];
  } else if (flags.verify !== undefined && flags.verify !== false) {
    const name = verifySecretVariable(bucket);
    const fromEnv = io.env[name] ?? io.dotenv[name];
    if (fromEnv !== undefined && fromEnv.trim() !== '') opts.verifySecrets = [fromEnv.trim()];
  }
  let generated: string | null = null;
  if (signSecret !== undefined) {
    const generate = signSecret.filter((s) => s === 'generate').length;
    if (generate > 1) throw new AppError('invalid_option', '--sign-secret generate: once per command');
    if (generate === 1) generated = generateSigningSecret();
    opts.signSecrets = signSecret.map((s) => (s === 'generate' ? (generated as string) : s));
  }
  return { opts, generated };
}
