"""Bubble fidelity: the simulator's bubble model, calibrated by a short probe, against a real host.

The goal: "predicted bubble fill and host slowdown within 10 % of
measured". The model is :class:`nbtune.allocators.bubbles.PipelineHostModel` with a
:class:`~nbtune.allocators.bubble_model.CoLocation` (slowdown σ, fill φ,
compute stretch κ). Nothing it is given is read off the phase it predicts,
except what the host publishes without a guest (its held iterations'
iteration time and idle shares, the same figures
:class:`~nbtune.bubbles.bubble_runtime.BubbleRuntime` publishes before it places a trial).

Each repetition:

1. **run A** (2-stage ``Schedule1F1B``, 4 microbatches, a gated guest per
   stage, gated and held iterations alternating): its first ``--probe``
   iterations after warm-up are the *co-location probe* (calibration: σ, φ, κ
   per stage, :func:`nbtune.bubbles.probe.phase`); the ``--later`` iterations
   after them are the phase to predict: *more* gated iterations, later, at
   whatever load the shared machine has by then. The fair part: the probe is
   a few iterations, the prediction is for 2.5× as many afterwards, and the
   bubble seconds are predicted from the model's arithmetic (T(1 + σ) −
   κ(1 − i)T per iteration), not copied.
2. **run B**, a *different question*: the same host with ``--cross-microbatches``
   (8) microbatches (twice the compute chunks, half as long; other idle
   shares), a fresh process group minutes later, predicted from run A's probe.
   This tests whether σ and φ are properties of guest-beside-stage on this
   machine rather than of one run.

Against each, the old model (σ = 0, φ = ``efficiency`` 0.6) on the same feed,
and ``ratio``: the probe's σ as a ratio, without the per-resumption delay
(δ: the probe's paired gated − held seconds per compute resumption, carried to
the target's resumptions per iteration, :meth:`CoLocation.at
<nbtune.allocators.bubble_model.CoLocation.at>`). Slowdowns are medians over
gated iterations each paired with its held neighbours (same load).
The measurement's own resolution: the later phase split in two halves, the
relative difference of their measured slowdowns and fills. Goal
``whatif_within_10pct``, run A's later phase, medians over repetitions: the
fill's relative error ≤ 10 %, and the slowdown's absolute error ≤ 10 % of the
measured slowdown (≤ 1 point when that is under 10 %).

``--stubborn``: guests that pause only at step boundaries and whose steps
outlast the stages' 10 ms grace, so each stage waits up to 10 ms before it
SIGSTOPs its guest: a slowdown the gate itself causes, well above the noise
(the default cooperative SCHED_IDLE guests cost the host a few percent either
way on this machine, inside its noise).

    python benchmarks/bubble_fidelity.py [--reps 3] [--probe 12] [--later 30] [--stubborn]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace

from _results import record  # benchmarks/_results.py: notes the load at start

from nbtune.bubbles import GuestSpec, HostSpec, PipelineHost
from nbtune.bubbles.calibrate import solo_step
from nbtune.bubbles.probe import Phase, phase, what_if

# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = ("nbtune/bubbles/", "nbtune/allocators/bubbles.py", "nbtune/allocators/bubble_model.py")
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine


def compare(probe: Phase, target: Phase, spec: HostSpec) -> dict:
    """:func:`nbtune.bubbles.probe.what_if`, and whether the calibrated model met the goal."""
    out = what_if(probe, target, spec.microbatches)
    out["within_10pct"] = within(out["new"], out["measured"])
    return out


def within(pred: dict, got: dict) -> bool:
    """Fill within 10 % of measured, slowdown within 10 % (or 1 point when under 10 %)."""
    slow_tol = max(0.1 * abs(got["slowdown"]), 0.01)
    return (abs(pred["fill"] - got["fill"]) <= 0.1 * got["fill"]
            and abs(pred["slowdown"] - got["slowdown"]) <= slow_tol)


def halves(run, first: int, last: int, guests, steps) -> dict:
    """The later phase's own resolution: its two halves measured apart."""
    mid = first + (last - first) // 2 // 2 * 2  # an even split keeps gated/held paired
    a, b = phase(run, range(first, mid), guests, steps), phase(run, range(mid, last), guests, steps)
    return {f: abs(x - y) / abs((x + y) / 2) for f, x, y in
            (("slowdown", a.slowdown(), b.slowdown()), ("fill", a.fill(), b.fill()))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--probe", type=int, default=12, help="probe iterations (half of them gated)")
    ap.add_argument("--later", type=int, default=30, help="iterations predicted after the probe")
    ap.add_argument("--cross-microbatches", type=int, default=8,
                    help="run B's microbatches (0: skip run B)")
    ap.add_argument("--stubborn", action="store_true",
                    help="guests that pause only at step boundaries, steps longer than the "
                         "stages' 10 ms grace, nice 0: a slowdown the gate causes, above the noise")
    args = ap.parse_args()
    warm = 2
    spec = HostSpec(stages=2, microbatches=4, batch=128, width=512, depth=8,
                    iterations=warm + args.probe + args.later, warmup=warm,
                    grace=0.01 if args.stubborn else 0.0, timeout=300.0, ab_block=1)
    cross = replace(spec, microbatches=args.cross_microbatches, iterations=warm + args.later)
    shape = (dict(width=384, depth=3, batch=256, layer_hooks=False, nice=0, idle_class=False)
             if args.stubborn else dict(width=128, depth=4, batch=64))
    guests = {s: GuestSpec(name=f"guest{s}", seed=10 + s, steps=10_000_000, stop_with_host=True,
                           **shape) for s in range(spec.stages)}
    later_its = range(warm + args.probe, spec.iterations)
    reps = []
    for rep in range(args.reps):
        run = PipelineHost(spec).run(guests)
        steps = {g.name: solo_step(g, 200) for g in guests.values()}
        probe = phase(run, range(warm, warm + args.probe), guests, steps)
        later = phase(run, later_its, guests, steps)
        r = {"probe": {"slowdown": probe.slowdown(), "fill": probe.fill(),
                       "stretch": [probe.colocation(s).compute_stretch for s in probe.stages],
                       "delay_ms_per_resumption": [1e3 * (probe.colocation(s).chunk_delay or 0.0)
                                                   for s in probe.stages],
                       "resumptions": [probe.resumptions(s) for s in probe.stages],
                       "held_iteration_s": probe.held_iteration()},
             "later": compare(probe, later, spec),
             "halves": halves(run, later_its.start, later_its.stop, guests, steps),
             "solo_step_ms": [1e3 * v for v in steps.values()]}
        if args.cross_microbatches:
            run_b = PipelineHost(cross).run(guests)
            r["cross"] = compare(probe, phase(run_b, range(warm, cross.iterations), guests, steps),
                                 cross)
        reps.append(r)
        print(f"rep {rep}: " + json.dumps(rounded(r)), flush=True)
    figures = summary(reps)
    figures["stubborn_guests"] = args.stubborn
    for k, v in figures.items():
        print(f"{k}: {v}")
    met = figures["whatif_within_10pct"]
    goal = {"whatif_within_10pct": "median |fill error| <= 10 % and median |slowdown error| "
                                   "<= 10 % (1 point under 10 %), later phase of run A"}
    record({"name": "bubble_fidelity", "figures": figures, "goal": goal, "met": met})


def summary(reps: list[dict]) -> dict:
    med = statistics.median
    out: dict = {"reps": len(reps)}
    for case in ("later", "cross"):
        rs = [r[case] for r in reps if case in r]
        if not rs:
            continue
        for f in ("fill", "slowdown", "bubble_s"):
            out[f"{case}_{f}_measured"] = [round(r["measured"][f], 4) for r in rs]
            out[f"{case}_{f}_predicted"] = [round(r["new"][f], 4) for r in rs]
            for k in ("new", "ratio", "old"):
                errs = [r[f"{k}_error"][f] for r in rs]
                out[f"{case}_{f}_{k}_error_median"] = round(med(abs(e) for e in errs), 3)
        out[f"{case}_within_10pct_per_rep"] = [r["within_10pct"] for r in rs]
    for f in ("slowdown", "fill"):
        out[f"probe_{f}"] = [round(r["probe"][f], 4) for r in reps]
        out[f"halves_{f}_rel_diff"] = [round(r["halves"][f], 3) for r in reps]
        out[f"halves_{f}_rel_diff_median"] = round(med(r["halves"][f] for r in reps), 3)
        got = [r["later"]["measured"][f] for r in reps]
        # run to run: how far the repetitions' measured values lie apart, relative to their median
        out[f"reps_{f}_spread"] = round((max(got) - min(got)) / abs(med(got)), 3) if med(got) else None
    # the goal: median over repetitions of each error's magnitude against the median measured
    rs = [r["later"] for r in reps]
    slow_err = med(abs(r["new"]["slowdown"] - r["measured"]["slowdown"]) for r in rs)
    slow_got = med(abs(r["measured"]["slowdown"]) for r in rs)
    out["later_slowdown_abs_error_median"] = round(slow_err, 4)
    out["whatif_within_10pct"] = (out["later_fill_new_error_median"] <= 0.1
                                  and slow_err <= max(0.1 * slow_got, 0.01))
    return out


def rounded(x):
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [rounded(v) for v in x]
    return round(x, 4) if isinstance(x, float) else x


if __name__ == "__main__":
    main()
