"""Experiment: the handle a user holds on a running or finished tuning job."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd

from nbtune.core import events as ev
from nbtune.core import frontend as _registry
from nbtune.core.best import best_index
from nbtune.core.handles import RecorderHandle
from nbtune.core.listing import error_line
from nbtune.core.roles import role
from nbtune.core.trial import TrialState
from nbtune.engine.engine import Engine
from nbtune.runtimes.runtime_protocol import Runtime

__all__ = ["Experiment", "Frontend", "Recipe", "TrialsFailed", "set_frontend", "error_line"]


class Frontend(Protocol):
    """What an :class:`Experiment` asks of the layers above it: the notebook UI
    (:mod:`nbtune.ui`) and the simulator's what-if (:mod:`nbtune.replay`)."""

    def report(self, exp: Experiment, path: Any) -> Any: ...

    def dashboard(self, exp: Experiment, **options: Any) -> Any: ...

    def show(self, exp: Experiment) -> None: ...

    def plot(self, exp: Experiment, view: str, **options: Any) -> Any: ...

    def what_if(self, exp: Experiment, **options: Any) -> Any: ...


@dataclass(frozen=True)
class Recipe:
    """How ``tune`` made an experiment's algorithm and allocator (registry names or classes,
    options, the seed it fixed): what a what-if builds fresh copies from, so the simulated
    run draws the same configs in the same order as the real one."""

    algorithm: Any
    algorithm_options: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    num_trials: int | None = None
    min_budget: float = 1.0
    max_budget: float = 1.0
    allocator: Any = "auto"
    allocator_options: dict[str, Any] = field(default_factory=dict)


def set_frontend(frontend: Frontend | None) -> None:
    """Plug the UI in (``nbtune/__init__.py`` does, lazily); the experiment never imports it."""
    _registry.set_frontend(frontend)


class TrialsFailed(RuntimeError):
    """Every trial of an experiment failed: :meth:`Experiment.wait` raises it with the first error.

    Like Ray Tune's ``TuneError``: a run whose every trial crashed has no result,
    and "done" would hide a bug in the training code. ``errors`` maps each trial
    id to its full traceback (also in ``exp.results()["error"]``).
    """

    def __init__(self, name: str, errors: dict[int, str]) -> None:
        self.errors = dict(errors)
        first = min(self.errors)
        super().__init__(
            f"experiment {name!r} failed: all {len(self.errors)} trials raised an error; "
            f"trial {first}'s traceback follows (every one is in exp.results()['error'])\n"
            f"{self.errors[first].rstrip()}")


#: creation order of experiments in this process ("the latest" for %tune_stop without a name)
_CREATED = itertools.count()


def _front() -> Frontend:
    front: Frontend | None = _registry.frontend()
    if front is None:
        raise RuntimeError("no notebook front end is plugged in: import nbtune first")
    return front


