"""F_max from measured memory in the engine (``tune(..., fusion=True)``, Hydro §4.3).

Units report their peak memory as events; the engine probes each shape group with units of
one and two members, then sizes its units under the worker's memory less the margin. The
peaks fed here follow Hydro's observation that a fused model's memory is linear in F
(Fig. 8b): ``base + per_member * F`` bytes, per shape group.
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.core import events as ev
from nbtune.core.commands import Finish, Launch
from nbtune.core.resources import ClusterSpec
from nbtune.core.space import choice, uniform
from nbtune.core.trial import TrialState
from nbtune.engine import Engine
from nbtune.engine.fusion_units import enable
from tests.engine.toy import OneShot

GB = 10**9
SPACE = {"x": uniform(0, 1), "width": choice([8, 16])}


def _units(cmds):
    out = defaultdict(list)
    for c in cmds:
        if isinstance(c, Launch) and c.unit is not None:
            out[c.unit].append(c.trial_id)
    return dict(out)


def run(n, gpus, memory_gb, peak, cap=256, margin=0.1, seed=0, measure=True, space=SPACE):
    """Run OneShot (budget 2) to the end; every unit's first report carries its peak
    ``peak(width, size)``. Returns the engine and, per unit, (width, size, the sizes of
    its group measured when it launched)."""
    algo = OneShot(space, metric="loss", max_budget=2, num_trials=n, seed=seed)
    eng = Engine(algo, validate=True)
    enable(eng, cap, ("width",), memory=True, margin=margin)
    cluster = ClusterSpec.homogeneous(gpus, memory_gb=memory_gb)
    cmds = eng.handle(ev.ExperimentStarted(0.0, cluster))
    measured: dict[int, dict[int, int]] = defaultdict(dict)  # width -> size -> peak
    launched: dict[int, tuple[int, int, dict[int, int]]] = {}
    queue: list[tuple[int, int]] = []  # (trial, unit) in launch order
    reported: set[int] = set()
    now = 0.0
    while not any(isinstance(c, Finish) for c in cmds):
        for uid, ids in _units(cmds).items():
            width = eng.trials[ids[0]].config["width"]
            launched[uid] = (width, len(ids), dict(measured[width]))
            queue.extend((t, uid) for t in ids)
        assert queue, "nothing runs and the engine did not finish"
        tid, uid = queue.pop(0)
        now += 1.0
        width, size, _ = launched[uid]
        events = []
        if measure and uid not in reported:  # the unit's first report carries its peak
            reported.add(uid)
            p = peak(width, size)
            measured[width][size] = max(p, measured[width].get(size, 0))
            events.append(ev.UnitMemoryMeasured(now, uid, p))
        cmds = eng.handle(*events, ev.TrialReported(now, tid, 1, {"loss": 0.5}))
        cmds += eng.handle(ev.TrialReported(now, tid, 2, {"loss": 0.4}))
    assert all(t.state is TrialState.COMPLETED for t in eng.trials.values())
    return eng, launched


def _f_max(seen: dict[int, int], budget: float) -> int:
    """The line through the smallest and largest sizes measured, solved for the budget."""
    lo, hi = min(seen), max(seen)
    per = max((seen[hi] - seen[lo]) / (hi - lo), 1)
    return max(1, math.floor((budget - (seen[lo] - per * lo)) / per))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), gpus=st.integers(1, 3), memory_gb=st.integers(2, 80),
       base=st.tuples(st.floats(0.05, 0.5), st.floats(0.05, 0.5)),
       per=st.tuples(st.floats(0.001, 0.2), st.floats(0.001, 0.2)),
       cap=st.integers(1, 300), seed=st.integers(0, 99))
def test_units_stay_under_the_measured_f_max_and_the_memory_limit(n, gpus, memory_gb, base,
                                                                  per, cap, seed):
    """No unit is wider than the F_max its group's measurements gave when it launched (nor
    than two members before two sizes were measured, nor the cap), and every unit sized by
    a measured F_max peaks under the worker's memory less the margin."""
    budget = memory_gb * GB * 0.9

    def peak(width, size):  # fractions of the budget, so that two members always fit
        i = 0 if width == 8 else 1
        return int(budget * (base[i] + per[i] * size))

    eng, launched = run(n, gpus, memory_gb, peak, cap=cap, seed=seed)
    assert sorted(t for m in eng.fusion.members.values() for t in m) == list(range(n))
    for width, size, seen in launched.values():
        assert size <= cap
        if len(seen) < 2:
            assert size <= 2  # a probe
        else:
            assert size <= _f_max(seen, budget)
            assert peak(width, size) <= budget


