"""The real thing: a 2-stage 1F1B host in two gloo processes, a guest process beside each stage.

One run (module fixture, bounded by ``HostSpec.timeout``) serves every test:
stage 0's guest is cooperative (checkpoints at every layer, grace 30 s so the
SIGSTOP fallback never fires and its timestamps are exact); stage 1's guest
checks only at step boundaries and its steps outlast a 2 ms grace, so stage 1
must SIGSTOP it. Timestamps are ``CLOCK_MONOTONIC`` in every process.
"""

from __future__ import annotations

import numpy as np
import pytest

from nbtune.bubbles import GuestSpec, HostSpec, PipelineHost, overlap, reference_weights
from nbtune.bubbles.colocate import fits, place
from nbtune.bubbles.guest import train_guest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SPEC = HostSpec(iterations=10, warmup=2, width=384, depth=4, batch=64, microbatches=4,
                grace=(30.0, 0.002), timeout=240.0)
# normal scheduling class (nice 19): on a crowded CI box a SCHED_IDLE guest may hardly run at all,
# and these tests are about the gate, not about the scheduler
COOP = GuestSpec(name="coop", seed=3, steps=1_000_000, stop_with_host=True, idle_class=False)
STUBBORN = GuestSpec(name="stubborn", seed=4, width=384, depth=3, batch=256, steps=150,
                     layer_hooks=False, idle_class=False)


@pytest.fixture(scope="module")
def run():
    return PipelineHost(SPEC).run({0: COOP, 1: STUBBORN})


def alone(spec: GuestSpec, steps: int) -> dict:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the guest process
    try:
        return train_guest(GuestSpec(**{**spec.__dict__, "steps": steps,
                                        "stop_with_host": False})).weights
    finally:
        torch.set_num_threads(threads)


def test_the_pipeline_trains_what_one_process_trains(run):
    ref = reference_weights(SPEC)
    diff = max(float(np.abs(run.weights[s][k] - ref[s][k]).max())
               for s in range(SPEC.stages) for k in ref[s])
    assert diff <= 1e-6


def test_each_stage_ran_1f1b_and_the_bubbles_are_measured(run):
    for it in run.iterations[SPEC.warmup:]:  # the first one also infers shapes
        order = ["".join(k for k, *_ in it[s] if k in "FB") for s in range(2)]
        assert order == ["FFBFBFBB", "FBFBFBFB"]  # stage 0 warms up with p = 2 forwards
        assert sum(k == "L" for k, *_ in it[1]) == SPEC.microbatches
    ratios = run.bubble_ratios()
    assert all(0.0 < r < 1.0 for r in ratios)
    assert run.throughput() > 0


def test_the_cooperative_guest_never_computes_while_its_stage_computes(run):
    g = run.guests["coop"]
    runs = [iv for iv in g.intervals if iv[0] == "run"]
    stage0 = [iv for it in run.iterations for iv in it[0]]
    assert run.stops[0] == 0  # no SIGSTOP: every pause was the guest's own, at a layer
    assert g.pauses >= SPEC.iterations and sum(e - s for _, s, e in runs) > 0
    # tolerance 0: the stage stamps its compute after it holds the slot, the guest stamps its
    # pause before it gives the slot up; the signal's latency is paid by the host (handoffs)
    assert overlap(runs, stage0) == 0.0
    assert len(run.handoffs[0]) == len(stage0)


def test_a_paused_guest_resumes_exactly_where_it_stopped(run):
    for spec in (COOP, STUBBORN):
        g = run.guests[spec.name]
        ref = alone(spec, len(g.step_ends))
        assert all(np.array_equal(g.weights[k], ref[k]) for k in ref), spec.name


def test_a_guest_that_does_not_pause_is_stopped_and_released_at_the_end(run):
    g = run.guests["stubborn"]
    assert run.stops[1] > 0  # its steps outlast the grace: the stage SIGSTOPped it
    assert len(run.stopped[1]) == run.stops[1]
    stage1 = [iv for it in run.iterations for iv in it[1]]
    # its clocks kept running while it was stopped; less those stretches, it never ran while
    # stage 1 computed (the stage stamps its compute after the SIGSTOP, and ends it before
    # the SIGCONT)
    assert overlap(run.guest_ran(1, "stubborn"), stage1) == 0.0
    host_end = max(e for it in run.iterations for _, _, e in it[1])
    assert g.ended > host_end  # it outlasted the host (it only ran in bubbles till then) ...
    assert len(g.step_ends) == STUBBORN.steps  # ... and was let go to finish on its own
    free = [s for k, s, _ in g.intervals if k == "free"]
    assert free and min(free) >= host_end
    # one handoff per compute chunk (how long each took is bubble_squeeze's figure: a
    # measurement of a loaded box, not a fact a test can rely on)
    assert len(run.handoffs[1]) == len(stage1)


def test_guests_are_placed_only_where_their_measured_peak_fits(run):
    stage_peaks = run.peak_rss
    guest_peaks = {n: g.peak_rss for n, g in run.guests.items()}
    assert min(stage_peaks) > 0 and min(guest_peaks.values()) > 0
    roomy = max(stage_peaks) + max(guest_peaks.values())
    assert fits(guest_peaks["coop"], stage_peaks[0], roomy)
    assert not fits(guest_peaks["coop"], stage_peaks[0], roomy // 4)
    assert len(place(guest_peaks, stage_peaks, roomy)) == 2
    assert place(guest_peaks, stage_peaks, roomy // 4) == {}
