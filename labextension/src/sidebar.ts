/**
 * The left-sidebar panel: one row per experiment in the store with its state,
 * trials ended / total (as `nbtune ls` and the dashboard count them), best
 * metric with its direction, and GPUs in use; clicking a row opens the
 * experiment (curves, trials) in a main-area panel.
 *
 * Plain DOM (no React) because the table is small and rebuilt whole on each
 * change; `data-*` attributes name the cells so browser tests can find them.
 */
import { Widget } from '@lumino/widgets';

import { ExperimentsModel, IExperimentSummary } from './model';

export function formatMetric(value: number | null): string {
  if (value === null || value === undefined) {
    return '–';
  }
  return Math.abs(value) >= 1000 || (value !== 0 && Math.abs(value) < 1e-3)
    ? value.toExponential(3)
    : value.toPrecision(4);
}

function cell(row: HTMLTableRowElement, text: string, field: string): void {
  const td = document.createElement('td');
  td.textContent = text;
  td.dataset.field = field;
  row.appendChild(td);
}

export class ExperimentsPanel extends Widget {
  constructor(model: ExperimentsModel, open: (name: string) => void = () => undefined) {
    super();
    this._model = model;
    this._open = open;
    this.id = 'nbtune-experiments';
    this.addClass('jp-nbtune-panel');
    this.title.caption = 'nbtune experiments';
    model.changed.connect(this._render, this);
    this._render();
  }

  dispose(): void {
    this._model.changed.disconnect(this._render, this);
    super.dispose();
  }

  private _render(): void {
    const node = this.node;
    node.textContent = '';
    const header = document.createElement('h2');
    header.className = 'jp-nbtune-title';
    header.textContent = 'nbtune experiments';
    node.appendChild(header);

    const reply = this._model.reply;
    if (this._model.error) {
      const err = document.createElement('div');
      err.className = 'jp-nbtune-error';
      err.textContent = this._model.error;
      node.appendChild(err);
    }
    if (reply === null) {
      if (!this._model.error) {
        node.appendChild(this._note('Loading…'));
      }
      return;
    }
    const store = document.createElement('div');
    store.className = 'jp-nbtune-store';
    store.textContent = `store: ${reply.store}`;
    store.title = reply.store;
    node.appendChild(store);
    if (reply.experiments.length === 0) {
      node.appendChild(
        this._note(
          reply.available
            ? 'No experiments in the store yet.'
            : 'No store yet: run a tuning job with a store to see it here.'
        )
      );
      return;
    }
    const table = document.createElement('table');
    table.className = 'jp-nbtune-table';
    const head = table.createTHead().insertRow();
    const headers: [string, string][] = [
      ['Experiment', 'experiment name'],
      ['State', 'running or done'],
      ['Trials', 'trials ended / total, as nbtune ls counts them'],
      ['Best', 'best value of the metric so far'],
      ['Metric', 'the metric and its direction (↓ minimized, ↑ maximized)'],
      ['GPU', 'GPUs held by running trials']
    ];
    for (const [label, tip] of headers) {
      const th = document.createElement('th');
      th.textContent = label;
      th.title = tip;
      head.appendChild(th);
    }
    const body = table.createTBody();
    for (const exp of reply.experiments) {
      body.appendChild(this._row(exp));
    }
    node.appendChild(table);
  }

  private _row(exp: IExperimentSummary): HTMLTableRowElement {
    const row = document.createElement('tr');
    row.dataset.experiment = exp.name;
    row.dataset.state = exp.state;
    row.title =
      `${exp.name}: ${exp.algorithm}, ${exp.mode}imize ${exp.metric}` +
      (exp.best_trial !== null ? `, best so far: trial ${exp.best_trial}` : '');
    cell(row, exp.name, 'name');
    cell(row, exp.state, 'state');
    cell(row, exp.trials, 'trials');
    cell(row, formatMetric(exp.best), 'best');
    cell(row, `${exp.metric} ${exp.mode === 'max' ? '↑' : '↓'}`, 'metric');
    cell(row, String(exp.gpus_in_use), 'gpus');
    row.classList.add('jp-nbtune-row');
    row.addEventListener('click', () => this._open(exp.name));
    return row;
  }

  private _note(text: string): HTMLElement {
    const div = document.createElement('div');
    div.className = 'jp-nbtune-note';
    div.textContent = text;
    return div;
  }

  private _model: ExperimentsModel;
  private _open: (name: string) => void;
}
