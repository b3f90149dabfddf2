"""``allocator="auto"``: FIFO unless measurements show packing pays; never slower than FIFO."""

from __future__ import annotations

import pytest

import nbtune
from nbtune.allocators import ALLOCATORS, AutoAllocator
from nbtune.allocators.profiling import InMemoryProfileStore
from nbtune.core.resources import Demand
from nbtune.core.space import grid, loguniform
from nbtune.runtimes.profiler import Profiler
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload

SPACE = {"lr": loguniform(1e-3, 1e-1), "layers": grid([2])}


def _run(wl, allocator, n=2, trials=24, history=None):
    rt = SimRuntime(cluster=n, profiler=Profiler(history) if history is not None else None)
    return nbtune.tune(wl, SPACE, algorithm="asha", eta=3, metric="loss", max_budget=9,
                       num_trials=trials, allocator=allocator, runtime=rt, seed=0, validate=True)


def test_registered_and_the_default():
    import inspect

    assert ALLOCATORS["auto"] is AutoAllocator
    assert inspect.signature(nbtune.tune).parameters["allocator"].default == "auto"


def test_packing_that_gains_nothing_keeps_fifo_after_one_probe():
    wl = SyntheticWorkload(SPACE, unit_time=2.0, alpha=2.0)  # whole-GPU model, packing hurts
    hist = InMemoryProfileStore()
    fifo, auto = _run(wl, "fifo"), _run(wl, "auto", history=hist)
    prof = auto.engine.hints["profiles"].get('{"layers": 2}')
    assert prof.c_measured and prof.c == 1
    assert auto.engine.allocator.mode == "fifo"
    a = auto.allocations()
    assert (a.share < 1).sum() == 2  # the probe's two trials, nothing else packed
    # the probe's price: two promoted trials (2 units of 2 s each) at half speed on one GPU
    assert auto.makespan <= fifo.makespan + 2 * 2.0
    again = _run(wl, "auto", history=hist)  # the job history knows c = 1: no probe, FIFO
    assert (again.allocations().share == 1.0).all()
    assert again.makespan == pytest.approx(fifo.makespan)


def test_packing_that_pays_switches_to_fluid_knapsack_and_beats_fifo():
    wl = SyntheticWorkload(SPACE, unit_time=2.0, demand=Demand(0.25, 2.0))  # a quarter GPU
    fifo, auto = _run(wl, "fifo"), _run(wl, "auto")
    prof = auto.engine.hints["profiles"].get('{"layers": 2}')
    assert prof.c_measured and prof.c >= 2
    assert auto.engine.allocator.mode == "fluid"
    assert auto.makespan < 0.8 * fifo.makespan


@pytest.mark.parametrize("compute, packs", [(1.0, False), (0.25, True)])
def test_without_a_probe_only_a_measured_gpu_room_packs(compute, packs):
    """``probe=False`` never packs to measure; a model the (simulated) NVML samples show busy a
    quarter of the time alone is packed all the same, by its GPU room, with no probe."""
    from nbtune.algorithms import make_algorithm
    from nbtune.engine.engine import Engine

    wl = SyntheticWorkload(SPACE, unit_time=2.0, demand=Demand(compute, 2.0))
    # the simulator samples a trial alone each second of its first four: then the room counts
    algo = make_algorithm("random", SPACE, metric="loss", max_budget=3, num_trials=12, seed=0)
    eng = Engine(algo, AutoAllocator(probe=False), validate=True)
    SimRuntime(cluster=2).start(eng, wl)
    assert eng.done and eng.allocator.mode == ("fluid" if packs else "fifo")
    assert eng.ledger.log and any(r.share < 1.0 for r in eng.ledger.log) == packs


@pytest.mark.parametrize("bad", [{"c": 0}, {"d": 0}])
def test_bad_fluid_options_fail_early(bad):
    with pytest.raises(ValueError):
        AutoAllocator(**bad)


