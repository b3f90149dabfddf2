"""What the epochs a tuning run chose cost, and the least time two cores could train them in.

``vs_peers`` prices each system's epochs with one core's in-process cost of an
epoch of the same shape (``vs_peers.epoch_costs``): *work*, the seconds Optuna
``n_jobs=1`` would spend on them back to back. Half of it is the *2-core bound*, the
least wall time any runtime on two cores could reach with those epochs (no start-up,
no overhead, both cores busy to the end). It separates what the stop rule chose
(how many epochs, of which configurations) from how well the runtime ran them.
"""

from __future__ import annotations

from typing import Any


def work(trained: list[tuple[dict[str, Any], Any]]) -> dict[str, int]:
    """Epochs trained per ``"channels,batch_size"``: all an epoch's cost depends on."""
    out: dict[str, int] = {}
    for config, n in trained:
        key = f"{int(config['channels'])},{int(config['batch_size'])}"
        out[key] = out.get(key, 0) + int(n)
    return out


def priced(epochs: dict[str, int], costs: dict[str, float]) -> float:
    return sum(n * costs[k] for k, n in epochs.items())


def bounds(med: dict[str, dict[str, Any]], pair_speedup: float = float("nan")) -> dict[str, Any]:
    """The bound's figures from ``vs_peers``' medians (``work_s``: each system's work).

    ``bound_s``: one core's work (Optuna ``n_jobs=1``), half of it for the systems on
    two workers; ``efficiency``: bound over wall time; ``bound_ratios``: Optuna
    ``n_jobs=1``'s wall time over nbtune's bound, the highest ratio a runtime with no
    overhead could reach with the epochs nbtune's stop rule chose (for Optuna ``n_jobs=1``
    itself, ``efficiency`` checks the model: near 1 when the prices are right);
    ``work_ratios``: twice Optuna ``n_jobs=1``'s work over nbtune's, that ratio with
    nbtune as efficient as Optuna ``n_jobs=1`` on each core. ``pair_bound_s`` and
    ``pair_efficiency``: the same with the work divided by ``pair_speedup``, the measured
    parallel speed-up of two bare processes (below 2 on real cores), for the systems on two
    workers: the bound two processes actually reach.
    """
    bound = {k: v["work_s"] / (1 if k == "optuna1" else 2) for k, v in med.items()
             if v.get("work_s")}
    eff = {k: b / med[k]["wall"] for k, b in bound.items()}
    nb = [k for k in ("cold", "cold_rank") if k in bound and "optuna1" in bound]
    ratios = {f"{k}_vs_optuna1": med["optuna1"]["wall"] / bound[k] for k in nb}
    # the same bound without the prices' level: Optuna n_jobs=1's work over half of nbtune's,
    # the ratio at Optuna's own efficiency (prices measured at another time of a drifting
    # machine cancel out, as long as every shape drifts alike)
    work_ratios = {f"{k}_vs_optuna1": 2 * med["optuna1"]["work_s"] / med[k]["work_s"]
                   for k in nb}
    pair_bound = {k: v["work_s"] / pair_speedup for k, v in med.items()
                  if v.get("work_s") and k != "optuna1" and pair_speedup == pair_speedup}
    pair_eff = {k: b / med[k]["wall"] for k, b in pair_bound.items()}
    for k, v in {"work_s": {k: v["work_s"] for k, v in med.items()}, "2-core bound": bound,
                 "efficiency": eff, "bound ratios": ratios, "work ratios": work_ratios,
                 "two-process bound": pair_bound, "efficiency against it": pair_eff}.items():
        print(f"{k}:", {n: round(x, 2) for n, x in v.items()})
    return {"work_s": {k: v["work_s"] for k, v in med.items()}, "bound_s": bound,
            "efficiency": eff, "bound_ratios": ratios, "work_ratios": work_ratios,
            "pair_speedup": pair_speedup, "pair_bound_s": pair_bound,
            "pair_efficiency": pair_eff}
