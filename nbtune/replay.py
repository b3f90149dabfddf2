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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nbtune.algorithms import make_algorithm
from nbtune.allocators import make_allocator
from nbtune.build import build_experiment, make_runtime
from nbtune.engine.engine import Engine
from nbtune.workloads.trace import TraceWorkload, config_key

__all__ = ["Decisions", "decisions", "replay_in_simulator"]


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


def decisions(exp: Any) -> Decisions:
    trials = exp.engine.trials.values()
    best = exp.best
    return Decisions(
        configs={t.trial_id: config_key(t.config) for t in trials},
        budgets={t.trial_id: round(float(t.budget_used), 6) for t in trials},
        states={t.trial_id: t.state.value for t in trials},
        best=None if best is None else int(best["trial_id"]),
    )


def replay_in_simulator(
    exp: Any,
    *,
    algorithm: str,
    seed: int,
    max_budget: float,
    num_trials: int | None = None,
    allocator: str = "fifo",
    allocator_options: Mapping[str, Any] | None = None,
    min_budget: float = 1.0,
    trace: TraceWorkload | None = None,
    **algorithm_options: Any,
) -> Any:
    """Run ``exp``'s job again on the simulator with its measured timings; return that Experiment.

    Pass the options the real run was started with (algorithm, seed,
    budgets, allocator): the trace looks simulated trials up by config, so a
    different seed or space fails loudly instead of comparing unrelated runs.
    """
    trace = trace if trace is not None else TraceWorkload.from_experiment(exp)
    kind = getattr(exp.engine.algorithm, "type", None)  # ASHA's variant: the run's, not a default
    if kind is not None and "type" not in algorithm_options:
        algorithm_options = {**algorithm_options, "type": kind}
    algo = make_algorithm(algorithm, trace.space, metric=exp.metric, mode=exp.mode,
                          max_budget=max_budget, num_trials=num_trials, seed=seed,
                          min_budget=min_budget, **algorithm_options)
    alloc = make_allocator(allocator, **dict(allocator_options or {}))
    rt = make_runtime("sim", cluster=exp.engine.cluster, launch_overhead=trace.launch_overhead)
    return build_experiment(f"{exp.name}-sim", Engine(algo, alloc), rt, trace)
