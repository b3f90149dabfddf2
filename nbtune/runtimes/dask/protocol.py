"""Every message the Dask runtime's processes send each other, one typed class per kind.

Five kinds of process talk (docs/architecture.md has the map): a trial process reports
to its worker, which forwards to the driver; the driver sends control back the same
way; a worker's pool and the fork server ask each other for processes. Each message is
a frozen dataclass here, built by its sender and dispatched on by type in its receiver.

Between processes a message travels as its *wire form*: a small dict tagged with its
kind (``{"k": "report", "step": 3.0, ...}``), which pickles as fast as a plain dict
and crosses Dask's msgpack comms and the fork server's JSON socket unchanged.
:func:`encode` makes it (fields that are None are left out), :func:`decode` reads it
back; :func:`kind_of` says what a wire message is without decoding it, for a hop that
only forwards (the worker, which adds the route: ``trial``, ``run``, ``rank``).
The classes are slotted, not frozen (a frozen dataclass is several times slower to
build, and a report is built every epoch); they are values all the same: a sender
builds one and nobody changes it after (``dataclasses.replace`` makes a changed copy).
Imports nothing heavy: the trial process loads it before the user's code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "Message", "TrialMessage", "Control",
    "Started", "Report", "Recomputed", "Held", "Checkpointed", "Exit", "Ready",
    "Go", "StopRequest", "Kill", "Verdict",
    "Import", "Job", "Quit", "Fork", "Forked", "Reaped", "Utilization",
    "encode", "decode", "kind_of", "KINDS",
]


@dataclass(slots=True, kw_only=True)
class Message:
    """A message of the Dask runtime; ``kind`` is its tag on the wire."""

    kind: ClassVar[str] = ""
    #: wire keys that differ from the field's name
    wire_names: ClassVar[dict[str, str]] = {}


# ----------------------------------------------------- trial process -> worker -> driver
@dataclass(slots=True, kw_only=True)
class TrialMessage(Message):
    """What a trial rank says. The worker adds the route (``trial``, ``run``, ``rank``);
    ``t`` is when it was sent (the sender's clock); ``member`` is a fused unit member's
    trial id (wire key ``m``)."""

    wire_names: ClassVar[dict[str, str]] = {"member": "m"}
    t: float | None = None
    member: int | None = None
    trial: int | None = None
    run: int | None = None
    rank: int | None = None


@dataclass(slots=True, kw_only=True)
class Started(TrialMessage):
    """The training function is about to be called (after a DDP group formed)."""

    kind: ClassVar[str] = "started"
    pid: int | None = None


@dataclass(slots=True, kw_only=True)
class Report(TrialMessage):
    """Metrics after ``step`` units. ``work``: seconds the loop worked since the last report
    returned (auto execution decides on it); ``wait``: the trial waits in ``report`` for a
    verdict; ``mem``: a fused unit's peak memory so far (bytes), when it grew."""

    kind: ClassVar[str] = "report"
    step: float
    metrics: dict[str, Any]
    work: float | None = None
    wait: bool | None = None
    mem: int | None = None


@dataclass(slots=True, kw_only=True)
class Recomputed(TrialMessage):
    """A step at or below what the trial had already done: recomputed work, not a result."""

    kind: ClassVar[str] = "recomputed"
    step: float


@dataclass(slots=True, kw_only=True)
class Held(TrialMessage):
    """The trial waits in place at its segment's end for ``go`` or a stop."""

    kind: ClassVar[str] = "held"
    step: float


@dataclass(slots=True, kw_only=True)
class Checkpointed(TrialMessage):
    """A checkpoint after ``step`` was written to ``path``."""

    kind: ClassVar[str] = "ckpt"
    step: float
    path: str


@dataclass(slots=True, kw_only=True)
class Exit(TrialMessage):
    """A rank's last message: how it ended. ``killed``: on the runtime's order; ``oom``: out
    of memory; ``reusable``: the process may serve another trial; ``cuda``: the GPU and MPS
    share its CUDA context is bound to; ``step``/``reason``: where and why it stopped."""

    kind: ClassVar[str] = "exit"
    ok: bool = True
    error: str | None = None
    oom: bool | None = None
    killed: bool | None = None
    reusable: bool | None = None
    cuda: str | None = None
    step: float | None = None
    reason: str | None = None
    pid: int | None = None


@dataclass(slots=True, kw_only=True)
class Ready(Message):
    """A warm trial process has imported its preloads and waits for a job."""

    kind: ClassVar[str] = "ready"


# ----------------------------------------------------- driver -> worker -> trial (control)
@dataclass(slots=True, kw_only=True)
class Control(Message):
    """Control for a running rank; ``member``: only that fused unit member (wire key ``m``)."""

    wire_names: ClassVar[dict[str, str]] = {"member": "m"}
    member: int | None = None


@dataclass(slots=True, kw_only=True)
class Go(Control):
    """A held trial trains on toward ``budget`` where it is (``threads``: its new share)."""

    kind: ClassVar[str] = "go"
    budget: float
    threads: int | None = None


@dataclass(slots=True, kw_only=True)
class StopRequest(Control):
    """Leave at the next ``report`` (``reason``: "stop", "pause", "resize"...)."""

    kind: ClassVar[str] = "stop"
    reason: str = "stop"


@dataclass(slots=True, kw_only=True)
class Kill(Control):
    """End the rank's process now; the worker reports it as a killed exit."""

    kind: ClassVar[str] = "kill"
    reason: str = "killed by the runtime"


@dataclass(slots=True, kw_only=True)
class Verdict(Control):
    """The engine decided on the report at ``step`` and did not stop the trial."""

    kind: ClassVar[str] = "verdict"
    step: float


# ----------------------------------------------------- worker pool <-> processes
@dataclass(slots=True, kw_only=True)
class Import(Message):
    """Import ``modules`` (an experiment's trainable's) ahead of the jobs that need them."""

    kind: ClassVar[str] = "import"
    modules: list[str]


@dataclass(slots=True, kw_only=True)
class Job(Message):
    """Run one trial rank: ``spec`` is the launch's job (see ``driver_side.jobs``)."""

    kind: ClassVar[str] = "job"
    spec: dict[str, Any]


@dataclass(slots=True, kw_only=True)
class Quit(Message):
    """A process that serves jobs ends."""

    kind: ClassVar[str] = "quit"


@dataclass(slots=True, kw_only=True)
class Fork(Message):
    """To the fork server: fork a trial process on the passed pipe end (request ``id``)."""

    kind: ClassVar[str] = "fork"
    id: int
    env: dict[str, str]
    worker: int
    imports: list[str]


@dataclass(slots=True, kw_only=True)
class Forked(Message):
    """From the fork server: request ``id`` became process ``pid``."""

    kind: ClassVar[str] = "forked"
    id: int
    pid: int


@dataclass(slots=True, kw_only=True)
class Reaped(Message):
    """From the fork server: its forked process ``pid`` ended with exit code ``rc``."""

    kind: ClassVar[str] = "reaped"
    pid: int
    rc: int


# ----------------------------------------------------- worker -> driver
@dataclass(slots=True, kw_only=True)
class Utilization(Message):
    """A worker's sample, one entry per slot: utilization, memory (bytes) and the CPU its
    trials wanted (``demand``, None where not measured)."""

    kind: ClassVar[str] = "util"
    worker: str
    util: list[float]
    mem: list[float]
    demand: list[float | None] | None = None


# ----------------------------------------------------- the wire form
#: every kind, by its tag
KINDS: dict[str, type[Message]] = {
    c.kind: c for c in (Started, Report, Recomputed, Held, Checkpointed, Exit, Ready, Go, StopRequest,
                        Kill, Verdict, Import, Job, Quit, Fork, Forked, Reaped, Utilization)
}

#: per kind, ``(field name, wire key)`` of each field, computed once
_FIELDS: dict[type[Message], tuple[tuple[str, str], ...]] = {
    c: tuple((f.name, c.wire_names.get(f.name, f.name)) for f in dataclasses.fields(c))
    for c in KINDS.values()
}


def encode(msg: Message, **route: Any) -> dict[str, Any]:
    """``msg``'s wire form, with ``route`` (``trial``, ``run``, ``rank``) added."""
    out: dict[str, Any] = {"k": msg.kind}
    for name, key in _FIELDS[type(msg)]:
        v = getattr(msg, name)
        if v is not None:
            out[key] = v
    if route:
        out.update(route)
    return out


def decode(raw: dict[str, Any]) -> Message:
    """The message a wire form stands for (keys it does not know are ignored)."""
    cls = KINDS[raw["k"]]
    return cls(**{name: raw[key] for name, key in _FIELDS[cls] if key in raw})


def kind_of(raw: dict[str, Any]) -> type[Message] | None:
    """The class of a wire message, without decoding it (None: not a message of ours)."""
    return KINDS.get(raw.get("k", ""))

