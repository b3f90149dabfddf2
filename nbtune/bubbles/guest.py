"""A guest trial: an ordinary training loop that may be gated into a host stage's bubbles.

The loop is what a user would write (a small MLP, SGD, synthetic regression
data from a seed); the only gate-specific lines are ``gate.attach(model)``
(checkpoints at layer boundaries) and ``gate.checkpoint()`` at each step
boundary. Run gated or alone it performs the same arithmetic in the same
order, so its final weights must be bit-identical either way: that is the
test of "a paused trial resumes exactly where it stopped".
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from nbtune.bubbles.device import MPS_SHARE_ENV, peak_memory, synchronizer, to_numpy, use_mps_share
from nbtune.bubbles.gate import Gate, GuestSide
from nbtune.bubbles.timeline import Interval, now

__all__ = ["GuestSpec", "GuestResult", "train_guest", "guest_main", "pin"]


@dataclass(frozen=True)
class GuestSpec:
    """One guest trial. ``layer_hooks=False`` pauses only at step boundaries (and so
    leans on the SIGSTOP fallback when a step outlasts the host's grace)."""

    seed: int = 0
    steps: int = 200
    width: int = 64
    depth: int = 4
    batch: int = 32
    lr: float = 0.05
    layer_hooks: bool = True
    stop_with_host: bool = False  # end at the first step boundary after the host has ended
    #: the guest process's niceness. The gate keeps the guest out of the stage's compute, but
    #: on CPU the stage's communication (gloo's I/O thread) needs the core too, during the
    #: bubble: at nice 0 a running guest delays it by whole time slices (gated iterations
    #: slow down markedly); at 19 it preempts the guest at once. The price, on a machine
    #: shared with other jobs, is that their processes starve the guest as well.
    nice: int = 19
    #: run the guest in Linux's SCHED_IDLE class: it gets a core only when nothing else wants
    #: it and never preempts a waking task, the scheduler's own notion of "in the bubbles"
    idle_class: bool = True
    name: str = "guest"
    #: where it trains: "cpu" or a CUDA device (its data is drawn on the CPU either way, so
    #: a run is the same sequence of numbers on any device)
    device: str = "cpu"
    #: with an MPS daemon: the guest's share of the GPU's SMs, its stage's (never more)
    mps_percentage: int | None = None


@dataclass
class GuestResult:
    spec: GuestSpec
    weights: dict[str, Any]  # name -> numpy array, the final parameters
    step_ends: list[float] = field(default_factory=list)  # when each step finished
    intervals: list[Interval] = field(default_factory=list)  # ("run"/"free", start, end)
    pauses: int = 0
    peak_rss: int = 0  # bytes: ru_maxrss of the guest process; on a GPU, peak reserved memory
    mps_share: str | None = None  # the MPS SM share the process ran under, as it saw it
    started: float = 0.0
    ended: float = 0.0
    cpu_s: float = 0.0  # CPU seconds the training loop got (process time), against its wall time

    def step_time(self) -> float:
        """Median seconds per step (of an ungated run, the guest's solo step time)."""
        gaps = sorted(b - a for a, b in zip([self.started, *self.step_ends], self.step_ends, strict=False))
        return gaps[len(gaps) // 2] if gaps else 0.0


def pin(cpu: int | None) -> None:
    """One thread, optionally on one core: a stage and its guest share a core as they
    would share a GPU."""
    import torch

    torch.set_num_threads(1)
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


def _model(spec: GuestSpec) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(spec.seed)
    layers: list[nn.Module] = []
    for _ in range(spec.depth):
        layers += [nn.Linear(spec.width, spec.width), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(spec.width, 1))


def train_guest(spec: GuestSpec, gate: GuestSide | None = None, *,
                on_ready: Any = None, stop: Any = None) -> GuestResult:
    """Train ``spec`` to the end; with ``gate``, only inside the host stage's bubbles.
    ``stop`` (an Event): end at the first step boundary after it is set (a probe's end)."""
    import torch

    dev = torch.device(spec.device)
    model = _model(spec).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=spec.lr)
    gen = torch.Generator().manual_seed(spec.seed + 1)
    w_true = torch.randn(spec.width, 1, generator=gen).to(dev)
    sync = synchronizer(spec.device)
    if gate is not None and gate.sync is None:
        gate.sync = sync  # nothing in flight when it gives the GPU back
    off_gpu = gate.off_device if gate is not None and sync is not None else nullcontext
    if gate is not None and spec.layer_hooks:
        gate.attach(model)
    if on_ready is not None:
        on_ready()
    if gate is not None:
        gate.start()
    res = GuestResult(spec=spec, weights={}, started=now())
    cpu0 = time.process_time()
    for _ in range(spec.steps):
        if stop is not None and stop.is_set():
            break
        if gate is not None:
            if spec.stop_with_host and gate.host_ended():
                break
            gate.checkpoint()
        with off_gpu():  # drawing the batch is CPU work: on a GPU it needs no bubble
            x = torch.randn(spec.batch, spec.width, generator=gen)
        x = x.to(dev)
        y = torch.tanh(x @ w_true)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if gate is not None:
            gate.checkpoint()
        opt.step()
        if sync is not None:
            sync()  # the step ends when its kernels do (step_ends time the guest's progress)
        res.step_ends.append(now())
    res.ended = now()
    res.cpu_s = time.process_time() - cpu0
    if gate is not None:
        gate.finish()
        res.intervals, res.pauses = gate.intervals, gate.pauses
    else:
        res.intervals = [("free", res.started, res.ended)]
    res.weights = {k: to_numpy(v) for k, v in model.state_dict().items()}
    res.peak_rss = peak_memory(spec.device)
    res.mps_share = os.environ.get(MPS_SHARE_ENV)
    return res


def guest_main(spec: GuestSpec, gate: Gate | None, out: Any, cpu: int | None,
               max_wait: float, stop: Any = None) -> None:
    """Entry point of a guest process: pinned beside its stage, gated."""
    use_mps_share(spec.mps_percentage)
    pin(cpu)
    os.nice(spec.nice)
    if spec.idle_class and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    side = GuestSide(gate, max_wait=max_wait) if gate is not None else None
    try:
        res = train_guest(spec, side, on_ready=lambda: out.put(("ready", spec.name, os.getpid())),
                          stop=stop)
        out.put(("guest", spec.name, res))
    except BaseException as exc:  # the parent must hear of it, not wait for a result
        out.put(("error", spec.name, repr(exc)))
        raise
