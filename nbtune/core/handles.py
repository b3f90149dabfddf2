"""Read-only views of the engine, the runtime and the experiment, for the layers below them.

The console, the workload traces and the kernel files read an engine or an
experiment that lives in a layer above them, and the experiment holds the store's
recorder, which lives beside it; neither can import the other's class.
These protocols name what they read (properties and methods only, nothing they
write), so a type checker and go-to-definition follow them; the real classes
(:class:`nbtune.engine.engine.Engine`, :class:`nbtune.experiment.Experiment`, the
runtimes) satisfy them structurally.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from nbtune.core.resources import ClusterSpec, Placement
from nbtune.core.trial import TrialRecord

__all__ = ["ClusterHolder", "Judged", "EngineView", "RuntimeView", "RecorderHandle", "ExperimentView"]


class ClusterHolder(Protocol):
    """Anything that knows the cluster it runs on (None before the experiment started)."""

    @property
    def cluster(self) -> ClusterSpec | None: ...


class Judged(Protocol):
    """What the engine and the experiment both say of a run: the metric it is judged on,
    which way is better, and whether it has ended."""

    @property
    def metric(self) -> str: ...

    @property
    def mode(self) -> str: ...

    @property
    def done(self) -> bool: ...


class EngineView(Judged, Protocol):
    """The engine as its readers see it: the trials, who runs where, the metric, the clock.

    ``algorithm`` is the tuning algorithm (read for its ``name``, ``space`` and
    ``num_trials``); ``subscribe(fn)`` calls ``fn(events, commands)`` after each
    ``handle`` on the engine's thread and returns the function that unsubscribes.
    """

    @property
    def trials(self) -> Mapping[int, TrialRecord]: ...

    @property
    def running(self) -> Mapping[int, Placement]: ...

    @property
    def time(self) -> float: ...

    @property
    def algorithm(self) -> Any: ...

    @property
    def ledger(self) -> ClusterHolder: ...

    @property
    def hints(self) -> Mapping[str, Any]: ...

    def subscribe(self, fn: Callable[..., Any]) -> Callable[[], None]: ...


class RuntimeView(Protocol):
    """A runtime as an experiment's readers use it: its name and waiting for its end."""

    @property
    def name(self) -> str: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class RecorderHandle(Protocol):
    """What an experiment's owner does with the store's recorder: count what it wrote,
    flush and close it, or drop what it has not written (a process that dies)."""

    @property
    def batches(self) -> int: ...

    def close(self) -> None: ...

    def abandon(self) -> None: ...


class ExperimentView(Judged, Protocol):
    """The user's handle on a run, read-only: its name, state, engine and results.

    ``learning_curves()`` and ``allocations()`` return data frames (pandas, which
    this layer does not import).
    """

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def engine(self) -> EngineView: ...

    @property
    def runtime(self) -> RuntimeView: ...

    @property
    def best(self) -> dict[str, Any] | None: ...

    def stop(self) -> None: ...

    def learning_curves(self) -> Any: ...

    def allocations(self) -> Any: ...
