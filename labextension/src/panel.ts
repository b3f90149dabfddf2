/**
 * An experiment in the main area, opened from the sidebar: its summary line
 * (state, trials ended / total, best value and direction, the GPUs or CPU
 * workers its running trials hold) and the views a person tunes by, one tab
 * each: the trial grid (sortable, filterable), optimization history,
 * parallel coordinates, hyperparameter importance, slices, learning
 * curves and the allocation timeline (trials on GPU or worker lanes over
 * time). Read from its source (a store, or the memory of a running kernel)
 * through the server extension, which computes the views
 * (nbtune/server/views_data.py), and refreshed every few seconds while it runs.
 *
 * Under successive halving most trials stop at the first rung, so the views
 * show each trial's last value with the budget it reached, and the budget
 * selector keeps only the trials that reached a budget (by default the
 * highest one enough trials reached). Other experiments the sidebar lists can
 * be added beside this one: their history is drawn on the same plot.
 */
import { Widget } from '@lumino/widgets';

import { allocationView } from './allocation';
import { curvesView } from './curves';
import { TrialGrid } from './grid';
import { historyView, IHistorySeries } from './history';
import { importanceView } from './importance';
import {
  deviceNoun,
  ExperimentsModel,
  fetchExperiment,
  fetchViews,
  IExperimentDetail,
  IViews
} from './model';
import { Brushes, parallelView } from './parallel';
import { formatMetric } from './sidebar';
import { slicesView } from './slices';

export { STATE_COLORS } from './curves';

/** The tabs, in the order a person reaches for them. */
const TABS: [string, string][] = [
  ['trials', 'Trials'],
  ['history', 'History'],
  ['parallel', 'Parallel coordinates'],
  ['importance', 'Importance'],
  ['slices', 'Slices'],
  ['curves', 'Learning curves'],
  ['allocation', 'Allocation']
];

let panels = 0;

/** What this experiment's lanes are, in words that fit the hardware. */
export function lanesWords(device: string | null | undefined): string {
  return device === 'GPU'
    ? 'on GPUs'
    : device === 'CPU'
      ? 'on CPU workers (standing in for GPUs)'
      : 'on workers';
}

export class ExperimentPanel extends Widget {
  /**
   * `source` is the id of the store or kernel holding `name` (null: the first that does);
   * `model` is the sidebar's list, from which experiments can be added beside this one.
   */
  constructor(
    name: string,
    source: string | null = null,
    label = '',
    model: ExperimentsModel | null = null
  ) {
    super();
    this.name = name;
    this.source = source;
    this.label = label;
    this._model = model;
    this.id = `nbtune-experiment-${++panels}`;
    this.addClass('jp-nbtune-experiment');
    this.node.dataset.experiment = name;
    if (source) {
      this.node.dataset.source = source;
    }
    this.title.label = `nbtune: ${name}`;
    this.title.caption = label ? `${name} (${label})` : name;
    this.title.closable = true;
    this._build();
    if (model) {
      model.changed.connect(this._fillCompare, this);
    }
    void this.refresh();
    this._timer = window.setInterval(() => void this.refresh(), 3000);
  }

  readonly name: string;
  readonly source: string | null;
  readonly label: string;

  dispose(): void {
    window.clearInterval(this._timer);
    if (this._model) {
      this._model.changed.disconnect(this._fillCompare, this);
    }
    super.dispose();
  }

  async refresh(): Promise<void> {
    try {
      const [detail, views, others] = await Promise.all([
        fetchExperiment(this.name, this.source),
        fetchViews(this.name, this.source, this._budget),
        Promise.all(this._compared.map(([src, name]) =>
          fetchViews(name, src, this._budget).then(v => [name, v] as [string, IViews])))
      ]);
      this._error.textContent = '';
      const key = JSON.stringify([detail, views, others, this._by]);
      if (key !== this._lastKey) {
        this._lastKey = key;
        this._render(detail, views, others);
      }
      if (detail.summary.state === 'done' || detail.summary.state === 'failed') {
        window.clearInterval(this._timer);
      }
    } catch (e) {
      this._error.textContent = (e as Error).message;
    }
  }

