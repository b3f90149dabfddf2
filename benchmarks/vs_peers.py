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

Every system tries the same 64 configurations in the same order
(:func:`configurations`, drawn once from the space with a fixed seed): nbtune through
``points_to_evaluate``, Optuna through ``study.enqueue_trial``, Ray Tune through its
``BasicVariantGenerator(points_to_evaluate=...)``; each run checks that it did
(``same_configs``), so no seed decides a ratio.

* nbtune: ``nbtune.tune(train, space, metric=..., mode="max", max_budget=27,
  num_trials=64, points_to_evaluate=...)``: defaults otherwise (runtime "auto": a local
  Dask cluster sized to the machine; ASHA in stopping mode). *cold*: a fresh process,
  cluster and warm-process start-up included; *warm*: a second experiment in the same
  process (as in a notebook).
* Optuna: ``SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)``,
  ``n_jobs=1`` and ``n_jobs=2``, in-process.
* Ray Tune: ``ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3)``,
  ``reuse_actors=True``, ``ray.init(num_cpus=2)`` (its start-up included,
  like nbtune's cold figure; ``fit`` alone is printed too).

Each round first prices an epoch of every shape in a fresh process (``epoch_costs``):
with it, ``two_core_bound`` reports each system's *work* (one core's seconds for the
epochs it chose) and the *2-core bound* (half of it: no runtime on two cores can be
faster with those epochs), so a ratio missed by the stop rule's choice of epochs
shows apart from one missed by the runtime (``efficiency``, ``bound_ratios``). Then two
fresh processes price them side by side (:func:`pair_speedup`): the parallel speed-up two
bare processes reach now, below 2; the work over it is the *two-process bound*
(``pair_bound_s``, ``pair_efficiency``), the bound the overhead goal is measured against.

Every system's process has imported torch and loaded the data set before its clock starts
(:func:`data`), as a notebook that tunes has: nbtune's kernel slot trains in that process
and finds the data there, as Optuna's trials do; worker processes load their own.

*Time to accuracy*: every loop stamps the wall clock at each report, so each system has
its best-so-far accuracy against the seconds since it was started (``curves``: the steps
of the round with the median wall time; ``tta_svg.py`` draws them). ``tta_s``: per
system, the median over rounds of the time until its best-so-far came within 0.005 of
the best peer's final accuracy in that round.

Each system runs in its own fresh process, in alternating order, for
``--rounds`` rounds (median wall time reported). Goals: cold >= 1.2x faster than
Optuna n_jobs=1 and >= 1.6x faster than Ray Tune; warm >= 1.3x faster than Optuna
n_jobs=1 and >= 1.15x faster than Optuna n_jobs=2; best accuracy within 0.5 % of the
best peer's; 0 trials in error; cold time to accuracy <= 0.7x Optuna n_jobs=1's; the
warm run at >= 0.85 of the two-process bound. Ends with one JSON line.
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
KEY_FIGURES = ("ratios/cold_vs_optuna1", "ratios/cold_vs_ray", "ratios/warm_vs_optuna1",
               "ratios/warm_vs_optuna2", "acc_gap", "tta_ratio_cold_vs_optuna1",
               "pair_efficiency/warm")
#: how close to the best peer's final accuracy "reached" means, for time to accuracy
TTA_WITHIN = 0.005


#: the workload every process of a run trains (``NBTUNE_BENCH_WORKLOAD``, inherited by trial
#: processes): ``cnn`` (this module's CNN) or ``mlp`` (``vs_peers_mlp``: asha_rules' one-hidden-
#: layer MLP, one pass per epoch, ~20-50 ms, its width from ``channels``: the space stays)
MLP_HIDDEN = {4: 16, 8: 64, 16: 256}


def workload() -> str:
    return os.environ.get("NBTUNE_BENCH_WORKLOAD", "cnn")


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
    if workload() == "mlp":
        h = MLP_HIDDEN[c]
        model = nn.Sequential(nn.Flatten(), nn.Linear(64, h), nn.ReLU(), nn.Linear(h, 10))
    else:
        model = nn.Sequential(
            nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(2 * c * 4, 10),
        )
    model = model.to(device())
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
    for _ in range(1 if workload() == "mlp" else PASSES):  # the MLP: epochs of ~20-50 ms
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
        if trial.report(e, val_acc=acc, wall=time.time()):  # wall: for the time to accuracy
            return


