/**
 * The experiment panel's trial grid: one row per trial (id, state, the metric,
 * its last value, the budget reached, every hyperparameter); a click on a
 * header sorts by that column (ascending, then descending; missing values
 * last, ties in trial-id order), and a filter row keeps the trials in a
 * state, in a numeric range, or whose text contains what is typed. The sort
 * and filters outlive the refreshes of a running experiment.
 */
import { IGridTrial } from './model';
import { formatMetric } from './sidebar';

type Cell = number | string | boolean | null;

/** A grid column: its field (`trial`, `state`, `value`, `last`, `budget`, `config/<p>`). */
interface IColumn {
  field: string;
  label: string;
  get: (t: IGridTrial) => Cell;
  numeric: boolean;
}

export class TrialGrid {
  constructor() {
    this.node = document.createElement('div');
    this.node.className = 'jp-nbtune-grid';
    this._count = document.createElement('div');
    this._count.className = 'jp-nbtune-note jp-nbtune-grid-count';
    this._table = document.createElement('table');
    this._table.className = 'jp-nbtune-table jp-nbtune-trials';
    this.node.appendChild(this._count);
    this.node.appendChild(this._table);
  }

  readonly node: HTMLDivElement;

  /** Show `trials`; `best` is starred; columns follow `params`. */
  update(trials: IGridTrial[], params: string[], metric: string, best: number | null): void {
    this._trials = trials;
    this._best = best;
    const cols: IColumn[] = [
      { field: 'trial', label: 'trial', get: t => t.trial_id, numeric: true },
      { field: 'state', label: 'state', get: t => t.state, numeric: false },
      { field: 'value', label: `${metric} (best)`, get: t => t.value, numeric: true },
      { field: 'last', label: `${metric} (last)`, get: t => t.last, numeric: true },
      { field: 'budget', label: 'budget', get: t => t.budget, numeric: true }
    ];
    for (const p of params) {
      const values = trials.map(t => t.config[p]).filter(v => v !== null && v !== undefined);
      cols.push({
        field: `config/${p}`,
        label: p,
        get: t => t.config[p] ?? null,
        numeric: values.length > 0 && values.every(v => typeof v === 'number')
      });
    }
    const key = JSON.stringify([cols.map(c => [c.field, c.label, c.numeric]),
      [...new Set(trials.map(t => t.state))].sort()]);
    if (key !== this._headKey) {
      this._headKey = key;
      this._columns = cols;
      this._head();
    }
    this._body();
  }

  /** Sort by `field` (asc/desc), as a header click does. */
  sortBy(field: string, dir: 'asc' | 'desc'): void {
    this._sort = { field, dir };
    this._head();
    this._body();
  }

  private _head(): void {
    const thead = this._table.tHead ?? this._table.createTHead();
    thead.textContent = '';
    const names = thead.insertRow();
    const filters = thead.insertRow();
    filters.className = 'jp-nbtune-filters';
    const states = [...new Set(this._trials.map(t => t.state))].sort();
    for (const c of this._columns) {
      const th = document.createElement('th');
      th.textContent = c.label;
      th.dataset.field = c.field;
      th.title = 'click to sort';
      th.classList.add('jp-nbtune-sortable');
      if (this._sort?.field === c.field) {
        th.dataset.sort = this._sort.dir;
        th.textContent += this._sort.dir === 'asc' ? ' ▲' : ' ▼';
      }
      th.addEventListener('click', () => {
        const dir = this._sort?.field === c.field && this._sort.dir === 'asc' ? 'desc' : 'asc';
        this.sortBy(c.field, dir);
      });
      names.appendChild(th);
      const cell = document.createElement('th');
      cell.dataset.filter = c.field;
      if (c.field === 'state') {
        const sel = document.createElement('select');
        sel.dataset.filterState = '';
        for (const s of ['', ...states]) {
          const o = document.createElement('option');
          o.value = s;
          o.textContent = s || 'all';
          sel.appendChild(o);
        }
        sel.value = states.includes(this._text.state ?? '') ? this._text.state : '';
        sel.addEventListener('change', () => {
          this._text.state = sel.value;
          this._body();
        });
        cell.appendChild(sel);
      } else if (c.numeric) {
        for (const side of ['min', 'max'] as const) {
          const input = document.createElement('input');
          input.type = 'number';
          input.step = 'any';
          input.placeholder = side;
          input.dataset[side === 'min' ? 'filterMin' : 'filterMax'] = c.field;
          const kept = this._range[c.field]?.[side === 'min' ? 0 : 1];
          input.value = kept === undefined || kept === null ? '' : String(kept);
          input.addEventListener('input', () => {
            const r = this._range[c.field] ?? [null, null];
            const v = input.value.trim() === '' ? null : Number(input.value);
            r[side === 'min' ? 0 : 1] = v !== null && isFinite(v) ? v : null;
            this._range[c.field] = r;
            this._body();
          });
          cell.appendChild(input);
        }
      } else {
        const input = document.createElement('input');
        input.type = 'text';
        input.placeholder = 'contains';
        input.dataset.filterText = c.field;
        input.value = this._text[c.field] ?? '';
        input.addEventListener('input', () => {
          this._text[c.field] = input.value;
          this._body();
        });
        cell.appendChild(input);
      }
      filters.appendChild(cell);
    }
  }

