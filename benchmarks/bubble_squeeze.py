"""Bubble squeeze, for real: a 2-stage 1F1B host with a gated guest trial beside each stage.

Each repetition runs the host alone and the host with one cooperative guest per
stage (``nbtune.bubbles``), in alternating order. The run with guests alternates
its iterations between *gated* (guests use the bubbles) and *held* (each stage
keeps its slot, the guests sleep). It reports:

* host throughput loss: 1 − (median iteration of the host-alone run) / (median
  gated iteration of the run with guests), median over repetitions (goal ≤ 3 %);
  and, as a second figure, the same loss within the run with guests, held
  against gated iterations (both under the same machine load, iteration by
  iteration, but the held iterations have sleeping guests beside them);
* bubble fill: guest progress inside the gated iterations / the stages' measured
  idle time in those iterations (goal ≥ 50 %). A guest step spans from the
  previous step's end to its own; it is credited its solo step time × the share
  of its running time that lay inside gated iterations
  (:func:`nbtune.bubbles.timeline.step_shares`), so compute a step did outside
  them counts for nothing;
* the measured bubble ratio (alone runs) against 1F1B's (p−1)/(m+p−1);
* correctness: each guest's final weights equal an ungated run of as many
  steps, and its running intervals never overlap its stage's compute;
* what-if: the simulator's bubble model
  (:class:`nbtune.allocators.bubbles.PipelineHostModel`) calibrated by a
  co-location probe (the run's first third of measured iterations: slowdown,
  fill, compute stretch) and fed the later iterations' held figures predicts
  their slowdown, bubble seconds and fill (:func:`nbtune.bubbles.probe.what_if`),
  next to the old model's (no slowdown, fill 0.6); ``benchmarks/bubble_fidelity.py``
  is the dedicated check.

On CPU a stage and its guest share one core (pinned), so the guest competes
for the very resource the host uses, caches and memory bandwidth included;
on a GPU (``--device cuda``) the bubble is the GPU's idle SMs, and each
process has a core of its own. With one GPU, an MPS daemon (started here when
``nvidia-cuda-mps-control`` exists) splits it into one share per stage
(``--mps-percentage``, default 100 / stages), and each guest gets its stage's
share: a two-GPU pipeline on two half-GPUs, activations crossing in host memory.

    python benchmarks/bubble_squeeze.py [--reps 3] [--iterations 30]
    python benchmarks/bubble_squeeze.py --device cuda [--width 4096 --depth 16 --batch 2048]
"""

from __future__ import annotations

import argparse
import statistics
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
from _results import record  # benchmarks/_results.py: notes the load at start

from nbtune.bubbles import GuestSpec, HostSpec, PipelineHost, one_f_one_b_bubble, overlap
from nbtune.bubbles.colocate import run_alone
from nbtune.bubbles.guest import train_guest
from nbtune.bubbles.probe import iteration_window as window
from nbtune.bubbles.probe import phase, what_if
from nbtune.bubbles.timeline import clip, idle_windows, merge, step_shares, total

# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = ("nbtune/bubbles/", "nbtune/runtimes/dask/gpu.py")
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine
RUNS_ON = ("cpu", "gpu")  # devices it has a mode for (default: cpu)


def solo(spec: GuestSpec, steps: int):
    """The guest alone for ``steps``: in this process on the CPU; on a GPU in a process of its
    own, so that this one never holds a CUDA context (MPS's quit waits for every client)."""
    if spec.device != "cpu":
        return run_alone(spec, steps=steps, timeout=300.0)
    import torch

    torch.set_num_threads(1)  # as in a guest process
    return train_guest(replace(spec, steps=steps, stop_with_host=False))


@contextmanager
def mps_daemon(device: str):
    """An MPS control daemon for this run's processes (GPU only, where the tool exists)."""
    from nbtune.runtimes.dask.gpu import mps_available, start_mps_daemon, stop_mps_daemon

    if device == "cpu" or not mps_available():
        yield False
        return
    env = start_mps_daemon()  # the stage and guest processes inherit its pipe at spawn
    try:
        yield True
    finally:
        stop_mps_daemon(env)


