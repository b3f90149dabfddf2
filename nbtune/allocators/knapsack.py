"""HyperSack's knapsack allocators: pack pending trials onto GPUs by compute, memory and CPUs.

Each GPU is a knapsack (HyperSack §IV-A). Share semantics, chosen so that the
engine's own bookkeeping *is* the knapsack's compute constraint: a trial
placed by these allocators holds ``share = Demand.compute`` of one GPU, and
:meth:`KnapsackAllocator.max_share` returns the GPU kind's oversubscription
ratio r, so the engine's ``validate=True`` check (sum of shares ≤ max_share)
is exactly HyperSack's constraint (2), Σ c_p ≤ r·C. Memory (3) and node CPU
cores (4) are checked here from the trials' demands. A trial whose share
covers its demand runs at full speed in the simulator
(:meth:`nbtune.workloads.workload_protocol.WorkloadModel.rate` measures Fluid's packing
overhead against the demand); the slowdown of oversubscription itself is a
neighbor-sensitive workload's business (``nbtune/workloads/interference.py``).

Demand is per GPU the trial occupies, the same on every GPU kind (HyperSack
profiles per architecture; a profile hint may later return kind-specific
numbers). Speed enters through the policies: first fit fills the fastest
GPUs first, worst fit weighs free compute by speed (see :mod:`.mkp`).

Running trials stay where they are: their shares, memory and CPUs are
subtracted first and only pending trials are placed (no resizes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter

import numpy as np

from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator, SchedulingView
from nbtune.allocators.demand import DEFAULT_DEMAND, DemandLookup, expected_runtimes
from nbtune.allocators.mkp import POLICIES, pack
from nbtune.allocators.oversubscription import DEFAULT_RATIO
from nbtune.allocators.swaps import improve_by_swaps
from nbtune.core.resources import ClusterSpec, Demand
from nbtune.core.tolerance import EPS

__all__ = [
    "ClusterRoom",
    "cluster_room",
    "KnapsackAllocator",
    "KnapsackFF",
    "KnapsackFFD",
    "KnapsackWF",
    "KnapsackWFD",
]


_COMPUTE, _MEMORY, _CPUS = attrgetter("compute"), attrgetter("memory_gb"), attrgetter("cpus")


@dataclass
class ClusterRoom:
    """What is left on each GPU (arrays in ``cluster.gpus`` order) once running trials are counted.

    Derived from the engine's ledger (``compute`` is the ratio less the view's
    ``gpu_load``) and the running trials' demands (memory, cores: only the
    knapsack knows them); the allocators then take from it as they place, so
    each decision gets its own what-if copy (:meth:`KnapsackAllocator.room`
    derives it once per state of the engine).
    """

    gpu_ids: list[int]
    ratio: np.ndarray  # oversubscription ratio of each GPU
    compute: np.ndarray  # ratio - placed shares
    memory: np.ndarray  # GB left
    gpu_node: np.ndarray  # node index of each GPU
    node_cpus: np.ndarray  # cores left per node
    speed: np.ndarray
    nodes: list[str]

    def copy(self) -> ClusterRoom:
        """A copy whose arrays can be taken from without changing this one."""
        return ClusterRoom(list(self.gpu_ids), self.ratio.copy(), self.compute.copy(),
                           self.memory.copy(), self.gpu_node.copy(), self.node_cpus.copy(),
                           self.speed.copy(), list(self.nodes))


def _check_ratios(ratios: Mapping[str, float]) -> dict[str, float]:
    out = {}
    for kind, r in ratios.items():
        if not float(r) > 0:
            raise ValueError(f"oversubscription ratio for GPU kind {kind!r} must be > 0, got {r}")
        out[str(kind)] = float(r)
    return out


def cluster_room(
    view: SchedulingView,
    ratios: Mapping[str, float],
    demand_of: DemandLookup | None = None,
) -> ClusterRoom:
    """Remaining compute, memory and CPUs per GPU/node after the running trials' demands."""
    return _room_and_demands(view, ratios, demand_of)[0]


