"""Knapsack allocators on a hand-built SchedulingView: demands, ratios, running trials, errors."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.allocators import ALLOCATORS, make_allocator
from nbtune.allocators.demand import DEFAULT_DEMAND, DemandLookup, expected_runtime, trial_demand
from nbtune.allocators.knapsack import KnapsackAllocator
from nbtune.allocators.oversubscription import choose_ratio, choose_ratios
from nbtune.allocators.profiling import InMemoryProfileStore, Profile, model_signature
from nbtune.core.resources import GPU, ClusterSpec, Demand, Placement
from nbtune.core.trial import TrialRecord, TrialSpec, TrialState


class Model:
    """A hint source: per-trial demand and unit time from dicts."""

    def __init__(self, demands=None, unit=None):
        self.demands = demands or {}
        self.unit = unit or {}

    def demand(self, trial_id, config):
        return self.demands.get(trial_id)

    def unit_time(self, trial_id, config):
        return self.unit.get(trial_id, 1.0)


@dataclass
class View:
    cluster: ClusterSpec
    specs: list[TrialSpec] = field(default_factory=list)
    placed: dict[int, Placement] = field(default_factory=dict)
    hints: dict[str, Any] = field(default_factory=dict)
    measured: dict[int, tuple[float, float]] = field(default_factory=dict)
    used: dict[int, float] = field(default_factory=dict)
    max_concurrent: int | None = None
    held: dict = field(default_factory=dict)
    time: float = 0.0
    max_budget: float = 10.0

    def __post_init__(self):
        self.trials = {}
        for s in self.specs:
            self.trials[s.trial_id] = TrialRecord(s.trial_id, s.config, target_budget=s.budget,
                                            budget_used=self.used.get(s.trial_id, 0.0))
        for tid in self.placed:
            self.trials[tid] = TrialRecord(tid, {}, TrialState.RUNNING)

    @property
    def pending(self):
        return self.specs

    @property
    def running(self):
        return self.placed

    @property
    def gpu_load(self):
        load = {g.gpu_id: 0.0 for g in self.cluster.gpus}
        for pl in self.placed.values():
            for g, s in pl:
                load[g] += s
        return load

    @property
    def gpu_count(self):
        on = Counter(g for pl in self.placed.values() for g, _ in pl)
        return {g.gpu_id: on[g.gpu_id] for g in self.cluster.gpus}

    @property
    def idle_gpus(self):
        return {g for g, v in self.gpu_load.items() if v <= 1e-12}

    def trial(self, trial_id):
        return self.trials[trial_id]

    def group(self, group_id):
        return None

    def unit_time(self, trial_id):
        return self.measured.get(trial_id)


def specs(n, start=0, budget=10.0):
    return [TrialSpec(i, {"i": i}, budget) for i in range(start, start + n)]


def check_fits(view, alloc, ratio):
    """Constraints (2)-(4) over running + launched trials, from the hinted demands."""
    model = view.hints["workload"]
    gpus = view.cluster.by_id()
    load, mem, cpu = {}, {}, {}
    for tid, pl in list(view.placed.items()) + list(alloc.launch.items()):
        d = model.demand(tid, {}) or DEFAULT_DEMAND
        for g, s in pl:
            load[g] = load.get(g, 0.0) + s
            mem[g] = mem.get(g, 0.0) + d.memory_gb
            node = gpus[g].node
            cpu[node] = cpu.get(node, 0.0) + d.cpus
    for g, v in load.items():
        assert v <= ratio.get(gpus[g].kind, 1.0) + 1e-9
        assert mem[g] <= gpus[g].memory_gb + 1e-9
    for n, v in cpu.items():
        assert v <= view.cluster.node_cpus[n] + 1e-9


def test_registry_names_are_the_contract():
    for name, policy in [("knapsack-ff", "ff"), ("knapsack-ffd", "ffd"), ("knapsack-wf", "wf"),
                         ("knapsack-wfd", "wfd")]:
        a = make_allocator(name)
        assert isinstance(a, KnapsackAllocator) and a.policy == policy and a.name == name
        assert ALLOCATORS[name] is type(a)


def test_share_is_the_demand_and_max_share_the_kinds_ratio():
    cluster = ClusterSpec.of([GPU(0, "n0", "A100", 1.0, 80), GPU(1, "n0", "H100", 2.0, 80),
                              GPU(2, "n0", "V100", 0.5, 32)], {"n0": 88})
    demands = {i: Demand(0.5, 1.0, 1.0) for i in range(20)}
    view = View(cluster, specs(20), hints={"workload": Model(demands)})
    ratio = {"A100": 3.0, "H100": 2.5}
    alloc = make_allocator("knapsack-wf", oversubscription=ratio)
    assert [alloc.max_share(view, g) for g in (0, 1, 2)] == [3.0, 2.5, 1.0]
    out = alloc.allocate(view)
    assert all(pl == ((pl[0][0], 0.5),) for pl in out.launch.values())
    assert len(out.launch) == 6 + 5 + 2  # 3.0/0.5 + 2.5/0.5 + 1.0/0.5
    check_fits(view, out, ratio)


@given(
    n_running=st.integers(0, 6),
    n_pending=st.integers(0, 25),
    c=st.sampled_from([0.2, 0.3, 0.5, 1.0]),
    mem=st.sampled_from([0.0, 5.0, 20.0]),
    cpus=st.sampled_from([0.0, 2.0, 8.0]),
    policy=st.sampled_from(["ff", "ffd", "wf", "wfd"]),
    r=st.sampled_from([1.0, 2.0, 3.0]),
)
def test_running_trials_stay_and_everything_fits(n_running, n_pending, c, mem, cpus, policy, r):
    cluster = ClusterSpec.homogeneous(4, gpus_per_node=2, kind="A100", memory_gb=40,
                                      cpus_per_node=16)
    ratio = {"A100": r}
    demands = {i: Demand(c, mem, cpus) for i in range(100)}
    alloc = KnapsackAllocator(policy, oversubscription=ratio)
    # running trials placed first by the allocator itself, so they fit by construction
    first = View(cluster, specs(n_running), hints={"workload": Model(demands)})
    placed = dict(alloc.allocate(first).launch)
    view = View(cluster, specs(n_pending, start=50), placed=placed,
                hints={"workload": Model(demands)})
    out = alloc.allocate(view)
    assert not out.resize
    assert set(out.launch) <= {s.trial_id for s in view.pending}
    check_fits(view, out, ratio)
    # maximal: a pending trial left out could not have fitted anywhere after the launches
    if len(out.launch) < n_pending:
        extra = View(cluster, specs(1, start=99), placed={**placed, **out.launch},
                     hints={"workload": Model(demands)})
        assert alloc.allocate(extra).launch == {}


def test_decreasing_policies_order_by_remaining_budget_times_unit_time():
    cluster = ClusterSpec.homogeneous(1, kind="A100")
    model = Model({i: Demand(0.6) for i in range(3)}, unit={0: 1.0, 1: 1.0, 2: 1.0})
    # trial 1 has the most budget left; trial 2's measured unit time beats the model's
    view = View(cluster, [TrialSpec(0, {}, 10.0), TrialSpec(1, {}, 30.0),
                          TrialSpec(2, {}, 10.0)], hints={"workload": model},
                measured={2: (5.0, 1.0)}, used={1: 5.0})
    assert [expected_runtime(view, s.trial_id, {}, s.budget) for s in view.pending] == [
        10.0, 25.0, 50.0]
    assert list(KnapsackAllocator("ffd").allocate(view).launch) == [2]
    assert list(KnapsackAllocator("ff").allocate(view).launch) == [0]


def test_demand_falls_back_profile_then_workload_then_default():
    cluster = ClusterSpec.homogeneous(1)
    sig = model_signature({"model": "resnet18", "bs": 64})
    store = InMemoryProfileStore([Profile(sig, unit_time=3.0, demand=Demand(0.2, 3.0, 1.0))])
    workload = Model({1: Demand(0.9), 2: Demand(0.4)})
    view = View(cluster, hints={"profiles": store, "workload": workload})
    known = {"model": "resnet18", "bs": 64, "lr": 0.01}  # the lr does not change the profile
    assert trial_demand(view, 1, known) == Demand(0.2, 3.0, 1.0)
    assert trial_demand(view, 1, {"model": "resnet34", "bs": 64}) == Demand(0.9)
    assert trial_demand(view, 2, {}) == Demand(0.4)
    assert trial_demand(view, 3, {}) == DEFAULT_DEMAND
    assert trial_demand(View(cluster), 3, {}, Demand(0.5)) == Demand(0.5)
    with pytest.raises(ValueError, match="compute must be > 0"):
        trial_demand(View(cluster, hints={"workload": Model({1: Demand(0.0)})}), 1, {})
    # the profile's unit time orders trials when the engine has not measured one
    v = View(cluster, [TrialSpec(1, known, 10.0)], hints={"profiles": store, "workload": workload})
    assert expected_runtime(v, 1, known, 10.0) == 30.0


def test_without_hints_it_is_one_trial_per_gpu():
    view = View(ClusterSpec.homogeneous(3), specs(5))
    out = make_allocator("knapsack-ff").allocate(view)
    assert sorted(out.launch.values()) == [((0, 1.0),), ((1, 1.0),), ((2, 1.0),)]


def test_max_concurrent_caps_launches_in_policy_order():
    view = View(ClusterSpec.homogeneous(2), specs(6), max_concurrent=3,
                hints={"workload": Model({i: Demand(0.25) for i in range(6)})})
    out = make_allocator("knapsack-ff").allocate(view)
    assert list(out.launch) == [0, 1, 2]
    assert make_allocator("knapsack-ff").capacity(view) == 3


def test_capacity_estimates_from_known_demands_and_never_below_idle_gpus():
    cluster = ClusterSpec.homogeneous(4, kind="A100")
    alloc = make_allocator("knapsack-wfd", oversubscription={"A100": 3.0})
    view = View(cluster, specs(2), hints={"workload": Model({0: Demand(0.25), 1: Demand(0.25)})})
    assert alloc.capacity(view) == 48  # 4 GPUs x 3.0 / 0.25
    assert make_allocator("knapsack-wfd").capacity(View(cluster)) == 4


def test_hinted_ratios_are_used_when_none_given():
    view = View(ClusterSpec.homogeneous(1, kind="H100"), hints={"oversubscription": {"H100": 2.5}})
    assert make_allocator("knapsack-ff").max_share(view, 0) == 2.5


def test_impossible_demand_is_an_early_clear_error():
    view = View(ClusterSpec.homogeneous(2, memory_gb=16), specs(1),
                hints={"workload": Model({0: Demand(0.5, 40.0)})})
    with pytest.raises(ValueError, match="trial 0 needs .* more than any GPU"):
        make_allocator("knapsack-wf").allocate(view)
    with pytest.raises(ValueError, match="unknown knapsack policy"):
        KnapsackAllocator("bf")
    with pytest.raises(ValueError, match="must be > 0"):
        KnapsackAllocator("ff", oversubscription={"A100": 0})


# ---------------------------------------------------------------- oversubscription
def test_choose_ratio_finds_the_papers_peaks():
    a100 = [(1, 40.0), (1.5, 55.0), (2, 70.0), (2.5, 82.0), (3, 90.0), (3.5, 84.0), (4, 75.0)]
    h100 = [(1, 60.0), (2, 101.0), (2.5, 118.0), (3, 110.0), (3, 112.0), (4, 90.0)]
    assert choose_ratios({"A100": a100, "H100": h100}) == {"A100": 3.0, "H100": 2.5}


def test_choose_ratio_averages_repeats_and_prefers_the_low_end_of_a_plateau():
    assert choose_ratio([(2, 100.0), (2, 80.0), (3, 95.0)]) == 3.0  # mean at 2 is 90
    assert choose_ratio([(2, 99.5), (3, 100.0), (4, 100.0)]) == 2.0
    assert choose_ratio([(2, 99.5), (3, 100.0)], tolerance=0.0) == 3.0
    with pytest.raises(ValueError, match="no .* samples"):
        choose_ratio([])
    with pytest.raises(ValueError, match="pair"):
        choose_ratio([(1.0,)])
    with pytest.raises(ValueError, match="ratio must be > 0"):
        choose_ratio([(0.0, 5.0)])


@given(st.lists(st.tuples(st.sampled_from([1.0, 1.5, 2.0, 2.5, 3.0, 4.0]),
                          st.floats(0, 1000)), min_size=1, max_size=30))
def test_chosen_ratio_is_sampled_and_within_tolerance_of_the_best(samples):
    r = choose_ratio(samples)
    means = {}
    for x, y in samples:
        means.setdefault(x, []).append(y)
    means = {x: sum(v) / len(v) for x, v in means.items()}
    assert r in means
    assert means[r] >= max(means.values()) * 0.99 - 1e-9
    assert all(x >= r for x, m in means.items() if m >= max(means.values()) * 0.99)


def test_refine_swaps_a_bigger_waiting_trial_into_the_sliver():
    demands = {0: Demand(0.6), 1: Demand(0.3), 2: Demand(0.4)}
    view = View(ClusterSpec.homogeneous(1), specs(3), hints={"workload": Model(demands)})
    assert set(make_allocator("knapsack-ff").allocate(view).launch) == {0, 1}
    out = make_allocator("knapsack-ff", refine=True).allocate(view)
    assert out.launch == {0: ((0, 0.6),), 2: ((0, 0.4),)}


def test_demand_lookup_remembers_until_the_config_or_source_changes():
    calls = []

    class Counting(Model):
        def demand(self, trial_id, config):
            calls.append(trial_id)
            return Demand(0.1 * config["bs"])

    cluster = ClusterSpec.homogeneous(1)
    lookup = DemandLookup()
    view = View(cluster, hints={"workload": Counting()})
    assert lookup(view, 1, {"bs": 2}) == Demand(0.2)
    assert lookup(view, 1, {"bs": 2}) == Demand(0.2) and calls == [1]
    assert lookup(view, 1, {"bs": 3}) == Demand(0.1 * 3) and calls == [1, 1]  # PBT mutated it
    view.hints = {"workload": Counting()}
    lookup(view, 1, {"bs": 3})
    assert calls == [1, 1, 1]
    # a profile store may learn between calls: never memoised
    store = InMemoryProfileStore()
    view.hints = {"profiles": store, "workload": Counting()}
    assert lookup(view, 1, {"bs": 3}) == Demand(0.1 * 3)
    store.put(Profile(model_signature({"bs": 3}), demand=Demand(0.5)))
    assert lookup(view, 1, {"bs": 3}) == Demand(0.5)
