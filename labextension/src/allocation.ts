/**
 * The allocation timeline: which trial held which share of which lane, from
 * when to when. A lane is a GPU, or a CPU worker standing in for one (the
 * words follow the hardware the experiment ran on); trials packed on one
 * lane stack, each as tall as its share. Read from the placements the engine
 * made, as the store (or a running kernel) recorded them
 * (nbtune/core/listing.py allocation_timeline).
 */
import { axis, Scale, scaleOf, svgEl } from './chart';
import { IAllocations } from './model';

/** A colour per trial (a fixed cycle, so a trial keeps its colour across refreshes). */
const TRIAL_COLORS = [
  '#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
  '#bcbd22', '#17becf'
];

/** The lanes' words in a sentence: GPUs only on GPUs, CPU workers where they stand in. */
function lanesNoun(device: string | null): string {
  return device === 'GPU'
    ? 'GPU lanes'
    : device === 'CPU'
      ? 'worker lanes (CPU workers standing in for GPUs)'
      : 'lanes';
}

export function allocationView(a: IAllocations | undefined): HTMLElement {
  const div = document.createElement('div');
  div.className = 'jp-nbtune-allocation';
  const note = document.createElement('div');
  note.className = 'jp-nbtune-note';
  if (!a) {
    note.textContent = 'This server does not serve the allocation timeline (an older nbtune).';
    div.appendChild(note);
    return div;
  }
  div.dataset.device = a.device ?? '';
  note.textContent =
    `Trials on ${lanesNoun(a.device)} over time; stacked = packed on one lane, ` +
    `each as tall as its share.` + (a.rects.length ? '' : ' No placement recorded yet.');
  div.appendChild(note);
  const n = Math.max(a.lanes.length, 1);
  const band = 26;
  const W = 640;
  const [L, R, T, B] = [90, 16, 10, 44];
  const H = T + B + band * n;
  const svg = svgEl('svg', { width: W, height: H, class: 'jp-nbtune-alloc' });
  const xs = scaleOf([0, ...a.rects.map(r => r.start), a.now], L, W - R);
  const ys = new Scale(0, n, T, T + band * n);
  axis(svg, xs, 'bottom', H - B, 'seconds since the experiment began');
  const ticks = a.lanes.map((l, i) => [ys.at(i + 0.5), l.label] as [number, string]);
  axis(svg, ys, 'left', L, a.word === 'lane' ? 'lane' : a.word, ticks);
  const row: { [lane: number]: number } = {};
  a.lanes.forEach((l, i) => {
    row[l.id] = i;
    const g = svgEl('g', { class: 'jp-nbtune-lane' }, svg);
    g.dataset.lane = String(l.id);
    g.dataset.label = l.label;
  });
  for (const r of a.rects) {
    const i = row[r.lane] ?? 0;
    const end = r.end ?? a.now;
    const x0 = xs.at(r.start);
    const rect = svgEl('rect', {
      x: x0,
      y: ys.at(i) + (1 - r.offset - r.share) * (band - 2) + 1,
      width: Math.max(xs.at(end) - x0, 1),
      height: Math.max(r.share * (band - 2), 1),
      fill: TRIAL_COLORS[r.trial_id % TRIAL_COLORS.length],
      'fill-opacity': r.end === null ? 0.95 : 0.7,
      stroke: '#fff',
      'stroke-width': 0.5,
      class: 'jp-nbtune-alloc-rect'
    }, svg);
    rect.dataset.trial = String(r.trial_id);
    rect.dataset.lane = String(r.lane);
    rect.dataset.share = String(r.share);
    rect.dataset.start = String(r.start);
    rect.dataset.end = r.end === null ? '' : String(r.end);
    rect.dataset.offset = String(r.offset);
    const title = svgEl('title', {}, rect);
    title.textContent =
      `trial ${r.trial_id} on ${a.lanes[i]?.label ?? r.lane}: share ${r.share}, ` +
      `${r.start.toFixed(1)} s to ` + (r.end === null ? 'now (running)' : `${r.end.toFixed(1)} s`);
  }
  div.appendChild(svg);
  return div;
}