def nbtune_space() -> dict[str, Any]:
    """The search space, as nbtune takes it (:func:`suggest` is Optuna's side of it)."""
    from nbtune import choice, loguniform, uniform

    return {"lr": loguniform(1e-3, 0.3), "momentum": uniform(0.5, 0.99),
            "channels": choice([4, 8, 16]), "batch_size": choice([16, 32, 64]),
            "weight_decay": loguniform(1e-6, 1e-2)}


def configurations(n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """The configurations every system tries, in this order: ``n`` (:data:`TRIALS`) draws
    from the space."""
    import numpy as np

    from nbtune.core.space import sample_config

    n = TRIALS if n is None else n
    rng = np.random.default_rng(seed)
    space = nbtune_space()
    return [{k: (int(v) if k in ("channels", "batch_size") else float(v))
             for k, v in sample_config(space, rng).items()} for _ in range(n)]


def same_order(tried: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> bool:
    """Did a system try ``wanted`` in that order (values equal to 1e-12)?"""
    return len(tried) == len(wanted) and all(
        set(a) == set(b) and all(abs(float(a[k]) - float(b[k])) <= 1e-12 * max(1.0, abs(b[k]))
                                 for k in b) for a, b in zip(tried, wanted, strict=True))


def curve(stamps: list[tuple[float, float]], t0: float) -> list[list[float]]:
    """``[seconds since t0, best so far]`` at each report that raised the best."""
    out: list[list[float]] = []
    best = float("-inf")
    for t, acc in sorted(stamps):
        if acc > best:
            best = acc
            out.append([round(t - t0, 3), acc])
    return out


def reached(steps: list[list[float]], target: float) -> float:
    """Seconds until a curve's best so far reached ``target`` (inf: never)."""
    return next((t for t, best in steps if best >= target), float("inf"))


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

    # `import nbtune` is lazy: resolving tune() imports what Optuna's and Ray's imports do,
    # before the clock as theirs are (tune() still opens its store in the clock)
    _ = nbtune.tune
    space = nbtune_space()
    configs = configurations()
    data()  # torch imported, the data loaded in this process before the clock starts, as Optuna's
    out: dict[str, Any] = {}
    for kind in ("cold", "warm"):
        t0, s0 = time.perf_counter(), time.time()
        exp = nbtune.tune(train_nbtune, space, metric="val_acc", mode="max",
                          max_budget=MAX_EPOCHS, num_trials=TRIALS, seed=0,
                          points_to_evaluate=configs, **options)
        exp.wait()
        wall = time.perf_counter() - t0
        trials = sorted(exp.engine.trials.values(), key=lambda t: t.trial_id)
        stamps = [(m["wall"], m["val_acc"]) for t in trials for _, _, m in t.results
                  if "wall" in m and "val_acc" in m]
        out[kind] = {
            "wall": wall, "best": max((t.best or 0.0) for t in trials),
            "epochs": sum(t.budget_used + t.recomputed for t in trials),
            "errors": sum(t.state.value == "error" for t in trials), "trials": len(trials),
            "work": work([(t.config, t.budget_used + t.recomputed) for t in trials]),
            "curve": curve(stamps, s0),
            "same_configs": same_order([dict(t.config) for t in trials], configs),
        }
    exp.runtime.close()
    return out


def run_optuna(n_jobs: int, *, channels: tuple[int, ...] = (4, 8, 16), trials: int = TRIALS,
               max_epochs: int = MAX_EPOCHS, seed: int = 0,
               given: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Optuna on this workload, trying :func:`configurations` first (``gpu_packing`` runs it
    on a GPU with other sizes and passes ``given=[]``: its sampler's own draws)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    epochs = [0]
    trained: list[tuple[dict[str, Any], int]] = []
    stamps: list[tuple[float, float]] = []

    def objective(trial):
        config = suggest(trial, channels)
        model, opt = make(config)
        acc = 0.0
        trained.append((config, 0))
        for e in range(1, max_epochs + 1):
            acc = epoch(model, opt, config, e)
            stamps.append((time.time(), acc))
            epochs[0] += 1
            trained[-1] = (config, e)
            trial.report(acc, e)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return acc

    data()
    configs = configurations(trials) if given is None else given
    t0, s0 = time.perf_counter(), time.time()
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=ETA))
    for config in configs or ():
        study.enqueue_trial(config)
    study.optimize(objective, n_trials=trials, n_jobs=n_jobs)
    wall = time.perf_counter() - t0
    best = max(max(t.intermediate_values.values(), default=0.0) for t in study.trials)
    errors = sum(t.state == optuna.trial.TrialState.FAIL for t in study.trials)
    tried = [t.params for t in sorted(study.trials, key=lambda t: t.number)]
    return {"wall": wall, "best": best, "epochs": epochs[0], "errors": errors,
            "trials": len(study.trials), "work": work(trained), "curve": curve(stamps, s0),
            "same_configs": configs is not None and same_order(tried, configs)}


def train_ray(config):
    from ray import tune

    model, opt = make(config)
    for e in range(1, MAX_EPOCHS + 1):
        tune.report({"val_acc": epoch(model, opt, config, e), "wall": time.time()})


def run_ray() -> dict[str, Any]:
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    configs = configurations()
    data()  # as every system: the driver has torch and the data before the clock starts
    t0, s0 = time.perf_counter(), time.time()
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
            search_alg=BasicVariantGenerator(points_to_evaluate=configs),
            scheduler=ASHAScheduler(max_t=MAX_EPOCHS, grace_period=1, reduction_factor=ETA)),
        run_config=tune.RunConfig(verbose=0, storage_path=f"/tmp/vs-peers-ray-{os.getpid()}"),
    )
    grid = tuner.fit()
    wall = time.perf_counter() - t0
    df = grid.get_dataframe()
    stamps = [(float(r["wall"]), float(r["val_acc"])) for res in grid
              if res.metrics_dataframe is not None
              for _, r in res.metrics_dataframe.iterrows() if "wall" in r and "val_acc" in r]
    tried = [dict(res.config) for res in grid]  # results in trial order
    tried_sorted = sorted(tried, key=lambda c: next(
        (i for i, w in enumerate(configs) if same_order([c], [w])), len(configs)))
    out = {"wall": wall, "fit": time.perf_counter() - t1,
           "best": float(df["val_acc"].max()) if "val_acc" in df else 0.0,
           "epochs": int(df["training_iteration"].sum()) if "training_iteration" in df else 0,
           "errors": len(grid.errors), "trials": len(df),
           "work": work([({"channels": r["config/channels"], "batch_size": r["config/batch_size"]},
                          r["training_iteration"]) for _, r in df.iterrows()]),
           "curve": curve(stamps, s0),
           # Ray's result grid is not in launch order: the same set, each tried once
           "same_configs": same_order(tried_sorted, configs)}
    ray.shutdown()
    return out


