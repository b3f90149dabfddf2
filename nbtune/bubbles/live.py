"""A pipeline host started in the background, measuring as it goes, that guests may join.

:meth:`PipelineHost.run <nbtune.bubbles.host.PipelineHost.run>` is given its
guests up front and blocks until the host ends (a benchmark's shape). A
scheduler needs the other shape: the host trains on its own while its
measured timeline comes in, and trials are placed beside its stages whenever
the allocator decides. :class:`LiveHost` starts the same stage processes
(:func:`~nbtune.bubbles.host._stage_main`) with a gate at *every* stage (a gate
with no guest costs the stage one uncontended lock per compute chunk), files
each message into a :class:`~nbtune.bubbles.host.HostRun` as it arrives, and
reads the figures a scheduler needs off what was measured so far: each
stage's idle fraction, the iteration time, the stage's peak memory and when
the host will end.
"""

from __future__ import annotations

import queue
import tempfile
from pathlib import Path
from typing import Any

from nbtune.bubbles.gate import Gate
from nbtune.bubbles.host import HostRun, HostSpec, PipelineHost, _stage_main, absorb, empty_run
from nbtune.bubbles.timeline import merge, now, total

__all__ = ["LiveHost"]


class LiveHost:
    """Run ``spec``'s stages in the background; messages go to ``out`` (shared with guests)."""

    def __init__(self, spec: HostSpec, ctx: Any, out: Any, *, pin_cores: bool = True) -> None:
        self.spec, self.ctx, self.out = spec, ctx, out
        layout = PipelineHost(spec, pin_cores=pin_cores)
        self.cores, self.guest_cores = layout.cores, layout.guest_cores  # equal on the CPU
        self.gates = [Gate(ctx) for _ in range(spec.stages)]
        self.run: HostRun = empty_run(spec)
        self.procs: list[Any] = []
        self.ended = [False] * spec.stages
        self.started_at = 0.0
        self.early: list[tuple] = []  # other processes' messages read while waiting for "up"
        self._tmp = tempfile.TemporaryDirectory()

    # ------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Spawn the stages, wait (bounded) until all are up, and let them train."""
        go = self.ctx.Event()
        for s in range(self.spec.stages):
            self.procs.append(self.ctx.Process(target=_stage_main, daemon=True, args=(
                s, self.spec, self.gates[s], self.out, str(Path(self._tmp.name) / "store"),
                self.cores[s], go)))
        for p in self.procs:
            p.start()
        deadline = now() + self.spec.timeout
        up = 0
        while up < self.spec.stages:
            msg = self.next_message(deadline)
            if msg[0] == "up":
                up += 1
            else:  # a guest's (they share the queue): for whoever reads the queue next
                self.early.append(msg)
        self.started_at = now()
        go.set()

    def next_message(self, deadline: float) -> tuple:
        """The host's next message (a stage's or a guest's), or TimeoutError at ``deadline``."""
        try:
            msg = self.out.get(timeout=max(deadline - now(), 0.01))
        except queue.Empty:
            self.close()
            raise TimeoutError("the pipeline host did not answer in time") from None
        if msg[0] == "error":
            self.close()
            raise RuntimeError(f"{msg[1]} failed: {msg[2]}")
        return msg

    def take(self, msg: tuple) -> bool:
        """File a stage's message; True if it was one (``iter``, ``stage`` or a stage's error)."""
        if msg[0] == "error" and str(msg[1]).startswith("stage"):
            self.ended = [True] * self.spec.stages
            raise RuntimeError(f"the pipeline host's {msg[1]} failed: {msg[2]}")
        if msg[0] not in ("iter", "stage"):
            return False
        absorb(self.run, msg)
        if msg[0] == "stage":
            self.ended[msg[1]] = True
        return True

    def wait_measured(self, iterations: int) -> None:
        """Block until every stage has published ``iterations`` iterations (the scheduler's
        first measurement); other messages are kept in :attr:`early`."""
        deadline = now() + self.spec.timeout
        while self.measured() < iterations:
            msg = self.next_message(deadline)
            if not self.take(msg):
                self.early.append(msg)

    @property
    def done(self) -> bool:
        return all(self.ended)

    def close(self) -> None:
        """Join the stages (bounded), killing any still there; a killed host frees its guests
        through the gate's liveness check."""
        for p in self.procs:
            p.join(timeout=1.0 if not self.done else max(self.spec.timeout, 1.0))
            if p.is_alive():
                p.kill()
                p.join(5)
        self._tmp.cleanup()

    # ------------------------------------------------------------ measurements
    def measured(self) -> int:
        """How many iterations every stage has published, in order from the first."""
        n = 0
        for it in self.run.stage_spans:
            if any(span == (0.0, 0.0) for span in it):
                break
            n += 1
        return n

    def _its(self) -> range:
        n = self.measured()
        lo = min(self.spec.warmup, max(n - 1, 0))  # warm-up left out once there is more
        return range(lo, n)

    def idle_fraction(self, stage: int) -> float:
        """Measured share of the stage's iterations in which it did not compute (any kind)."""
        its = self._its()
        busy = span = 0.0
        for it in its:
            a, b = self.run.stage_spans[it][stage]
            span += b - a
            busy += total(merge(self.run.iterations[it][stage]))
        return max(1.0 - busy / span, 0.0) if span > 0 else 0.0

    def iteration_time(self) -> float:
        """Mean measured seconds per iteration (stage 0's spans; the pipeline moves as one)."""
        its = self._its()
        spans = [self.run.iter_spans[it] for it in its]
        return sum(b - a for a, b in spans) / len(spans) if spans else 0.0

    def expected_end(self) -> float:
        """When the host will end, at its measured pace (``now()``'s clock)."""
        n = self.measured()
        last = self.run.iter_spans[n - 1][1] if n else now()
        return max(last, now()) + (self.spec.iterations - n) * self.iteration_time()

    def stage_peak(self, stage: int) -> int:
        """The stage process's measured peak RSS so far, bytes."""
        return self.run.peak_rss[stage]

    def compute(self, stage: int) -> list[tuple[str, float, float]]:
        """Every compute interval the stage published."""
        return [iv for it in self.run.iterations for iv in it[stage]]
