"""Chaos: many short real trials on a LocalCluster while a worker is SIGKILLed every few seconds.

Each kill takes a worker process (and its trial processes) down mid-trial;
the nanny starts it again under the same name. nbtune must requeue the
trials it held (a lost worker is not the trial's fault), restart them from
their latest checkpoint, and lose nothing already reported. The same
experiment is run once without kills (same seed) for the extra wall time.

Figures: trials finished, results lost (reported (trial, step) pairs missing
from the final record; goal 0), restarts from a checkpoint vs from scratch,
worker kills, wall time with and without chaos. ``python benchmarks/chaos.py``
runs the full version (200 trials, a kill every 10 s); tests/reliability/
test_chaos.py runs a bounded one in CI. Ends with one JSON line.
"""

from __future__ import annotations

try:  # as a script, benchmarks/ is on sys.path; tests import benchmarks.chaos
    from _results import record
except ImportError:
    from benchmarks._results import record

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/runtimes/dask/", "nbtune/engine/", "nbtune/core/events.py", "nbtune/core/trial.py",
)
WALL_CLOCK = False  # its goal figures do not depend on the machine or its load


def train_chaos(config: dict[str, Any], trial: Any) -> None:
    """Short steps, a checkpoint after each: what a killed trial can restart from."""
    state = trial.restore() or {"steps": []}
    for step in trial.steps():
        time.sleep(config["step_time"])
        state["steps"].append(step)
        trial.report(step=step, loss=config["x"] / step, restored=trial.restore_step or 0.0)
        trial.checkpoint(state)


class Killer(threading.Thread):
    """SIGKILLs a worker running a trial every ``every`` seconds (the nanny restarts it),
    preferring one whose trial has written a checkpoint.

    The next kill waits until the killed worker is back in the runtime's
    inventory (``n_workers`` of them): on a loaded machine a restart can take
    longer than the kill interval, and killing faster than workers come back
    measures the machine, not nbtune.
    """

    def __init__(self, client: Any, runtime: Any, engine: Any, every: float, seed: int,
                 n_workers: int) -> None:
        super().__init__(name="chaos-killer", daemon=True)
        self.client, self.runtime, self.engine = client, runtime, engine
        self.every, self.rng, self.n_workers = every, random.Random(seed), n_workers
        self.kills = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every):
            inv = self.runtime.inventory
            while len(inv.workers) < self.n_workers and not self.stop.wait(0.1):
                pass  # the last victim is not back yet
            running = list(self.engine.running.items())
            try:  # trials that have written a checkpoint (the driver thread adds to it)
                saved = set(self.runtime.checkpoints)
            except RuntimeError:
                saved = set()
            busy = sorted({inv.slots[g].worker for _, p in running for g, _ in p
                           if g in inv.slots})
            ready = sorted({inv.slots[g].worker for t, p in running if t in saved
                            for g, _ in p if g in inv.slots})
            if not busy:
                continue
            # a worker whose trial can restart from a checkpoint, where there is one: the
            # recovery path under test; a trial killed before its first checkpoint only
            # starts again, and a run whose kills all came that early showed nothing
            victim = self.rng.choice(ready or busy)
            try:
                pid = self.client.run(os.getpid, workers=[victim])[victim]
                os.kill(pid, signal.SIGKILL)
                self.kills += 1
            except Exception:  # the worker went on its own, or is restarting
                continue


def chaos_run(n_trials: int, kill_every: float | None, *, steps: int = 4,
              step_time: float = 0.25, n_workers: int = 2, seed: int = 0,
              timeout: float = 600.0) -> dict[str, Any]:
    """One experiment on a fresh LocalCluster, with a worker killed every ``kill_every`` s."""
    import distributed

    import nbtune
    from nbtune.core import events as ev
    from nbtune.core.trial import TrialState
    from nbtune.runtimes.dask import DaskRuntime

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = distributed.LocalCluster(
        n_workers=n_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None, resources={"GPU": 1}, scheduler_kwargs={"dashboard_address": None})
    client = distributed.Client(cluster, set_as_default=False)
    lost_events: list[ev.TrialFailed] = []
    killer = None
    try:
        with tempfile.TemporaryDirectory() as ckpt:
            rt = DaskRuntime(client, checkpoint_dir=ckpt, warm_processes=1, preload=(),
                             sample_interval=1.0)
            space = {"x": nbtune.uniform(0.1, 1.0), "step_time": nbtune.choice([step_time])}
            t0 = time.monotonic()
            exp = nbtune.tune(train_chaos, space, algorithm="random", metric="loss",
                              max_budget=steps, num_trials=n_trials, seed=seed, runtime=rt)
            exp.engine.subscribe(lambda events, _c: lost_events.extend(
                e for e in events if isinstance(e, ev.TrialFailed) and e.worker_lost))
            if kill_every:
                killer = Killer(client, rt, exp.engine, kill_every, seed, n_workers)
                killer.start()
            try:
                finished = rt.wait(timeout)
            finally:
                if killer is not None:
                    killer.stop.set()
                rt.close()
            wall = time.monotonic() - t0
    finally:
        client.close()
        cluster.close()
    trials = exp.engine.trials.values()
    recorded = {(t.trial_id, b) for t in trials for _, b, _ in t.results}
    lost = n_trials * steps - len(recorded)
    from_ckpt = sum(len({m["restored"] for _, _, m in t.results if m.get("restored")})
                    for t in trials)
    return {
        "trials": n_trials, "finished": sum(t.state is TrialState.COMPLETED for t in trials),
        "results_lost": lost, "worker_kills": killer.kills if killer else 0,
        "trials_requeued": len(lost_events), "restarts_from_checkpoint": from_ckpt,
        "restarts_from_scratch": max(len(lost_events) - from_ckpt, 0),
        "trial_failures": sum(t.failures for t in trials), "wall_s": round(wall, 2),
        "completed_in_time": bool(finished),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--kill-every", type=float, default=10.0)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--step-time", type=float, default=0.25)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    kw = dict(steps=args.steps, step_time=args.step_time, n_workers=args.workers)
    calm = chaos_run(args.trials, None, **kw)
    print("without kills:", calm)
    chaos = chaos_run(args.trials, args.kill_every, **kw)
    print("with kills:   ", chaos)
    figures = {**chaos, "calm_wall_s": calm["wall_s"],
               "extra_wall_pct": round(100 * (chaos["wall_s"] / calm["wall_s"] - 1), 1)}
    goal = {"finished": args.trials, "results_lost": 0, "trial_failures": 0}
    met = (chaos["finished"] == args.trials and chaos["results_lost"] == 0
           and chaos["trial_failures"] == 0 and chaos["worker_kills"] > 0)
    record({"name": "chaos", "figures": figures, "goal": goal, "met": met})


if __name__ == "__main__":
    main()