  /** The trials the filters keep, in the chosen order. */
  shown(): IGridTrial[] {
    let rows = this._trials.filter(t => this._keeps(t));
    const s = this._sort;
    const col = s ? this._columns.find(c => c.field === s.field) : undefined;
    if (s && col) {
      const sign = s.dir === 'asc' ? 1 : -1;
      rows = [...rows].sort((a, b) => {
        const x = col.get(a);
        const y = col.get(b);
        const xn = x === null || x === undefined || (typeof x === 'number' && isNaN(x));
        const yn = y === null || y === undefined || (typeof y === 'number' && isNaN(y));
        if (xn || yn) {
          return xn && yn ? 0 : xn ? 1 : -1; // missing values last, either way
        }
        if (typeof x === 'number' && typeof y === 'number') {
          return sign * (x - y);
        }
        const xs = String(x);
        const ys = String(y);
        return sign * (xs < ys ? -1 : xs > ys ? 1 : 0);
      });
    }
    return rows;
  }

  private _keeps(t: IGridTrial): boolean {
    for (const c of this._columns) {
      const v = c.get(t);
      if (c.field === 'state') {
        if (this._text.state && t.state !== this._text.state) {
          return false;
        }
      } else if (c.numeric) {
        const [lo, hi] = this._range[c.field] ?? [null, null];
        if (lo === null && hi === null) {
          continue;
        }
        if (typeof v !== 'number' || (lo !== null && v < lo) || (hi !== null && v > hi)) {
          return false;
        }
      } else {
        const want = (this._text[c.field] ?? '').trim().toLowerCase();
        if (want && !String(v ?? '').toLowerCase().includes(want)) {
          return false;
        }
      }
    }
    return true;
  }

  private _body(): void {
    const old = this._table.tBodies[0];
    if (old) {
      old.remove();
    }
    const body = this._table.createTBody();
    const rows = this.shown();
    for (const t of rows) {
      const r = body.insertRow();
      r.dataset.trial = String(t.trial_id);
      r.dataset.state = t.state;
      for (const c of this._columns) {
        const td = r.insertCell();
        const v = c.get(t);
        td.dataset.field = c.field;
        td.dataset.value = v === null || v === undefined ? '' : String(v);
        if (c.field === 'state') {
          td.textContent = t.trial_id === this._best ? `★ ${t.state}` : t.state;
        } else if (typeof v === 'number' && c.field !== 'trial') {
          // whole numbers (a budget, an integer choice) as they are, others to 4 digits
          td.textContent = Number.isInteger(v) ? String(v) : formatMetric(v);
        } else {
          td.textContent = v === null || v === undefined ? '' : String(v);
        }
      }
    }
    this._count.textContent =
      rows.length === this._trials.length
        ? `${rows.length} trials`
        : `${rows.length} of ${this._trials.length} trials (filtered)`;
    this.node.dataset.shown = String(rows.length);
  }

  private _table: HTMLTableElement;
  private _count: HTMLDivElement;
  private _trials: IGridTrial[] = [];
  private _best: number | null = null;
  private _columns: IColumn[] = [];
  private _headKey = '';
  private _sort: { field: string; dir: 'asc' | 'desc' } | null = null;
  private _range: { [field: string]: [number | null, number | null] } = {};
  private _text: { [field: string]: string } = {};
}
