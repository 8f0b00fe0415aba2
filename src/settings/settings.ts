/**
 * Operator settings every process of a database agrees on (`hookbucket settings`): stored in the
 * settings table, one text value per key, read by the CLI, the admin API and every worker. A key
 * not set has its default. Values are checked and written in their normal form here, so what
 * `settings show` prints is what the workers apply.
 */
import {
  ANY_DESTINATION,
  formatDestinationPolicy,
  parseDestinationPolicy,
  PUBLIC_DESTINATIONS,
  type DestinationPolicy,
} from '../policy/destination-policy.js';
import { AppError } from '../shared/errors.js';
import type { StoredSetting } from '../store/store.js';

export const SETTING_KEYS = ['destinations'] as const;
export type SettingKey = (typeof SETTING_KEYS)[number];

export const SETTING_DEFAULTS: Readonly<Record<SettingKey, string>> = { destinations: 'any' };

export const SETTING_HELP: Readonly<Record<SettingKey, string>> = {
  destinations: 'which addresses deliveries may connect to: any (default), public, or allow:<CIDR|address|host|*.domain|public>,…',
};

export function isSettingKey(key: string): key is SettingKey {
  return (SETTING_KEYS as readonly string[]).includes(key);
}

export function unknownSetting(key: string): AppError {
  return new AppError('invalid_input', `unknown setting ${JSON.stringify(key)}; settings: ${SETTING_KEYS.join(', ')}`);
}

/** A value as typed, checked and in its normal form (`allow:public` → `public`); invalid_input otherwise. */
export function normalSettingValue(key: SettingKey, text: string): string {
  const p = parseDestinationPolicy(text);
  if ('error' in p) throw new AppError('invalid_input', `invalid ${key} setting: ${p.error}`);
  return formatDestinationPolicy(p);
}

export interface SettingView {
  key: SettingKey;
  value: string;
  /** Not set: the default applies. */
  isDefault: boolean;
  updatedAt: number | null;
}

/** Every known setting, set or not, in key order. */
export function settingViews(rows: readonly StoredSetting[]): SettingView[] {
  return SETTING_KEYS.map((key) => {
    const row = rows.find((r) => r.key === key);
    return row
      ? { key, value: row.value, isDefault: false, updatedAt: row.updatedAt }
      : { key, value: SETTING_DEFAULTS[key], isDefault: true, updatedAt: null };
  });
}

/**
 * The destination policy the rows say. A stored value this version cannot read (written by a
 * newer one, or by hand) fails closed: `public`, never `any`.
 */
export function destinationPolicyOf(rows: readonly StoredSetting[]): DestinationPolicy {
  const row = rows.find((r) => r.key === 'destinations');
  if (row === undefined) return ANY_DESTINATION;
  const p = parseDestinationPolicy(row.value);
  return 'error' in p ? PUBLIC_DESTINATIONS : p;
}

/** Sets a setting after checking its value; returns the row as stored. */
export async function setSetting(
  store: { putSetting(key: string, value: string): Promise<StoredSetting> },
  key: string,
  text: string,
): Promise<StoredSetting> {
  if (!isSettingKey(key)) throw unknownSetting(key);
  return store.putSetting(key, normalSettingValue(key, text));
}