def ab(run, guests: dict[int, GuestSpec], solo_step: dict[str, float]) -> dict:
    """One run with guests: held and gated iterations' median times, and per stage the
    gated bubbles and the guest progress made inside the gated iterations."""
    spec, its = run.spec, range(run.spec.warmup, run.spec.iterations)
    dur = {g: [run.iter_spans[k][1] - run.iter_spans[k][0] for k in its if spec.gated(k) == g]
           for g in (True, False)}
    out: dict = {"held_s": statistics.median(dur[False]), "gated_s": statistics.median(dur[True])}
    for s, g in guests.items():
        res = run.guests[g.name]
        stage = [iv for it in run.iterations for iv in it[s]]
        runs = run.guest_ran(s, g.name)
        windows = [window(run, k, s) for k in its if spec.gated(k)]
        bubble = sum(total(idle_windows(stage, lo, hi)) for lo, hi in windows)
        steps = sum(step_shares(res.started, res.step_ends, runs, windows))
        ended = sum(any(lo <= e < hi for lo, hi in windows) for e in res.step_ends)
        gated_runs = sum(total(clip(merge(runs), *w)) for w in windows)
        out[s] = {"bubble_s": bubble, "steps": steps, "progress_s": steps * solo_step[g.name],
                  "steps_ended_inside": ended, "guest_running_s": gated_runs,
                  "guest_cpu_per_running_s": res.cpu_s / max(total(merge(runs)), 1e-9),
                  "overlap_s": overlap(runs, stage), "stops": run.stops[s],
                  "handoff_median_ms": 1e3 * statistics.median(run.handoffs[s]),
                  "handoff_max_ms": 1e3 * max(run.handoffs[s])}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--grace", type=float, default=None,
                    help="seconds a stage waits for its guest to pause before SIGSTOP (0: none; "
                         "default 0 on CPU, 0.05 on a GPU, where a stopped guest's queued "
                         "kernels would still run: it must pause itself)")
    ap.add_argument("--no-idle-class", action="store_true",
                    help="keep the guests in the normal scheduling class (nice only)")
    ap.add_argument("--guest-width", type=int, default=None,
                    help="the guest MLP's width (a tiny one isolates the gate's own cost; "
                         "default 128 on CPU, 2048 on a GPU)")
    ap.add_argument("--nice", type=int, default=19, help="the guest processes' niceness")
    ap.add_argument("--device", default="cpu", help="'cpu' or a CUDA device ('cuda', 'cuda:0')")
    ap.add_argument("--mps-percentage", type=int, default=None,
                    help="on a GPU: each stage's (and its guest's) SM share (default 100/stages)")
    ap.add_argument("--width", type=int, default=None, help="the host MLP's width")
    ap.add_argument("--depth", type=int, default=None, help="the host MLP's layers")
    ap.add_argument("--batch", type=int, default=None, help="the host's batch (4 microbatches)")
    ap.add_argument("--guest-batch", type=int, default=None, help="default 64 (CPU), 512 (GPU)")
    args = ap.parse_args()
    gpu = args.device != "cpu"
    args.grace = (0.05 if gpu else 0.0) if args.grace is None else args.grace
    args.guest_width = args.guest_width or (2048 if gpu else 128)
    args.guest_batch = args.guest_batch or (512 if gpu else 64)
    with mps_daemon(args.device) as mps:
        run(args, gpu, mps)


