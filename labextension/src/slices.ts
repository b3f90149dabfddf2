/**
 * Slice plots: the metric against each hyperparameter, one small plot each,
 * a dot per shown trial coloured by the budget it reached.
 */
import { axis, budgetColor, Scale, scaleOf, svgEl } from './chart';
import { IViews } from './model';

export function slicesView(v: IViews): HTMLElement {
  const div = document.createElement('div');
  div.className = 'jp-nbtune-slices';
  const W = 320;
  const H = 240;
  const [L, R, T, B] = [60, 12, 10, 44];
  for (const p of v.params) {
    const s = v.slices[p];
    if (!s) {
      continue;
    }
    const svg = svgEl('svg', { width: W, height: H, class: 'jp-nbtune-slice' });
    svg.dataset.param = p;
    const numeric = s.x.every(x => typeof x === 'number');
    const cats = numeric ? [] : [...new Set(s.x.map(String))].sort();
    const log = v.axes[p]?.log ?? false;
    const xs = numeric
      ? scaleOf(s.x as number[], L, W - R, log)
      : new Scale(-0.5, cats.length - 0.5, L, W - R);
    const ys = scaleOf(s.value, H - B, T);
    const ticks = numeric
      ? undefined
      : cats.map((c, i) => [xs.at(i), c] as [number, string]);
    axis(svg, xs, 'bottom', H - B, p, ticks);
    axis(svg, ys, 'left', L, v.metric);
    s.x.forEach((x, k) => {
      const px = numeric ? xs.at(x as number) : xs.at(cats.indexOf(String(x)));
      const dot = svgEl('circle', {
        cx: px,
        cy: ys.at(s.value[k]),
        r: 3.5,
        fill: budgetColor(s.budget[k], v.budgets),
        class: 'jp-nbtune-point'
      }, svg);
      dot.dataset.trial = String(s.trial_id[k]);
      dot.dataset.x = String(x);
      dot.dataset.value = String(s.value[k]);
      dot.dataset.budget = String(s.budget[k]);
    });
    div.appendChild(svg);
  }
  return div;
}
