"""RubberBand's resource allocation planner (§4.3, Alg. 2) and its baselines.

* **static** (§3.2): the cheapest fixed-size cluster whose predicted JCT meets
  the deadline, its GPUs shared fairly within each stage;
* **naive elastic** (§6.3.1): a fixed number of GPUs per trial in every stage,
  the cluster resized to match (the policy of prior work);
* **planned**: Alg. 2, warm-started from the static allocation (and 2x, 3x of
  it): each step decrements one stage's allocation to the next value that
  still divides fairly among its trials, keeps the candidate with the largest
  cost saved per second of JCT added (Eq. 1), and stops when no feasible
  candidate saves more than ``delta``. It never returns a plan predicted
  costlier than the static warm start, because that start is a candidate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from nbtune.planner.dag import Prediction, StageAllocation, simulate
from nbtune.planner.plan import Plan
from nbtune.planner.profiles import ZERO_LATENCY, CloudProfile, Latency, ScalingProfile
from nbtune.planner.profiles import cloud as cloud_named
from nbtune.planner.spec import ExperimentSpec

__all__ = [
    "InfeasibleDeadline",
    "cheapest_static",
    "fair_values",
    "jct_floor",
    "naive_elastic",
    "optimize_plan",
    "plan",
    "static_allocation",
    "step_down",
]


class InfeasibleDeadline(ValueError):
    """No allocation considered finishes by the deadline; the message gives the fastest."""


Evaluate = Callable[[StageAllocation], Prediction]


def step_down(gpus: int, trials: int) -> int | None:
    """The next smaller stage allocation that divides fairly (§4.3), or None at 1.

    Fair values are multiples of the trial count (each trial gets the same
    GPUs) and its factors (each GPU runs the same number of trials in turn).
    """
    if gpus <= 1:
        return None
    if gpus > trials:
        return trials * ((gpus - 1) // trials)
    return max(d for d in range(1, gpus) if trials % d == 0)


def _candidate_step(gpus: int, trials: int, cloud: CloudProfile) -> int | None:
    """The next fair allocation down; under per-instance billing, the next that frees an instance.

    A step that keeps the same instances saves nothing when whole instances
    are billed, so it would stop the greedy search on a plateau; stepping on
    to the first fair value that releases an instance keeps the search moving
    with steps that still divide fairly.
    """
    lower = step_down(gpus, trials)
    if cloud.billing != "instance":
        return lower
    while lower is not None and cloud.instances_for(lower) == cloud.instances_for(gpus):
        lower = step_down(lower, trials)
    return lower


def fair_values(trials: int, limit: int) -> list[int]:
    """All fair allocations of a stage up to ``limit`` GPUs, ascending."""
    vals = {d for d in range(1, min(trials, limit) + 1) if trials % d == 0}
    vals |= set(range(trials, limit + 1, trials))
    return sorted(vals)


def static_allocation(spec: ExperimentSpec, instances: int, cloud: CloudProfile) -> StageAllocation:
    """A fixed cluster of ``instances``: each stage uses what divides fairly (§3.2)."""
    total = instances * cloud.gpus_per_instance
    gpus = tuple(
        s.trials * (total // s.trials) if total >= s.trials else total for s in spec.stages
    )
    return StageAllocation(gpus, (instances,) * spec.num_stages())


def cheapest_static(
    spec: ExperimentSpec, evaluate: Evaluate, cloud: CloudProfile, deadline: float,
    max_instances: int, jct_floor: float | None = None,
) -> tuple[int, Prediction] | tuple[None, Prediction]:
    """Enumerate cluster sizes 1..max; the cheapest feasible, or (None, fastest seen).

    Under per-instance billing a cluster of ``k`` costs at least ``k`` times
    one instance held for ``jct_floor`` (the job with every stage at its
    fastest), so the enumeration stops once that bound passes the best cost.
    """
    floor_cost = None
    if jct_floor is not None and cloud.billing == "instance":
        floor_cost = cloud.instance_cost(jct_floor)
    best: tuple[int, Prediction] | None = None
    fastest: Prediction | None = None
    for k in range(1, max_instances + 1):
        if best is not None and floor_cost is not None and k * floor_cost > best[1].cost:
            break
        p = evaluate(static_allocation(spec, k, cloud))
        if fastest is None or p.jct < fastest.jct:
            fastest = p
        if p.jct <= deadline and (best is None or p.cost < best[1].cost):
            best = (k, p)
    assert fastest is not None
    return best if best is not None else (None, fastest)


def naive_elastic(
    spec: ExperimentSpec, evaluate: Evaluate, cloud: CloudProfile, deadline: float,
    max_gpus: int,
) -> Prediction | None:
    """Fixed GPUs per trial in every stage, the cluster resized to match; cheapest feasible."""
    best = None
    widest = max(s.trials for s in spec.stages)
    for g in range(1, max(1, max_gpus // widest) + 1):
        p = evaluate(StageAllocation.elastic([s.trials * g for s in spec.stages], cloud))
        if p.jct <= deadline and (best is None or p.cost < best.cost):
            best = p
    return best


def optimize_plan(
    spec: ExperimentSpec, evaluate: Evaluate, cloud: CloudProfile, deadline: float,
    warm: Sequence[int], *, delta: float = 1e-9,
) -> tuple[StageAllocation, Prediction, int]:
    """Alg. 2 from the warm-start GPUs per stage; returns the plan, its prediction, steps."""
    cur = StageAllocation.elastic(list(warm), cloud)
    cur_p = evaluate(cur)
    steps = 0
    while True:
        best: tuple[float, StageAllocation, Prediction] | None = None
        for i, stage in enumerate(spec.stages):
            lower = _candidate_step(cur.gpus[i], stage.trials, cloud)
            if lower is None:
                continue
            gpus = list(cur.gpus)
            gpus[i] = lower
            cand = StageAllocation.elastic(gpus, cloud)
            p = evaluate(cand)
            saved = cur_p.cost - p.cost
            if p.jct > deadline or saved <= delta:
                continue
            added = p.jct - cur_p.jct
            m = math.inf if added <= 0 else saved / added  # Eq. 1
            if best is None or (m, saved) > (best[0], cur_p.cost - best[2].cost):
                best = (m, cand, p)
        if best is None:
            return cur, cur_p, steps
        _, cur, cur_p = best
        steps += 1


def jct_floor(spec: ExperimentSpec, profile: ScalingProfile, cloud: CloudProfile,
              held_ready: Latency | None = None) -> float:
    """A lower bound on any plan's JCT: start-up plus every stage at its fastest, no straggler.

    Half the mean is used for the sampled parts, so Monte-Carlo noise in a
    prediction (a sample mean below the distribution's mean) cannot cross it.
    ``held_ready``: instances already held start after it instead of a new one's start.
    """
    fastest = min(profile.points.values())
    work = sum(s.iterations * fastest + profile.startup_s for s in spec.stages)
    start = cloud.provision.mean + cloud.init.mean
    if held_ready is not None:
        start = min(start, held_ready.mean)
    return 0.5 * (start + work)


def plan(
    spec: ExperimentSpec,
    profile: ScalingProfile,
    cloud: CloudProfile | str,
    deadline: float,
    *,
    samples: int = 16,
    seed: int = 0,
    warm_multiples: Sequence[int] = (1, 2, 3),
    max_instances: int = 128,
    held: int = 0,
    held_ready: Latency = ZERO_LATENCY,
) -> Plan:
    """The cheapest predicted allocation plan that finishes within ``deadline`` seconds.

    ``held`` instances are already running when the job starts (a local cluster
    with workers up), each ready to train after ``held_ready``
    (:func:`nbtune.planner.measure.measure_ready`); more are provisioned as the
    cloud profile says. Raises :class:`InfeasibleDeadline` when even the fastest
    static cluster of up to ``max_instances`` instances is predicted to miss the
    deadline.
    """
    if not isinstance(spec, ExperimentSpec):
        raise TypeError(f"spec must be an ExperimentSpec (see spec_from), got {type(spec).__name__}")
    if not isinstance(profile, ScalingProfile):
        raise TypeError(f"profile must be a ScalingProfile, got {type(profile).__name__}")
    cloud = cloud_named(cloud)
    if not (isinstance(deadline, int | float) and math.isfinite(deadline) and deadline > 0):
        raise ValueError(f"deadline must be a positive number of seconds, got {deadline!r}")
    t0 = time.perf_counter()
    cache: dict[StageAllocation, Prediction] = {}

    def evaluate(a: StageAllocation) -> Prediction:
        if a not in cache:
            cache[a] = simulate(spec, a, profile, cloud, samples=samples, seed=seed,
                                held=held, held_ready=held_ready)
        return cache[a]

    k, static_p = cheapest_static(spec, evaluate, cloud, deadline, max_instances,
                                  jct_floor(spec, profile, cloud, held_ready if held else None))
    if k is None:
        raise InfeasibleDeadline(
            f"no static cluster of up to {max_instances} x {cloud.name} finishes within "
            f"{deadline:.0f} s: the fastest is predicted at {static_p.jct:.0f} s "
            f"({static_p.instances[0]} instances). Give a later deadline, a faster "
            f"instance type, or a larger max_instances."
        )
    best_alloc, best_p = static_allocation(spec, k, cloud), static_p
    steps_total = 0
    for mult in warm_multiples:
        warm = static_allocation(spec, k * mult, cloud)
        if evaluate(StageAllocation.elastic(list(warm.gpus), cloud)).jct > deadline:
            continue
        alloc, p, steps = optimize_plan(spec, evaluate, cloud, deadline, warm.gpus)
        steps_total += steps
        if p.cost < best_p.cost:
            best_alloc, best_p = alloc, p
    naive = naive_elastic(
        spec, evaluate, cloud, deadline, max_instances * cloud.gpus_per_instance
    )
    return Plan(
        spec=spec,
        profile=profile,
        cloud=cloud,
        deadline=float(deadline),
        allocation=best_alloc,
        planned=best_p,
        static=static_p,
        naive=naive,
        static_instances=k,
        simulations=len(cache),
        greedy_steps=steps_total,
        planning_s=time.perf_counter() - t0,
        held=held,
        held_ready=held_ready,
    )
