"""A real pipeline-parallel host job: ``torch.distributed.pipelining`` 1F1B, one process per stage.

The host is the "large model" of Hydro §5.1: a small MLP cut into ``stages``
consecutive parts, each trained in its own process by ``Schedule1F1B`` over
gloo, ``microbatches`` per iteration, on the CPU or on a CUDA device
(:mod:`.device`: the layers on the GPU, activations crossing in host memory).
Each stage times its own compute (forward and backward of a microbatch, the
loss on the last stage, the optimizer step) through
:class:`~nbtune.bubbles.gate.HostSide`, which also keeps a co-located guest out
while it computes, and publishes each iteration's intervals on a queue as it
goes; the parent (the scheduler side) reads them.

It does not use torch's private schedule visualiser: the timeline is what the
stages measured, not what the schedule says should happen.
"""

from __future__ import annotations

import os
import queue
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from nbtune.bubbles.device import OnDevice, peak_memory, synchronizer, to_numpy, use_mps_share
from nbtune.bubbles.gate import Gate, HostSide
from nbtune.bubbles.guest import GuestResult, GuestSpec, guest_main, pin
from nbtune.bubbles.timeline import Interval, bubble_ratio, now, subtract

__all__ = ["HostSpec", "HostRun", "PipelineHost", "reference_weights"]


