/**
 * Parallel coordinates: one line per shown trial across every hyperparameter
 * and the metric, coloured by the metric. A hyperparameter's axis is scaled
 * as its domain is (log ranges on a log axis, choices evenly spaced), with the
 * server's ticks; an axis without a recorded domain spans the shown values.
 * Drag along an axis to brush a range: lines outside every brush are dimmed.
 */
import { niceTicks, ramp, svgEl, tickLabel } from './chart';
import { IViews } from './model';

/** The brushed ranges, 0..1 along each axis, kept by the panel across refreshes. */
export type Brushes = { [axis: string]: [number, number] };

interface IAxis {
  name: string;
  /** each shown trial's position, 0 (bottom) .. 1 (top), null when it has no value */
  unit: (number | null)[];
  ticks: [number, string][];
}

function dataAxis(name: string, values: (number | string | boolean | null)[]): IAxis {
  const nums = values.filter(v => typeof v === 'number') as number[];
  if (nums.length === values.filter(v => v !== null).length && nums.length) {
    const lo = Math.min(...nums);
    const hi = Math.max(...nums);
    const unit = values.map(v =>
      typeof v === 'number' ? (hi === lo ? 0.5 : (v - lo) / (hi - lo)) : null
    );
    const ticks = (hi === lo ? [lo] : niceTicks(lo, hi, 4)).map(
      t => [hi === lo ? 0.5 : (t - lo) / (hi - lo), tickLabel(t)] as [number, string]
    );
    return { name, unit, ticks };
  }
  const cats = [...new Set(values.filter(v => v !== null).map(String))].sort();
  const at = (i: number) => (i + 0.5) / cats.length;
  return {
    name,
    unit: values.map(v => (v === null ? null : at(cats.indexOf(String(v))))),
    ticks: cats.map((c, i) => [at(i), c] as [number, string])
  };
}

export function parallelView(v: IViews, brushes: Brushes, onBrush: () => void): HTMLElement {
  const div = document.createElement('div');
  div.className = 'jp-nbtune-parallel';
  const pc = v.parallel;
  const ids = (pc.trial_id ?? []) as number[];
  const axes: IAxis[] = v.params.map(p => {
    const unit = pc[`${p}/unit`] as (number | null)[] | undefined;
    if (unit && v.axes[p] && unit.every(u => u !== null)) {
      return { name: p, unit, ticks: v.axes[p].ticks };
    }
    return dataAxis(p, pc[p] ?? []);
  });
  axes.push(dataAxis(v.metric, pc[v.metric] ?? []));
  const W = Math.max(640, 150 * axes.length);
  const H = 320;
  const [L, R, T, B] = [60, 60, 24, 30];
  const svg = svgEl('svg', { width: W, height: H });
  const ax = (i: number) => L + (axes.length === 1 ? 0 : (i * (W - L - R)) / (axes.length - 1));
  const ay = (u: number) => H - B - u * (H - B - T);
  const metricUnit = axes[axes.length - 1].unit;
  const lines = svgEl('g', { class: 'jp-nbtune-lines' }, svg);
  const paths: SVGPathElement[] = [];
  ids.forEach((tid, k) => {
    let d = '';
    axes.forEach((a, i) => {
      const u = a.unit[k];
      if (u !== null) {
        d += `${d ? 'L' : 'M'}${ax(i)},${ay(u)}`;
      }
    });
    const path = svgEl('path', {
      d,
      fill: 'none',
      stroke: ramp(metricUnit[k] ?? 0),
      'stroke-width': 1.5,
      class: 'jp-nbtune-pc-line'
    }, lines);
    path.dataset.trial = String(tid);
    path.dataset.budget = String((pc.budget ?? [])[k]);
    const values: { [axis: string]: unknown } = {};
    for (const a of [...v.params, v.metric]) {
      values[a] = (pc[a] ?? [])[k];
    }
    path.dataset.values = JSON.stringify(values);
    const tip = svgEl('title', {}, path);
    tip.textContent = `trial ${tid}: ` + Object.entries(values).map(([a, x]) => `${a}=${x}`).join(', ');
    paths.push(path);
  });
  const applyBrushes = () => {
    paths.forEach((path, k) => {
      const kept = axes.every(a => {
        const r = brushes[a.name];
        const u = a.unit[k];
        return !r || (u !== null && u >= r[0] - 1e-9 && u <= r[1] + 1e-9);
      });
      path.classList.toggle('jp-nbtune-dim', !kept);
      path.dataset.brushed = kept ? '1' : '0';
    });
    div.dataset.kept = String(paths.filter(p => p.dataset.brushed === '1').length);
  };
  axes.forEach((a, i) => {
    const g = svgEl('g', { class: 'jp-nbtune-axis jp-nbtune-pc-axis' }, svg);
    g.dataset.axis = a.name;
    svgEl('line', { x1: ax(i), x2: ax(i), y1: ay(0), y2: ay(1) }, g);
    for (const [u, text] of a.ticks) {
      svgEl('line', { x1: ax(i) - 4, x2: ax(i), y1: ay(u), y2: ay(u) }, g);
      const t = svgEl('text', { x: ax(i) - 6, y: ay(u) + 3, 'text-anchor': 'end', class: 'jp-nbtune-tick' }, g);
      t.textContent = text;
    }
    const label = svgEl('text', { x: ax(i), y: T - 10, 'text-anchor': 'middle', class: 'jp-nbtune-axis-label' }, g);
    label.textContent = a.name;
    const band = svgEl('rect', { x: ax(i) - 7, width: 14, y: ay(1), height: 0, class: 'jp-nbtune-brush' }, g);
    const show = () => {
      const r = brushes[a.name];
      band.setAttribute('y', String(r ? ay(r[1]) : ay(1)));
      band.setAttribute('height', String(r ? ay(r[0]) - ay(r[1]) : 0));
      if (r) {
        g.dataset.brush = `${r[0]},${r[1]}`;
      } else {
        delete g.dataset.brush;
      }
    };
    show();
    // the hit area: drag to brush, click without dragging to clear
    const hit = svgEl('rect', { x: ax(i) - 10, width: 20, y: ay(1) - 4, height: ay(0) - ay(1) + 8, fill: 'transparent', class: 'jp-nbtune-brush-area' }, g);
    hit.style.cursor = 'crosshair';
    hit.addEventListener('mousedown', (e: MouseEvent) => {
      e.preventDefault();
      const box = svg.getBoundingClientRect();
      const unitAt = (ev: MouseEvent) =>
        Math.min(Math.max((H - B - (ev.clientY - box.top)) / (H - B - T), 0), 1);
      const start = unitAt(e);
      const move = (ev: MouseEvent) => {
        const u = unitAt(ev);
        brushes[a.name] = [Math.min(start, u), Math.max(start, u)];
        show();
        applyBrushes();
      };
      const up = (ev: MouseEvent) => {
        window.removeEventListener('mousemove', move);
        window.removeEventListener('mouseup', up);
        if (Math.abs(unitAt(ev) - start) < 0.01) {
          delete brushes[a.name];
        }
        show();
        applyBrushes();
        onBrush();
      };
      window.addEventListener('mousemove', move);
      window.addEventListener('mouseup', up);
    });
  });
  applyBrushes();
  div.appendChild(svg);
  const note = document.createElement('div');
  note.className = 'jp-nbtune-note';
  note.textContent =
    `One line per trial, coloured by ${v.metric} (dark: low, bright: high). ` +
    'Drag along an axis to keep a range; click it to clear.';
  div.appendChild(note);
  return div;
}
