"""ASHA's two stop rules on real learning curves: epochs trained and best accuracy.

``ASHA(stop_rule="ray")`` (the default, Ray Tune's ``ASHAScheduler``) and
``stop_rule="rank"`` (Li et al.'s top ``floor(n/eta)``, Optuna's
``SuccessiveHalvingPruner``) judge the same reports differently at small rungs.
To compare them without a run's noise, every configuration of three 64-config
samples of ``vs_peers``' search space (nbtune's ASHA with seeds 0 and 1, and
Optuna's ``RandomSampler(seed=0)`` when Optuna is installed) is trained for 27
epochs with ``vs_peers``' CNN loop (two processes side by side, as nbtune's two
workers), keeping each epoch's validation accuracy and time. The curves are then
replayed through nbtune's own :class:`~nbtune.algorithms.ASHA` on two simulated
workers in stopping mode (a trial waits at a rung for its verdict, as on Dask):
trials start in sample order when a worker frees, each epoch takes the time it
took. Printed per sample and rule: epochs trained, best accuracy reported, and
the replayed makespan.

Goal (the claim ``docs/porting.rst`` makes): on every sample, ``rank`` trains
at most 80 % of ``ray``'s epochs, and its best accuracy is within 0.5 % of
``ray``'s. ``--curves FILE`` keeps the trained curves (JSON) and reuses them.
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from _results import record  # benchmarks/_results.py: notes the load at start

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import vs_peers as vp  # noqa: E402

WORKERS = 2


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/algorithms/asha.py", "nbtune/algorithms/algorithm_protocol.py", "nbtune/algorithms/_common.py",
    "nbtune/core/trial.py", "benchmarks/vs_peers.py",
)
WALL_CLOCK = False  # its goal figures do not depend on the machine or its load


def nbtune_sample(seed: int) -> list[dict[str, Any]]:
    """The configurations ``tune(..., seed=seed)``'s ASHA starts, in order."""
    from nbtune.algorithms import ASHA

    algo = ASHA(vp.nbtune_space(), metric="val_acc", mode="max", max_budget=vp.MAX_EPOCHS,
                num_trials=vp.TRIALS, seed=seed)
    return [s.config for g in algo.ask(vp.TRIALS) for s in g.specs]


def optuna_sample(seed: int) -> list[dict[str, Any]]:
    """``vs_peers``' Optuna objective's suggestions under ``RandomSampler(seed)``, in order."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=seed))
    out = []
    for _ in range(vp.TRIALS):
        t = study.ask()
        out.append(vp.suggest(t))
        study.tell(t, 0.0)
    return out


def curve(config: dict[str, Any]) -> dict[str, Any]:
    model, opt = vp.make(config)
    acc, secs = [], []
    for e in range(1, vp.MAX_EPOCHS + 1):
        t = time.perf_counter()
        acc.append(vp.epoch(model, opt, config, e))
        secs.append(time.perf_counter() - t)
    return {"config": config, "acc": acc, "time": secs}


def replay(curves: list[dict[str, Any]], rule: str) -> dict[str, float]:
    """Stopping-mode ASHA on ``WORKERS`` simulated workers over the trained curves."""
    from nbtune.algorithms import ASHA
    from nbtune.core.trial import Decision

    algo = ASHA(vp.nbtune_space(), metric="val_acc", mode="max", max_budget=vp.MAX_EPOCHS,
                num_trials=len(curves), seed=0, stop_rule=rule)
    ids = [s.trial_id for g in algo.ask(len(curves)) for s in g.specs]
    heap: list[tuple[float, int, int]] = []
    nxt, epochs, best, now = 0, 0, 0.0, 0.0

    def start(i: int, t0: float) -> None:
        heapq.heappush(heap, (t0 + curves[i]["time"][0], i, 1))

    for _ in range(min(WORKERS, len(curves))):
        start(nxt, 0.0)
        nxt += 1
    while heap:
        now, i, e = heapq.heappop(heap)
        epochs += 1
        acc = curves[i]["acc"][e - 1]
        best = max(best, acc)
        stop = algo.on_report(ids[i], float(e), {"val_acc": acc}) == Decision.STOP
        if not stop and e < vp.MAX_EPOCHS:
            heapq.heappush(heap, (now + curves[i]["time"][e], i, e + 1))
        elif nxt < len(curves):
            start(nxt, now)
            nxt += 1
    return {"epochs": epochs, "best": best, "makespan_s": now}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--curves", type=Path, default=None,
                    help="JSON file to keep the trained curves in (reused when present)")
    args = ap.parse_args()
    if args.curves is not None and args.curves.exists():
        data = json.loads(args.curves.read_text())
    else:
        samples = {"nbtune_seed0": nbtune_sample(0), "nbtune_seed1": nbtune_sample(1)}
        try:
            samples["optuna_seed0"] = optuna_sample(0)
        except ImportError:
            print("optuna not installed (the bench extra): its sample is left out")
        data = {}
        t0 = time.perf_counter()
        with ProcessPoolExecutor(WORKERS) as ex:
            for name, cfgs in samples.items():
                data[name] = list(ex.map(curve, cfgs))
                print(f"{name}: trained {len(cfgs)} x {vp.MAX_EPOCHS} epochs "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
        if args.curves is not None:
            args.curves.write_text(json.dumps(data))
    figures: dict[str, Any] = {}
    met = True
    for name, curves in data.items():
        res = {rule: replay(curves, rule) for rule in ("ray", "rank")}
        ray, rank = res["ray"], res["rank"]
        saved = 1.0 - rank["epochs"] / ray["epochs"]
        gap = (ray["best"] - rank["best"]) / ray["best"]
        figures[name] = {**{f"{r}_{k}": v for r, x in res.items() for k, v in x.items()},
                         "epochs_saved": saved, "best_gap": gap}
        met = met and saved >= 0.2 and gap <= 0.005
        for rule, x in res.items():
            print(f"{name:>13} {rule:>4}: {x['epochs']:4d} epochs, best {x['best']:.4f}, "
                  f"makespan {x['makespan_s']:6.1f} s")
        print(f"{name:>13}: rank saves {saved:.0%} of the epochs, best accuracy "
              f"{gap:.2%} below ray's")
    goal = {"epochs_saved_min": 0.2, "best_gap_max": 0.005}
    record({"name": "asha_rules", "figures": figures, "goal": goal, "met": bool(met)})


if __name__ == "__main__":
    main()
