"""Allocation logs of fixed simulator runs hash as they did when the resource ledger was unified.

The GPU bookkeeping (per-GPU load, trial counts, GPU-second accrual, where
paused trials wait) lives in the engine's one ledger, which allocators read
through a view; moving it there was to change no decision. Each run below
(fixed seeds; several algorithms × fifo,
Fluid, the knapsack policies, fluid+knapsack, auto; packing at non-dyadic
shares, cluster changes, resizes, barrier filling where paused trials go on)
is hashed over its whole allocation log (every record's trial, GPU, share,
start and end, floats by ``repr``, in log order) and, separately, over every
trial's accrued GPU-seconds. The expected hashes were recorded with the
bookkeeping spread over the allocators; a changed decision, a share off by one
ulp, or a different accrual order changes a hash.

Re-recorded on purpose (the commits that did say why): ASHA/BOHB for Ray's
stopping rule, and again when ASHA's default became the ``rank`` rule; the knapsack runs, as the profiler counts a busy GPU before a
trial's first report as its demand but skips a CPU stand-in's start-up (the refine
run is at oversubscription 1.3, where its swaps still change a decision); two knapsack
runs when the simulator began handing events closer than EPS to the engine in one call
(their unit times are multiples of 1/64 s, whose sums rounding splits by an ulp);
waterfill-hyperband-changes when DynamicFluid's scale-downs that feed scale-ups began to
join a shared GPU instead of staying alone on their own (which freed nothing).

Run ``python tests/engine/test_allocation_hashes.py`` to print the hashes of
the current code (to record new ones after a *deliberate* behaviour change).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

import nbtune
from nbtune.allocators.profiling import InMemoryProfileStore
from nbtune.core.events import ResourcesChanged
from nbtune.core.resources import GPU, ClusterSpec, Demand
from nbtune.core.space import grid, loguniform, uniform
from nbtune.experiment import Experiment
from nbtune.runtimes.profiler import Profiler
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload

SPACE = {"lr": loguniform(1e-4, 1e-1), "width": uniform(0.0, 1.0)}
KSPACE = {"lr": uniform(1e-4, 1e-1), "bs": grid([64, 128, 256, 512])}


def _fluid_workload(seed: int) -> SyntheticWorkload:
    return SyntheticWorkload(SPACE, unit_time=lambda c: 2.0 + 30.0 * c["width"], alpha=1.2,
                             beta=1.1, unit_time_jitter=0.2, seed=seed, launch_overhead=1.0,
                             demand=lambda c: Demand(0.2 + 0.6 * c["width"],
                                                     2.0 + 8 * c["width"], 1.0))


def _knapsack_workload() -> SyntheticWorkload:
    return SyntheticWorkload(KSPACE, unit_time=lambda c: c["bs"] / 64, seed=1,
                             demand=lambda c: Demand(0.1 + c["bs"] / 1024, 2 + c["bs"] / 64, 2))


def _mixed_cluster() -> ClusterSpec:
    gpus = [GPU(i, f"n{i // 2}", kind="A100" if i < 4 else "V100", memory_gb=40 if i < 4 else 16,
                speed=1.0 if i < 4 else 0.6) for i in range(8)]
    return ClusterSpec(gpus, node_cpus={f"n{i}": 16.0 for i in range(4)})


def _fluid(algorithm: str, allocator: str, *, n: int, per_node: int, seed: int,
           changes: tuple[tuple[float, int, int], ...] = (), **opts) -> Experiment:
    sim = SimRuntime(cluster=ClusterSpec.homogeneous(n, gpus_per_node=per_node),
                     resize_overhead=opts.get("resize_overhead", 0.0))
    for t, m, p in changes:
        sim.at(t, ResourcesChanged, cluster=ClusterSpec.homogeneous(m, gpus_per_node=p))
    kw = {"eta": 3} if algorithm in ("asha", "hyperband") else {}
    return nbtune.tune(_fluid_workload(seed), SPACE, algorithm=algorithm, metric="loss",
                       max_budget=27, num_trials=40, allocator=allocator, runtime=sim,
                       seed=seed, validate=True, allocator_options=opts, **kw)


def _knapsack(allocator: str, algorithm: str = "grid", cluster: ClusterSpec | None = None,
              **opts) -> Experiment:
    cluster = cluster or ClusterSpec.homogeneous(4, gpus_per_node=2, kind="A100", memory_gb=40,
                                                 cpus_per_node=32)
    kw = {"eta": 3} if algorithm in ("asha", "hyperband") else {}
    return nbtune.tune(_knapsack_workload(), KSPACE, algorithm=algorithm, metric="loss",
                       max_budget=6, num_trials=32, allocator=allocator,
                       runtime=SimRuntime(cluster=cluster), validate=True, seed=0,
                       allocator_options=opts, **kw)


def _filled(algorithm: str, allocator: str, seed: int, **kw) -> Experiment:
    """Barrier filling: paused trials go on speculatively where they last ran."""
    wl = SyntheticWorkload(SPACE, unit_time=lambda c: 5.0 + 40.0 * c["width"], seed=seed)
    return nbtune.tune(wl, algorithm=algorithm, metric="loss", seed=seed, allocator=allocator,
                       runtime=SimRuntime(cluster=4), fill_barriers=True, validate=True, **kw)


def _auto(demand: Demand | None, alpha: float = 1.0) -> Experiment:
    kw = {} if demand is None else {"demand": demand}
    wl = SyntheticWorkload({"lr": loguniform(1e-3, 1e-1), "layers": grid([2])}, unit_time=2.0,
                           alpha=alpha, **kw)
    rt = SimRuntime(cluster=2, profiler=Profiler(InMemoryProfileStore()))
    return nbtune.tune(wl, wl.space, algorithm="asha", eta=3, metric="loss", max_budget=9,
                       num_trials=24, allocator="auto", runtime=rt, seed=0, validate=True)


RUNS: dict[str, Callable[[], Experiment]] = {
    "fifo-asha": lambda: _fluid("asha", "fifo", n=6, per_node=3, seed=1),
    "fifo-bohb": lambda: _fluid("bohb", "fifo", n=4, per_node=2, seed=2),
    "waterfill-asha-c3": lambda: _fluid("asha", "waterfill", n=8, per_node=4, seed=3, c=3, d=4,
                                        resize_overhead=2.0),
    "waterfill-hyperband-changes": lambda: _fluid(
        "hyperband", "waterfill", n=12, per_node=4, seed=4, c=4, d=3, resize_overhead=1.0,
        changes=((40.0, 8, 4), (120.0, 16, 4))),
    "waterfill-random-c3-d1": lambda: _fluid("random", "waterfill", n=5, per_node=5, seed=5,
                                             c=3, d=1),
    "waterfill-static-asha": lambda: _fluid("asha", "waterfill-static", n=6, per_node=2, seed=6,
                                            c=2, d=2),
    "fluid+knapsack-asha": lambda: _fluid("asha", "fluid+knapsack", n=8, per_node=4, seed=7,
                                          c=3, d=3, resize_overhead=2.0,
                                          oversubscription={"generic": 1.5}),
    "fluid+knapsack-changes": lambda: _fluid(
        "random", "fluid+knapsack", n=6, per_node=3, seed=8, c=4, d=2,
        oversubscription={"generic": 2.0}, changes=((30.0, 3, 3), (90.0, 9, 3))),
    "knapsack-ff": lambda: _knapsack("knapsack-ff", oversubscription={"A100": 1.5}),
    "knapsack-ffd-asha": lambda: _knapsack("knapsack-ffd", "asha",
                                           oversubscription={"A100": 1.3}),
    "knapsack-wf-random": lambda: _knapsack("knapsack-wf", "random",
                                            oversubscription={"A100": 1.7}),
    "knapsack-wfd-asha": lambda: _knapsack("knapsack-wfd", "asha",
                                           oversubscription={"A100": 3.0}),
    "knapsack-wfd-mixed": lambda: _knapsack("knapsack-wfd", cluster=_mixed_cluster(),
                                            oversubscription={"A100": 3.0, "V100": 1.5}),
    # at 1.7 the swaps change nothing once demands are measured from the first report on
    "knapsack-refine": lambda: _knapsack("knapsack-wf", "random",
                                         oversubscription={"A100": 1.3}, refine=True),
    "fill-fifo-sha": lambda: _filled("sha", "fifo", 1, num_trials=27, max_budget=27),
    "fill-fifo-sha-9": lambda: _filled("sha", "fifo", 2, num_trials=9, max_budget=9),
    "auto-packs": lambda: _auto(Demand(0.25, 2.0)),
    "auto-stays-fifo": lambda: _auto(None, alpha=2.0),
}

#: recorded before the ledger was unified: (allocation log, GPU-seconds)
# ASHA/BOHB runs re-recorded: ASHA's stopping rule judges a trial against its rung before
# adding its own result, as Ray's ASHAScheduler does, which changes which trials stop.
# auto-packs re-recorded: the simulator samples a trial alone every second (4 samples, as
# Dask's workers sample NVML), and auto packs by the GPU room those samples measure (a
# quarter-GPU model: room 4) before its probe.
EXPECTED: dict[str, tuple[str, str]] = {
    'auto-packs': ('2e196f108192e9f2', '6f99f30263ede3e8'),
    'auto-stays-fifo': ('a211767787552620', 'f03e0a6742859f83'),
    'fill-fifo-sha': ('4087826aec620a0b', '23a0a94c161509c8'),
    'fill-fifo-sha-9': ('bdff2c0f8876cb44', 'c395e58179aa601a'),
    'fifo-asha': ('fff3a57ab8dde52b', '95df8ab1a71633df'),
    'fifo-bohb': ('ac47ff8e7b3eb40b', '8544b2ea398b79ba'),
    'fluid+knapsack-asha': ('71c86b5df2a907bf', '1731c623f0bb8a7c'),
    'fluid+knapsack-changes': ('0c5a3c5699b9673e', '0725b2e326f996a7'),
    'knapsack-ff': ('ae77a7e36045f36c', '58e50feffd4eec7a'),
    'knapsack-ffd-asha': ('73f40a008f5c3caf', 'ab2d9f966e0513fd'),
    'knapsack-refine': ('7e1019a955fb79d7', '3cef169ddc8bc266'),
    'knapsack-wf-random': ('2170c017a9e464b1', '3cef169ddc8bc266'),
    'knapsack-wfd-asha': ('96af09bf7bb8b582', '0a15073e6cf60ff7'),
    'knapsack-wfd-mixed': ('65ef465934953e6b', 'ad314b09738e6ffa'),
    'waterfill-asha-c3': ('db6313f41e196250', '9addfedd5140d7d5'),
    'waterfill-hyperband-changes': ('df8eaa30a11dc07c', '90bbb86ec648c511'),
    'waterfill-random-c3-d1': ('90a78a34dc58404d', '69e1d4925a8141a8'),
    'waterfill-static-asha': ('508de686b00b5f42', '6b00936d4d74f522'),
}


def digests(exp: Experiment) -> tuple[str, str]:
    """(hash of the allocation log, hash of every trial's GPU-seconds), 16 hex digits each."""
    log = hashlib.sha256()
    for r in exp.engine.ledger.log:
        log.update(f"{r.trial_id} {r.gpu_id} {r.share!r} {r.start!r} {r.end!r}\n".encode())
    acc = hashlib.sha256()
    for tid, t in sorted(exp.engine.trials.items()):
        acc.update(f"{tid} {t.state.value} {t.gpu_seconds!r} {t.budget_used!r}\n".encode())
    return log.hexdigest()[:16], acc.hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_allocation_log_hashes_as_recorded(name):
    exp = RUNS[name]()
    assert exp.engine.done and exp.engine.ledger.log
    assert digests(exp) == EXPECTED[name]


def test_the_runs_resize_and_pack_at_shares_that_are_not_powers_of_two():
    """The hashes guard the float order of loads only if the runs make such loads."""
    exp = RUNS["waterfill-asha-c3"]()
    shares = {r.share for r in exp.engine.ledger.log}
    assert any(0 < s < 1 and (s * 1024) % 1 for s in shares)
    assert len({r.trial_id for r in exp.engine.ledger.log}) < len(exp.engine.ledger.log)


if __name__ == "__main__":
    for name in sorted(RUNS):
        print(f"    {name!r}: {digests(RUNS[name]())!r},")
