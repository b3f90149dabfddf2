"""``BubbleRuntime(host, probe=...)`` calibrates the what-if model itself, in the host's first iterations.

One real run: a 2-stage 1F1B host whose first iterations after warm-up
alternate gated / held with a probe guest beside each stage; then the probe
guests stop and ``nbtune.tune`` places its trials. Checked from what the
processes measured: the probe ran only in its iterations and the trials only
after them, the runtime kept a measured :class:`CoLocation` per stage, and
its model reproduces, at the probe's own configuration, the slowdown the
probe measured (through the per-resumption delay, not a copy of σ).
"""

from __future__ import annotations

import pytest

from nbtune.bubbles import GuestSpec, HostSpec
from nbtune.bubbles.bubble_runtime import BubbleRuntime
from tests.bubbles.test_runtime import tune_on

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SPEC = HostSpec(iterations=50, warmup=2, width=256, depth=4, batch=64, microbatches=4,
                grace=0.01, timeout=240.0)
PROBE = 12
# steps longer than the grace, paused only at step boundaries: a slowdown the gate causes
GUEST = GuestSpec(width=256, depth=3, batch=256, layer_hooks=False, nice=0, idle_class=False)


@pytest.fixture(scope="module")
def probed():
    return tune_on(BubbleRuntime(SPEC, idle_class=False, probe=GUEST, probe_iterations=PROBE),
                   2, 1)


def test_the_probe_runs_first_and_the_trials_after_it(probed):
    exp, rt, run = probed
    until = SPEC.warmup + PROBE
    assert rt.spec.ab_until == until
    assert [rt.spec.gated(k) for k in range(SPEC.warmup, until)] == [False, True] * (PROBE // 2)
    assert all(rt.spec.gated(k) for k in range(until, SPEC.iterations))
    assert (exp.results()["state"] == "completed").all()
    probe_end = max(run.stage_spans[until - 1][s][1] for s in range(2))
    probe_steps = [t for g in rt.probe.guests.values() for t in run.guests[g.name].step_ends]
    assert probe_steps and min(probe_steps) < probe_end
    first_trial = min(iv[1] for recs in rt.guests.values() for r in recs for iv in r.intervals)
    assert first_trial >= probe_end  # the trials waited for the probe's measurement


def test_the_runtime_hands_the_measured_colocation_to_its_model(probed):
    _, rt, _ = probed
    phase = rt.probe.phase
    assert rt.colocation is not None and len(rt.colocation) == 2
    for c in rt.colocation:
        assert c.chunk_delay is not None and 0.0 < c.fill <= 1.0 and c.compute_stretch > 0
    assert phase.slowdown() > 0.1, phase.slowdown()  # the premise: this guest slows the host
    model = rt.what_if()
    assert model.colocation == rt.colocation
    assert model.iteration_time == pytest.approx(phase.held_iteration())
    # at the probe's own configuration the per-resumption delay gives back the measured
    # slowdown (pipeline paced by its most delayed stage: here both carry the same delay)
    assert model.gated_iteration_time / model.iteration_time - 1 == pytest.approx(
        phase.delay() / phase.held_iteration(), rel=1e-9)
    for s in range(2):
        assert model.guest_speed(s) == pytest.approx(
            rt.colocation[s].fill * model.gated_stage_idle(s), rel=1e-9)


def test_a_probe_needs_iterations_left_for_the_trials():
    with pytest.raises(ValueError, match="leave none"):
        BubbleRuntime(HostSpec(iterations=10, warmup=2), probe=GUEST, probe_iterations=8)