def run(args: argparse.Namespace, gpu: bool, mps: bool) -> None:
    pct = (args.mps_percentage or 50) if mps else None  # two stages: half a GPU each
    spec = HostSpec(stages=2, microbatches=4, batch=args.batch or (2048 if gpu else 128),
                    width=args.width or (4096 if gpu else 512), depth=args.depth or (16 if gpu else 8),
                    iterations=args.iterations, warmup=2, grace=args.grace, timeout=300.0,
                    ab_block=1, device=args.device, mps_percentage=pct)
    guests = {s: GuestSpec(name=f"guest{s}", seed=10 + s, width=args.guest_width, depth=4,
                           batch=args.guest_batch,
                           steps=10_000_000, stop_with_host=True, nice=args.nice,
                           idle_class=not args.no_idle_class, device=args.device,
                           mps_percentage=pct)
              for s in range(spec.stages)}
    host = PipelineHost(spec)
    # losses: against the host-alone run of the same repetition; in_run: held vs gated
    losses, in_run, ratios, fills, identical, no_overlap = [], [], [], [], True, True
    whatifs = []
    for rep in range(args.reps):
        alone_first = rep % 2 == 0
        for kind in (["alone", "ab"] if alone_first else ["ab", "alone"]):
            if kind == "alone":
                r = host.run()
                alone_its = [b - a for a, b in r.iter_spans[spec.warmup:]]
                alone_s = statistics.median(alone_its)
                ratios.append(r.bubble_ratios())
                print(f"rep {rep} host alone: median iteration {1e3 * alone_s:.1f} ms, "
                      f"bubble ratio {[round(x, 3) for x in r.bubble_ratios()]}", flush=True)
                continue
            r = host.run(guests)
            solo_runs = {g.name: solo(g, len(r.guests[g.name].step_ends)) for g in guests.values()}
            for g in guests.values():
                ref, got = solo_runs[g.name].weights, r.guests[g.name].weights
                identical &= all(np.array_equal(ref[k], got[k]) for k in ref)
            f = ab(r, guests, {n: x.step_time() for n, x in solo_runs.items()})
            fills.append(sum(f[s]["progress_s"] for s in guests) / sum(f[s]["bubble_s"] for s in guests))
            in_run.append(1.0 - f["held_s"] / f["gated_s"])
            no_overlap &= all(f[s]["overlap_s"] == 0.0 for s in guests)
            cut = spec.warmup + (spec.iterations - spec.warmup) // 3 // 2 * 2
            steps = {n: x.step_time() for n, x in solo_runs.items()}
            whatifs.append(what_if(phase(r, range(spec.warmup, cut), guests, steps),
                                   phase(r, range(cut, spec.iterations), guests, steps),
                                   spec.microbatches))
            print(f"rep {rep} what-if (measured, new and old model): {whatifs[-1]}", flush=True)
            gated_s = f["gated_s"]
            print(f"rep {rep} with guests: median iteration held {1e3 * f['held_s']:.1f} ms, "
                  f"gated {1e3 * gated_s:.1f} ms (held vs gated {100 * in_run[-1]:.1f} %), fill "
                  f"{100 * fills[-1]:.0f} %; " + "; ".join(
                      f"stage {s}: bubble {f[s]['bubble_s']:.3f} s, {f[s]['steps']:.1f} guest "
                      f"steps' compute inside ({f[s]['steps_ended_inside']} ended inside) = "
                      f"{f[s]['progress_s']:.3f} s solo, guest running "
                      f"{f[s]['guest_running_s']:.3f} s (CPU/running "
                      f"{f[s]['guest_cpu_per_running_s']:.2f}), overlap {f[s]['overlap_s']} s, "
                      f"stops {f[s]['stops']}, handoff median {f[s]['handoff_median_ms']:.3f} ms "
                      f"max {f[s]['handoff_max_ms']:.1f} ms" for s in guests), flush=True)
        losses.append(1.0 - alone_s / gated_s)
        print(f"rep {rep} host loss against the host alone: {100 * losses[-1]:.1f} %", flush=True)
    loss, fill_med = statistics.median(losses), statistics.median(fills)
    loss_in_run = statistics.median(in_run)
    measured = [statistics.median(r[s] for r in ratios) for s in range(spec.stages)]
    formula = one_f_one_b_bubble(spec.stages, spec.microbatches)
    print(f"host throughput loss against the host-alone runs: {[round(x, 3) for x in losses]}, "
          f"median {100 * loss:.1f} %; held vs gated iterations of the runs with guests: "
          f"{[round(x, 3) for x in in_run]}, median {100 * loss_in_run:.1f} %")
    print(f"bubble ratio measured {[round(x, 3) for x in measured]} vs 1F1B formula {formula:.3f}")
    print(f"bubble time turned into guest progress: {[round(x, 3) for x in fills]} "
          f"(median {100 * fill_med:.0f} %); guests identical to solo runs: {identical}; "
          f"no overlap with the stage's compute: {no_overlap}")
    err = {f"{k}_{f}": round(statistics.median(abs(w[f"{k}_error"][f]) for w in whatifs), 3)
           for k in ("new", "old") for f in ("slowdown", "fill", "bubble_s")}
    # the same slowdown seen as the gated iteration's time, T(1 + σ): a relative error of σ
    # itself is ill-conditioned when σ is near 0 (a GPU guest that costs the host ~1 %)
    err |= {f"{k}_iteration": round(statistics.median(
        abs(w[k]["slowdown"] - w["measured"]["slowdown"]) / (1 + w["measured"]["slowdown"])
        for w in whatifs), 4) for k in ("new", "old")}
    print(f"what-if, median relative errors (probe-calibrated model 'new', assumed 'old'): {err}")
    figures = {"host_throughput_loss": round(loss, 4),
               "whatif_error": err,
               "host_throughput_loss_per_rep": [round(x, 4) for x in losses],
               "host_loss_held_vs_gated_in_run": round(loss_in_run, 4),
               "host_loss_held_vs_gated_in_run_per_rep": [round(x, 4) for x in in_run],
               "bubble_fill": round(fill_med, 3), "bubble_fill_per_rep": [round(x, 3) for x in fills],
               "bubble_ratio_measured": [round(x, 3) for x in measured],
               "bubble_ratio_1f1b": round(formula, 3), "guests_identical": identical,
               "gate_overlap_zero": no_overlap, "reps": args.reps, "guest_nice": args.nice,
               "grace_s": args.grace, "guest_sched_idle": not args.no_idle_class,
               "guest_width": args.guest_width, "device": args.device, "mps_percentage": pct,
               "host": {"width": spec.width, "depth": spec.depth, "batch": spec.batch}}
    goal = {"host_throughput_loss": "<= 0.03", "bubble_fill": ">= 0.5",
            "guests_identical": True, "gate_overlap_zero": True}
    met = loss <= 0.03 and fill_med >= 0.5 and identical and no_overlap
    record({"name": "bubble_squeeze", "figures": figures, "goal": goal, "met": met},
           gpu=args.device == "cuda")


if __name__ == "__main__":
    main()