  /** The parts that stay: header, controls, tab bar and the tabs' bodies. */
  private _build(): void {
    const node = this.node;
    this._head.textContent = this.name;
    node.appendChild(this._head);
    if (this.label) {
      const where = document.createElement('div');
      where.className = 'jp-nbtune-where';
      where.textContent = this.label;
      node.appendChild(where);
    }
    this._summary.className = 'jp-nbtune-summary';
    node.appendChild(this._summary);
    this._error.className = 'jp-nbtune-error';
    node.appendChild(this._error);

    const controls = document.createElement('div');
    controls.className = 'jp-nbtune-controls';
    const budgetLabel = document.createElement('label');
    budgetLabel.textContent = 'Budget ';
    this._budgetSelect.className = 'jp-nbtune-budget';
    this._budgetSelect.title =
      'show only the trials that reached this budget, each at its last value';
    this._budgetSelect.addEventListener('change', () => {
      this._budget = Number(this._budgetSelect.value);
      void this.refresh();
    });
    budgetLabel.appendChild(this._budgetSelect);
    controls.appendChild(budgetLabel);
    this._budgetNote.className = 'jp-nbtune-note jp-nbtune-budget-note';
    controls.appendChild(this._budgetNote);
    const compareLabel = document.createElement('label');
    compareLabel.textContent = 'Beside it ';
    this._compareSelect.className = 'jp-nbtune-compare';
    this._compareSelect.multiple = true;
    this._compareSelect.size = 3;
    this._compareSelect.title = 'experiments shown beside this one (history on one plot)';
    this._compareSelect.addEventListener('change', () => {
      this._compared = Array.from(this._compareSelect.selectedOptions).map(
        o => JSON.parse(o.value) as [string | null, string]
      );
      void this.refresh();
    });
    compareLabel.appendChild(this._compareSelect);
    controls.appendChild(compareLabel);
    node.appendChild(controls);
    this._fillCompare();

    const bar = document.createElement('div');
    bar.className = 'jp-nbtune-tabbar';
    for (const [id, text] of TABS) {
      const b = document.createElement('button');
      b.className = 'jp-nbtune-tab';
      b.dataset.tab = id;
      b.textContent = text;
      b.addEventListener('click', () => this.showTab(id));
      bar.appendChild(b);
      const body = document.createElement('div');
      body.className = 'jp-nbtune-tabbody';
      body.dataset.tab = id;
      this._bodies[id] = body;
    }
    node.appendChild(bar);
    for (const [id] of TABS) {
      node.appendChild(this._bodies[id]);
    }
    this._bodies.trials.appendChild(this._grid.node);
    const by = document.createElement('select');
    by.className = 'jp-nbtune-history-by';
    for (const [v, t] of [['time', 'against time'], ['trial', 'against trial number']]) {
      const o = document.createElement('option');
      o.value = v;
      o.textContent = t;
      by.appendChild(o);
    }
    by.addEventListener('change', () => {
      this._by = by.value as 'time' | 'trial';
      void this.refresh();
    });
    this._bodies.history.appendChild(by);
    this._historyPlot.className = 'jp-nbtune-plot';
    this._bodies.history.appendChild(this._historyPlot);
    this.showTab(this._tab);
  }

  /** Bring tab `id` forward (the others stay rendered, hidden). */
  showTab(id: string): void {
    this._tab = id;
    this.node.dataset.tab = id;
    for (const [t] of TABS) {
      this._bodies[t].hidden = t !== id;
      this.node
        .querySelector(`.jp-nbtune-tab[data-tab="${t}"]`)
        ?.classList.toggle('jp-mod-active', t === id);
    }
  }

