"""The co-location probe's arithmetic on a built host timeline (no processes).

:func:`nbtune.bubbles.probe.phase` reads a :class:`~nbtune.bubbles.host.HostRun`;
here the run is built so the truth is known: every compute resumption of a
gated iteration costs ``delay`` seconds, and the machine's load may stretch
everything as the run goes on.
"""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.bubbles.guest import GuestResult, GuestSpec
from nbtune.bubbles.host import HostSpec, empty_run
from nbtune.bubbles.probe import phase, what_if

GUESTS = {s: GuestSpec(name=f"g{s}") for s in range(2)}
SOLO = {g.name: 0.001 for g in GUESTS.values()}


def built_run(microbatches: int, iterations: int, *, chunks: int, chunk: float, gap: float,
              delay: float, drift: float = 0.0):
    """2 stages, ``chunks`` compute chunks per iteration each, separated by ``gap``; gated
    (odd) iterations pay ``delay`` before each chunk; iteration k runs (1 + drift·k) slower
    (a machine whose load grows). The guest runs in the first half of every gated gap of
    stage 0 and finishes a step there."""
    spec = HostSpec(stages=2, microbatches=microbatches, iterations=iterations, warmup=0,
                    ab_block=1)
    run = empty_run(spec)
    ends: list[float] = []
    ran: list = []
    t = 0.0
    for k in range(iterations):
        f = 1.0 + drift * k
        pause = (gap + (delay if spec.gated(k) else 0.0)) * f
        t0 = t
        for s in range(2):
            ivs, c = [], t0
            for _ in range(chunks):
                c += pause
                if s == 0 and spec.gated(k):
                    ends.append(c - pause / 2)
                    ran.append(("run", c - pause, c - pause / 2))
                ivs.append(("F", c, c + chunk * f))
                c += chunk * f
            run.iterations[k][s] = ivs
            run.stage_spans[k][s] = (t0, c)
            t = c
        run.iter_spans[k] = run.stage_spans[k][0]
    for g in GUESTS.values():
        run.guests[g.name] = GuestResult(g, {}, step_ends=list(ends), intervals=list(ran))
    return run


@given(st.integers(3, 20), st.floats(0.001, 0.01), st.floats(0.0, 0.005), st.floats(0.0, 0.08))
def test_paired_slowdown_reads_the_guest_cost_through_a_load_drift(n, chunk, delay, drift):
    run = built_run(4, 24, chunks=n, chunk=chunk, gap=0.0005, delay=delay, drift=drift)
    p = phase(run, range(2, 24), GUESTS, SOLO)
    truth = delay / (chunk + 0.0005)  # every gated iteration, whatever its load
    assert p.slowdown() == pytest.approx(truth, rel=1e-6, abs=1e-9)
    assert p.resumptions(0) == p.resumptions(1) == n
    # the delay per resumption at the phase's middle load
    assert p.colocation(0).chunk_delay == pytest.approx(
        statistics.median(g - h for g, h in p.pairs(0)) / n, rel=1e-9)
    if drift >= 0.02 and delay > 0.0005:  # unpaired medians compare different loads
        med = statistics.median
        unpaired = med(p.gated_s[0]) / med(p.held_s[0]) - 1.0
        assert abs(unpaired - truth) > abs(p.slowdown() - truth)


def test_a_probe_at_4_microbatches_predicts_the_slowdown_at_8():
    probe_run = built_run(4, 26, chunks=9, chunk=0.01, gap=0.002, delay=0.01)
    probe = phase(probe_run, range(2, 26), GUESTS, SOLO)
    target_run = built_run(8, 26, chunks=17, chunk=0.005, gap=0.002, delay=0.01)
    target = phase(target_run, range(2, 26), GUESTS, SOLO)
    w = what_if(probe, target, 8)
    got = w["measured"]
    assert got["slowdown"] == pytest.approx(0.01 / 0.007)
    assert w["new"]["slowdown"] == pytest.approx(got["slowdown"], rel=1e-6)
    assert w["new"]["bubble_s"] == pytest.approx(got["bubble_s"], rel=1e-6)
    # σ as a ratio (0.01 / 0.012 at 4 microbatches) misses it by 42 %
    assert w["ratio_error"]["slowdown"] == pytest.approx(0.01 / 0.012 / (0.01 / 0.007) - 1)
    assert w["old_error"]["slowdown"] == -1.0


def test_fill_credits_the_compute_run_in_gated_iterations_wherever_the_step_ends():
    """A gated guest pauses mid-step: a step that ran inside a gated iteration but ended
    after it (in the held one) is progress made in the bubbles all the same."""
    run = built_run(4, 12, chunks=3, chunk=0.01, gap=0.002, delay=0.001)
    p = phase(run, range(2, 12), GUESTS, SOLO)
    assert p.steps == [pytest.approx(5 * 3)] * 2  # 5 gated iterations, a step per gap
    assert p.fill() == pytest.approx(2 * 15 * 0.001 / sum(p.bubble_s))
    for g in GUESTS.values():  # each gated iteration's last step now ends in the held one
        res = run.guests[g.name]
        ends = res.step_ends
        for hi in (run.stage_spans[k][0][1] for k in range(12) if run.spec.gated(k)):
            i = max(j for j, e in enumerate(ends) if e < hi)
            ends[i] = hi + 0.0001
    moved = phase(run, range(2, 12), GUESTS, SOLO)
    assert moved.steps == p.steps and moved.fill() == pytest.approx(p.fill())
    # compute done outside the measured windows counts for nothing
    for g in GUESTS.values():
        run.guests[g.name].intervals = [("run", b + 1e3, e + 1e3)
                                        for _, b, e in run.guests[g.name].intervals]
    assert phase(run, range(2, 12), GUESTS, SOLO).steps == [0.0, 0.0]
