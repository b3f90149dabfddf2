/**
 * Hyperparameter importance: one bar per hyperparameter, the share of the
 * metric's variance a seeded random forest (scikit-learn, on the server)
 * attributes to it at the shown budget.
 */
import { axis, Scale, svgEl } from './chart';
import { IViews } from './model';

export function importanceView(v: IViews): HTMLElement {
  const div = document.createElement('div');
  div.className = 'jp-nbtune-importance';
  if (v.importance === null) {
    const note = document.createElement('div');
    note.className = 'jp-nbtune-note';
    note.textContent =
      `Importance needs at least ${v.min_trials} trials at this budget with different ` +
      `values of ${v.metric} (and a recorded search space).`;
    div.appendChild(note);
    return div;
  }
  const entries = Object.entries(v.importance).sort((a, b) => b[1] - a[1]);
  const W = 640;
  const row = 26;
  const [L, R, T, B] = [140, 20, 8, 44];
  const H = T + B + row * entries.length;
  const svg = svgEl('svg', { width: W, height: H });
  const xs = new Scale(0, 1, L, W - R);
  axis(svg, xs, 'bottom', H - B, 'share of the variance of ' + v.metric + ' explained');
  entries.forEach(([p, w], i) => {
    const y = T + i * row;
    const bar = svgEl('rect', {
      x: L,
      y: y + 4,
      width: Math.max(xs.at(w) - L, 0.5),
      height: row - 8,
      fill: '#1f77b4',
      class: 'jp-nbtune-bar'
    }, svg);
    bar.dataset.param = p;
    bar.dataset.importance = String(w);
    const label = svgEl('text', { x: L - 6, y: y + row / 2 + 4, 'text-anchor': 'end' }, svg);
    label.textContent = p;
    const val = svgEl('text', { x: xs.at(w) + 4, y: y + row / 2 + 4 }, svg);
    val.textContent = w.toFixed(3);
  });
  div.appendChild(svg);
  const shown = (v.parallel.trial_id ?? []).length;
  const note = document.createElement('div');
  note.className = 'jp-nbtune-note';
  note.textContent =
    `A random forest (scikit-learn, fixed seed) fitted on the ${shown} trials ` +
    (v.budget ? `that reached budget ${v.budget}` : 'with a value') +
    `, each hyperparameter at its place in the search space; its mean decrease in impurity.`;
  div.appendChild(note);
  return div;
}
