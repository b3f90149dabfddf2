/**
 * Optimization history: each shown trial's last value (a dot coloured by the
 * budget it reached) against when it was reported or its trial number, and
 * the best so far as a step line; experiments side by side share one plot,
 * one colour each.
 */
import { axis, budgetColor, EXPERIMENT_COLORS, legend, scaleOf, svgEl } from './chart';
import { IViews } from './model';

/** One experiment's history on the plot: its name and views. */
export interface IHistorySeries {
  name: string;
  views: IViews;
}

export function historyView(series: IHistorySeries[], by: 'time' | 'trial'): HTMLElement {
  const div = document.createElement('div');
  div.className = 'jp-nbtune-history';
  div.dataset.by = by;
  const W = 640;
  const H = 300;
  const [L, R, T, B] = [60, 16, 10, 44];
  const svg = svgEl('svg', { width: W, height: H });
  const all = series.map(s => s.views.history[by]);
  const xs = scaleOf(all.flatMap(h => h.x), L, W - R);
  const ys = scaleOf(all.flatMap(h => [...h.value, ...h.best]), H - B, T);
  const metric = series[0]?.views.metric ?? 'value';
  axis(svg, xs, 'bottom', H - B, by === 'time' ? 'seconds since the experiment began' : 'trial number');
  axis(svg, ys, 'left', L, `${metric} (last value)`);
  const compare = series.length > 1;
  series.forEach((s, i) => {
    const h = s.views.history[by];
    const color = EXPERIMENT_COLORS[i % EXPERIMENT_COLORS.length];
    const g = svgEl('g', { class: 'jp-nbtune-series' }, svg);
    g.dataset.experiment = s.name;
    g.dataset.source = s.views.source;
    g.dataset.budget = String(s.views.budget);
    // the best so far: a step line through every shown trial
    let d = '';
    h.x.forEach((x, k) => {
      const px = xs.at(x);
      const py = ys.at(h.best[k]);
      d += k === 0 ? `M${px},${py}` : `H${px}V${py}`;
    });
    const best = svgEl('path', {
      d,
      fill: 'none',
      stroke: compare ? color : '#d62728',
      'stroke-width': 2,
      class: 'jp-nbtune-best'
    }, g);
    best.dataset.best = h.best.join(',');
    h.x.forEach((x, k) => {
      const dot = svgEl('circle', {
        cx: xs.at(x),
        cy: ys.at(h.value[k]),
        r: 3.5,
        fill: compare ? color : budgetColor(h.budget[k], s.views.budgets),
        stroke: compare ? budgetColor(h.budget[k], s.views.budgets) : 'none',
        class: 'jp-nbtune-point'
      }, g);
      dot.dataset.trial = String(h.trial_id[k]);
      dot.dataset.value = String(h.value[k]);
      dot.dataset.best = String(h.best[k]);
      dot.dataset.budget = String(h.budget[k]);
      dot.dataset.x = String(x);
      const tip = svgEl('title', {}, dot);
      tip.textContent = `${s.name} trial ${h.trial_id[k]}: ${metric} ${h.value[k]} at budget ${h.budget[k]}`;
    });
  });
  div.appendChild(svg);
  if (compare) {
    div.appendChild(legend(series.map((s, i) => [
      EXPERIMENT_COLORS[i % EXPERIMENT_COLORS.length],
      `${s.name} (budget ≥ ${s.views.budget})`
    ])));
  } else if (series.length) {
    const v = series[0].views;
    div.appendChild(legend([
      ...v.budgets.map(b => [budgetColor(b, v.budgets), `budget ${b}`] as [string, string]),
      ['#d62728', 'best so far']
    ]));
  }
  return div;
}
