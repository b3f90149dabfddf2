"""rubberband_plan: the planner on RubberBand's Table 2 / Table 3 setting (EuroSys '21 §6.3.1).

Run: ``python benchmarks/rubberband_plan.py``

Spec: ``spec_from(SuccessiveHalving(n=32, min_budget=1, max_budget=50, eta=3))``
(nbtune's rungs: 32 trials to epoch 1, 10 to 3, 3 to 9, 1 to 27, 1 to 50).
Cloud: ``aws-p3.8xlarge`` ($12.24/instance-hour on-demand, 4 V100 each, per-second
billing with a 60 s minimum; 15 s provisioning + 15 s initialisation as the paper's
warm pool). Scaling profile: seconds per epoch of one trial, ``T1 / speedup(w)``;
the speed-ups are this benchmark's assumption shaped like the paper's Fig. 4
(sub-linear; near-linear inside one 4-GPU NVLink instance, much weaker across
instances), stragglers with cv = 0.05; T1 = 98 s per epoch on one GPU is chosen
so that, as in the paper, the 20-minute deadline is tight (the cheapest static
cluster is several instances). Fig. 4's image is not in the paper text we have,
so the exact values are not read from it.

Goals: planned/static cost <= 0.46 at 20 min; planned never costlier
than static at 20, 30 and 40 min; the 20-minute plan's shape close to Table 3
(per trial count: GPUs per trial and cluster size within 2x of the paper's);
each plan computed in < 1 s (wall, fastest of 3 runs: the machine is shared).
"""

from __future__ import annotations

import time

from _results import record  # benchmarks/_results.py: notes the load at start

from nbtune.algorithms import SuccessiveHalving
from nbtune.core.space import loguniform
from nbtune.planner import CLOUDS, ScalingProfile, plan, spec_from

T1_S = 98.0
SPEEDUP = {1: 1.0, 2: 1.9, 4: 3.6, 8: 5.0, 16: 5.3, 32: 5.5}
CV = 0.05
DEADLINES_MIN = (20, 30, 40)
REPEATS = 3
#: Table 3 of the paper: trials -> (GPUs per trial, instances)
TABLE3 = {32: (1, 8), 10: (2, 5), 3: (4, 4), 1: (8, 2)}
#: Table 2 of the paper (simulated): deadline -> (planned $, static $)
TABLE2 = {20: (15.68, 34.00), 30: (14.70, 17.73), 40: (14.68, 14.99)}


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = ("nbtune/planner/", "nbtune/algorithms/successive_halving.py")
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine


def shape_vs_table3(p) -> dict:
    """Per paper row, our stages with the same trial count: GPUs/trial and instances."""
    rows = p.rows()
    out, close = {}, True
    for n, (g, inst) in TABLE3.items():
        ours = [r for r in rows if r["trials"] == n]
        if not ours:
            close = False
            continue
        og = max(r["gpus_per_trial"] for r in ours)
        oi = max(r["instances"] for r in ours)
        out[n] = {"gpus_per_trial": og, "instances": oi, "paper": [g, inst]}
        close &= (g / 2 <= og <= 2 * g) and (inst / 2 <= oi <= 2 * inst)
    return {"rows": out, "close": close}


def main() -> dict:
    space = {"lr": loguniform(1e-4, 1e-1)}
    spec = spec_from(SuccessiveHalving(space, metric="loss", num_trials=32, min_budget=1,
                                       max_budget=50, eta=3))
    profile = ScalingProfile.from_speedup(T1_S, SPEEDUP, cv=CV, source="benchmark assumption")
    cloud = CLOUDS["aws-p3.8xlarge"]
    figures: dict = {"price_per_hour": cloud.price_per_hour, "t1_s": T1_S,
                     "speedup": SPEEDUP, "deadlines": {}}
    plans = {}
    for d in DEADLINES_MIN:
        walls, cpus = [], []
        for _ in range(REPEATS):  # the machine is shared: the fastest of a few is the cost
            t0, c0 = time.perf_counter(), time.process_time()
            p = plan(spec, profile, cloud, d * 60)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        secs = min(walls)
        plans[d] = p
        print(p, "\n")
        figures["deadlines"][d] = {
            "planned_cost": round(p.planned.cost, 2),
            "planned_jct_s": round(p.planned.jct, 1),
            "static_cost": round(p.static.cost, 2),
            "static_jct_s": round(p.static.jct, 1),
            "static_instances": p.static_instances,
            "naive_cost": None if p.naive is None else round(p.naive.cost, 2),
            "naive_jct_s": None if p.naive is None else round(p.naive.jct, 1),
            "cost_ratio": round(p.cost_ratio, 3),
            "paper_ratio": round(TABLE2[d][0] / TABLE2[d][1], 3),
            "plan_gpus": list(p.allocation.gpus),
            "plan_instances": list(p.allocation.instances),
            "planning_s": round(secs, 3),
            "planning_cpu_s": round(min(cpus), 3),
            "simulations": p.simulations,
        }
    shape = shape_vs_table3(plans[20])
    figures["table3_shape"] = shape["rows"]
    ratio20 = figures["deadlines"][20]["cost_ratio"]
    never_worse = all(plans[d].planned.cost <= plans[d].static.cost + 1e-9 for d in plans)
    max_plan_s = max(v["planning_s"] for v in figures["deadlines"].values())
    goal = {"cost_ratio_20min": "<= 0.46", "never_worse_than_static": True,
            "table3_shape_close": True, "planning_s": "< 1"}
    met = ratio20 <= 0.46 and never_worse and shape["close"] and max_plan_s < 1.0
    figures.update(cost_ratio_20min=ratio20, never_worse_than_static=never_worse,
                   table3_shape_close=shape["close"], max_planning_s=max_plan_s)
    line = {"name": "rubberband_plan", "figures": figures, "goal": goal, "met": met}
    record(line)
    return line


if __name__ == "__main__":
    main()