def test_the_packing_probe_leaves_held_trials_where_their_process_waits():
    """A held trial (no checkpoint, its process waiting on its GPU) goes on there: the probe
    neither packs it nor takes its GPU (moved, its process is given up and its state lost)."""
    from nbtune.allocators.profiling import Profile, model_signature
    from nbtune.core.resources import ClusterSpec
    from nbtune.core.trial import TrialRecord, TrialSpec, TrialState
    from tests.allocators.fluid_views import View

    cfg = {"layers": 2}
    store = InMemoryProfileStore([Profile(model_signature(cfg), unit_time=1.0,
                                          packing={1: 1.0})])
    specs = [TrialSpec(t, dict(cfg), 9.0) for t in range(4)]
    trials = {s.trial_id: TrialRecord(s.trial_id, dict(cfg), TrialState.PENDING, target_budget=9.0,
                                budget_used=3.0) for s in specs}
    view = View(ClusterSpec.homogeneous(3), trials, {}, specs, hints={"profiles": store})
    view.held = {0: ((0, 1.0),), 1: ((1, 1.0),)}
    out = AutoAllocator().allocate(view)
    assert out.launch[0] == ((0, 1.0),) and out.launch[1] == ((1, 1.0),)
    probe = {t for t, pl in out.launch.items() if pl[0][1] < 1.0}
    assert probe == {2, 3} and {out.launch[t][0][0] for t in probe} == {2}


@pytest.mark.parametrize("runnable, probed", [(None, False), (0.99, False), (0.4, True)])
def test_on_time_sliced_gpus_the_probe_waits_for_the_runnable_share(runnable, probed):
    """CPU stand-ins: no packing probe before the trial's runnable share is measured; one that
    fills its core settles c = 1 with no probe, one that waits on data half the time is probed."""
    from nbtune.allocators.profiling import Profile, model_signature
    from nbtune.core.resources import ClusterSpec
    from nbtune.core.trial import TrialRecord, TrialSpec, TrialState
    from nbtune.runtimes.profile_samples import Obs
    from tests.allocators.fluid_views import View

    cfg = {"layers": 2}
    sig = model_signature(cfg)
    prof = Profiler()
    prof.time_sliced = True
    prof.put(Profile(sig, unit_time=1.0, packing={1: 1.0}))  # its time alone is known
    if runnable is not None:
        prof._obs.setdefault(sig, Obs()).demand.extend([runnable - 0.1, runnable])
    specs = [TrialSpec(t, dict(cfg), 9.0) for t in range(4)]
    trials = {s.trial_id: TrialRecord(s.trial_id, dict(cfg), TrialState.PENDING,
                                      target_budget=9.0) for s in specs}
    view = View(ClusterSpec.homogeneous(2), trials, {}, specs, hints={"profiles": prof})
    out = AutoAllocator().allocate(view)
    packed = {t for t, pl in out.launch.items() if pl[0][1] < 1.0}
    assert bool(packed) == probed, out.launch
    if runnable == 0.99:
        assert prof.get(sig).c_measured and prof.get(sig).c == 1  # known without a probe
    prof.time_sliced = False  # a GPU (no runnable share): timing decides, the probe runs
    if runnable is None:
        assert {t for t, pl in AutoAllocator().allocate(view).launch.items() if pl[0][1] < 1}


@pytest.mark.parametrize("util, packs", [(0.07, True), (0.4, True), (0.9, False)])
def test_on_real_gpus_a_model_that_leaves_the_gpu_idle_is_packed_without_a_probe(util, packs):
    """GPU room (HyperSack's measured compute demand): a model NVML shows busy 7 % of the time
    alone is packed at once, as many per GPU as fit (capped at c = 4, or by the room), with no
    probe and no packing measured; one that fills the GPU is not (the probe decides, as before).
    On time-sliced stand-ins the room is never read: a CPU share is not a GPU's idle time."""
    from nbtune.allocators.profiling import Profile, model_signature
    from nbtune.core.resources import ClusterSpec
    from nbtune.core.trial import TrialRecord, TrialSpec, TrialState
    from nbtune.runtimes.profile_samples import Obs
    from tests.allocators.fluid_views import View

    cfgs = [{"layers": k} for k in range(8)]  # eight shapes: eight signatures, none probed
    prof = Profiler()
    for cfg in cfgs:
        sig = model_signature(cfg)
        prof.put(Profile(sig, unit_time=1.0, packing={1: 1.0}, demand=Demand(util, 1.0)))
        prof._obs.setdefault(sig, Obs()).util.extend([util] * 4)
    specs = [TrialSpec(t, dict(cfg), 9.0) for t, cfg in enumerate(cfgs)]
    trials = {s.trial_id: TrialRecord(s.trial_id, dict(s.config), TrialState.PENDING,
                                      target_budget=9.0) for s in specs}
    view = View(ClusterSpec.homogeneous(2), trials, {}, specs, hints={"profiles": prof})
    auto = AutoAllocator(probe=False)  # no probe: only the room can make it pack
    out = auto.allocate(view)
    packed = [t for t, pl in out.launch.items() if pl[0][1] < 1.0]
    assert (auto.mode == "fluid") == packs
    if packs:
        per_gpu = max(sum(pl[0][0] == g for pl in out.launch.values()) for g in (0, 1))
        assert len(out.launch) > 2 and per_gpu <= min(4, int(1 / util))
        assert packed
    else:
        assert len(out.launch) == 2 and not packed
    assert prof.gpu_room(model_signature(cfgs[0])) == pytest.approx(1 / util)
    prof.time_sliced = True
    assert prof.gpu_room(model_signature(cfgs[0])) is None
    assert AutoAllocator(probe=False).allocate(view).launch.keys() <= {0, 1}


