/**
 * Plain-SVG plotting for the experiment panel's views: scales (linear or log),
 * round-number ticks, axes with ticks and a label, and the colour ramps
 * (by budget, by metric, by experiment). No plotting library: the views are
 * few and small, and every mark carries its values in data attributes, so
 * what a page shows can be read back from it.
 */

export const SVG_NS = 'http://www.w3.org/2000/svg';

/** An SVG element with attributes (numbers written as they are). */
export function svgEl<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: { [name: string]: string | number } = {},
  parent?: Element
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    el.setAttribute(k, String(v));
  }
  if (parent) {
    parent.appendChild(el);
  }
  return el;
}

/** Maps a value range onto pixels, linearly or on a log scale. */
export class Scale {
  constructor(lo: number, hi: number, from: number, to: number, log = false) {
    this.log = log && lo > 0 && hi > 0;
    if (!(hi > lo)) {
      // one value (or none): a range round it, so it sits mid-axis
      const pad = lo === 0 || !isFinite(lo) ? 1 : Math.abs(lo) * 0.1;
      lo = (isFinite(lo) ? lo : 0) - pad;
      hi = lo + 2 * pad;
      if (this.log && lo <= 0) {
        this.log = false;
      }
    }
    this.lo = lo;
    this.hi = hi;
    this.from = from;
    this.to = to;
  }

  /** The pixel of value `v`. */
  at(v: number): number {
    const f = this.log
      ? (Math.log(v) - Math.log(this.lo)) / (Math.log(this.hi) - Math.log(this.lo))
      : (v - this.lo) / (this.hi - this.lo);
    return this.from + f * (this.to - this.from);
  }

  /** Round-number ticks inside the range: decades on a log scale. */
  ticks(count = 5): number[] {
    if (this.log) {
      const out: number[] = [];
      for (let e = Math.floor(Math.log10(this.lo)); e <= Math.ceil(Math.log10(this.hi)); e++) {
        const v = Math.pow(10, e);
        if (v >= this.lo * (1 - 1e-9) && v <= this.hi * (1 + 1e-9)) {
          out.push(v);
        }
      }
      return out.length >= 2 ? out : [this.lo, this.hi];
    }
    return niceTicks(this.lo, this.hi, count);
  }

  readonly lo: number;
  readonly hi: number;
  readonly from: number;
  readonly to: number;
  readonly log: boolean;
}

/** A scale over `values` (finite ones), with a little room at both ends. */
export function scaleOf(values: number[], from: number, to: number, log = false): Scale {
  const v = values.filter(x => isFinite(x) && (!log || x > 0));
  if (v.length === 0) {
    return new Scale(0, 1, from, to);
  }
  let lo = Math.min(...v);
  let hi = Math.max(...v);
  if (log) {
    return new Scale(lo / 1.1, hi * 1.1, from, to, true);
  }
  const pad = (hi - lo) * 0.04;
  lo -= pad;
  hi += pad;
  return new Scale(lo, hi, from, to);
}

/** About `count` round numbers (1, 2, 2.5, 5 times a power of ten) within [lo, hi]. */
export function niceTicks(lo: number, hi: number, count = 5): number[] {
  const span = hi - lo;
  if (!(span > 0) || !isFinite(span)) {
    return [lo];
  }
  const raw = span / Math.max(count, 1);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map(m => m * mag).find(s => s >= raw) ?? raw;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
    out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return out;
}

/** A tick's label: short, without float noise. */
export function tickLabel(v: number): string {
  if (v === 0) {
    return '0';
  }
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-3) {
    return v.toExponential(0).replace('e+', 'e');
  }
  return String(parseFloat(v.toPrecision(4)));
}

/**
 * An axis: its line, ticks at `ticks` (values, or [pixel, label] pairs already placed),
 * and its label. `orient`: 'bottom' (x, at pixel `at` down) or 'left' (y, at pixel `at`).
 */
export function axis(
  parent: Element,
  scale: Scale,
  orient: 'bottom' | 'left',
  at: number,
  label: string,
  ticks?: [number, string][]
): SVGGElement {
  const g = svgEl('g', { class: `jp-nbtune-axis jp-nbtune-axis-${orient}` }, parent);
  g.dataset.label = label;
  const placed: [number, string][] =
    ticks ?? scale.ticks().map(v => [scale.at(v), tickLabel(v)] as [number, string]);
  if (orient === 'bottom') {
    svgEl('line', { x1: scale.from, x2: scale.to, y1: at, y2: at }, g);
    for (const [px, text] of placed) {
      svgEl('line', { x1: px, x2: px, y1: at, y2: at + 4 }, g);
      const t = svgEl('text', { x: px, y: at + 15, 'text-anchor': 'middle' }, g);
      t.textContent = text;
      t.classList.add('jp-nbtune-tick');
    }
    const l = svgEl('text', { x: (scale.from + scale.to) / 2, y: at + 30, 'text-anchor': 'middle' }, g);
    l.textContent = label;
    l.classList.add('jp-nbtune-axis-label');
  } else {
    svgEl('line', { x1: at, x2: at, y1: scale.from, y2: scale.to }, g);
    for (const [px, text] of placed) {
      svgEl('line', { x1: at - 4, x2: at, y1: px, y2: px }, g);
      const t = svgEl('text', { x: at - 6, y: px + 3, 'text-anchor': 'end' }, g);
      t.textContent = text;
      t.classList.add('jp-nbtune-tick');
    }
    const mid = (scale.from + scale.to) / 2;
    const l = svgEl('text', {
      x: 12,
      y: mid,
      'text-anchor': 'middle',
      transform: `rotate(-90 12 ${mid})`
    }, g);
    l.textContent = label;
    l.classList.add('jp-nbtune-axis-label');
  }
  return g;
}

/** A colour on a blue (0) to yellow (1) ramp, viridis-like. */
export function ramp(f: number): string {
  const stops = [
    [68, 1, 84],
    [59, 82, 139],
    [33, 145, 140],
    [94, 201, 98],
    [253, 231, 37]
  ];
  const x = Math.min(Math.max(isFinite(f) ? f : 0, 0), 1) * (stops.length - 1);
  const i = Math.min(Math.floor(x), stops.length - 2);
  const t = x - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * t));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

/** The colour of a budget among the `budgets` reached (lowest dark, highest bright). */
export function budgetColor(budget: number, budgets: number[]): string {
  const i = budgets.indexOf(budget);
  return ramp(budgets.length <= 1 ? 1 : (i < 0 ? 0 : i) / (budgets.length - 1));
}

/** One colour per compared experiment, in the order they are shown. */
export const EXPERIMENT_COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];

/** A small legend row: coloured swatches with their labels. */
export function legend(items: [string, string][]): HTMLElement {
  const div = document.createElement('div');
  div.className = 'jp-nbtune-legend';
  for (const [color, text] of items) {
    const item = document.createElement('span');
    const sw = document.createElement('span');
    sw.className = 'jp-nbtune-swatch';
    sw.style.background = color;
    item.appendChild(sw);
    item.appendChild(document.createTextNode(text));
    div.appendChild(item);
  }
  return div;
}