def _room_and_demands(
    view: SchedulingView,
    ratios: Mapping[str, float],
    demand_of: DemandLookup | None = None,
) -> tuple[ClusterRoom, list[Demand]]:
    """:func:`cluster_room`, and the running trials' demands (in ``view.running`` order)."""
    demand_of = demand_of or DemandLookup()
    cluster: ClusterSpec = view.cluster
    base = _cluster_arrays(cluster)
    gpu_ids, pos, gpu_node = base.gpu_ids, base.pos, base.gpu_node
    ratio = base.ratio(ratios)
    load = view.gpu_load
    compute = ratio - np.fromiter(map(load.get, gpu_ids, repeat(0.0)), dtype=float,
                                  count=len(gpu_ids))
    memory = base.memory.copy()
    node_cpus = base.node_cpus.copy()
    # every running trial's memory off its GPUs and cores off their nodes, in the order a
    # per-trial loop would take them (ufunc.at applies repeated indices one after another)
    running = view.running
    demands = demand_of.many(view, running)
    pos_get = pos.get
    # (nothing to take where no trial needs memory or cores: x - 0.0 is x)
    needs = any(d.memory_gb != 0.0 or d.cpus != 0.0 for d in demands)
    entries = [(pos_get(g), k) for k, pl in enumerate(running.values()) for g, _ in pl] \
        if needs else []
    if entries:
        if any(i is None for i, _ in entries):  # GPUs the cluster no longer has
            entries = [(i, k) for i, k in entries if i is not None]
        idx = np.fromiter((i for i, _ in entries), dtype=np.int64, count=len(entries))
        owner = np.fromiter((k for _, k in entries), dtype=np.int64, count=len(entries))
        mem = np.array([d.memory_gb for d in demands], dtype=float)
        cpus = np.array([d.cpus for d in demands], dtype=float)
        np.subtract.at(memory, idx, mem[owner])
        np.subtract.at(node_cpus, gpu_node[idx], cpus[owner])
    return ClusterRoom(list(gpu_ids), ratio, compute, memory, gpu_node.copy(), node_cpus,
                       base.speed.copy(), list(base.nodes)), demands


@dataclass
class _ClusterArrays:
    """What :func:`cluster_room` reads of a cluster that does not change while it is the same."""

    gpu_ids: list[int]
    pos: dict[int, int]
    kinds: list[str]
    memory: np.ndarray
    gpu_node: np.ndarray
    node_cpus: np.ndarray
    speed: np.ndarray
    nodes: list[str]
    #: the per-GPU ratio array of each ratios mapping asked for (its items as the key)
    ratio_of: dict[tuple, np.ndarray] = field(default_factory=dict)

    def ratio(self, ratios: Mapping[str, float]) -> np.ndarray:
        key = tuple(ratios.items())
        got = self.ratio_of.get(key)
        if got is None:
            got = self.ratio_of[key] = np.array([ratios.get(k, DEFAULT_RATIO) for k in self.kinds],
                                                dtype=float)
        return got.copy()


_LAST_CLUSTER: list[tuple[ClusterSpec, _ClusterArrays]] = []


def _cluster_arrays(cluster: ClusterSpec) -> _ClusterArrays:
    """The cluster's per-GPU arrays, remembered for the last cluster object seen."""
    hit = _LAST_CLUSTER[0] if _LAST_CLUSTER else None
    if hit is not None and hit[0] is cluster:
        return hit[1]
    gpus = cluster.gpus
    nodes = list(dict.fromkeys(g.node for g in gpus))
    node_ix = {n: i for i, n in enumerate(nodes)}
    out = _ClusterArrays(
        [g.gpu_id for g in gpus], {g.gpu_id: i for i, g in enumerate(gpus)},
        [g.kind for g in gpus], np.array([g.memory_gb for g in gpus], dtype=float),
        np.array([node_ix[g.node] for g in gpus], dtype=np.int64),
        np.array([float(cluster.node_cpus.get(n, 0.0)) for n in nodes], dtype=float),
        np.array([g.speed for g in gpus], dtype=float), nodes)
    _LAST_CLUSTER[:] = [(cluster, out)]
    return out


