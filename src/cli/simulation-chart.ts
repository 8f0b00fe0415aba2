/**
 * `simulate --chart`: a hand-made SVG line plot of attempts, backlog and successes per minute,
 * with the outage shaded and the drain marked. Pure: a result in, SVG text out; no dependencies.
 */
import { formatDuration } from '../config/units.js';
import type { SimulationMinute, SimulationResult } from '../drain/simulate.js';
import { formatRate } from '../policy/token-bucket.js';

const W = 900;
const H = 440;
const M = { left: 70, right: 24, top: 56, bottom: 48 };

const SERIES: ReadonlyArray<{ key: keyof SimulationMinute; label: string; color: string }> = [
  { key: 'attempts', label: 'attempts / min', color: '#d62728' },
  { key: 'backlog', label: 'backlog', color: '#1f77b4' },
  { key: 'successes', label: 'successes / min', color: '#2ca02c' },
];

function escapeXml(s: string): string {
  return s.replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** 1, 2 or 5 times a power of ten, so that about `n` ticks cover [0, max]. */
function niceStep(max: number, n: number): number {
  const raw = max / n;
  const pow = 10 ** Math.floor(Math.log10(raw));
  for (const f of [1, 2, 5, 10]) if (raw <= f * pow) return f * pow;
  return 10 * pow;
}

function shortNumber(n: number): string {
  if (n >= 1e6) return `${+(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${+(n / 1e3).toFixed(1)}k`;
  return String(n);
}

export function simulationChartSvg(r: SimulationResult): string {
  const rows = r.minutes;
  const n = Math.max(1, rows.length);
  const top = Math.max(1, ...rows.flatMap((row) => SERIES.map((s) => row[s.key])));
  const yStep = niceStep(top, 5);
  const yMax = Math.ceil(top / yStep) * yStep;
  const plotW = W - M.left - M.right;
  const plotH = H - M.top - M.bottom;
  const x = (minute: number) => M.left + (minute / n) * plotW;
  const y = (v: number) => M.top + plotH - (v / yMax) * plotH;
  const f = (v: number) => v.toFixed(1);

  const i = r.input;
  const title = `hookbucket simulate: policy ${i.policy.name}, arrival ${formatRate(i.arrival)}, outage ${formatDuration(i.outageMs)}, capacity ${formatRate(i.capacity)}, timeout ${formatDuration(i.timeoutMs)}`;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="${M.left}" y="22" font-size="14" font-weight="bold">${escapeXml(title)}</text>`,
  ];
  if (i.outageMs > 0) {
    const x1 = x(Math.min(n, i.outageMs / 60_000));
    out.push(`<rect x="${f(M.left)}" y="${M.top}" width="${f(x1 - M.left)}" height="${plotH}" fill="#fbe3e3"/>`);
    out.push(`<text x="${f(M.left + 4)}" y="${M.top + 14}" fill="#a33">outage</text>`);
  }
  for (let v = 0; v <= yMax; v += yStep) {
    out.push(`<line x1="${M.left}" x2="${W - M.right}" y1="${f(y(v))}" y2="${f(y(v))}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${M.left - 6}" y="${f(y(v) + 4)}" text-anchor="end">${shortNumber(v)}</text>`);
  }
  const xStep = niceStep(n, 10);
  for (let m = 0; m <= n; m += xStep) {
    out.push(`<line x1="${f(x(m))}" x2="${f(x(m))}" y1="${M.top + plotH}" y2="${M.top + plotH + 4}" stroke="#333"/>`);
    out.push(`<text x="${f(x(m))}" y="${M.top + plotH + 18}" text-anchor="middle">${m}</text>`);
  }
  out.push(`<text x="${f(M.left + plotW / 2)}" y="${H - 10}" text-anchor="middle">minute</text>`);
  out.push(`<rect x="${M.left}" y="${M.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#333"/>`);
  if (r.drainMinute !== null && r.drainedAtMs !== null) {
    const xd = x(r.drainedAtMs / 60_000);
    out.push(`<line x1="${f(xd)}" x2="${f(xd)}" y1="${M.top}" y2="${M.top + plotH}" stroke="#555" stroke-dasharray="4 3"/>`);
    out.push(`<text x="${f(xd + 4)}" y="${M.top + 28}" fill="#555">drained (minute ${r.drainMinute})</text>`);
  }
  // Successes go under attempts, wider, so that where every attempt succeeds both stay visible.
  for (const s of [...SERIES].reverse()) {
    // Each value is plotted at the end of its minute, where the backlog is measured.
    const points = [`${f(x(0))},${f(y(0))}`, ...rows.map((row) => `${f(x(row.minute))},${f(y(row[s.key]))}`)].join(' ');
    const width = s.key === 'successes' ? 4 : 1.8;
    out.push(`<polyline fill="none" stroke="${s.color}" stroke-width="${width}" points="${points}"/>`);
  }
  SERIES.forEach((s, k) => {
    const lx = M.left + k * 170;
    out.push(`<line x1="${lx}" x2="${lx + 22}" y1="40" y2="40" stroke="${s.color}" stroke-width="3"/>`);
    out.push(`<text x="${lx + 28}" y="44">${escapeXml(s.label)}</text>`);
  });
  if (r.drainMinute === null) {
    out.push(`<text x="${W - M.right}" y="44" text-anchor="end" fill="#a33">no drain within the run</text>`);
  }
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
