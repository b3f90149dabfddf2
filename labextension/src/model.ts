/**
 * The client side of the nbtune server extension's REST endpoint.
 *
 * One model is shared by the sidebar and the status bar so the store is read
 * once per poll, whatever number of views show it. Polling (rather than a
 * websocket) keeps the server side a plain authenticated GET that any Jupyter
 * deployment (JupyterHub, a proxy) passes through.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

/** One experiment as the server summarizes it (see nbtune/server/summary.py). */
export interface IExperimentSummary {
  name: string;
  state: string;
  algorithm: string;
  metric: string;
  mode: string;
  trials_total: number;
  trials_running: number;
  /** trials stopped, completed or failed */
  trials_ended: number;
  /** `ended/total`, exactly as `nbtune ls` and the dashboard's header show it */
  trials: string;
  best: number | null;
  best_trial: number | null;
  /** lanes held by running trials: GPUs, or the CPU workers standing in for them (`device`) */
  gpus_in_use: number;
  /**
   * what the lanes are: 'GPU', 'CPU' (CPU workers standing in for GPUs) or null
   * (not known yet); absent from servers older than issue #27
   */
  device?: Device;
  /** `gpus_in_use` in words, as the server says it: `3 GPUs`, `2 CPU workers` */
  in_use?: string;
  updated: string | null;
  /** the id of the source (store or kernel) it comes from; see ISource */
  source?: string;
}

/**
 * Where experiments come from (nbtune/server/sources.py): a store (the
 * configured one, or one a running kernel uses) or a running kernel's
 * memory (experiments run without a store).
 */
export interface ISource {
  id: string;
  kind: 'store' | 'kernel';
  /** a store's path or URL (password hidden), or a kernel's notebook */
  location: string;
  /** the location as shown: a path relative to the server's root when under it */
  shown?: string;
  available: boolean;
  error: string | null;
  /** store: it is the server's configured store */
  configured?: boolean;
  /** store: the notebooks (or kernels) of the running kernels using it */
  used_by?: string[];
  /** kernel: its process id and notebook path (relative to the server's root) */
  pid?: number;
  notebook?: string | null;
}

/** The whole answer of GET /nbtune/api/experiments. */
export interface IExperimentsReply {
  /** the configured store and whether it exists (also in `sources`) */
  store: string;
  available: boolean;
  /** absent from servers older than the kernel listing: one source, `store` */
  sources?: ISource[];
  experiments: IExperimentSummary[];
  totals: ITotals;
}

/** What an experiment's lanes are: GPUs, CPU workers standing in for GPUs, or not known. */
export type Device = 'GPU' | 'CPU' | null;

/** The status bar's sums over every listed experiment (nbtune/server/summary.py totals). */
export interface ITotals {
  experiments: number;
  trials_running: number;
  /** every lane held, GPU or CPU worker (the name older clients read) */
  gpus_in_use: number;
  /** the one kind every experiment runs on, 'mixed', or null; absent from older servers */
  device?: Device | 'mixed';
  /** `gpus_in_use` split by device: 'GPU', 'CPU', 'unknown' */
  in_use_by_device?: { [device: string]: number };
}

/**
 * `n` lanes of `device` in words: GPUs only on GPUs, CPU workers where CPU
 * workers stand in for them, workers when not known (an older server) or mixed.
 */
