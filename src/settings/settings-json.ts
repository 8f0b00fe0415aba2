/** The settings as JSON (`settings show --json`, GET /api/settings) and back (the CLI's --api). */
import { iso } from '../json/iso.js';
import type { StoredSetting } from '../store/store.js';
import { settingViews, type SettingView } from './settings.js';

export interface SettingJson {
  value: string;
  /** true: not set, the default applies. */
  default: boolean;
  updated_at: string | null;
}

export function settingJson(v: SettingView): SettingJson {
  return { value: v.value, default: v.isDefault, updated_at: iso(v.updatedAt) };
}

/** `{ "destinations": { "value": "public", "default": false, "updated_at": "…" } }`: every known key. */
export function settingsJson(rows: readonly StoredSetting[]): Record<string, SettingJson> {
  return Object.fromEntries(settingViews(rows).map((v) => [v.key, settingJson(v)]));
}

/** The rows a settings JSON object stands for: the keys that are set (not default). */
export function settingsFromJson(j: unknown): StoredSetting[] {
  const out: StoredSetting[] = [];
  for (const [key, v] of Object.entries((j ?? {}) as Record<string, Partial<SettingJson>>)) {
    if (v?.default === true || typeof v?.value !== 'string') continue;
    out.push({ key, value: v.value, updatedAt: typeof v.updated_at === 'string' ? Date.parse(v.updated_at) : 0 });
  }
  return out;
}