class Experiment:
    """Results and controls of one tuning job, whatever runtime runs it."""

    #: the :class:`nbtune.store.Store` recording this experiment (None: kept in memory only)
    store: Any = None
    #: the :class:`nbtune.store.Recorder` writing into it
    recorder: RecorderHandle | None = None
    #: the :class:`nbtune.planner.plan_executor.PlanExecutor` following a plan (``tune(plan=...)``)
    plan_executor: Any = None
    #: how ``tune`` made the algorithm and allocator (None: given as instances, or a run
    #: with surrogates, fusion or a plan, which a what-if does not rebuild)
    recipe: Recipe | None = None

    def what_if(self, *, gpus: int | None = None, allocator: Any = None,
                allocator_options: dict[str, Any] | None = None, cloud: Any = None) -> Any:
        """This run again on the simulator, at another scale or with another allocator.

        Every trial replays its own measured seconds per epoch, launch costs and metrics
        (:meth:`nbtune.workloads.TraceWorkload.from_experiment`); the algorithm is built
        afresh with the run's seed, so it draws the same configs. ``gpus``: how many GPUs
        (default: the run's); ``allocator``: a registry name (default: the run's);
        ``cloud``: a price profile (``nbtune.planner.profiles.CLOUDS`` name or a
        ``CloudProfile``) to price both runs. Returns a
        :class:`nbtune.replay.WhatIf`: the real and the simulated makespan, utilization,
        best result (and cost) side by side, and the simulated experiment. A trial the
        simulated run trains further than the real one did keeps its last measured metrics.
        """
        return _front().what_if(self, gpus=gpus, allocator=allocator,
                                allocator_options=allocator_options, cloud=cloud)

    def plan(self, **planning: Any) -> Any:
        """RubberBand, after a run that followed a plan: predicted vs measured JCT and cost.

        To plan before running use ``nbtune.planner.plan_for(algorithm, space,
        deadline=..., cloud=..., profile=...)`` and pass the plan to ``tune(plan=...)``.
        """
        if planning:
            raise TypeError("exp.plan() takes no arguments; plan before running with "
                            f"nbtune.planner.plan_for(..., {', '.join(f'{k}=...' for k in planning)})")
        if self.plan_executor is None:
            raise ValueError("this experiment did not follow a plan: plan one with "
                             "nbtune.planner.plan_for(...) and run nbtune.tune(..., plan=p)")
        return self.plan_executor.predicted_vs_actual()

    @property
    def cost(self) -> float | None:
        """Metered cloud cost of a run that follows a plan (None without a plan)."""
        return None if self.plan_executor is None else self.plan_executor.cost

    @property
    def planned(self) -> tuple[float, float] | None:
        """The followed plan's predicted ``(JCT seconds, cost)`` (None without a plan): what
        the dashboard shows beside the measured JCT and :attr:`cost` while the plan runs."""
        if self.plan_executor is None:
            return None
        p = self.plan_executor.plan.planned
        return float(p.jct), float(p.cost)

    def __init__(self, name: str, engine: Engine, runtime: Runtime, trainable: Any) -> None:
        self.name = name
        self.engine = engine
        self.runtime = runtime
        self.trainable = trainable
        self.created = next(_CREATED)

    # ------------------------------------------------------------- control
    def wait(self, timeout: float | None = None, *, progress: bool | None = None,
             every: float = 10.0) -> Experiment:
        """Block until the experiment ends (or ``timeout`` seconds pass).

        ``progress`` prints a status line every ``every`` seconds to stderr
        (default: in a terminal yes, in a notebook no: it has the dashboard).
        Raises :class:`TrialsFailed` (with the first error) when every trial failed.
        """
        from nbtune.console import progress_default, wait_with_progress

        if progress is None:
            progress = progress_default() and not self.engine.done
        if progress:
            wait_with_progress(self, timeout, every)
        else:
            self.runtime.wait(timeout)
        if self.failed:
            raise TrialsFailed(self.name, {t.trial_id: t.error or "" for t in
                                           self.engine.trials.values()})
        return self

    @property
    def done(self) -> bool:
        return self.engine.done

    @property
    def errored(self) -> int:
        """How many trials ended in an error."""
        return sum(1 for t in list(self.engine.trials.values()) if t.state is TrialState.ERROR)

    @property
    def failed(self) -> bool:
        """Ended with every trial in error: no result at all."""
        n = len(self.engine.trials)
        return self.engine.done and n > 0 and self.errored == n

    @property
    def state(self) -> str:
        """``failed``, ``done``, ``paused`` or ``running``: what every view calls it."""
        if self.failed:
            return "failed"
        return "done" if self.done else ("paused" if self.engine.paused else "running")

    def _control(self, event_type: type[ev.Event], *fields: Any) -> None:
        """Hand a person's event to the runtime, unless the runtime has let this experiment's
        engine go: it is over then, and the runtime may be running the next experiment."""
        if self.engine.started and not self.runtime.drives(self.engine):
            return
        self.runtime.submit(event_type(self.runtime.clock.now(), *fields))

    def stop(self) -> None:
        """End the experiment: stop every trial (nothing to do once it is over)."""
        self._control(ev.ExperimentStopRequested)

    def stop_trial(self, trial_id: int) -> None:
        self._control(ev.TrialStopRequested, trial_id)

    def pause(self) -> None:
        """Checkpoint every running trial and free the GPUs until :meth:`unpause`."""
        self._control(ev.ExperimentPauseRequested)

    def unpause(self) -> None:
        """Continue after :meth:`pause` (paused trials resume from their checkpoints)."""
        self._control(ev.ExperimentResumeRequested)

    def set_concurrency(self, max_concurrent: int | None) -> None:
        """Run at most ``max_concurrent`` trials at once (``None`` lifts the cap)."""
        if max_concurrent is not None and (
            isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int)
            or max_concurrent < 1
        ):
            raise ValueError(f"max_concurrent must be an integer >= 1 or None, "
                             f"got {max_concurrent!r}")
        self._control(ev.ConcurrencyChanged, max_concurrent)

    # ------------------------------------------------------------- results
    @property
    def metric(self) -> str:
        return self.engine.metric

    @property
    def mode(self) -> str:
        return self.engine.mode

    def results(self) -> pd.DataFrame:
        """One row per trial: id, config columns, state, best metric, budget, GPU-seconds, times.

        With ``tune(..., fusion=F)`` a ``group`` column gives the fused unit each trial
        last ran in (members of one fused model share it); with ``tune(..., scaling=S)`` a
        ``role`` column says ``surrogate`` or ``target`` (the full model)."""
        rows = []
        fused = getattr(self.engine, "fusion", None) is not None
        now = self.engine.time
        for t in self.engine.trials.values():
            gpu_s = t.gpu_seconds_at(now)
            rows.append({
                "trial_id": t.trial_id,
                **{f"config/{k}": v for k, v in t.config.items()},
                "state": t.state.value,
                self.metric: t.best,
                "last": t.last,
                "budget_used": t.budget_used,
                "gpu_seconds": gpu_s,
                "start": t.start_time,
                "end": t.end_time,
                "failures": t.failures,
                "error": t.error,
                **({"group": t.unit} if fused else {}),
                "role": role(t.config),
            })
        cols = ["trial_id", "state", self.metric, "last", "budget_used", "gpu_seconds", "start",
                "end", "failures", "error", *(["group"] if fused else [])]
        df = pd.DataFrame(rows)
        if df.empty:
            return pd.DataFrame(columns=cols)
        if not df["role"].any():
            df = df.drop(columns="role")
        return df.sort_values("trial_id").reset_index(drop=True)

    @property
    def best(self) -> dict[str, Any] | None:
        """The trial with the best metric: ``{"trial_id", "config", metric, "budget_used"}``."""
        trials = list(self.engine.trials.values())
        # only trials trained the furthest compete (nbtune.core.best says why)
        i = best_index(((t.best, t.budget_used) for t in trials), self.mode)
        if i is None:
            return None
        b = trials[i]
        return {"trial_id": b.trial_id, "config": dict(b.config), self.metric: b.best,
                "budget_used": b.budget_used}

    @property
    def makespan(self) -> float:
        """Seconds from the start to the last trial's end (so far, if still running)."""
        ends = [t.end_time for t in self.engine.trials.values() if t.end_time is not None]
        if not self.engine.done:
            return self.engine.time
        return max(ends) if ends else 0.0

    def learning_curves(self) -> pd.DataFrame:
        """Every report: trial_id, time, budget and the metrics."""
        rows = [
            {"trial_id": t.trial_id, "time": time, "budget": b, **m}
            for t in self.engine.trials.values() for time, b, m in t.results
        ]
        return pd.DataFrame(rows, columns=None if rows else ["trial_id", "time", "budget"])

    def allocations(self) -> pd.DataFrame:
        """Who held which GPU when: trial_id, gpu_id, share, start, end."""
        now = self.engine.time
        return pd.DataFrame(
            [(r.trial_id, r.gpu_id, r.share, r.start, now if r.end is None else r.end)
             for r in self.engine.ledger.log],
            columns=["trial_id", "gpu_id", "share", "start", "end"],
        )

    def utilization(self) -> pd.DataFrame:
        """Per-GPU utilization over time (columns time, gpu_id, util)."""
        return self.runtime.utilization(self.engine)

    def busy_seconds(self) -> dict[int, float]:
        """Utilization integrated over the makespan, per GPU that was sampled (GPU-seconds busy).

        The one integral behind :meth:`mean_utilization` and the CLI's per-GPU figures.
        """
        u = self.utilization()
        span = self.makespan
        out: dict[int, float] = {}
        if u.empty or span <= 0:
            return out
        for g, rows in u.groupby("gpu_id"):
            times = list(rows["time"]) + [span]
            vals = list(rows["util"])
            out[int(g)] = sum(v * max(min(times[i + 1], span) - min(times[i], span), 0.0)
                              for i, v in enumerate(vals))
        return out

    def mean_utilization(self) -> float:
        """Time-weighted average utilization over all GPUs and the whole makespan."""
        return self._mean_of(self.busy_seconds())

    def _mean_of(self, busy: dict[int, float]) -> float:
        if not busy:
            return 0.0
        return sum(busy.values()) / (self.makespan * self.engine.cluster.n_gpus)

    def summary(self) -> str:
        df = self.results()
        states = df["state"].value_counts().to_dict() if not df.empty else {}
        best = self.best
        busy = self.busy_seconds()  # none: a run shorter than the sampling interval, not 0 %
        lines = [
            f"experiment {self.name!r}: {len(df)} trials "
            + ", ".join(f"{n} {s}" for s, n in sorted(states.items())),
            f"makespan {self.makespan:,.1f} s on {self.engine.cluster.n_gpus} "
            f"{'CPU workers' if self.engine.cluster.cpu_stand_ins else 'GPUs'}, "
            + (f"mean utilization {self._mean_of(busy):.1%}" if busy else
               "utilization not sampled (the run was shorter than the sampling interval)"),
        ]
        if best:
            lines.append(f"best trial {best['trial_id']}: {self.metric}={best[self.metric]:.4g} "
                         f"at budget {best['budget_used']:g} with {best['config']}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        n = len(self.engine.trials)
        errors = f", {self.errored} errored" if self.errored else ""
        return f"<Experiment {self.name!r} {self.state}: {n} trials{errors}>"

    def trials_in(self, state: TrialState) -> list[int]:
        return [t.trial_id for t in self.engine.trials.values() if t.state is state]

    # ------------------------------------------------------------- notebook
    # the UI is an entry point above this layer: it is plugged in (set_frontend) by the
    # package facade, lazily, so the engine, runtimes and plain scripts never load widgets
    def report(self, path: Any) -> Any:
        """Write the dashboard's figures to a standalone HTML file (works offline)."""
        return _front().report(self, path)

    def dashboard(self, **options: Any) -> Any:
        """The live dashboard (:class:`nbtune.ui.Dashboard`) of this experiment."""
        return _front().dashboard(self, **options)

    def plot(self, view: str = "history", *, budget: float | str | None = None) -> Any:
        """One analysis view, as of now, for a notebook cell (Optuna's ``plot_*``):
        ``"history"``, ``"importance"``, ``"parallel"`` (coordinates) or ``"slices"``, of the
        trials that reached ``budget`` (None: the highest budget enough trials reached;
        ``"all"``: every trial). Its ``figure`` is the Bokeh model."""
        return _front().plot(self, view, budget=budget)

    def _ipython_display_(self) -> None:
        _front().show(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        # for frontends that render mime bundles but not widgets (nbconvert, renderers)
        import html

        text = self.summary() if self.engine.ledger.cluster is not None else repr(self)
        return {"text/plain": text, "text/html": f"<pre>{html.escape(text)}</pre>"}