export function deviceNoun(device: string | null | undefined, n: number): string {
  const noun = device === 'GPU' ? 'GPU' : device === 'CPU' ? 'CPU worker' : 'worker';
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/** The lanes held, in words, as the status bar shows them: `3 GPUs · 2 CPU workers`. */
export function inUseText(totals: ITotals): string {
  const by = totals.in_use_by_device;
  if (!by) {
    return deviceNoun(totals.device, totals.gpus_in_use); // an older server: "workers"
  }
  const held = ['GPU', 'CPU', 'unknown']
    .filter(d => (by[d] ?? 0) > 0)
    .map(d => deviceNoun(d, by[d]));
  return held.length ? held.join(' · ') : deviceNoun(totals.device, 0);
}

/** The sources of a reply, also from a server that predates `sources`. */
export function sourcesOf(reply: IExperimentsReply): ISource[] {
  if (reply.sources) {
    return reply.sources;
  }
  return [
    {
      id: `store:${reply.store}`,
      kind: 'store',
      location: reply.store,
      available: reply.available,
      error: null,
      configured: true
    }
  ];
}

/** What a source is called in the sidebar's group headers and the panel. */
export function sourceLabel(source: ISource): string {
  if (source.kind === 'kernel') {
    return source.notebook
      ? `notebook ${source.notebook} · in memory (kernel ${source.pid})`
      : `kernel ${source.pid} · in memory`;
  }
  const users = source.used_by?.length ? ` · used by ${source.used_by.join(', ')}` : '';
  return `store ${source.shown ?? source.location}${users}`;
}

export const ENDPOINT = 'nbtune/api/experiments';

/** GET the experiment list; throws a readable Error on a network or HTTP failure. */
export async function fetchExperiments(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<IExperimentsReply> {
  const url = URLExt.join(settings.baseUrl, ENDPOINT);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, {}, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  if (!response.ok) {
    let message = text;
    try {
      message = JSON.parse(text).message || text;
    } catch {
      // not JSON: keep the raw body
    }
    throw new Error(`nbtune server extension: HTTP ${response.status}: ${message}`);
  }
  return JSON.parse(text) as IExperimentsReply;
}

/** Polls the endpoint every `intervalMs` and tells listeners when the reply changes. */
export class ExperimentsModel {
  constructor(intervalMs = 3000) {
    this._intervalMs = intervalMs;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get reply(): IExperimentsReply | null {
    return this._reply;
  }

  get error(): string | null {
    return this._error;
  }

  start(): void {
    if (this._timer === null) {
      void this.refresh();
      // a hidden browser tab does not poll; it refreshes as soon as it is shown again
      this._timer = window.setInterval(() => {
        if (document.visibilityState !== 'hidden') {
          void this.refresh();
        }
      }, this._intervalMs);
      document.addEventListener('visibilitychange', this._onVisible);
    }
  }

  dispose(): void {
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
      document.removeEventListener('visibilitychange', this._onVisible);
    }
    Signal.clearData(this);
  }

  async refresh(): Promise<void> {
    let reply: IExperimentsReply | null = null;
    let error: string | null = null;
    try {
      reply = await fetchExperiments();
    } catch (e) {
      error = (e as Error).message;
    }
    const key = JSON.stringify([reply, error]);
    if (key !== this._lastKey) {
      this._lastKey = key;
      this._reply = reply ?? this._reply;
      this._error = error;
      this._changed.emit();
    }
  }

  private _onVisible = (): void => {
    if (document.visibilityState === 'visible') {
      void this.refresh();
    }
  };

  private _intervalMs: number;
  private _timer: number | null = null;
  private _reply: IExperimentsReply | null = null;
  private _error: string | null = null;
  private _lastKey = '';
  private _changed = new Signal<this, void>(this);
}

/** One experiment in detail (GET /nbtune/api/experiments/<name>). */
export interface IExperimentDetail {
  summary: IExperimentSummary;
  trials: {
    trial_id: number;
    state: string;
    value: number | null;
    budget: number | null;
    error: string | null;
  }[];
  /** trial id -> [budget, value] points */
  curves: { [trial: string]: [number | null, number | null][] };
  /** the allocation timeline; absent from servers that predate it */
  allocations?: IAllocations;
}

/**
 * Which trial held which share of which lane, from when to when (the engine's
 * placements as recorded; nbtune/core/listing.py allocation_timeline).
 */
export interface IAllocations {
  /** what the lanes are: 'GPU', 'CPU' (CPU workers standing in for GPUs) or null */
  device: Device;
  /** one lane in words: 'GPU', 'worker' or 'lane' (not known) */
  word: string;
  /** the experiment's time: where a placement still held ends on the plot */
  now: number;
  /** every lane of the cluster, idle ones too, with its label (`GPU 0`, `worker 1`) */
  lanes: { id: number; label: string }[];
  /** one per placement, in the order they were made; `end` null while held */
  rects: {
    trial_id: number;
    lane: number;
    share: number;
    start: number;
    end: number | null;
    /** its height in the lane: shares packed on one lane stack */
    offset: number;
  }[];
}

/** GET one experiment's detail from `source` (an ISource id); throws a readable Error on failure. */
export async function fetchExperiment(
  name: string,
  source: string | null = null,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<IExperimentDetail> {
  let url = URLExt.join(settings.baseUrl, ENDPOINT, encodeURIComponent(name));
  if (source) {
    url += `?source=${encodeURIComponent(source)}`;
  }
  const response = await ServerConnection.makeRequest(url, {}, settings);
  const text = await response.text();
  if (!response.ok) {
    throw new Error(`nbtune server extension: HTTP ${response.status}: ${text}`);
  }
  return JSON.parse(text) as IExperimentDetail;
}

/** One trial as the panel's grid shows it (nbtune/server/views_data.py). */
export interface IGridTrial {
  trial_id: number;
  state: string;
  /** the metric's best value (the column of `exp.results()` named after the metric) */
  value: number | null;
  /** its last value: the one the analysis views show */
  last: number | null;
  /** the budget it reached */
  budget: number | null;
  config: { [param: string]: number | string | boolean | null };
}

/** History at one budget: the shown trials in `x` order and the best so far after each. */
export interface IHistory {
  x: number[];
  value: number[];
  budget: number[];
  trial_id: number[];
  best: number[];
}

/** The analysis views of one experiment (GET /nbtune/api/experiments/<name>/analysis). */
export interface IViews {
  metric: string;
  mode: string;
  /** the searched hyperparameters */
  params: string[];
  budgets: number[];
  default_budget: number | null;
  /** the budget shown: only trials that reached at least it (0: all trials) */
  budget: number | null;
  min_trials: number;
  trials: IGridTrial[];
  history: { time: IHistory; trial: IHistory };
  /** columns: trial_id, budget, the metric, each hyperparameter and its `<name>/unit` */
  parallel: { [column: string]: (number | string | boolean | null)[] };
  /** each hyperparameter's axis as its domain scales it: [position 0..1, label] ticks */
  axes: { [param: string]: { ticks: [number, string][]; categorical: boolean; log: boolean } };
  slices: {
    [param: string]: {
      x: (number | string | boolean | null)[];
      value: number[];
      budget: number[];
      trial_id: number[];
    };
  };
  /** share of the metric's variance each hyperparameter explains (null: too few trials) */
  importance: { [param: string]: number } | null;
  source: string;
}

/** GET one experiment's analysis views at `budget` (null: the default budget, 0: all). */
export async function fetchViews(
  name: string,
  source: string | null = null,
  budget: number | null = null,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<IViews> {
  let url = URLExt.join(settings.baseUrl, ENDPOINT, encodeURIComponent(name), 'analysis');
  const query: string[] = [];
  if (source) {
    query.push(`source=${encodeURIComponent(source)}`);
  }
  if (budget !== null) {
    query.push(`budget=${budget}`);
  }
  if (query.length) {
    url += `?${query.join('&')}`;
  }
  const response = await ServerConnection.makeRequest(url, {}, settings);
  const text = await response.text();
  if (!response.ok) {
    throw new Error(`nbtune server extension: HTTP ${response.status}: ${text}`);
  }
  return JSON.parse(text) as IViews;
}
