/**
 * The left-sidebar panel: the experiments of every source the server lists
 * (the configured store, the stores the running kernels use, the kernels'
 * memory-only experiments), grouped under one header row per source, each
 * with its state, trials ended / total (as `nbtune ls` and the dashboard
 * count them), best metric with its direction, and the GPUs in use (or the
 * CPU workers standing in for them: the words fit the hardware); clicking a
 * row opens that source's experiment (curves, trials) in a main-area panel.
 *
 * Plain DOM (no React) because the table is small and rebuilt whole on each
 * change; `data-*` attributes name the cells so browser tests can find them.
 */
import { Widget } from '@lumino/widgets';

import {
  deviceNoun,
  ExperimentsModel,
  IExperimentSummary,
  ISource,
  sourceLabel,
  sourcesOf
} from './model';

/** What a click on a row opens: the experiment `name` of the source `source` (an ISource id). */
export type OpenExperiment = (name: string, source: string | null, label: string) => void;

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

/**
 * The last column's header: GPUs only when every experiment listed runs on GPUs,
 * workers otherwise (CPU workers standing in for GPUs, a mix, or an older server).
 */
export function lanesHeader(experiments: IExperimentSummary[]): [string, string] {
  const devices = new Set(experiments.map(e => e.device ?? null));
  if (devices.size === 1 && devices.has('GPU')) {
    return ['GPUs', 'GPUs held by running trials'];
  }
  if (devices.size === 1 && devices.has('CPU')) {
    return ['Workers', 'CPU workers (standing in for GPUs) held by running trials'];
  }
  return ['Workers', 'GPUs or CPU workers held by running trials (hover a number)'];
}

export class ExperimentsPanel extends Widget {
  constructor(model: ExperimentsModel, open: OpenExperiment = () => undefined) {
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
    const sources = sourcesOf(reply);
    if (reply.experiments.length === 0 && sources.every(s => !s.error)) {
      for (const source of sources) {
        node.appendChild(this._sourceNote(source));
      }
      node.appendChild(
        this._note(
          reply.available
            ? 'No experiments in the store yet.'
            : 'No experiments yet: run tune() in a notebook (its experiments show here ' +
                'while its kernel runs), or a run with a store.'
        )
      );
      return;
    }
    const table = document.createElement('table');
    table.className = 'jp-nbtune-table';
    const head = table.createTHead().insertRow();
    const headers: [string, string][] = [
      ['Experiment', 'experiment name'],
      ['State', 'running, paused, done or failed'],
      ['Trials', 'trials ended / total, as nbtune ls counts them'],
      ['Best', 'best value of the metric so far'],
      ['Metric', 'the metric and its direction (↓ minimized, ↑ maximized)'],
      lanesHeader(reply.experiments)
    ];
    for (const [label, tip] of headers) {
      const th = document.createElement('th');
      th.textContent = label;
      th.title = tip;
      head.appendChild(th);
    }
    (head.lastElementChild as HTMLElement).dataset.field = 'gpus';
    const fallback = sources.length === 1 ? sources[0].id : null;
    for (const source of sources) {
      const exps = reply.experiments.filter(e => (e.source ?? fallback) === source.id);
      if (exps.length === 0 && !source.error && !source.configured) {
        continue; // a store a kernel uses that holds nothing yet
      }
      const body = table.createTBody();
      body.className = 'jp-nbtune-group';
      body.dataset.source = source.id;
      body.appendChild(this._header(source));
      if (source.error) {
        body.appendChild(this._wide(source.error, 'jp-nbtune-error'));
      } else if (exps.length === 0) {
        body.appendChild(
          this._wide(
            source.available
              ? 'No experiments in this store yet.'
              : 'No store here yet: tune(store=True) from the server root writes it.',
            'jp-nbtune-note'
          )
        );
      }
      for (const exp of exps) {
        body.appendChild(this._row(exp, source));
      }
    }
    node.appendChild(table);
  }

  /** The group's header row: where its experiments come from. */
  private _header(source: ISource): HTMLTableRowElement {
    const row = document.createElement('tr');
    row.className = 'jp-nbtune-source';
    row.dataset.source = source.id;
    row.dataset.kind = source.kind;
    const th = document.createElement('th');
    th.colSpan = 6;
    th.textContent = sourceLabel(source);
    th.title =
      source.kind === 'kernel'
        ? `experiments kept in the memory of kernel ${source.pid} (run without a store): ` +
          'they go when the kernel shuts down'
        : `the store at ${source.location}` +
          (source.configured ? ' (the server\'s configured store)' : '');
    row.appendChild(th);
    return row;
  }

  private _wide(text: string, className: string): HTMLTableRowElement {
    const row = document.createElement('tr');
    const td = document.createElement('td');
    td.colSpan = 6;
    td.className = className;
    td.textContent = text;
    row.appendChild(td);
    return row;
  }

  private _sourceNote(source: ISource): HTMLElement {
    const div = document.createElement('div');
    div.className = 'jp-nbtune-store';
    div.textContent = sourceLabel(source);
    div.title = source.location;
    return div;
  }

  private _row(exp: IExperimentSummary, source: ISource): HTMLTableRowElement {
    const row = document.createElement('tr');
    row.dataset.experiment = exp.name;
    row.dataset.source = source.id;
    row.dataset.state = exp.state;
    row.title =
      `${exp.name}: ${exp.algorithm}, ${exp.mode}imize ${exp.metric}` +
      (exp.best_trial !== null ? `, best so far: trial ${exp.best_trial}` : '') +
      ` (${sourceLabel(source)})`;
    cell(row, exp.name, 'name');
    cell(row, exp.state, 'state');
    cell(row, exp.trials, 'trials');
    cell(row, formatMetric(exp.best), 'best');
    cell(row, `${exp.metric} ${exp.mode === 'max' ? '↑' : '↓'}`, 'metric');
    cell(row, String(exp.gpus_in_use), 'gpus');
    const held = row.lastElementChild as HTMLElement;
    held.dataset.device = exp.device ?? '';
    held.title = `${exp.in_use ?? deviceNoun(exp.device, exp.gpus_in_use)} held by running trials`;
    row.classList.add('jp-nbtune-row');
    row.addEventListener('click', () => this._open(exp.name, source.id, sourceLabel(source)));
    return row;
  }

  private _note(text: string): HTMLElement {
    const div = document.createElement('div');
    div.className = 'jp-nbtune-note';
    div.textContent = text;
    return div;
  }

  private _model: ExperimentsModel;
  private _open: OpenExperiment;
}
