"""ASHA's stop rules on real learning curves: which one should be the default.

``ASHA(stop_rule="ray")`` (Ray Tune's ``ASHAScheduler``) and ``stop_rule="rank"``
(Li et al.'s top ``floor(n/eta)``, Optuna's ``SuccessiveHalvingPruner``) judge the
same reports differently at small rungs. To compare them without a run's noise,
every configuration of five 64-config samples (nbtune's ASHA with seeds 0-4) of
three workloads is trained for 27 epochs, two processes side by side as nbtune's
two workers, keeping each epoch's validation accuracy and time:

* ``cnn``: ``vs_peers``' CNN on scikit-learn's digits (its search space and loop);
* ``mlp``: a one-hidden-layer MLP on the same digits (epochs of ~20 ms);
* ``linear``: softmax regression on the same digits (a convex model: curves that
  rise slowly and never cross as the networks' do).

The curves are then replayed through nbtune's own :class:`~nbtune.algorithms.ASHA`
on two simulated workers in stopping mode (a trial waits at a rung for its
verdict, as on Dask): trials start in sample order when a worker frees, each epoch
takes the time it took. Per workload and rule, medians over the five samples of:
epochs trained, the run's final best accuracy, and the time until the run's best
is within 0.005 (absolute) of its final best.

The choice: the rule with the fewest epochs (summed over the workloads' medians)
whose median final best is within 0.005 of the best rule's on every workload.
Goal: ASHA's default ``stop_rule`` is that rule. ``--curves FILE`` keeps the
trained curves (JSON) and reuses them. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import heapq
import inspect
import json
import statistics
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


SEEDS = (0, 1, 2, 3, 4)
NEAR = 0.005  # "within 0.005 of": of the final best (time to it), of the best rule (choice)
RULES = ("ray", "rank")
WORKLOADS = ("cnn", "mlp", "linear")


def space(workload: str) -> dict[str, Any]:
    """Each workload's search space (the CNN's is ``vs_peers``')."""
    from nbtune import choice, loguniform, uniform

    if workload == "cnn":
        return vp.nbtune_space()
    common = {"lr": loguniform(1e-3, 0.3), "momentum": uniform(0.5, 0.99),
              "batch_size": choice([16, 32, 64]), "weight_decay": loguniform(1e-6, 1e-2)}
    if workload == "mlp":
        return {**common, "hidden": choice([16, 64, 256])}
    return common


def nbtune_sample(workload: str, seed: int) -> list[dict[str, Any]]:
    """The configurations ``tune(..., seed=seed)``'s ASHA starts, in order."""
    from nbtune.algorithms import ASHA

    algo = ASHA(space(workload), metric="val_acc", mode="max", max_budget=vp.MAX_EPOCHS,
                num_trials=vp.TRIALS, seed=seed)
    return [s.config for g in algo.ask(vp.TRIALS) for s in g.specs]


def make(workload: str, config: dict[str, Any]) -> tuple[Any, Any]:
    if workload == "cnn":
        return vp.make(config)
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if workload == "mlp":
        h = int(config["hidden"])
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, h), nn.ReLU(), nn.Linear(h, 10))
    else:
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"],
                          weight_decay=config["weight_decay"])
    return model, opt


def curve(job: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    workload, config = job
    model, opt = make(workload, config)
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

    algo = ASHA({"x": vp.nbtune_space()["lr"]}, metric="val_acc", mode="max",
                max_budget=vp.MAX_EPOCHS, num_trials=len(curves), seed=0, stop_rule=rule)
    ids = [s.trial_id for g in algo.ask(len(curves)) for s in g.specs]
    heap: list[tuple[float, int, int]] = []
    nxt, epochs, best, now = 0, 0, 0.0, 0.0
    improved: list[tuple[float, float]] = []  # (time, best so far) at each new best

    def start(i: int, t0: float) -> None:
        heapq.heappush(heap, (t0 + curves[i]["time"][0], i, 1))

    for _ in range(min(WORKERS, len(curves))):
        start(nxt, 0.0)
        nxt += 1
    while heap:
        now, i, e = heapq.heappop(heap)
        epochs += 1
        acc = curves[i]["acc"][e - 1]
        if acc > best:
            best = acc
            improved.append((now, best))
        stop = algo.on_report(ids[i], float(e), {"val_acc": acc}) == Decision.STOP
        if not stop and e < vp.MAX_EPOCHS:
            heapq.heappush(heap, (now + curves[i]["time"][e], i, e + 1))
        elif nxt < len(curves):
            start(nxt, now)
            nxt += 1
    near = next(t for t, b in improved if b >= best - NEAR)
    return {"epochs": epochs, "best": best, "near_s": near, "makespan_s": now}


def choose(medians: dict[str, dict[str, dict[str, float]]]) -> str:
    """The rule with the fewest epochs among those within ``NEAR`` of the best on every
    workload (``medians[workload][rule]``)."""
    ok = [r for r in RULES if all(m[r]["best"] >= max(x["best"] for x in m.values()) - NEAR
                                  for m in medians.values())]
    return min(ok, key=lambda r: sum(m[r]["epochs"] for m in medians.values()))


def train_all(workloads: tuple[str, ...]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    jobs = [(w, seed, cfg) for w in workloads for seed in SEEDS
            for cfg in nbtune_sample(w, seed)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(WORKERS) as ex:
        out = list(ex.map(curve, [(w, cfg) for w, _, cfg in jobs], chunksize=4))
    print(f"trained {len(jobs)} configurations x {vp.MAX_EPOCHS} epochs "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    data: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for (w, seed, _), c in zip(jobs, out, strict=True):
        data.setdefault(w, {}).setdefault(str(seed), []).append(c)
    return data


def main() -> None:
    from nbtune.algorithms import ASHA

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--curves", type=Path, default=None,
                    help="JSON file to keep the trained curves in (reused when present)")
    args = ap.parse_args()
    if args.curves is not None and args.curves.exists():
        data = json.loads(args.curves.read_text())
    else:
        vp.data()
        data = train_all(WORKLOADS)
        if args.curves is not None:
            args.curves.write_text(json.dumps(data))
    figures: dict[str, Any] = {}
    medians: dict[str, dict[str, dict[str, float]]] = {}
    for w, samples in data.items():
        runs = {r: [replay(c, r) for c in samples.values()] for r in RULES}
        medians[w] = {r: {k: statistics.median(x[k] for x in rs) for k in rs[0]}
                      for r, rs in runs.items()}
        for r, m in medians[w].items():
            figures[f"{w}_{r}"] = {k: round(v, 4) for k, v in m.items()}
            print(f"{w:>7} {r:>4}: {m['epochs']:6.0f} epochs, best {m['best']:.4f}, "
                  f"within {NEAR} of it at {m['near_s']:6.1f} s, makespan "
                  f"{m['makespan_s']:6.1f} s (medians of {len(samples)} samples)")
    chosen = choose(medians)
    default = inspect.signature(ASHA.__init__).parameters["stop_rule"].default
    figures.update(chosen=chosen, default=default, default_is_chosen=chosen == default,
                   samples=len(SEEDS))
    print(f"the rule with the fewest epochs within {NEAR} of the best: {chosen!r} "
          f"(ASHA's default: {default!r})")
    goal = {"default_is_chosen": True}  # "within NEAR of the best rule", NEAR = 0.005
    record({"name": "asha_rules", "figures": figures, "goal": goal,
            "met": chosen == default})


if __name__ == "__main__":
    main()