SYSTEMS = ["nbtune", "optuna1", "optuna2", "ray"]


def one(system: str) -> dict[str, Any]:
    if system == "costs":
        return epoch_costs()
    if system == "nbtune":
        return run_nbtune()
    if system.startswith("optuna"):
        return {system: run_optuna(int(system[-1]))}
    return {"ray": run_ray()}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}


def _answer(system: str, p: subprocess.CompletedProcess[str] | subprocess.Popen[str],
            out: str, err: str) -> dict[str, Any]:
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith("{")), None)
    if p.returncode != 0 or line is None:
        print(f"  {system} failed (rc {p.returncode}): {err[-2000:]}", flush=True)
        return {}
    return json.loads(line)


def spawn(system: str) -> dict[str, Any]:
    p = subprocess.run([sys.executable, __file__, "--one", system], capture_output=True,
                       text=True, env=_env(), timeout=1800)
    return _answer(system, p, p.stdout, p.stderr)


def pair_speedup(alone: dict[str, float]) -> float:
    """The parallel speed-up of two bare processes on this machine now: two fresh processes
    price every shape's epoch side by side (:func:`epoch_costs`, one torch thread each);
    per shape, twice the price alone (``alone``, this round's) over the mean price paired;
    the median over shapes. Two cores give less than 2x (shared caches, memory bandwidth,
    turbo): a two-worker run cannot beat its work divided by this."""
    procs = [subprocess.Popen([sys.executable, __file__, "--one", "costs"], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
             for _ in range(2)]
    paired = [_answer("costs (paired)", p, *p.communicate(timeout=1800)) for p in procs]
    if not alone or not all(paired):
        return float("nan")
    return statistics.median(2 * alone[k] / ((paired[0][k] + paired[1][k]) / 2)
                             for k in alone)


PEERS = ("optuna1", "optuna2", "ray")
GOAL = {"cold_vs_optuna1": 1.2, "cold_vs_ray": 1.6, "warm_vs_optuna1": 1.3,
        "warm_vs_optuna2": 1.15, "acc_gap_rel": 0.005, "errors": 0,
        "tta_ratio_cold_vs_optuna1": 0.7, "warm_pair_efficiency": 0.85}
#: ``vs_peers_mlp``'s goal: the warm run's efficiency against the measured two-process bound
#: on the MLP, the same configurations, accuracy and errors (the ratios are reported)
MLP_GOAL = {"acc_gap_rel": 0.005, "errors": 0, "warm_pair_efficiency": 0.85}


def time_to_accuracy(round_runs: dict[str, dict[str, Any]]) -> None:
    """Each run of one round gets ``tta``: seconds until its best so far came within
    :data:`TTA_WITHIN` of the best peer's final accuracy in that round (inf: never)."""
    peers = [round_runs[k]["best"] for k in PEERS if k in round_runs]
    if not peers:
        return
    target = max(peers) - TTA_WITHIN
    for res in round_runs.values():
        res["tta"] = reached(res.get("curve", []), target)


def main(bench: str = "vs_peers", goal: dict[str, float] | None = None) -> None:
    """Run the rounds and record them as ``bench`` against ``goal`` (default :data:`GOAL`; with
    another goal only its keys decide ``met``)."""
    goal = GOAL if goal is None else goal
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", choices=[*SYSTEMS, "costs"])
    ap.add_argument("--skip", nargs="*", default=[], choices=SYSTEMS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    speedups: list[float] = []
    runs: dict[str, list[dict[str, Any]]] = {}
    systems = [s for s in SYSTEMS if s not in args.skip]
    load = os.getloadavg()[0]
    loads = []
    for r in range(args.rounds):
        order = systems if r % 2 == 0 else systems[::-1]  # alternate: drift hits all alike
        loads.append(os.getloadavg()[0])
        costs = spawn("costs")  # this round's prices of an epoch, in a fresh process
        speedups.append(pair_speedup(costs))
        print(f"round {r + 1} (load {loads[-1]:.1f}) epoch costs (ms): "
              + ", ".join(f"{k} {v * 1e3:.0f}" for k, v in costs.items())
              + f"; two bare processes side by side: {speedups[-1]:.2f}x one", flush=True)
        this_round: dict[str, dict[str, Any]] = {}
        for s in order:
            for name, res in spawn(s).items():
                res["work_s"] = priced(res.get("work", {}), costs) if costs else 0.0
                this_round[name] = res
                runs.setdefault(name, []).append(res)
                print(f"round {r + 1} {name:>8}: {res['wall']:6.1f} s, best {res['best']:.4f}, "
                      f"{res['epochs']:5.0f} epochs ({res['work_s']:5.1f} s of one core's "
                      f"work), {res['errors']} errors, same configs {res.get('same_configs')}",
                      flush=True)
        time_to_accuracy(this_round)
        print(f"round {r + 1} time to accuracy (s): "
              + ", ".join(f"{k} {v.get('tta', float('nan')):.1f}" for k, v in this_round.items()),
              flush=True)
    med = {k: {f: statistics.median(x.get(f, float("inf")) for x in v)
               for f in ("wall", "best", "epochs", "work_s", "tta")}
           | {"errors": sum(x["errors"] for x in v), "rounds": len(v),
              "same_configs": all(x.get("same_configs") for x in v)} for k, v in runs.items()}
    print(f"load average before: {load:.1f}, after: {os.getloadavg()[0]:.1f} (2 cores)")
    for k, v in med.items():
        print(f"{k:>8}: median {v['wall']:6.1f} s, best {v['best']:.4f}, "
              f"{v['epochs']:.0f} epochs, time to accuracy {v['tta']:.1f} s, "
              f"{v['errors']} errors in {v['rounds']} rounds")
    wall = {k: v["wall"] for k, v in med.items()}
    # the curves of the round whose wall time is each system's median
    curves = {k: min(v, key=lambda x: abs(x["wall"] - med[k]["wall"])).get("curve", [])
              for k, v in runs.items()}
    finite = lambda x: None if x == float("inf") else x  # noqa: E731 (JSON has no inf)
    figures: dict[str, Any] = {"median_wall_s": wall, "load_avg": load, "round_loads": loads,
                               "best_acc": {k: v["best"] for k, v in med.items()},
                               "epochs": {k: v["epochs"] for k, v in med.items()},
                               "errors": {k: v["errors"] for k, v in med.items()},
                               "same_configs": {k: v["same_configs"] for k, v in med.items()},
                               "tta_s": {k: finite(v["tta"]) for k, v in med.items()},
                               "curves": curves}
    ratios = {}
    if "cold" in wall and "optuna1" in wall:
        ratios["cold_vs_optuna1"] = wall["optuna1"] / wall["cold"]
        ratios["warm_vs_optuna1"] = wall["optuna1"] / wall["warm"]
    if "warm" in wall and "optuna2" in wall:
        ratios["warm_vs_optuna2"] = wall["optuna2"] / wall["warm"]
    if "cold" in wall and "ray" in wall:
        ratios["cold_vs_ray"] = wall["ray"] / wall["cold"]
    peers = [med[k]["best"] for k in PEERS if k in med]
    nb = [med[k]["best"] for k in ("cold", "warm") if k in med]
    gap = (max(peers) - min(nb)) / max(peers) if peers and nb else None
    tta = None
    if "cold" in med and "optuna1" in med and med["optuna1"]["tta"] not in (0, float("inf")):
        tta = med["cold"]["tta"] / med["optuna1"]["tta"]
    speedup = statistics.median(speedups) if speedups else float("nan")
    figures.update(ratios=ratios, acc_gap=gap, tta_ratio_cold_vs_optuna1=finite(tta),
                   workload=workload(), **bounds(med, speedup))
    pair_eff = figures["pair_efficiency"].get("warm")
    checks = {
        "ratios": all(k in ratios and ratios[k] >= goal[k] for k in
                      ("cold_vs_optuna1", "cold_vs_ray", "warm_vs_optuna1", "warm_vs_optuna2")
                      if k in goal),
        "acc_gap_rel": gap is not None and gap <= goal.get("acc_gap_rel", 0.0),
        "errors": sum(med[k]["errors"] for k in ("cold", "warm") if k in med) == 0,
        "tta_ratio_cold_vs_optuna1": "tta_ratio_cold_vs_optuna1" not in goal or (
            tta is not None and tta <= goal["tta_ratio_cold_vs_optuna1"]),
        "warm_pair_efficiency": "warm_pair_efficiency" not in goal or (
            pair_eff is not None and pair_eff >= goal["warm_pair_efficiency"]),
    }
    met = (all(checks.values()) and all(v["same_configs"] for v in med.values())
           and args.rounds >= 3)
    print("ratios:", {k: round(v, 2) for k, v in ratios.items()}, "accuracy gap:", gap,
          "time to accuracy, cold over Optuna n_jobs=1:", tta,
          "warm efficiency against the measured two-process bound:", pair_eff)
    record({"name": bench, "figures": figures, "goal": goal, "met": bool(met)})


if __name__ == "__main__":
    main()