def test_cpu_stand_ins_read_from_the_cluster_are_time_sliced_in_a_replay_too():
    """A resumed run replays its events before any runtime exists: the profiler then learns
    time slicing from the recorded cluster (GPUs of kind "cpu"), so the replay's ``auto``
    reads no GPU room where the first run (told by its Dask runtime) read none either."""
    from nbtune.core.resources import ClusterSpec

    wl = SyntheticWorkload(SPACE, unit_time=2.0, demand=Demand(0.25, 2.0))
    runs = {}
    for kind in ("cpu", "A100"):
        exp = nbtune.tune(wl, SPACE, algorithm="random", metric="loss", max_budget=3,
                          num_trials=12, allocator=AutoAllocator(probe=False), seed=0,
                          runtime=SimRuntime(cluster=ClusterSpec.homogeneous(2, kind=kind)))
        prof = exp.engine.hints["profiles"]
        assert prof.time_sliced is False  # nobody said so: the cluster does
        runs[kind] = (prof.sliced, exp.engine.allocator.mode)
    assert runs == {"cpu": (True, "fifo"), "A100": (False, "fluid")}


def test_a_model_not_measured_yet_packs_at_its_familys_smallest_room():
    """Many small shapes of one model (each its own signature, most stopped at their first
    rung) never give each shape enough samples alone: a shape not measured yet packs at the
    smallest GPU room measured in its family, so the GPU is not left mostly idle."""
    from nbtune.core.space import choice

    space = {"lr": loguniform(1e-3, 0.3), "channels": choice([8, 16, 32]),
             "batch_size": choice([16, 32, 64])}
    unit, compute = {16: 0.65, 32: 0.28, 64: 0.13}, {16: 0.03, 32: 0.073, 64: 0.09}
    spans = {}
    for allocator in ("fifo", "auto"):
        wl = SyntheticWorkload(space, unit_time=lambda c: unit[c["batch_size"]],
                               demand=lambda c: Demand(compute[c["batch_size"]], 2.1),
                               launch_overhead=0.5, max_budget_hint=9, seed=0)
        exp = nbtune.tune(wl, space, algorithm="asha", eta=3, metric="loss", max_budget=9,
                          num_trials=27, allocator=allocator, runtime=SimRuntime(cluster=1),
                          seed=0, validate=True)
        spans[allocator] = exp.makespan
        if allocator == "auto":
            prof = exp.engine.hints["profiles"]
            rooms = {s: prof.gpu_room(s) for s in prof.measured()}
            known = [r for r in rooms.values() if r is not None]
            assert known and None in rooms.values()  # some shapes never measured alone
            unseen = '{"batch_size": 128, "channels": 8}'
            assert prof.similar_room(unseen) == min(known)
            assert prof.similar_room('{"depth": 3}') is None  # another model: nothing known
    assert spans["fifo"] / spans["auto"] >= 1.5


def test_cpu_stand_ins_borrow_no_room():
    from nbtune.core.resources import ClusterSpec

    wl = SyntheticWorkload(SPACE, unit_time=2.0, demand=Demand(0.25, 2.0))
    rt = SimRuntime(cluster=ClusterSpec.homogeneous(2, kind="cpu"))
    exp = nbtune.tune(wl, SPACE, algorithm="asha", eta=3, metric="loss", max_budget=9,
                      num_trials=12, allocator="auto", runtime=rt, seed=0)
    prof = exp.engine.hints["profiles"]
    assert prof.similar_room('{"layers": 4}') is None and prof.gpu_room('{"layers": 2}') is None
