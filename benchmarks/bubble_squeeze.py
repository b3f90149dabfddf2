"""Bubble squeeze, for real: a 2-stage 1F1B host with a gated guest trial beside each stage.

Runs the host alone and the host with one cooperative guest per stage
(``nbtune.bubbles``), alternating, ``--reps`` times, and reports:

* host throughput loss: 1 − (samples/s with guests) / (samples/s alone), medians
  over the repetitions (goal ≤ 3 %);
* bubble fill: per stage, guest steps finished inside the host's measured
  window × the guest's solo step time / the stage's measured idle time in that
  window (goal ≥ 50 %, summed over stages weighted by bubble time);
* the measured bubble ratio (alone runs) against 1F1B's (p−1)/(m+p−1);
* correctness: each guest's final weights equal an ungated run of as many
  steps, and its running intervals never overlap its stage's compute.

On CPU a stage and its guest share one core (pinned), so the guest competes
for the very resource the host uses, caches and memory bandwidth included;
on a GPU the bubble is the GPU's, and the host's CPU side is untouched.

    python benchmarks/bubble_squeeze.py [--reps 3] [--iterations 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace

import numpy as np

from nbtune.bubbles import GuestSpec, HostSpec, PipelineHost, one_f_one_b_bubble, overlap
from nbtune.bubbles.guest import train_guest
from nbtune.bubbles.timeline import idle_windows, total


def solo(spec: GuestSpec, steps: int):
    import torch

    torch.set_num_threads(1)  # as in a guest process
    return train_guest(replace(spec, steps=steps, stop_with_host=False))


def fill(run, guests: dict[int, GuestSpec], solo_step: dict[str, float]) -> dict:
    lo, hi = run.window()
    out = {}
    for s, g in guests.items():
        res = run.guests[g.name]
        stage = [iv for it in run.iterations for iv in it[s]]
        bubble = total(idle_windows(stage, lo, hi))
        steps = sum(lo <= e <= hi for e in res.step_ends)
        runs = [iv for iv in res.intervals if iv[0] == "run"]
        out[s] = {"bubble_s": bubble, "steps_in_window": steps,
                  "progress_s": steps * solo_step[g.name],
                  "overlap_s": overlap(runs, stage), "stops": run.stops[s],
                  "handoff_median_ms": 1e3 * statistics.median(run.handoffs[s]),
                  "handoff_max_ms": 1e3 * max(run.handoffs[s])}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=20)
    args = ap.parse_args()
    spec = HostSpec(stages=2, microbatches=4, batch=128, width=512, depth=8,
                    iterations=args.iterations, warmup=3, grace=0.05, timeout=300.0)
    guests = {s: GuestSpec(name=f"guest{s}", seed=10 + s, width=128, depth=4, batch=64,
                           steps=10_000_000, stop_with_host=True) for s in range(spec.stages)}
    host = PipelineHost(spec)
    alone_thr, with_thr, ratios, fills, identical = [], [], [], [], True
    for rep in range(args.reps):
        order = ["alone", "with"] if rep % 2 == 0 else ["with", "alone"]
        for kind in order:
            if kind == "alone":
                r = host.run()
                alone_thr.append(r.throughput())
                ratios.append(r.bubble_ratios())
                print(f"rep {rep} alone: {r.throughput():.1f} samples/s, "
                      f"bubble ratio {[round(x, 3) for x in r.bubble_ratios()]}", flush=True)
                continue
            r = host.run(guests)
            with_thr.append(r.throughput())
            solo_runs = {g.name: solo(g, len(r.guests[g.name].step_ends)) for g in guests.values()}
            for g in guests.values():
                ref, got = solo_runs[g.name].weights, r.guests[g.name].weights
                identical &= all(np.array_equal(ref[k], got[k]) for k in ref)
            f = fill(r, guests, {n: s.step_time() for n, s in solo_runs.items()})
            fills.append(f)
            print(f"rep {rep} with guests: {r.throughput():.1f} samples/s; " + "; ".join(
                f"stage {s}: bubble {v['bubble_s']:.3f} s, {v['steps_in_window']} guest steps "
                f"= {v['progress_s']:.3f} s solo, overlap {v['overlap_s']:.6f} s, "
                f"stops {v['stops']}, handoff median {v['handoff_median_ms']:.3f} ms "
                f"max {v['handoff_max_ms']:.1f} ms" for s, v in f.items()), flush=True)
    a, w = statistics.median(alone_thr), statistics.median(with_thr)
    loss = 1.0 - w / a
    fill_frac = [sum(f[s]["progress_s"] for s in f) / sum(f[s]["bubble_s"] for s in f)
                 for f in fills]
    fill_med = statistics.median(fill_frac)
    measured = [statistics.median(r[s] for r in ratios) for s in range(spec.stages)]
    formula = one_f_one_b_bubble(spec.stages, spec.microbatches)
    no_overlap = all(v["overlap_s"] == 0.0 for f in fills for v in f.values())
    print(f"host alone {a:.1f} samples/s, with guests {w:.1f}: loss {100 * loss:.1f} %")
    print(f"bubble ratio measured {[round(x, 3) for x in measured]} vs 1F1B formula {formula:.3f}")
    print(f"bubble time turned into guest progress: {[round(x, 3) for x in fill_frac]} "
          f"(median {100 * fill_med:.0f} %); guests identical to solo runs: {identical}; "
          f"no overlap with the stage's compute: {no_overlap}")
    figures = {"host_alone_samples_s": round(a, 1), "host_with_guests_samples_s": round(w, 1),
               "host_throughput_loss": round(loss, 4), "bubble_fill": round(fill_med, 3),
               "bubble_fill_per_rep": [round(x, 3) for x in fill_frac],
               "bubble_ratio_measured": [round(x, 3) for x in measured],
               "bubble_ratio_1f1b": round(formula, 3), "guests_identical": identical,
               "gate_overlap_zero": no_overlap, "reps": args.reps}
    goal = {"host_throughput_loss": "<= 0.03", "bubble_fill": ">= 0.5",
            "guests_identical": True}
    met = loss <= 0.03 and fill_med >= 0.5 and identical and no_overlap
    print(json.dumps({"name": "bubble_squeeze", "figures": figures, "goal": goal, "met": met}))


if __name__ == "__main__":
    main()
