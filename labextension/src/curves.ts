/**
 * Learning curves: every trial's reports, the metric against the budget,
 * coloured by the trial's state, the best trial's thick and red.
 */
import { axis, scaleOf, svgEl } from './chart';
import { IExperimentDetail } from './model';

export const STATE_COLORS: { [state: string]: string } = {
  running: '#1f77b4',
  paused: '#9467bd',
  completed: '#17becf',
  stopped: '#c7c7c7',
  error: '#ff7f0e',
  pending: '#c5b0d5'
};

export function curvesView(d: IExperimentDetail): SVGSVGElement {
  const W = 640;
  const H = 280;
  const [L, R, T, B] = [60, 16, 10, 44];
  const svg = svgEl('svg', { width: W, height: H, class: 'jp-nbtune-curves' });
  const pts = Object.values(d.curves)
    .flat()
    .filter(p => p[0] !== null && p[1] !== null) as [number, number][];
  const xs = scaleOf(pts.map(p => p[0]), L, W - R);
  const ys = scaleOf(pts.map(p => p[1]), H - B, T);
  axis(svg, xs, 'bottom', H - B, 'budget');
  axis(svg, ys, 'left', L, d.summary.metric);
  const state: { [id: string]: string } = {};
  for (const t of d.trials) {
    state[String(t.trial_id)] = t.trial_id === d.summary.best_trial ? 'best' : t.state;
  }
  for (const [tid, curve] of Object.entries(d.curves)) {
    const good = curve.filter(p => p[0] !== null && p[1] !== null) as [number, number][];
    const st = state[tid];
    const line = svgEl('polyline', {
      points: good.map(p => `${xs.at(p[0])},${ys.at(p[1])}`).join(' '),
      stroke: st === 'best' ? '#d62728' : STATE_COLORS[st] ?? '#888',
      'stroke-width': st === 'best' ? 3 : 1.5,
      fill: 'none'
    }, svg);
    line.dataset.trial = tid;
  }
  return svg;
}
