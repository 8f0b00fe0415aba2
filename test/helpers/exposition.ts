/**
 * A small parser of the Prometheus text exposition format (0.0.4), for tests that assert exact
 * values: one sample per line, `name{label="value",...} value`, with `# HELP` / `# TYPE` comments.
 */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  samples: Sample[];
  /** `# TYPE` per metric name. */
  types: Map<string, string>;
  /** The samples named `name` whose labels include every pair of `labels`. */
  find(name: string, labels?: Record<string, string>): Sample[];
  /** The one sample named `name` with exactly these labels; undefined when absent (throws when several). */
  value(name: string, labels?: Record<string, string>): number | undefined;
  /** Every distinct value of `label` among the samples of `name`. */
  labelValues(name: string, label: string): string[];
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*/y;

function unescapeLabel(v: string): string {
  return v.replace(/\\(.)/g, (_m, c: string) => (c === 'n' ? '\n' : c));
}

function parseValue(v: string): number {
  if (v === '+Inf') return Infinity;
  if (v === '-Inf') return -Infinity;
  if (v === 'NaN') return NaN;
  const n = Number(v);
  if (Number.isNaN(n)) throw new Error(`not a sample value: ${v}`);
  return n;
}

export function parseExposition(text: string): Exposition {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    if (line.startsWith('#')) {
      const t = /^# TYPE (\S+) (\S+)$/.exec(line);
      if (t) types.set(t[1]!, t[2]!);
      continue;
    }
    const m = SAMPLE.exec(line);
    if (!m) throw new Error(`not an exposition line: ${JSON.stringify(line)}`);
    const labels: Record<string, string> = {};
    const body = m[2] ?? '';
    LABEL.lastIndex = 0;
    while (LABEL.lastIndex < body.length) {
      const l = LABEL.exec(body);
      if (!l) throw new Error(`bad labels in ${JSON.stringify(line)}`);
      labels[l[1]!] = unescapeLabel(l[2]!);
    }
    samples.push({ name: m[1]!, labels, value: parseValue(m[3]!) });
  }
  const matches = (s: Sample, labels: Record<string, string>) => Object.entries(labels).every(([k, v]) => s.labels[k] === v);
  const find = (name: string, labels: Record<string, string> = {}) => samples.filter((s) => s.name === name && matches(s, labels));
  return {
    samples,
    types,
    find,
    value(name, labels = {}) {
      const exact = samples.filter(
        (s) => s.name === name && matches(s, labels) && Object.keys(s.labels).length === Object.keys(labels).length,
      );
      if (exact.length > 1) throw new Error(`${exact.length} samples of ${name} ${JSON.stringify(labels)}`);
      return exact[0]?.value;
    },
    labelValues(name, label) {
      return [...new Set(find(name).flatMap((s) => (label in s.labels ? [s.labels[label]!] : [])))].sort();
    },
  };
}
