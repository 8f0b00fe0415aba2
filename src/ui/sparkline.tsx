/**
 * An inline SVG sparkline of arrivals against deliveries. Pure: counts in, markup out. Numbers
 * only: nothing stored reaches the SVG but counts.
 */

export interface SparkSeries {
  /** Requests stored per bin, oldest bin first. */
  arrivals: number[];
  /** Deliveries settled as delivered per bin. */
  deliveries: number[];
  /** Each bin's length, ms. */
  binMs: number;
}

const WIDTH = 120;
const HEIGHT = 28;
const PAD = 2;

/** Polyline points for `values` scaled to `max` (max 0: a flat line at the bottom). */
export function sparkPoints(values: readonly number[], max: number): string {
  if (values.length === 0) return '';
  const step = values.length === 1 ? 0 : (WIDTH - 2 * PAD) / (values.length - 1);
  return values
    .map((v, i) => {
      const x = PAD + i * step;
      const y = HEIGHT - PAD - (max > 0 ? (v / max) * (HEIGHT - 2 * PAD) : 0);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
}

export function Sparkline(props: { series: SparkSeries }) {
  const { arrivals, deliveries, binMs } = props.series;
  const max = Math.max(0, ...arrivals, ...deliveries);
  const a = arrivals.reduce((s, v) => s + v, 0);
  const d = deliveries.reduce((s, v) => s + v, 0);
  const label = `last ${Math.round((binMs * arrivals.length) / 60_000)} min: ${a} arrived, ${d} delivered (per ${Math.round(binMs / 60_000)} min, peak ${max})`;
  return (
    <svg class="spark" width={WIDTH} height={HEIGHT} viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img" aria-label={label}>
      <title>{label}</title>
      <polyline class="spark-arrivals" fill="none" stroke="#1f6feb" stroke-width="1.5" points={sparkPoints(arrivals, max)} />
      <polyline
        class="spark-deliveries"
        fill="none"
        stroke="#2da44e"
        stroke-width="1.5"
        stroke-dasharray="3 2"
        points={sparkPoints(deliveries, max)}
      />
    </svg>
  );
}
