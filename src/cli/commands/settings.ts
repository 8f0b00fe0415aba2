import { Command } from 'commander';
import { iso } from '../../json/iso.js';
import {
  isSettingKey,
  normalSettingValue,
  SETTING_HELP,
  SETTING_KEYS,
  settingViews,
  setSetting,
  unknownSetting,
  type SettingView,
} from '../../settings/settings.js';
import { settingJson, settingsJson } from '../../settings/settings-json.js';
import { escapeTerminal } from '../../policy/terminal-text.js';
import { withStore } from '../context.js';
import { print, printJson, table, type CliIo } from '../io.js';

const EXAMPLES = `
Examples:
  $ hookbucket settings show
  $ hookbucket settings set destinations public
  $ hookbucket settings set destinations allow:public,10.0.0.0/8,consumer.internal
  $ hookbucket settings set destinations allow:*.svc.cluster.local,fd00::/8
  $ hookbucket settings set destinations any
  $ hookbucket settings show destinations --json`;

const DESTINATIONS_HELP = `
destinations: which addresses the drain worker may connect to, and which --destination and
replay --to URLs bucket create|update and replay accept. Off by default.
  any      no check (the default): localhost and private-network consumers work
  public   only public unicast addresses. Refused: loopback (127/8, ::1), private (10/8,
           172.16/12, 192.168/16), CGNAT (100.64/10), link-local (169.254/16, fe80::/10),
           unique-local (fc00::/7), 0/8 and ::, cloud metadata (169.254.169.254,
           fd00:ec2::254), multicast, broadcast and other reserved blocks. An IPv4-mapped
           IPv6 address (::ffff:a.b.c.d) is judged as the IPv4 address it carries.
  allow:<entry>,…
           only what is listed: a CIDR (10.0.0.0/8, fd00::/8), one address (192.168.1.10), a
           host name (consumer.internal: every address it resolves to), every name under a
           domain (*.svc.internal), and the word public (every public address). A metadata
           address stays refused behind a host name; list its CIDR to allow it.

A host name is checked by every address it resolves to: when the setting is set, at bucket
create|update and replay --to (exit 2, destination_refused), and again by the worker at each new
connection, which then connects to the address it checked (no second DNS lookup). An attempt the
worker refuses is recorded with error class destination_refused and retried on the bucket's
schedule, like a connection error. Every serve and worker applies a change within 5 s, without a
restart, and closes its open connections to addresses the new setting refuses.`;

interface ShowOpts {
  json?: boolean;
}

function showText(views: readonly SettingView[]): string {
  return table(
    ['SETTING', 'VALUE', 'SET'],
    views.map((v) => [v.key, escapeTerminal(v.value), v.isDefault ? 'default' : (iso(v.updatedAt) ?? '-')]),
  );
}

export function makeSettingsCommand(io: CliIo): Command {
  const settings = new Command('settings')
    .description('show and change settings every serve and worker of the database applies (destinations)')
    .addHelpText('after', `${EXAMPLES}\n${DESTINATIONS_HELP}`);

  settings.addCommand(
    new Command('show')
      .description('print the settings (a key: that one only); a setting not set shows its default')
      .argument('[key]', `a setting: ${SETTING_KEYS.join(', ')}`)
      .option('--json', 'print JSON: { "<key>": { "value", "default", "updated_at" } } (one key: that object)')
      .addHelpText('after', EXAMPLES)
      .action(async (key: string | undefined, opts: ShowOpts, cmd: Command) => {
        if (key !== undefined && !isSettingKey(key)) throw unknownSetting(key);
        await withStore(cmd, io, async (store) => {
          const rows = await store.getSettings();
          const views = settingViews(rows).filter((v) => key === undefined || v.key === key);
          if (opts.json) return printJson(io, key === undefined ? settingsJson(rows) : settingJson(views[0]!));
          print(io, showText(views));
        });
      }),
  );

  settings.addCommand(
    new Command('set')
      .description('change a setting for every process of the database (applied within 5 s)')
      .argument('<key>', `a setting: ${SETTING_KEYS.map((k) => `${k} (${SETTING_HELP[k]})`).join('; ')}`)
      .argument('<value>', 'its new value')
      .option('--json', 'print the setting as stored, as JSON')
      .addHelpText(
        'after',
        `${EXAMPLES}\n${DESTINATIONS_HELP}\n\nExit codes: 0 set, 2 unknown setting or invalid value (invalid_input), 1 other errors.`,
      )
      .action(async (key: string, value: string, opts: ShowOpts, cmd: Command) => {
        if (!isSettingKey(key)) throw unknownSetting(key);
        // Checked before the database is opened (or created).
        normalSettingValue(key, value);
        await withStore(cmd, io, async (store) => {
          const row = await setSetting(store, key, value);
          const view: SettingView = { key, value: row.value, isDefault: false, updatedAt: row.updatedAt };
          if (opts.json) return printJson(io, settingJson(view));
          print(io, `${key} = ${escapeTerminal(row.value)} (every serve and worker applies it within 5 s)`);
        });
      }),
  );
  return settings;
}