  /** The experiments that can be added beside this one: every other one the sidebar lists. */
  private _fillCompare(): void {
    const reply = this._model?.reply;
    const chosen = new Set(this._compared.map(c => JSON.stringify(c)));
    const options = (reply?.experiments ?? [])
      .filter(e => !(e.name === this.name && (this.source === null || e.source === this.source)))
      .map(e => [e.source ?? null, e.name] as [string | null, string]);
    const key = JSON.stringify(options);
    if (key === this._compareKey) {
      return;
    }
    this._compareKey = key;
    this._compareSelect.textContent = '';
    for (const o of options) {
      const opt = document.createElement('option');
      opt.value = JSON.stringify(o);
      opt.textContent = o[1];
      opt.dataset.experiment = o[1];
      opt.dataset.source = o[0] ?? '';
      opt.selected = chosen.has(opt.value);
      this._compareSelect.appendChild(opt);
    }
  }

  private _render(d: IExperimentDetail, v: IViews, others: [string, IViews][]): void {
    const s = d.summary;
    this.node.dataset.experiment = s.name;
    this.node.dataset.state = s.state;
    this.node.dataset.device = s.device ?? '';
    const dir = s.mode === 'max' ? '↑ maximized' : '↓ minimized';
    const held = s.in_use ?? deviceNoun(s.device, s.gpus_in_use);
    this._summary.textContent =
      `${s.state} · ${s.trials} trials ended · ${s.algorithm} · ${s.metric} ${dir}` +
      (s.best_trial !== null ? ` · best ${formatMetric(s.best)} (trial ${s.best_trial})` : '') +
      ` · ${lanesWords(s.device)}` +
      (s.state === 'running' ? ` · ${held} in use` : '');

    // the budget selector: each budget reached, with how many trials reached it
    const counts = (b: number) => v.trials.filter(t => (t.budget ?? 0) >= b - 1e-9).length;
    this._budgetSelect.textContent = '';
    for (const b of [...v.budgets, 0]) {
      const o = document.createElement('option');
      o.value = String(b);
      o.textContent =
        b === 0
          ? `all budgets (${v.trials.filter(t => t.last !== null).length} trials)`
          : `≥ ${b} (${counts(b)} trials)` + (b === v.default_budget ? ', default' : '');
      this._budgetSelect.appendChild(o);
    }
    this._budgetSelect.value = String(v.budget ?? 0);
    this.node.dataset.budget = String(v.budget);
    this.node.dataset.defaultBudget = String(v.default_budget);
    this._budgetNote.textContent =
      v.budget === null
        ? 'no trial has a value yet'
        : `views show each trial's last value, with the budget it reached; only trials ` +
          (v.budget === 0 ? 'with a value (all budgets)' : `that reached budget ${v.budget}`);

    this._grid.update(v.trials, v.params, v.metric, s.best_trial);
    const series: IHistorySeries[] = [
      { name: s.name, views: v },
      ...others.map(([name, views]) => ({ name, views }))
    ];
    this._historyPlot.textContent = '';
    this._historyPlot.appendChild(historyView(series, this._by));
    this._fill('parallel', parallelView(v, this._brushes, () => undefined));
    this._fill('importance', importanceView(v));
    this._fill('slices', slicesView(v));
    this._fill('curves', curvesView(d));
    this._fill('allocation', allocationView(d.allocations));
  }

  private _fill(tab: string, content: Node): void {
    this._bodies[tab].textContent = '';
    this._bodies[tab].appendChild(content);
  }

  private _model: ExperimentsModel | null;
  private _timer: number;
  private _lastKey = '';
  private _tab = 'trials';
  private _by: 'time' | 'trial' = 'time';
  private _budget: number | null = null;
  private _compared: [string | null, string][] = [];
  private _compareKey = '';
  private _brushes: Brushes = {};
  private _grid = new TrialGrid();
  private _head = document.createElement('h2');
  private _summary = document.createElement('div');
  private _error = document.createElement('div');
  private _budgetSelect = document.createElement('select');
  private _budgetNote = document.createElement('span');
  private _compareSelect = document.createElement('select');
  private _historyPlot = document.createElement('div');
  private _bodies: { [tab: string]: HTMLDivElement } = {};
}
