/**
 * An experiment in the main area, opened from the sidebar: its summary line
 * (state, trials ended / total, best value and direction), learning curves as
 * a small SVG and the trials table, read from its source (a store, or the
 * memory of a running kernel) through the server extension and refreshed
 * every few seconds while the experiment runs.
 */
import { Widget } from '@lumino/widgets';

import { fetchExperiment, IExperimentDetail } from './model';
import { formatMetric } from './sidebar';

const SVG = 'http://www.w3.org/2000/svg';
const STATE_COLORS: { [state: string]: string } = {
  running: '#1f77b4',
  paused: '#9467bd',
  completed: '#17becf',
  stopped: '#c7c7c7',
  error: '#ff7f0e',
  pending: '#c5b0d5'
};

let panels = 0;

export class ExperimentPanel extends Widget {
  /** `source` is the id of the store or kernel holding `name` (null: the first that does). */
  constructor(name: string, source: string | null = null, label = '') {
    super();
    this.name = name;
    this.source = source;
    this.label = label;
    this.id = `nbtune-experiment-${++panels}`;
    this.addClass('jp-nbtune-experiment');
    this.node.dataset.experiment = name;
    if (source) {
      this.node.dataset.source = source;
    }
    this.title.label = `nbtune: ${name}`;
    this.title.caption = label ? `${name} (${label})` : name;
    this.title.closable = true;
    void this.refresh();
    this._timer = window.setInterval(() => void this.refresh(), 3000);
  }

  readonly name: string;
  readonly source: string | null;
  readonly label: string;

  dispose(): void {
    window.clearInterval(this._timer);
    super.dispose();
  }

  async refresh(): Promise<void> {
    try {
      const detail = await fetchExperiment(this.name, this.source);
      this._render(detail);
      if (detail.summary.state === 'done' || detail.summary.state === 'failed') {
        window.clearInterval(this._timer);
      }
    } catch (e) {
      this.node.textContent = (e as Error).message;
    }
  }

  private _render(d: IExperimentDetail): void {
    const s = d.summary;
    const node = this.node;
    node.textContent = '';
    node.dataset.experiment = s.name;
    node.dataset.state = s.state;
    const head = document.createElement('h2');
    head.textContent = s.name;
    node.appendChild(head);
    if (this.label) {
      const where = document.createElement('div');
      where.className = 'jp-nbtune-where';
      where.textContent = this.label;
      node.appendChild(where);
    }
    const line = document.createElement('div');
    line.className = 'jp-nbtune-summary';
    const dir = s.mode === 'max' ? '↑ maximized' : '↓ minimized';
    line.textContent =
      `${s.state} · ${s.trials} trials ended · ${s.algorithm} · ${s.metric} ${dir}` +
      (s.best_trial !== null ? ` · best ${formatMetric(s.best)} (trial ${s.best_trial})` : '');
    node.appendChild(line);
    node.appendChild(this._curves(d));
    const table = document.createElement('table');
    table.className = 'jp-nbtune-table jp-nbtune-trials';
    const hr = table.createTHead().insertRow();
    for (const h of ['trial', 'state', `${s.metric} (best)`, 'budget', 'error']) {
      const th = document.createElement('th');
      th.textContent = h;
      hr.appendChild(th);
    }
    const body = table.createTBody();
    for (const t of d.trials) {
      const r = body.insertRow();
      r.dataset.trial = String(t.trial_id);
      const best = t.trial_id === s.best_trial;
      const cells = [
        String(t.trial_id),
        best ? `★ ${t.state}` : t.state, // the best, starred: its state still shows
        formatMetric(t.value),
        formatMetric(t.budget),
        t.error ?? ''
      ];
      cells.forEach((text, i) => {
        const td = r.insertCell();
        td.textContent = text;
        td.dataset.field = ['trial', 'state', 'value', 'budget', 'error'][i];
      });
    }
    node.appendChild(table);
  }

  private _curves(d: IExperimentDetail): SVGSVGElement {
    const W = 600;
    const H = 220;
    const svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('width', String(W));
    svg.setAttribute('height', String(H));
    svg.classList.add('jp-nbtune-curves');
    const pts = Object.values(d.curves)
      .flat()
      .filter(p => p[0] !== null && p[1] !== null) as [number, number][];
    if (pts.length === 0) {
      return svg;
    }
    const xs = pts.map(p => p[0]);
    const ys = pts.map(p => p[1]);
    const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
    const [y0, y1] = [Math.min(...ys), Math.max(...ys)];
    const sx = (x: number) => 30 + ((x - x0) / (x1 - x0 || 1)) * (W - 40);
    const sy = (y: number) => H - 20 - ((y - y0) / (y1 - y0 || 1)) * (H - 30);
    const state: { [id: string]: string } = {};
    for (const t of d.trials) {
      state[String(t.trial_id)] = t.trial_id === d.summary.best_trial ? 'best' : t.state;
    }
    for (const [tid, curve] of Object.entries(d.curves)) {
      const line = document.createElementNS(SVG, 'polyline');
      const good = curve.filter(p => p[0] !== null && p[1] !== null) as [number, number][];
      line.setAttribute('points', good.map(p => `${sx(p[0])},${sy(p[1])}`).join(' '));
      const st = state[tid];
      line.setAttribute('stroke', st === 'best' ? '#d62728' : STATE_COLORS[st] ?? '#888');
      line.setAttribute('stroke-width', st === 'best' ? '3' : '1.5');
      line.setAttribute('fill', 'none');
      line.dataset.trial = tid;
      svg.appendChild(line);
    }
    return svg;
  }

  private _timer: number;
}
