"""Whole simulations in which every allocator call goes to the fast code and the reference.

Each ``capacity`` and ``allocate`` call is answered by both (the reference:
``tests/allocators/fluid_reference.py``) and must agree to the last float and
in dict order, across packing, multi-GPU widths, ε, and GPUs lost and gained
(``ResourcesChanged``); the simulation then goes on with the answer.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbtune.algorithms import make_algorithm
from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator, SchedulingView
from nbtune.core.events import ResourcesChanged
from nbtune.core.resources import ClusterSpec, Demand
from nbtune.core.space import loguniform, uniform
from nbtune.engine.engine import Engine
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload
from tests.allocators.test_scaling_equivalence import _check_call, _fluid_pair


class Shadow(BaseAllocator):
    """Sends every call to the fast allocator and the reference; they must agree."""

    def __init__(self, fast: BaseAllocator, ref: BaseAllocator) -> None:
        self.fast, self.ref = fast, ref
        self.name = fast.name
        self.calls = self.resizes = 0

    def capacity(self, view: SchedulingView) -> int:
        a, b = self.fast.capacity(view), self.ref.capacity(view)
        assert a == b
        return a

    def allocate(self, view: SchedulingView) -> Allocation:
        out = _check_call(self.fast, self.ref, view)
        self.calls += 1
        self.resizes += len(out.resize)
        return out

    def max_share(self, view: SchedulingView, gpu_id: int) -> float:
        return self.fast.max_share(view, gpu_id)


def _fixed_limits(alloc: BaseAllocator) -> BaseAllocator:
    fluid = getattr(alloc, "_fluid", alloc)
    fluid._measured = None  # as ``measured=False``: c, d stay as given
    return alloc


SPACE = {"lr": loguniform(1e-4, 1e-1), "width": uniform(0.0, 1.0)}


def _simulate(kind: str, algo: str, n_trials: int, cluster: ClusterSpec, changes: list,
              seed: int, *, c: int, d: int, alpha: float, beta: float, eps: float,
              max_budget: float = 27.0) -> Shadow:
    wl = SyntheticWorkload(SPACE, unit_time=lambda cfg: 2.0 + 30.0 * cfg["width"],
                           alpha=alpha, beta=beta, unit_time_jitter=0.2, seed=seed, launch_overhead=1.0,
                           demand=lambda cfg: Demand(0.2 + 0.6 * cfg["width"],
                                                     2.0 + 8 * cfg["width"], 1.0))
    opts = {"oversubscription": {"generic": 1.5}} if kind == "fluid+knapsack" else {}
    fast, ref = _fluid_pair(kind, c=c, d=d, resize_overhead=eps, **opts)
    # the references predate measured limits: compare both at the c, d given
    fast, ref = _fixed_limits(fast), _fixed_limits(ref)
    shadow = Shadow(fast, ref)
    kw = {"eta": 3} if algo in ("asha", "hyperband") else {}
    alg = make_algorithm(algo, SPACE, metric="loss", max_budget=max_budget,
                         num_trials=n_trials, seed=seed, **kw)
    engine = Engine(alg, shadow, validate=True, hints={"workload": wl})
    sim = SimRuntime(cluster=cluster, resize_overhead=eps)
    for t, new in changes:
        sim.at(t, ResourcesChanged, cluster=new)
    sim.start(engine, wl)
    assert engine.done
    return shadow


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["waterfill", "waterfill-static", "fluid+knapsack"]),
       algo=st.sampled_from(["asha", "hyperband", "random"]),
       n_trials=st.integers(1, 40), n_gpus=st.integers(1, 16), per_node=st.integers(1, 8),
       changes=st.lists(st.tuples(st.floats(1.0, 200.0), st.integers(1, 16),
                                  st.integers(1, 8)), max_size=2),
       seed=st.integers(0, 10_000), c=st.integers(1, 4), d=st.integers(1, 4),
       alpha=st.floats(1.0, 1.5), beta=st.floats(1.0, 1.25),
       eps=st.sampled_from([0.0, 1.0, 10.0]))
def test_simulations_decide_exactly_as_the_reference(kind, algo, n_trials, n_gpus, per_node,
                                                      changes, seed, c, d, alpha, beta, eps):
    cluster = ClusterSpec.homogeneous(n_gpus, gpus_per_node=per_node)
    moves = [(t, ClusterSpec.homogeneous(n, gpus_per_node=p)) for t, n, p in changes]
    shadow = _simulate(kind, algo, n_trials, cluster, moves, seed, c=c, d=d, alpha=alpha,
                       beta=beta, eps=eps)
    assert shadow.calls > 0


def test_a_larger_asha_run_with_resizes_decides_as_the_reference():
    """ASHA on 48 GPUs over 6 nodes with a node lost and regained: hundreds of decisions."""
    cluster = ClusterSpec.homogeneous(48, gpus_per_node=8)
    changes = [(60.0, ClusterSpec.homogeneous(40, gpus_per_node=8)),
               (150.0, ClusterSpec.homogeneous(48, gpus_per_node=8))]
    for kind in ("waterfill", "fluid+knapsack"):
        shadow = _simulate(kind, "asha", 150, cluster, changes, 3, c=4, d=4, alpha=1.2,
                           beta=1.1, eps=2.0)
        assert shadow.calls > 100
        assert shadow.resizes > 0 or kind != "waterfill"
