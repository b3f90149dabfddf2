"""colocate with nothing preferred (a launch) answers on arrays what the general loop answers."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.allocators.fluid_knapsack import _colocate_loop, colocate
from nbtune.allocators.knapsack import ClusterRoom
from nbtune.core.resources import Demand
from nbtune.core.tolerance import EPS as _TOL


def reference_colocate(k: int, demand: Demand, room: ClusterRoom) -> list[int] | None:
    """colocate's general loop (the form a preferred placement takes), with nothing preferred."""
    ok = (room.compute >= 1.0 - _TOL) & (room.memory >= demand.memory_gb - _TOL)
    return _colocate_loop(k, demand, room, ok, set())


@settings(max_examples=400, deadline=None)
@given(data=st.data(), n_nodes=st.integers(1, 6), k=st.integers(1, 6),
       cpus=st.sampled_from([0.0, 1.0, 2.0, 3.0, 0.7]), mem=st.sampled_from([0.0, 4.0, 10.0]),
       shuffled=st.booleans())
def test_colocate_without_preference_matches_the_loop(data, n_nodes, k, cpus, mem, shuffled):
    per = data.draw(st.integers(1, 8))
    n = n_nodes * per
    node = np.repeat(np.arange(n_nodes), per)
    if shuffled:  # GPUs of a node need not be next to each other
        node = np.array(data.draw(st.permutations(node.tolist())))
    compute = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0 - 1e-12, 1.0, 1.5]),
                                          min_size=n, max_size=n)))
    memory = np.array(data.draw(st.lists(st.sampled_from([2.0, 4.0, 16.0]), min_size=n,
                                         max_size=n)))
    node_cpus = np.array(data.draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0, 2.0, 5.0, 6.3]),
                                            min_size=n_nodes, max_size=n_nodes)))
    room = ClusterRoom(list(range(100, 100 + n)), np.ones(n), compute, memory, node,
                       node_cpus, np.ones(n), [f"n{i}" for i in range(n_nodes)])
    dem = Demand(1.0, mem, cpus)
    assert colocate(k, dem, room) == reference_colocate(k, dem, room)