def test_a_small_memory_limit_splits_a_group_into_units_of_f_max():
    """One worker, 20 trials of one shape: units of 1 and 2 members measure the line, then
    the other 17 fuse in units no wider than the F_max = 6 that 16 GB less 10 % allow."""
    peak = lambda width, size: int(2.4 * GB + 2.0 * GB * size)  # noqa: E731
    eng, launched = run(20, 1, 16, peak, space={"x": uniform(0, 1), "width": choice([8])})
    f_max = math.floor((16 * 0.9 - 2.4) / 2.0)
    assert f_max == 6
    sizes = [size for _, size, _ in launched.values()]
    assert sizes == [1, 2, 6, 6, 5]  # probes, then 17 trials spread over ceil(17 / 6) units
    # what each unit was sized from: nothing, F = 1, then F = 1, 2 (and 6, once measured)
    assert [sorted(seen) for _, _, seen in launched.values()] == [
        [], [1], [1, 2], [1, 2, 6], [1, 2, 6]]
    assert all(peak(8, s) <= 16 * GB * 0.9 for s in sizes)


def test_without_measurements_units_stay_probes_and_every_trial_still_runs():
    """A runtime that reports no memory never lets a group fuse wider than two (the
    missing probes are offered again whenever none is in flight): nothing stalls."""
    eng, launched = run(9, 2, 16, lambda w, s: 0, measure=False)
    assert all(size <= 2 for _, size, _ in launched.values())
    assert eng.done


def test_a_member_that_does_not_fit_alone_runs_alone():
    eng, launched = run(6, 1, 4, lambda w, s: int(5 * GB + GB * s))
    assert all(size == 1 for _, size, seen in launched.values() if len(seen) >= 2)


def test_fusion_with_memory_keeps_the_margin_in_range():
    algo = OneShot(SPACE, metric="loss", max_budget=2, num_trials=2, seed=0)
    with pytest.raises(ValueError, match="margin"):
        enable(Engine(algo), 8, ("width",), memory=True, margin=1.0)


def test_the_measurement_is_stored_and_read_back_for_resume():
    """A resumed run replays the stored events: the peaks must come back as they were."""
    from nbtune.store.serialize import dump_event, load_event

    e = ev.UnitMemoryMeasured(3.5, 7, 12 * GB + 345)
    kind, payload = dump_event(e)
    assert load_event(kind, payload) == e


def test_a_group_is_split_over_the_workers_its_probes_still_hold():
    """Two workers: the F = 1 probe ends, then the F = 2 probe reports its peak while it
    still runs. The other 9 trials are split over both workers (the probe's comes back),
    not put in one unit on the idle one."""
    algo = OneShot({"x": uniform(0, 1), "width": choice([8])}, metric="loss", max_budget=3,
                   num_trials=12, seed=0)
    eng = Engine(algo, validate=True)
    enable(eng, 256, ("width",), memory=True)
    cmds = eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2, memory_gb=16)))
    (u1, (one,)), (u2, two) = sorted(_units(cmds).items(), key=lambda kv: len(kv[1]))
    assert len(two) == 2
    eng.handle(ev.UnitMemoryMeasured(1.0, u1, GB), ev.TrialReported(1.0, one, 1, {"loss": 1}))
    for b in (2, 3):
        cmds = eng.handle(ev.TrialReported(float(b), one, b, {"loss": 1}))
    assert not _units(cmds)  # the F = 2 probe has not reported its peak: the rest wait
    out = eng.handle(ev.UnitMemoryMeasured(4.0, u2, GB + GB // 10),
                     *(ev.TrialReported(4.0, t, 1, {"loss": 1}) for t in two))
    (unit, members), = _units(out).items()  # one worker is idle: one unit launches now
    assert len(members) == 5  # 9 trials over the idle worker and the probe's
    for b in (2, 3):
        out = eng.handle(*(ev.TrialReported(5.0 + b, t, b, {"loss": 1}) for t in two))
    (_, rest), = _units(out).items()  # the probe's worker takes the other 4
    assert len(rest) == 4
