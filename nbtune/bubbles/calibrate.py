"""A co-location probe in a live host's first iterations: the calibrated what-if model for free.

:mod:`.probe` reads a probe off a finished :class:`~nbtune.bubbles.host.HostRun`;
``benchmarks/bubble_fidelity.py`` runs one on purpose. A user of
:class:`~nbtune.bubbles.bubble_runtime.BubbleRuntime` should not need that script:
with ``BubbleRuntime(host, probe=GuestSpec(...))`` the live host's first
``probe_iterations`` after warm-up alternate gated / held (``HostSpec.ab_block = 1``,
``ab_until``) with a probe guest beside each stage (pinned to the stage's
core, on the stage's own gate); then the probe guests stop at their next step
boundary, the trials take the stages, and every later iteration is gated.
:class:`LiveProbe` runs that and turns it into the
:class:`~nbtune.allocators.bubble_model.CoLocation` per stage and the
calibrated :class:`~nbtune.allocators.bubbles.PipelineHostModel` model, fed by the
probe's held iterations (the host's no-guest figures).

The price: the host runs half of its probe iterations with a guest that is
not a trial (its progress is thrown away) and the first trial starts after
them.
"""

from __future__ import annotations

from dataclasses import replace

from nbtune.allocators.bubble_model import CoLocation
from nbtune.allocators.bubbles import PipelineHostModel
from nbtune.bubbles.guest import GuestSpec, guest_main, train_guest
from nbtune.bubbles.host import HostSpec, absorb
from nbtune.bubbles.live import LiveHost
from nbtune.bubbles.probe import Phase, model, phase
from nbtune.bubbles.timeline import now

__all__ = ["LiveProbe", "probe_spec", "solo_step"]


def probe_spec(spec: HostSpec, iterations: int) -> HostSpec:
    """``spec`` with its first ``iterations`` after warm-up alternating gated / held."""
    if iterations < 2:
        raise ValueError(f"a probe needs a gated and a held iteration, got {iterations}")
    until = spec.warmup + iterations
    if spec.iterations <= until:
        raise ValueError(f"the host's {spec.iterations} iterations leave none after its "
                         f"warm-up and a {iterations}-iteration probe")
    return replace(spec, ab_block=1, ab_until=until)


def solo_step(spec: GuestSpec, steps: int = 100) -> float:
    """The guest's solo seconds per step in this process (one thread, as in its own)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_guest(replace(spec, steps=steps, stop_with_host=False)).step_time()
    finally:
        torch.set_num_threads(threads)


class LiveProbe:
    """Probe guests beside a :class:`LiveHost`'s stages for its ``ab_until`` first iterations."""

    def __init__(self, host: LiveHost, guest: GuestSpec, *, max_wait: float = 30.0) -> None:
        if host.spec.ab_until is None:
            raise ValueError("the host's spec has no probe (see probe_spec)")
        self.host = host
        self.guests = {s: replace(guest, name=f"probe{s}", seed=guest.seed + s,
                                  steps=10**9, stop_with_host=True)
                       for s in range(host.spec.stages)}
        self.stop = host.ctx.Event()
        self.procs = [host.ctx.Process(target=guest_main, daemon=True, args=(
            g, host.gates[s], host.out, host.cores[s], max_wait, self.stop))
            for s, g in self.guests.items()]
        self.phase: Phase | None = None

    def start(self) -> None:
        """Spawn the probe guests and wait (bounded) until each has built its model and
        waits at its gate, so the host starts, and its probe iterations run, with them
        there: a guest still importing torch on a loaded machine would make no progress in
        the probe and leave nothing to measure. Other messages, and the ``ready`` ones,
        stay in the host's :attr:`~LiveHost.early` for their reader."""
        for p in self.procs:
            p.start()
        want = {g.name for g in self.guests.values()}
        deadline = now() + self.host.spec.timeout
        while want:
            msg = self.host.next_message(deadline)
            if msg[0] == "ready":
                want.discard(msg[1])
            self.host.early.append(msg)

    def finish(self) -> tuple[CoLocation, ...]:
        """Wait (bounded) for the probe's iterations, stop the probe guests, and read them."""
        host, spec = self.host, self.host.spec
        host.wait_measured(spec.ab_until)
        self.stop.set()
        want = {g.name for g in self.guests.values()}
        for msg in [m for m in host.early if m[0] == "guest" and m[1] in want]:
            host.early.remove(msg)
            absorb(host.run, msg)
        deadline = now() + spec.timeout
        while not want <= host.run.guests.keys():
            msg = host.next_message(deadline)
            if msg[0] == "guest" and msg[1] in want:
                absorb(host.run, msg)
            elif not host.take(msg):
                host.early.append(msg)
        for p in self.procs:
            p.join(5.0)
        steps = {g.name: solo_step(g) for g in self.guests.values()}
        self.phase = phase(host.run, range(spec.warmup, spec.ab_until), self.guests, steps)
        return tuple(self.phase.colocation(s) for s in self.phase.stages)

    def model(self) -> PipelineHostModel:
        """The calibrated what-if model of this host (after :meth:`finish`)."""
        if self.phase is None:
            raise RuntimeError("the probe has not finished")
        return model(self.phase, self.host.spec.microbatches)
