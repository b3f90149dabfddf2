"""nbtune against Optuna and Ray Tune on one real training function, side by side.

The workload: a small CNN (two 3x3 conv layers, max-pooling, a linear head)
on scikit-learn's bundled handwritten digits (1,797 8x8 images, 80/20 split),
SGD with momentum; each epoch is ``PASSES`` passes over the training split, the metric
the validation accuracy. Search space: learning rate, momentum, channels,
batch size, weight decay. ASHA eta = 3 over 1-27 epochs, 64 trials, in every
system. The training loop is written once per system as its users write it:
no checkpoint, train from epoch 1, report every epoch. Every trial trains
with one torch thread (Ray's and nbtune's default for a 1-CPU trial; with
torch's default of 2 threads an epoch took 40x longer on the loaded 2-core
machine).

* nbtune: ``nbtune.tune(train, space, metric=..., mode="max", max_budget=27,
  num_trials=64)``: defaults only (runtime "auto": a local Dask cluster sized
  to the machine; ASHA in stopping mode). *cold*: a fresh process, cluster and
  warm-process start-up included; *warm*: a second experiment in the same
  process (as in a notebook), with the same seed (the same configurations).
* Optuna: ``SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)``,
  ``n_jobs=1`` and ``n_jobs=2``, in-process.
* Ray Tune: ``ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3)``,
  ``reuse_actors=True``, ``ray.init(num_cpus=2)`` (its start-up included,
  like nbtune's cold figure; ``fit`` alone is printed too).

``nbtune_rank`` (not in the goals; ``--skip nbtune_rank`` leaves it out) is the same
nbtune call with ``stop_rule="rank"``: ASHA judging as Optuna's pruner does, so the
two differ in resources, not in the rule (figures ``cold_rank``, ``warm_rank``).

Each round first prices an epoch of every shape in a fresh process (``epoch_costs``):
with it, ``two_core_bound`` reports each system's *work* (one core's seconds for the
epochs it chose) and the *2-core bound* (half of it: no runtime on two cores can be
faster with those epochs), so a ratio missed by the stop rule's choice of epochs
shows apart from one missed by the runtime (``efficiency``, ``bound_ratios``).

Each system runs in its own fresh process, in alternating order, for
``--rounds`` rounds (median wall time reported). Goals: cold >= 1.6x
faster than Optuna n_jobs=1 and >= 1.4x faster than Ray Tune; warm >= 1.8x
faster than Optuna n_jobs=1; best accuracy within 0.5 % of the best peer's;
0 trials in error. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _results import record  # benchmarks/_results.py: notes the load at start

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from two_core_bound import bounds, priced, work  # noqa: E402

MAX_EPOCHS = 27
#: passes over the training split per reported epoch, to size the job (the goal puts
#: Optuna ``n_jobs=1`` at 20-40 s; 3 passes take well over that, see RESULTS.md, vs_peers)
PASSES = 2
TRIALS = 64
ETA = 3


# ------------------------------------------------------------ the workload
# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = (
    "nbtune/runtimes/dask/", "nbtune/engine/", "nbtune/algorithms/asha.py",
    "nbtune/allocators/", "nbtune/api.py", "nbtune/build/", "benchmarks/two_core_bound.py",
)
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine
# the figures summary.py shows (paths into figures)
KEY_FIGURES = ("ratios/cold_vs_optuna1", "ratios/cold_vs_ray", "ratios/warm_vs_optuna1", "acc_gap")


def device() -> str:
    """Where the workload trains: ``cpu`` here; ``gpu_packing`` sets ``NBTUNE_BENCH_DEVICE``
    to ``cuda`` (read in each process, so trial processes inherit it from their worker)."""
    return os.environ.get("NBTUNE_BENCH_DEVICE", "cpu")


def data() -> tuple[Any, Any, Any, Any]:
    """Digits as tensors on :func:`device`, cached per process (a trial process reuses it)."""
    import types

    cache = sys.modules.setdefault("_vs_peers_cache", types.ModuleType("_vs_peers_cache"))
    if getattr(cache, "device", None) != device():
        cache.device = device()
        import torch
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        x, y = load_digits(return_X_y=True)
        xtr, xva, ytr, yva = train_test_split(x / 16.0, y, test_size=0.2, random_state=0,
                                              stratify=y)
        t = lambda a, dt: torch.tensor(a, dtype=dt, device=device())  # noqa: E731
        cache.xy = (t(xtr, torch.float32).view(-1, 1, 8, 8), t(ytr, torch.long),
                    t(xva, torch.float32).view(-1, 1, 8, 8), t(yva, torch.long))
    return cache.xy


def make(config: dict[str, Any]) -> tuple[Any, Any]:
    import torch
    from torch import nn

    torch.set_num_threads(1)  # one thread per trial in every system (Ray's and nbtune's default)
    torch.manual_seed(0)
    c = int(config["channels"])
    model = nn.Sequential(
        nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * c * 4, 10),
    ).to(device())
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"],
                          weight_decay=config["weight_decay"])
    return model, opt


def epoch(model: Any, opt: Any, config: dict[str, Any], seed: int) -> float:
    """One pass over the training split; the validation accuracy after it."""
    import torch
    import torch.nn.functional as F

    xtr, ytr, xva, yva = data()
    g = torch.Generator().manual_seed(seed)
    bs = int(config["batch_size"])
    model.train()
    for _ in range(PASSES):
        perm = torch.randperm(len(xtr), generator=g).to(xtr.device)  # the CPU's order anywhere
        for i in range(0, len(xtr), bs):
            idx = perm[i:i + bs]
            opt.zero_grad()
            F.cross_entropy(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        return float((model(xva).argmax(1) == yva).float().mean())


# ------------------------------------------------------------ the price of an epoch
def epoch_costs(reps: int = 5) -> dict[str, float]:
    """In-process seconds per epoch of each ``"channels,batch_size"`` (one thread, as Optuna
    ``n_jobs=1`` trains): the median of ``reps`` passes over all nine shapes in turn, after
    a warm-up epoch each, so the machine's drift during the pricing hits every shape alike.

    With :func:`two_core_bound.work` they price the epochs a system chose as one core
    would train them back to back (``work_s``; see :mod:`two_core_bound`).
    """
    data()
    shapes = {}
    for c in (4, 8, 16):
        for b in (16, 32, 64):
            cfg = {"channels": c, "batch_size": b, "lr": 0.01, "momentum": 0.9,
                   "weight_decay": 1e-4}
            model, opt = make(cfg)
            epoch(model, opt, cfg, 0)
            shapes[f"{c},{b}"] = (model, opt, cfg, [])
    for e in range(1, reps + 1):
        for model, opt, cfg, times in shapes.values():
            t = time.perf_counter()
            epoch(model, opt, cfg, e)
            times.append(time.perf_counter() - t)
    return {k: statistics.median(v[3]) for k, v in shapes.items()}


# ------------------------------------------------------------ the systems
def train_nbtune(config, trial):
    """nbtune (and Optuna's) loop: report(value, step), stop when told."""
    model, opt = make(config)
    for e in range(1, MAX_EPOCHS + 1):
        acc = epoch(model, opt, config, e)
        if trial.report(e, val_acc=acc):
            return


def nbtune_space() -> dict[str, Any]:
    """The search space, as nbtune takes it (:func:`suggest` is Optuna's side of it)."""
    from nbtune import choice, loguniform, uniform

    return {"lr": loguniform(1e-3, 0.3), "momentum": uniform(0.5, 0.99),
            "channels": choice([4, 8, 16]), "batch_size": choice([16, 32, 64]),
            "weight_decay": loguniform(1e-6, 1e-2)}


def suggest(trial: Any, channels: tuple[int, ...] = (4, 8, 16)) -> dict[str, Any]:
    """The search space through an Optuna trial's ``suggest_*`` calls (their order fixes the
    configurations a seeded sampler draws)."""
    return {"lr": trial.suggest_float("lr", 1e-3, 0.3, log=True),
            "momentum": trial.suggest_float("momentum", 0.5, 0.99),
            "channels": trial.suggest_categorical("channels", list(channels)),
            "batch_size": trial.suggest_categorical("batch_size", [16, 32, 64]),
            "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-2, log=True)}


def run_nbtune(**options: Any) -> dict[str, Any]:
    import nbtune

    space = nbtune_space()
    out: dict[str, Any] = {}
    for kind in ("cold", "warm"):
        t0 = time.perf_counter()
        exp = nbtune.tune(train_nbtune, space, metric="val_acc", mode="max",
                          max_budget=MAX_EPOCHS, num_trials=TRIALS, seed=0, **options)
        exp.wait()
        wall = time.perf_counter() - t0
        trials = list(exp.engine.trials.values())
        out[kind] = {
            "wall": wall, "best": max((t.best or 0.0) for t in trials),
            "epochs": sum(t.budget_used + t.recomputed for t in trials),
            "errors": sum(t.state.value == "error" for t in trials), "trials": len(trials),
            "work": work([(t.config, t.budget_used + t.recomputed) for t in trials]),
        }
    exp.runtime.close()
    return out


def run_optuna(n_jobs: int, *, channels: tuple[int, ...] = (4, 8, 16), trials: int = TRIALS,
               max_epochs: int = MAX_EPOCHS, seed: int = 0) -> dict[str, Any]:
    """Optuna on this workload (``gpu_packing`` runs it on a GPU with other sizes)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    epochs = [0]
    trained: list[tuple[dict[str, Any], int]] = []

    def objective(trial):
        config = suggest(trial, channels)
        model, opt = make(config)
        acc = 0.0
        trained.append((config, 0))
        for e in range(1, max_epochs + 1):
            acc = epoch(model, opt, config, e)
            epochs[0] += 1
            trained[-1] = (config, e)
            trial.report(acc, e)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return acc

    data()
    t0 = time.perf_counter()
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=ETA))
    study.optimize(objective, n_trials=trials, n_jobs=n_jobs)
    wall = time.perf_counter() - t0
    best = max(max(t.intermediate_values.values(), default=0.0) for t in study.trials)
    errors = sum(t.state == optuna.trial.TrialState.FAIL for t in study.trials)
    return {"wall": wall, "best": best, "epochs": epochs[0], "errors": errors,
            "trials": len(study.trials), "work": work(trained)}


def train_ray(config):
    from ray import tune

    model, opt = make(config)
    for e in range(1, MAX_EPOCHS + 1):
        tune.report({"val_acc": epoch(model, opt, config, e)})


def run_ray() -> dict[str, Any]:
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    t1 = time.perf_counter()
    space = {"lr": tune.loguniform(1e-3, 0.3), "momentum": tune.uniform(0.5, 0.99),
             "channels": tune.choice([4, 8, 16]), "batch_size": tune.choice([16, 32, 64]),
             "weight_decay": tune.loguniform(1e-6, 1e-2)}
    tuner = tune.Tuner(
        tune.with_resources(train_ray, {"cpu": 1}), param_space=space,
        tune_config=tune.TuneConfig(
            metric="val_acc", mode="max", num_samples=TRIALS, reuse_actors=True,
            scheduler=ASHAScheduler(max_t=MAX_EPOCHS, grace_period=1, reduction_factor=ETA)),
        run_config=tune.RunConfig(verbose=0, storage_path=f"/tmp/vs-peers-ray-{os.getpid()}"),
    )
    grid = tuner.fit()
    wall = time.perf_counter() - t0
    df = grid.get_dataframe()
    out = {"wall": wall, "fit": time.perf_counter() - t1,
           "best": float(df["val_acc"].max()) if "val_acc" in df else 0.0,
           "epochs": int(df["training_iteration"].sum()) if "training_iteration" in df else 0,
           "errors": len(grid.errors), "trials": len(df),
           "work": work([({"channels": r["config/channels"], "batch_size": r["config/batch_size"]},
                          r["training_iteration"]) for _, r in df.iterrows()])}
    ray.shutdown()
    return out


SYSTEMS = ["nbtune", "optuna1", "optuna2", "ray", "nbtune_rank"]


def one(system: str) -> dict[str, Any]:
    if system == "costs":
        return epoch_costs()
    if system == "nbtune":
        return run_nbtune()
    if system == "nbtune_rank":
        return {f"{k}_rank": v for k, v in run_nbtune(stop_rule="rank").items()}
    if system.startswith("optuna"):
        return {system: run_optuna(int(system[-1]))}
    return {"ray": run_ray()}


def spawn(system: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, __file__, "--one", system], capture_output=True,
                       text=True, env=env, timeout=1800)
    line = next((ln for ln in reversed(p.stdout.splitlines()) if ln.startswith("{")), None)
    if p.returncode != 0 or line is None:
        print(f"  {system} failed (rc {p.returncode}): {p.stderr[-2000:]}", flush=True)
        return {}
    return json.loads(line)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", choices=[*SYSTEMS, "costs"])
    ap.add_argument("--skip", nargs="*", default=[], choices=SYSTEMS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    runs: dict[str, list[dict[str, Any]]] = {}
    systems = [s for s in SYSTEMS if s not in args.skip]
    load = os.getloadavg()[0]
    for r in range(args.rounds):
        order = systems if r % 2 == 0 else systems[::-1]  # alternate: drift hits all alike
        costs = spawn("costs")  # this round's prices of an epoch, in a fresh process
        print(f"round {r + 1} epoch costs (ms): "
              + ", ".join(f"{k} {v * 1e3:.0f}" for k, v in costs.items()), flush=True)
        for s in order:
            for name, res in spawn(s).items():
                res["work_s"] = priced(res.get("work", {}), costs) if costs else 0.0
                runs.setdefault(name, []).append(res)
                print(f"round {r + 1} {name:>8}: {res['wall']:6.1f} s, best {res['best']:.4f}, "
                      f"{res['epochs']:5.0f} epochs ({res['work_s']:5.1f} s of one core's "
                      f"work), {res['errors']} errors", flush=True)
    med = {k: {f: statistics.median(x[f] for x in v)
               for f in ("wall", "best", "epochs", "work_s")}
           | {"errors": sum(x["errors"] for x in v), "rounds": len(v)} for k, v in runs.items()}
    print(f"load average before: {load:.1f}, after: {os.getloadavg()[0]:.1f} (2 cores)")
    for k, v in med.items():
        print(f"{k:>8}: median {v['wall']:6.1f} s, best {v['best']:.4f}, "
              f"{v['epochs']:.0f} epochs, {v['errors']} errors in {v['rounds']} rounds")
    wall = {k: v["wall"] for k, v in med.items()}
    figures: dict[str, Any] = {"median_wall_s": wall, "load_avg": load,
                               "best_acc": {k: v["best"] for k, v in med.items()},
                               "epochs": {k: v["epochs"] for k, v in med.items()},
                               "errors": {k: v["errors"] for k, v in med.items()}}
    goal = {"cold_vs_optuna1": 1.6, "cold_vs_ray": 1.4, "warm_vs_optuna1": 1.8,
            "acc_gap": 0.005, "errors": 0}
    ratios = {}
    if "cold" in wall and "optuna1" in wall:
        ratios["cold_vs_optuna1"] = wall["optuna1"] / wall["cold"]
        ratios["warm_vs_optuna1"] = wall["optuna1"] / wall["warm"]
    if "cold" in wall and "ray" in wall:
        ratios["cold_vs_ray"] = wall["ray"] / wall["cold"]
    extra = {}  # nbtune with Optuna's rule: figures only, not in ``met``
    if "cold_rank" in wall and "optuna1" in wall:
        extra["cold_rank_vs_optuna1"] = wall["optuna1"] / wall["cold_rank"]
        extra["warm_rank_vs_optuna1"] = wall["optuna1"] / wall["warm_rank"]
    if "cold_rank" in wall and "ray" in wall:
        extra["cold_rank_vs_ray"] = wall["ray"] / wall["cold_rank"]
    peers = [med[k]["best"] for k in ("optuna1", "optuna2", "ray") if k in med]
    nb = [med[k]["best"] for k in ("cold", "warm") if k in med]
    gap = (max(peers) - min(nb)) if peers and nb else None
    figures.update(ratios=ratios, acc_gap=gap, rank_ratios=extra, **bounds(med))
    met = (all(k in ratios and ratios[k] >= goal[k] for k in
               ("cold_vs_optuna1", "cold_vs_ray", "warm_vs_optuna1"))
           and gap is not None and gap <= goal["acc_gap"]
           and sum(med[k]["errors"] for k in ("cold", "warm") if k in med) == 0)
    print("ratios:", {k: round(v, 2) for k, v in ratios.items()}, "accuracy gap:", gap)
    if extra:
        print("with stop_rule='rank':", {k: round(v, 2) for k, v in extra.items()})
    record({"name": "vs_peers", "figures": figures, "goal": goal, "met": bool(met)})


if __name__ == "__main__":
    main()
