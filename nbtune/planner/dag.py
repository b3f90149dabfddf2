"""RubberBand's execution model (§4.2, Alg. 1): a plan as a DAG of timed tasks.

A plan and a spec become a graph of SCALE (provider queuing), INIT_INSTANCE
(instance set-up), TRAIN (one trial's iterations on its workers) and SYNC
(the stage barrier) nodes. Latencies are sampled from each node's
distribution (Monte Carlo, seeded, so the same plan always gets the same
prediction and the planner compares candidates on common random numbers);
JCT is the longest path. Cost follows the billing model: per-instance billing
charges every instance from provisioning to release, idle at a barrier or
during a scale-up included, at least the minimum charge; per-function billing
charges only the GPU-seconds of TRAIN nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from nbtune.planner.profiles import ZERO_LATENCY, CloudProfile, Latency, ScalingProfile
from nbtune.planner.spec import ExperimentSpec

__all__ = [
    "Allocation",
    "Dag",
    "Node",
    "NodeKind",
    "Prediction",
    "StageAllocation",
    "simulate",
    "stage_layout",
    "to_dag",
]


class NodeKind:
    """The four node types of §4.2 (plus the root every DAG starts from)."""

    START = "START"
    SCALE = "SCALE"
    INIT_INSTANCE = "INIT_INSTANCE"
    TRAIN = "TRAIN"
    SYNC = "SYNC"


class Node(NamedTuple):
    """One task; a NamedTuple because the planner builds tens of thousands per plan."""

    kind: str
    latency: Latency
    preds: tuple[int, ...]
    stage: int = -1
    #: GPUs a TRAIN node occupies (per-function billing)
    gpus: int = 0


@dataclass
class Dag:
    """Nodes in topological order: a node's predecessors always come before it."""

    nodes: list[Node] = field(default_factory=list)

    def add(self, kind: str, latency: Latency, preds: tuple[int, ...] = (), **kw: int) -> int:
        preds = tuple(preds)
        if preds and (min(preds) < 0 or max(preds) >= len(self.nodes)):
            raise ValueError(f"predecessors {preds} must be existing nodes (added earlier)")
        self.nodes.append(Node(kind, latency, preds, **kw))
        return len(self.nodes) - 1

    def sample_latencies(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``(len(nodes), n)`` sampled latencies, one column per Monte-Carlo sample."""
        groups: dict[Latency, list[int]] = {}
        for i, v in enumerate(self.nodes):
            groups.setdefault(v.latency, []).append(i)
        out = np.empty((len(self.nodes), n))
        for lat, idx in groups.items():  # one draw per distribution, in first-seen order
            out[idx] = lat.sample(rng, len(idx) * n).reshape(len(idx), n)
        return out

    def finish_times(self, lat: np.ndarray) -> np.ndarray:
        """Alg. 1's ``sample_duration``: each node ends its latency after its last predecessor."""
        fin = np.empty_like(lat)
        for i, v in enumerate(self.nodes):
            p = v.preds
            if not p:
                fin[i] = lat[i]
            elif len(p) == 1:
                np.add(fin[p[0]], lat[i], out=fin[i])
            else:
                np.add(fin[list(p)].max(axis=0), lat[i], out=fin[i])
        return fin

    def longest_path(self, lat: np.ndarray) -> np.ndarray:
        """Length of the critical path per sample (the JCT)."""
        return self.finish_times(lat).max(axis=0)


@dataclass(frozen=True)
class StageAllocation:
    """GPUs the job uses in each stage and instances held meanwhile (billed).

    Elastic plans hold just enough instances for the stage's GPUs; a static
    cluster holds the same instances throughout, whatever the stage uses.
    """

    gpus: tuple[int, ...]
    instances: tuple[int, ...]

    @classmethod
    def elastic(cls, gpus: tuple[int, ...] | list[int], cloud: CloudProfile) -> StageAllocation:
        g = tuple(int(x) for x in gpus)
        return cls(g, tuple(cloud.instances_for(x) for x in g))


#: the plan's former name, still importable (``nbtune.planner.Allocation``); not to be
#: confused with :class:`nbtune.allocators.Allocation`, one scheduling decision's placements
Allocation = StageAllocation


def stage_layout(trials: int, gpus: int) -> tuple[int, int]:
    """Fair division of a stage: ``(parallel slots, GPUs per trial)``.

    With at least as many GPUs as trials each trial gets ``gpus // trials``;
    with fewer, each GPU runs queued trials one after another (§4.2).
    """
    if gpus < 1:
        raise ValueError(f"a stage needs at least one GPU, got {gpus}")
    if gpus >= trials:
        return trials, gpus // trials
    return gpus, 1


def to_dag(
    spec: ExperimentSpec, alloc: StageAllocation, profile: ScalingProfile, cloud: CloudProfile,
    *, held: int = 0, held_ready: Latency = ZERO_LATENCY,
) -> tuple[Dag, list[tuple[int, int, int]]]:
    """Build the DAG stage by stage; also return per stage ``(entry, scale, sync)`` node ids.

    ``entry`` is the previous SYNC (or START), ``scale`` the SCALE node or -1.
    ``held`` instances are there when the job starts (a cluster already running:
    no SCALE), each ready after ``held_ready`` (its own set-up, e.g. a runtime's
    warm processes); RubberBand's jobs start from none.
    """
    if len(alloc.gpus) != spec.num_stages() or len(alloc.instances) != spec.num_stages():
        raise ValueError(
            f"the allocation has {len(alloc.gpus)} stages, the spec {spec.num_stages()}"
        )
    if isinstance(held, bool) or int(held) != held or held < 0:
        raise ValueError(f"held must be a whole number of instances >= 0, got {held!r}")
    dag = Dag()
    frontier = dag.add(NodeKind.START, Latency(0.0))
    held = min(int(held), alloc.instances[0])  # more than stage 0 holds: released at once
    marks: list[tuple[int, int, int]] = []
    for i, stage in enumerate(spec.stages):
        gpus, inst = alloc.gpus[i], alloc.instances[i]
        if inst * cloud.gpus_per_instance < gpus:
            raise ValueError(f"stage {i}: {inst} instances cannot hold {gpus} GPUs")
        entry, scale, ready = frontier, -1, (frontier,)
        # instances setting up at once on one host slow each other (cloud.shared_init):
        # at stage 0 the held ones and the new ones, later only the new ones
        f = cloud.init_sharing(inst if i == 0 else inst - held)
        if i == 0 and held:  # the instances already there, set up in parallel
            own = Latency(held_ready.mean * f, held_ready.cv)
            ready = tuple(dag.add(NodeKind.INIT_INSTANCE, own, (frontier,), stage=0)
                          for _ in range(held))
        init = Latency(cloud.init.mean * f, cloud.init.cv)
        # a worker's first trial pays its cold start: at stage 0 every instance is fresh
        new_gpus = (inst if i == 0 else max(inst - held, 0)) * cloud.gpus_per_instance
        if inst > held:  # a blocking SCALE, then the new instances initialise in parallel
            scale = dag.add(NodeKind.SCALE, cloud.provision, (frontier,), stage=i)
            ready = (*(ready if i == 0 and held else ()), *(
                dag.add(NodeKind.INIT_INSTANCE, init, (scale,), stage=i)
                for _ in range(inst - held)))
        held = inst
        slots, per_trial = stage_layout(stage.trials, gpus)
        # workers of one host slow each other down (a local cluster): as many as train at once
        train = Latency(
            stage.iterations * profile.seconds(per_trial) * profile.sharing(slots * per_trial)
            + profile.startup_s,
            profile.cv,
        )
        # the first trial on each new worker pays its cold start once (RubberBand's
        # profiler would see it as a slower first iteration on a fresh instance)
        cold_slots = min(slots, -(-new_gpus // per_trial)) if profile.cold_start_s else 0
        cold = Latency(train.mean + profile.cold_start_s, profile.cv)
        tails = []
        for s in range(slots):
            prev = ready
            for k in range(s, stage.trials, slots):  # queued trials run one after another
                lat = cold if k == s and s < cold_slots else train
                prev = (dag.add(NodeKind.TRAIN, lat, prev, stage=i, gpus=per_trial),)
            tails.append(prev[0])
        frontier = dag.add(NodeKind.SYNC, Latency(0.0), tuple(tails), stage=i)
        marks.append((entry, scale, frontier))
    return dag, marks


@dataclass(frozen=True)
class Prediction:
    """Simulated JCT and cost of one plan (means and standard deviations over samples)."""

    jct: float
    cost: float
    jct_std: float
    cost_std: float
    #: mean start and end second of each stage
    stage_start: tuple[float, ...]
    stage_end: tuple[float, ...]
    instances: tuple[int, ...]
    gpus: tuple[int, ...]

    def timeline(self) -> list[tuple[float, float, int]]:
        """``(start s, end s, instances held)`` per stage, for charts."""
        return list(zip(self.stage_start, self.stage_end, self.instances, strict=True))


def _instance_cost(
    marks: list[tuple[int, int, int]], alloc: StageAllocation, fin: np.ndarray, cloud: CloudProfile,
    held: int = 0,
) -> np.ndarray:
    """Per-instance billing: each instance from provisioned to released, min charge each.

    Instances are released (newest first) at the barrier after which the next
    stage holds fewer; they are billed idle while they wait at that barrier.
    The ``held`` instances there at the start are billed from it; those stage 0
    does not use go at once, at the minimum charge.
    """
    cost = np.zeros(fin.shape[1])
    rate = cloud.price_per_hour / 3600.0
    kept = min(held, alloc.instances[0])
    cost += (held - kept) * cloud.min_billed_s * rate
    live: list[np.ndarray] = [np.zeros(fin.shape[1])] * kept  # acquire times, newest last
    for i, (_, scale, sync) in enumerate(marks):
        if scale >= 0:  # billed once provisioned, i.e. from the SCALE node's end
            live.extend(fin[scale] for _ in range(alloc.instances[i] - len(live)))
        keep = alloc.instances[i + 1] if i + 1 < len(marks) else 0
        while len(live) > keep:
            cost += np.maximum(fin[sync] - live.pop(), cloud.min_billed_s) * rate
    return cost


def simulate(spec: ExperimentSpec, alloc: StageAllocation, profile: ScalingProfile,
             cloud: CloudProfile, *, samples: int = 16, seed: int = 0, held: int = 0,
             held_ready: Latency = ZERO_LATENCY) -> Prediction:
    """Alg. 1: mean JCT (longest path) and cost over ``samples`` seeded draws
    (``held``, ``held_ready``: the instances already there, :func:`to_dag`)."""
    dag, marks = to_dag(spec, alloc, profile, cloud, held=held, held_ready=held_ready)
    rng = np.random.default_rng(seed)
    lat = dag.sample_latencies(rng, samples)
    fin = dag.finish_times(lat)
    jct = fin.max(axis=0)
    if cloud.billing == "instance":
        cost = _instance_cost(marks, alloc, fin, cloud, held)
    else:
        train = [k for k, v in enumerate(dag.nodes) if v.kind == NodeKind.TRAIN]
        gpus = np.array([dag.nodes[k].gpus for k in train], dtype=float)
        cost = (lat[train] * gpus[:, None]).sum(axis=0) * cloud.price_per_gpu_second
    cost = cost + spec.total_iterations * profile.data_gb_per_iteration * cloud.ingress_price_per_gb
    return Prediction(
        jct=float(jct.mean()),
        cost=float(cost.mean()),
        jct_std=float(jct.std()),
        cost_std=float(cost.std()),
        stage_start=tuple(float(fin[e].mean()) for e, _, _ in marks),
        stage_end=tuple(float(fin[s].mean()) for _, _, s in marks),
        instances=tuple(alloc.instances),
        gpus=tuple(alloc.gpus),
    )
