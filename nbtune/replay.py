"""Simulator fidelity: replay a real run on the simulator and compare what each decided.

It sits beside ``tune`` (it builds an experiment, as ``tune`` does), not in
the workload models it replays through.

The simulator is only worth trusting if, fed the real run's timings, it makes
the real run's decisions. :func:`replay_in_simulator` builds a
:class:`~nbtune.workloads.trace.TraceWorkload` from a finished experiment and
runs the same algorithm (same space, same seed) and the same allocator on a
simulated copy of the same cluster; :func:`decisions` reduces an experiment to
what the tuner decided (configs, how far each trial was promoted, how it
ended, the winner), so two runs can be compared with ``==``.

The simulated engine gets no workload hint: the real engine had none, and an
allocator that read the trace's unit times up front would place trials
differently from the real run, which learnt them from reports.

:func:`what_if` (``exp.what_if``) asks the same replay another question: the
run on more or fewer GPUs, or under another allocator, with the real and the
simulated makespan, utilization, best result and (with a price profile) cost
side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from nbtune.build import (
    ResourceOptions,
    RunSpec,
    SearchOptions,
    build_experiment,
    make_engine,
    make_policies,
    make_runtime,
)
from nbtune.experiment import Experiment
from nbtune.workloads.trace import TraceWorkload, config_key

__all__ = ["Decisions", "WhatIf", "decisions", "replay_in_simulator", "what_if"]


@dataclass(frozen=True)
class Decisions:
    """What a tuning run decided, comparable across runtimes."""

    #: trial id -> config (exact)
    configs: dict[int, tuple[tuple[str, str], ...]]
    #: trial id -> budget it was trained to (its highest rung)
    budgets: dict[int, float]
    #: trial id -> final state ("completed", "stopped", ...)
    states: dict[int, str]
    #: the trial :attr:`Experiment.best` names
    best: int | None

    def differences(self, other: Decisions) -> list[str]:
        """Human-readable differences (empty when the decisions agree)."""
        out = []
        for name in ("configs", "budgets", "states"):
            a, b = getattr(self, name), getattr(other, name)
            for tid in sorted(set(a) | set(b)):
                if a.get(tid) != b.get(tid):
                    out.append(f"trial {tid} {name[:-1]}: {a.get(tid)} vs {b.get(tid)}")
        if self.best != other.best:
            out.append(f"best trial: {self.best} vs {other.best}")
        return out


def decisions(exp: Experiment) -> Decisions:
    trials = exp.engine.trials.values()
    best = exp.best
    return Decisions(
        configs={t.trial_id: config_key(t.config) for t in trials},
        budgets={t.trial_id: round(float(t.budget_used), 6) for t in trials},
        states={t.trial_id: t.state.value for t in trials},
        best=None if best is None else int(best["trial_id"]),
    )


def replay_in_simulator(
    exp: Experiment,
    *,
    algorithm: str,
    seed: int,
    max_budget: float,
    num_trials: int | None = None,
    allocator: str = "fifo",
    allocator_options: Mapping[str, Any] | None = None,
    min_budget: float = 1.0,
    trace: TraceWorkload | None = None,
    cluster: Any = None,
    **algorithm_options: Any,
) -> Experiment:
    """Run ``exp``'s job again on the simulator with its measured timings; return that Experiment.

    Pass the options the real run was started with (algorithm, seed,
    budgets, allocator): the trace looks simulated trials up by config, so a
    different seed or space fails loudly instead of comparing unrelated runs.
    ``cluster``: where to replay it (a GPU count or a ClusterSpec; default: the run's).
    """
    trace = trace if trace is not None else TraceWorkload.from_experiment(exp)
    kind = getattr(exp.engine.algorithm, "type", None)  # ASHA's variant: the run's, not a default
    if kind is not None and "type" not in algorithm_options:
        algorithm_options = {**algorithm_options, "type": kind}
    spec = RunSpec(trace, trace.space,
                   SearchOptions(algorithm=algorithm, metric=exp.metric, mode=exp.mode,
                                 max_budget=max_budget, min_budget=min_budget,
                                 num_trials=num_trials, seed=seed,
                                 algorithm_options=algorithm_options),
                   ResourceOptions(allocator=allocator, allocator_options=allocator_options))
    algo, alloc = make_policies(spec)
    rt = make_runtime("sim", cluster=exp.engine.cluster if cluster is None else cluster,
                      launch_overhead=trace.launch_overhead)
    return build_experiment(f"{exp.name}-sim", make_engine(algo, alloc), rt, trace)


@dataclass(frozen=True)
class WhatIf:
    """A what-if's answer: ``table`` (rows ``real`` and ``what-if``; columns gpus,
    allocator, trials, makespan_s, mean_utilization, best and, priced, cost) and the
    simulated :class:`~nbtune.experiment.Experiment` to look into."""

    table: pd.DataFrame
    experiment: Experiment

    @property
    def speedup(self) -> float:
        """The real makespan over the simulated one (> 1: the what-if is faster)."""
        real, sim = self.table["makespan_s"]
        return float(real / sim) if sim > 0 else float("inf")

    def __repr__(self) -> str:
        return f"WhatIf (speed-up {self.speedup:.2f}x)\n{self.table.to_string()}"

    def _repr_html_(self) -> str:
        return (f"<b>what-if</b>: speed-up {self.speedup:.2f}x"
                + self.table.to_html(float_format=lambda v: f"{v:.4g}"))


def what_if(exp: Experiment, *, gpus: int | None = None, allocator: Any = None,
            allocator_options: Mapping[str, Any] | None = None, cloud: Any = None) -> WhatIf:
    """``exp`` replayed on the simulator with ``gpus`` GPUs and ``allocator`` (default: the
    run's own); see :meth:`nbtune.experiment.Experiment.what_if`."""
    from nbtune.planner.profiles import cloud as cloud_profile

    recipe = exp.recipe
    if recipe is None:
        raise ValueError(
            f"experiment {exp.name!r} has no recipe to rebuild its algorithm from: a what-if "
            "needs a run started by nbtune.tune with the algorithm and allocator given by "
            "name (not instances) and without scaling=, fusion= or plan=")
    if gpus is not None and (isinstance(gpus, bool) or int(gpus) != gpus or gpus < 1):
        raise ValueError(f"gpus must be a whole number >= 1, got {gpus!r}")
    price = None if cloud is None else cloud_profile(cloud)
    if allocator is None:
        allocator = recipe.allocator
        options = dict(recipe.allocator_options if allocator_options is None
                       else allocator_options)
    else:
        options = dict(allocator_options or {})
    try:
        sim = replay_in_simulator(exp, algorithm=recipe.algorithm, seed=recipe.seed,
                                  max_budget=recipe.max_budget, num_trials=recipe.num_trials,
                                  allocator=allocator, allocator_options=options,
                                  min_budget=recipe.min_budget, cluster=gpus,
                                  **recipe.algorithm_options)
    except KeyError as exc:  # a config the real run never trained
        raise ValueError(f"the what-if drew a config the real run has no measurements of "
                         f"({exc.args[0]}); ask again once {exp.name!r} has finished") from None
    rows = {"real": _figures(exp, recipe.allocator, price),
            "what-if": _figures(sim, allocator, price)}
    return WhatIf(pd.DataFrame.from_dict(rows, orient="index"), sim)


def _figures(exp: Experiment, allocator: Any, price: Any) -> dict[str, Any]:
    best, gpus = exp.best, len(exp.engine.cluster.gpus)
    out = {"gpus": gpus, "allocator": getattr(allocator, "name", allocator),
           "trials": len(exp.engine.trials), "makespan_s": float(exp.makespan),
           # a run rebuilt from its store has no runtime that sampled it
           "mean_utilization": None if exp.runtime is None else float(exp.mean_utilization()),
           "best": None if best is None else best.get(exp.metric)}
    if price is not None:
        if price.billing == "function":  # the GPU-seconds used
            out["cost"] = (None if exp.runtime is None else
                           sum(exp.busy_seconds().values()) * price.price_per_gpu_second)
        else:  # every instance held for the whole run
            out["cost"] = price.instances_for(gpus) * price.instance_cost(float(exp.makespan))
    return out
