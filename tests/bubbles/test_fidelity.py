"""The sim's bubble model, calibrated by a co-location probe, against a real 2-stage host.

One real run (2 gloo stage processes, a guest beside each): gated and held
iterations alternate; the first ones after warm-up are the probe, the later
ones what the calibrated model predicts. The guests pause only at step
boundaries and their steps outlast the stages' 10 ms ``grace``, so a stage
that wants its core back waits up to 10 ms before it SIGSTOPs its guest: a
slowdown the gate itself causes, large whatever the machine's load (the
cooperative guests of ``bubble_squeeze`` cost a few percent either way on this
shared machine, within its noise). The test is that
the model *with* the measured slowdown predicts the later phase better than
the old one without it (σ = 0, fill = a constant 0.6), with tolerances loose
enough for a loaded shared machine, where the later phase's own two halves
differ by tens of percent (``benchmarks/RESULTS.md``, bubble_fidelity).
"""

from __future__ import annotations

import pytest

from nbtune.bubbles import GuestSpec, HostSpec, PipelineHost
from nbtune.bubbles.calibrate import solo_step
from nbtune.bubbles.probe import phase, what_if

pytestmark = [pytest.mark.slow, pytest.mark.integration]

WARM, PROBE, LATER = 2, 24, 24  # 12 gated + 12 held probe iterations: shorter ones flaked
SPEC = HostSpec(stages=2, microbatches=4, batch=128, width=384, depth=8,
                iterations=WARM + PROBE + LATER, warmup=WARM, grace=0.01, timeout=240.0,
                ab_block=1)
GUESTS = {s: GuestSpec(name=f"g{s}", seed=20 + s, width=384, depth=3, batch=256, steps=10_000_000,
                       stop_with_host=True, layer_hooks=False, nice=0, idle_class=False)
          for s in range(2)}


@pytest.fixture(scope="module")
def phases():
    run = PipelineHost(SPEC).run(GUESTS)
    steps = {g.name: solo_step(g) for g in GUESTS.values()}  # one thread, as in the guest
    probe = phase(run, range(WARM, WARM + PROBE), GUESTS, steps)
    later = phase(run, range(WARM + PROBE, SPEC.iterations), GUESTS, steps)
    return probe, later


def test_the_probe_measures_the_slowdown_a_guest_costs(phases):
    probe, later = phases
    # the configuration's premise: a guest that keeps the core past the grace slows the host
    assert later.slowdown() > 0.15, (probe.slowdown(), later.slowdown())
    assert probe.slowdown() > 0.15, (probe.slowdown(), later.slowdown())


def test_the_calibrated_model_predicts_the_later_phase_better_than_the_old_one(phases):
    probe, later = phases
    w = what_if(probe, later, SPEC.microbatches)
    pred, got = w, w["measured"]
    err = {k: {f: abs(pred[k][f] - got[f]) for f in got} for k in ("new", "old")}
    detail = (pred, got)
    # the old model says 0: its error is the whole slowdown; the probe's is smaller (measured
    # 0.04-0.51 of it in 10 runs; a model that ignores the slowdown has exactly 1)
    assert err["new"]["slowdown"] <= 0.8 * err["old"]["slowdown"], detail
    # the slowdown stretches the bubbles: the old model under-counts them by 72-87 %; the
    # calibrated one erred by 0-47 % of that, once 80 % (with the slowdown ignored: 94-100 %)
    assert err["new"]["bubble_s"] <= 0.85 * err["old"]["bubble_s"], detail
    # the fill is measured, not the old constant: within 60 % of the later phase's (measured
    # 1-36 %: the later phase's own halves differ by up to a quarter on this shared machine)
    assert err["new"]["fill"] <= 0.6 * got["fill"], detail