class KnapsackAllocator(BaseAllocator):
    """Place pending trials one per GPU share by a HyperSack policy (ff, ffd, wf, wfd).

    ``oversubscription`` maps a GPU kind to its ratio r (pick it from profiling
    with :func:`nbtune.allocators.oversubscription.choose_ratios`); kinds not
    listed, and everything when it is None and the engine has no
    ``hints["oversubscription"]``, get r = 1. ``default_demand`` is assumed
    for trials no hint knows. ``refine=True`` follows the policy with a swap
    pass (:mod:`nbtune.allocators.swaps`) that closes most of the gap to the
    optimal packing, at the cost of the policy's order at the margin.
    """

    name = "knapsack"
    policy = "wfd"

    def __init__(
        self,
        policy: str | None = None,
        *,
        oversubscription: Mapping[str, float] | None = None,
        default_demand: Demand = DEFAULT_DEMAND,
        refine: bool = False,
    ) -> None:
        if policy is not None:
            if policy not in POLICIES:
                raise ValueError(f"unknown knapsack policy {policy!r}; choose one of {POLICIES}")
            self.policy = policy
            self.name = f"knapsack-{policy}"
        self._ratios = None if oversubscription is None else _check_ratios(oversubscription)
        if not default_demand.compute > 0:
            raise ValueError(f"default_demand.compute must be > 0, got {default_demand}")
        self.default_demand = default_demand
        self.demand_of = DemandLookup(default_demand)
        self.refine = bool(refine)
        self._kinds: tuple[ClusterSpec | None, dict[int, str]] = (None, {})
        self._hinted: tuple[Mapping[str, float] | None, dict[str, float]] = (None, {})
        # the last room derived, with the view's state_version and what else it rests on
        self._last_room: tuple[tuple, dict[str, float], ClusterRoom, list[Demand]] | None = None

    # ------------------------------------------------------------ helpers
    def ratios(self, view: SchedulingView) -> dict[str, float]:
        """The kind -> r mapping in force: the constructor's, else ``hints["oversubscription"]``."""
        if self._ratios is not None:
            return self._ratios
        hinted = view.hints.get("oversubscription")
        if hinted is None:
            return {}
        if self._hinted[0] is not hinted:  # checked once per mapping the engine holds
            self._hinted = (hinted, _check_ratios(hinted))
        return self._hinted[1]

    def _kind_of(self, view: SchedulingView, gpu_id: int) -> str:
        cluster, kinds = self._kinds
        if cluster is not view.cluster:
            kinds = {g.gpu_id: g.kind for g in view.cluster.gpus}
            self._kinds = (view.cluster, kinds)
        return kinds.get(gpu_id, "")

    def max_share(self, view: SchedulingView, gpu_id: int) -> float:
        return self.ratios(view).get(self._kind_of(view, gpu_id), DEFAULT_RATIO)

    def room(self, view: SchedulingView) -> tuple[ClusterRoom, list[Demand]]:
        """:func:`cluster_room` under this allocator's ratios and demands, and the running
        trials' demands (in ``view.running`` order), for the caller to take from.

        The engine asks :meth:`capacity` and then :meth:`allocate` of the same state in
        one scheduling round; a view with a ``state_version`` (the engine's) says so, and
        the room derived first is handed out again (a copy) while the stamp, the cluster,
        the running placements and loads (the engine's own mappings: found by identity),
        the ratios and the hinted profiles and workload are the same. A view that narrows
        the engine's (fewer GPUs or trials) but passes its stamp on shows other mappings,
        so it gets a room of its own.
        """
        ratios = self.ratios(view)
        stamp = getattr(view, "state_version", None)
        key = None
        if stamp is not None:
            hints = view.hints
            key = (stamp, view.cluster, view.running, view.gpu_load, hints.get("profiles"),
                   hints.get("workload"))
            last = self._last_room
            if last is not None and last[0] == key and last[1] == ratios:
                return last[2].copy(), last[3]
        room, demands = _room_and_demands(view, ratios, self.demand_of)
        self._last_room = None if key is None else (key, dict(ratios), room.copy(), demands)
        return room, demands

    def _room_for_concurrency(self, view: SchedulingView) -> int | None:
        if view.max_concurrent is None:
            return None
        return max(view.max_concurrent - len(view.running), 0)

    # ------------------------------------------------------------ protocol
    def capacity(self, view: SchedulingView) -> int:
        """An estimate of how many trials fit in what is free, sized by the trials known so far.

        Trials the algorithm has not created yet have no demand; the mean of the
        running and pending trials' demands (or ``default_demand``) stands in.
        Never less than the number of idle GPUs, so the cluster cannot sit idle.
        """
        room, running = self.room(view)
        known = [self.demand_of(view, s.trial_id, s.config) for s in view.pending] + running
        if known:  # (the lists np.mean was given, built without a Python loop)
            c = float(np.mean(list(map(_COMPUTE, known))))
            m = float(np.mean(list(map(_MEMORY, known))))
            q = float(np.mean(list(map(_CPUS, known))))
        else:
            d = self.default_demand
            c, m, q = d.compute, d.memory_gb, d.cpus
        per_gpu = np.floor(np.maximum(room.compute, 0.0) / c + EPS)
        if m > 0:
            per_gpu = np.minimum(per_gpu, np.floor(np.maximum(room.memory, 0.0) / m + EPS))
        est = int(per_gpu.sum())
        if q > 0:
            est = min(est, int(np.floor(np.maximum(room.node_cpus, 0.0) / q + EPS).sum()))
        est = max(est, len(view.idle_gpus))
        cap = self._room_for_concurrency(view)
        return est if cap is None else min(est, cap)

    def allocate(self, view: SchedulingView) -> Allocation:
        pending = list(view.pending)
        cap = self._room_for_concurrency(view)
        if not pending or cap == 0:
            return Allocation()
        room = self.room(view)[0]
        demands = [self.demand_of(view, s.trial_id, s.config) for s in pending]
        self._check_fits(view, room, pending, demands)
        runtime = None
        if self.policy.endswith("d"):
            runtime = expected_runtimes(view, ((s.trial_id, s.config, s.budget) for s in pending))
        where = pack(
            [d.compute for d in demands], [d.memory_gb for d in demands],
            [d.cpus for d in demands], room.compute, room.memory, room.gpu_node,
            room.node_cpus, policy=self.policy, runtime=runtime, speed=room.speed,
        )
        if self.refine:
            where = improve_by_swaps(
                where, [d.compute for d in demands], [d.memory_gb for d in demands],
                [d.cpus for d in demands], room.compute, room.memory, room.gpu_node,
                room.node_cpus,
            )
        placed = np.flatnonzero(where >= 0)
        if cap is not None and len(placed) > cap:
            # keep the first ``cap`` in the order the policy considered them
            rank = np.empty(len(pending), dtype=np.int64)
            order = (np.argsort(-np.asarray(runtime), kind="stable") if runtime is not None
                     else np.arange(len(pending)))
            rank[order] = np.arange(len(pending))
            placed = placed[np.argsort(rank[placed], kind="stable")][:cap]
        launch = {
            pending[i].trial_id: ((room.gpu_ids[where[i]], demands[i].compute),)
            for i in placed.tolist()
        }
        return Allocation(launch=launch)

    def _check_fits(self, view: SchedulingView, room: ClusterRoom, pending: list,
                    demands: list[Demand]) -> None:
        """A trial no empty GPU could ever hold would wait forever: say so now.

        Checked per dimension (the largest ratio, memory and node), which catches
        the usual mistakes cheaply; a demand that fits each dimension only on a
        different GPU is left to the engine's "placed none" error.
        """
        cluster = view.cluster
        top_c = float(room.ratio.max())
        top_m = max(g.memory_gb for g in cluster.gpus)
        top_q = max((float(cluster.node_cpus.get(n, 0.0)) for n in room.nodes), default=0.0)
        for spec, d in zip(pending, demands, strict=True):
            if d.compute > top_c + EPS or d.memory_gb > top_m + EPS or d.cpus > top_q + EPS:
                raise ValueError(
                    f"trial {spec.trial_id} needs {d}, more than any GPU of this cluster "
                    f"offers (compute r={top_c:g}, memory {top_m:g} GB, node CPUs "
                    f"{top_q:g}): lower its demand, raise the oversubscription ratio, or "
                    "add bigger GPUs"
                )


class KnapsackFF(KnapsackAllocator):
    """HyperSack first fit."""

    name = "knapsack-ff"
    policy = "ff"


class KnapsackFFD(KnapsackAllocator):
    """HyperSack first fit, longest expected runtime first."""

    name = "knapsack-ffd"
    policy = "ffd"


class KnapsackWF(KnapsackAllocator):
    """HyperSack worst fit: the GPU with the most free compute."""

    name = "knapsack-wf"
    policy = "wf"


class KnapsackWFD(KnapsackAllocator):
    """HyperSack worst fit, longest expected runtime first (the paper's best policy)."""

    name = "knapsack-wfd"
    policy = "wfd"