@dataclass(frozen=True)
class HostSpec:
    """The host job: a ``depth``-layer MLP of ``width`` split evenly over ``stages``."""

    stages: int = 2
    microbatches: int = 4
    batch: int = 64
    width: int = 256
    depth: int = 8
    iterations: int = 10
    warmup: int = 2  # iterations left out of throughput and bubble figures
    lr: float = 0.01
    seed: int = 0
    #: seconds a stage waits for its guest to pause before it SIGSTOPs it; one per stage or all
    grace: float | tuple[float, ...] = 0.05
    timeout: float = 120.0  # gloo's timeout and the parent's bound on the whole run
    #: 0: guests use every bubble. k > 0: iterations alternate in blocks of k between gated
    #: (guests in the bubbles) and held (the stage keeps its slot, the guest sleeps), so one
    #: run compares the host with and without guests under the same machine load
    ab_block: int = 0
    #: with ``ab_block``: alternate only before this iteration, gate every one from here on
    #: (a co-location probe in the host's first iterations, then guests in every bubble)
    ab_until: int | None = None
    #: where the stages compute: "cpu" (one core per stage) or a CUDA device such as "cuda:0"
    device: str = "cpu"
    #: with an MPS daemon: each stage process's share of the GPU's SMs, e.g. 50 for two stages
    #: on one GPU (each stage a half-GPU, as if on its own smaller GPU)
    mps_percentage: int | None = None

    def gated(self, it: int) -> bool:
        """Whether iteration ``it`` lets the guests into its bubbles."""
        if self.ab_until is not None and it >= self.ab_until:
            return True
        return self.ab_block == 0 or (it // self.ab_block) % 2 == 1


@dataclass
class HostRun:
    """What one run measured."""

    spec: HostSpec
    iterations: list[list[list[Interval]]] = field(default_factory=list)  # [it][stage] -> intervals
    iter_spans: list[tuple[float, float]] = field(default_factory=list)  # stage 0's per iteration
    stage_spans: list[list[tuple[float, float]]] = field(default_factory=list)  # [it][stage]
    weights: list[dict[str, Any]] = field(default_factory=list)  # per stage, final
    #: per stage, bytes: peak RSS on the CPU, peak reserved device memory on a GPU
    peak_rss: list[int] = field(default_factory=list)
    handoffs: list[list[float]] = field(default_factory=list)  # per stage
    stops: list[int] = field(default_factory=list)  # SIGSTOP fallbacks per stage
    stopped: list[list[Interval]] = field(default_factory=list)  # per stage, guest SIGSTOPped
    guests: dict[str, GuestResult] = field(default_factory=dict)

    def measured(self) -> list[list[Interval]]:
        """Per stage, every interval of the measured (post-warmup) iterations."""
        its = self.iterations[self.spec.warmup:]
        return [[iv for it in its for iv in it[s]] for s in range(self.spec.stages)]

    def window(self) -> tuple[float, float]:
        """From the first measured iteration's start to the last one's end (stage 0's clock)."""
        spans = self.iter_spans[self.spec.warmup:]
        return spans[0][0], spans[-1][1]

    def guest_ran(self, stage: int, name: str) -> list[Interval]:
        """When the guest beside ``stage`` really ran while gated: its running intervals less
        the stretches the stage had it SIGSTOPped."""
        runs = [iv for iv in self.guests[name].intervals if iv[0] == "run"]
        return subtract(runs, self.stopped[stage])

    def throughput(self) -> float:
        """Host samples per second over the measured iterations."""
        lo, hi = self.window()
        return len(self.iter_spans[self.spec.warmup:]) * self.spec.batch / (hi - lo)

    def bubble_ratios(self) -> list[float]:
        """Per stage, the mean over measured iterations of :func:`bubble_ratio`."""
        its = self.iterations[self.spec.warmup:]
        per = [bubble_ratio(it) for it in its]
        return [sum(r[s] for r in per) / len(per) for s in range(self.spec.stages)]


def _layers(spec: HostSpec) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(spec.seed)
    layers: list[nn.Module] = []
    for _ in range(spec.depth):
        layers += [nn.Linear(spec.width, spec.width), nn.ReLU()]
    return nn.Sequential(*layers)


def _part(spec: HostSpec, model: Any, stage: int) -> Any:
    from torch import nn

    per = len(model) // spec.stages
    return nn.Sequential(*list(model)[stage * per:(stage + 1) * per])


def _batch(spec: HostSpec, it: int) -> tuple[Any, Any]:
    import torch

    gen = torch.Generator().manual_seed(spec.seed * 100_003 + it)
    x = torch.randn(spec.batch, spec.width, generator=gen)
    return x, torch.sin(x)


def reference_weights(spec: HostSpec) -> list[dict[str, Any]]:
    """The same training in one process (per-microbatch losses averaged, as 1F1B scales them)."""
    import torch

    pin(None)
    model = _layers(spec)
    opt = torch.optim.SGD(model.parameters(), lr=spec.lr)
    for it in range(spec.iterations):
        x, y = _batch(spec, it)
        opt.zero_grad()
        for xm, ym in zip(x.chunk(spec.microbatches), y.chunk(spec.microbatches), strict=True):
            (torch.nn.functional.mse_loss(model(xm), ym) / spec.microbatches).backward()
        opt.step()
    return [{k: v.detach().numpy().copy() for k, v in _part(spec, model, s).state_dict().items()}
            for s in range(spec.stages)]


def _stage_main(rank: int, spec: HostSpec, gate: Gate | None, out: Any, store: str,
                cpu: int | None, go: Any) -> None:
    """One stage's process: 1F1B over gloo, every compute chunk timed and gated."""
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    use_mps_share(spec.mps_percentage)
    pin(cpu)
    sync = synchronizer(spec.device) or (lambda: None)
    grace = spec.grace if isinstance(spec.grace, float | int) else spec.grace[rank]
    host = HostSide(gate, grace=grace)

    class TimedStage(PipelineStage):
        """A PipelineStage whose compute chunks go through the gate and into the timeline."""

        def forward_one_chunk(self, *a: Any, **k: Any) -> Any:
            with host.busy("F"):
                out = super().forward_one_chunk(*a, **k)
                sync()  # the chunk ends when its kernels do
                return out

        def backward_one_chunk(self, *a: Any, **k: Any) -> Any:
            with host.busy("B"):
                out = super().backward_one_chunk(*a, **k)
                sync()
                return out

    def loss_fn(output: Any, target: Any) -> Any:
        with host.busy("L"):
            return torch.nn.functional.mse_loss(output, target)

    try:
        dist.init_process_group("gloo", rank=rank, world_size=spec.stages,
                                init_method=f"file://{store}",
                                timeout=timedelta(seconds=spec.timeout))
        part = _part(spec, _layers(spec), rank)
        shape = (spec.batch // spec.microbatches, spec.width)
        # static shapes, no shape inference through the GPU; stage > 0's input carries a gradient
        ins, outs = torch.empty(shape, requires_grad=rank > 0), torch.empty(shape, requires_grad=True)
        stage = (TimedStage(part, rank, spec.stages, torch.device("cpu")) if spec.device == "cpu"
                 else TimedStage(OnDevice(part, spec.device), rank, spec.stages,
                                 torch.device("cpu"), input_args=ins, output_args=outs))
        sched = Schedule1F1B(stage, n_microbatches=spec.microbatches, loss_fn=loss_fn)
        opt = torch.optim.SGD(part.parameters(), lr=spec.lr)
        out.put(("up", rank))
        if not go.wait(spec.timeout):  # the guests are up (or the parent gave up on them)
            raise TimeoutError("the parent never said go")
        host.start()
        dist.barrier()
        for it in range(spec.iterations):
            x, y = _batch(spec, it)
            if not spec.gated(it):
                host.hold()
            t0 = now()
            opt.zero_grad()
            if rank == 0:
                sched.step(x)
            elif rank == spec.stages - 1:
                sched.step(target=y)
            else:
                sched.step()
            with host.busy("O"):
                opt.step()
                sync()
            t1 = now()
            if not spec.gated(it):
                host.release()
            out.put(("iter", rank, it, (t0, t1), host.take(), peak_memory(spec.device)))
        host.end()
        dist.barrier()
        weights = {k: to_numpy(v) for k, v in part.state_dict().items()}
        out.put(("stage", rank, weights, peak_memory(spec.device), host.handoffs,
                 gate.stops.value if gate is not None else 0, host.stopped))
        dist.destroy_process_group()
    except BaseException as exc:
        host.end()  # a failing host must not leave its guest paused
        out.put(("error", f"stage {rank}", repr(exc)))
        raise


class PipelineHost:
    """Run the host job, optionally with one gated guest beside each stage.

    ``pin_cores`` puts stage i and its guest on core i (when the machine has a
    core per stage), the CPU analogue of a stage and its guest sharing one GPU.
    On a GPU they share the device, not a core: each process gets its own core
    where there are enough (``guest_cores``), else none is pinned.
    """

    def __init__(self, spec: HostSpec, *, pin_cores: bool = True) -> None:
        self.spec = spec
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        n = spec.stages if spec.device == "cpu" else 2 * spec.stages
        mine = cores[:n] if pin_cores and len(cores) >= n else [None] * n
        self.cores: list[int | None] = mine[:spec.stages]
        self.guest_cores: list[int | None] = mine[-spec.stages:]

    def run(self, guests: dict[int, GuestSpec] | None = None, *,
            guest_max_wait: float = 30.0) -> HostRun:
        """Train the host (and the guests at their stages); bounded by ``spec.timeout``."""
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        spec, guests = self.spec, guests or {}
        out = ctx.Queue()
        go = ctx.Event()
        gates = [Gate(ctx) if s in guests else None for s in range(spec.stages)]
        procs = []
        run = empty_run(spec)
        deadline = now() + spec.timeout
        with tempfile.TemporaryDirectory() as tmp:
            try:
                # everything starts at once (importing torch is most of a run's time);
                # the stages train only once every guest is ready to be gated
                for s, g in guests.items():
                    procs.append(ctx.Process(target=guest_main, daemon=True,
                                             args=(g, gates[s], out, self.guest_cores[s], guest_max_wait)))
                for s in range(spec.stages):
                    procs.append(ctx.Process(target=_stage_main, daemon=True, args=(
                        s, spec, gates[s], out, str(Path(tmp) / "store"), self.cores[s], go)))
                for p in procs:
                    p.start()
                self._collect(out, {"ready", "up"}, len(guests) + spec.stages, run, deadline)
                go.set()
                self._collect(out, {"iter", "stage", "guest"},
                              spec.iterations * spec.stages + spec.stages + len(guests),
                              run, deadline)
            finally:
                for p in procs:
                    p.join(timeout=max(deadline - now(), 1.0))
                    if p.is_alive():
                        p.kill()
                        p.join(5)
        return run

    @staticmethod
    def _collect(out: Any, kinds: set[str], n: int, run: HostRun, deadline: float) -> None:
        got = 0
        while got < n:
            try:
                msg = out.get(timeout=max(deadline - now(), 0.01))
            except queue.Empty:
                raise TimeoutError(f"the host run produced {got} of {n} messages in time") from None
            kind = msg[0]
            if kind == "error":
                raise RuntimeError(f"{msg[1]} failed: {msg[2]}")
            if kind not in kinds:
                raise RuntimeError(f"unexpected message {kind!r}")
            got += 1
            absorb(run, msg)


def absorb(run: HostRun, msg: tuple) -> None:
    """File one message of a stage or guest process into ``run``."""
    kind = msg[0]
    if kind == "iter":
        _, rank, it, span, ivs, rss = msg
        run.iterations[it][rank] = ivs
        run.stage_spans[it][rank] = span
        run.peak_rss[rank] = max(run.peak_rss[rank], rss)
        if rank == 0:
            run.iter_spans[it] = span
    elif kind == "stage":
        _, rank, w, rss, hand, stops, stopped = msg
        run.weights[rank], run.peak_rss[rank], run.stopped[rank] = w, rss, stopped
        run.handoffs[rank], run.stops[rank] = hand, stops
    elif kind == "guest":
        run.guests[msg[1]] = msg[2]


def empty_run(spec: HostSpec) -> HostRun:
    """A :class:`HostRun` with a slot for every iteration and stage, filled as messages come."""
    return HostRun(spec, iterations=[[[] for _ in range(spec.stages)]
                                     for _ in range(spec.iterations)],
                   iter_spans=[(0.0, 0.0)] * spec.iterations,
                   stage_spans=[[(0.0, 0.0)] * spec.stages for _ in range(spec.iterations)],
                   weights=[{}] * spec.stages, peak_rss=[0] * spec.stages,
                   handoffs=[[] for _ in range(spec.stages)], stops=[0] * spec.stages,
                   stopped=[[] for _ in range(spec.stages)])
