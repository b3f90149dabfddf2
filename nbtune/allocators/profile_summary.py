"""A Profile from what the runtime's profiler measured: Fluid's c, α, d, β and ε (§4.2.2).

Pure arithmetic over mean seconds per budget unit, keyed by how many trials
shared a GPU (p) or how many GPUs a trial used (w); the runtime's
:class:`~nbtune.runtimes.profiler.Profiler` collects the times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from nbtune.allocators.profiling import (
    Profile,
    fit_alpha,
    fit_beta,
    packing_limit,
    scaling_limit,
)
from nbtune.core.resources import Demand

__all__ = ["summarize", "fit_resize_cost", "slicing_floor"]


def summarize(base: Profile, pack: dict[int, float], scale: dict[int, float], demand: Demand,
              resize_cost: float | None, threshold: float = 0.05,
              min_gain: float = 0.1, *, runnable: float | None = None) -> Profile:
    """A Profile from mean seconds per unit at p packed (``pack``) and at w GPUs (``scale``).

    Fields not measured keep ``base``'s (the job history). c and α come from
    packing (Fluid's marginal benefit, §4.2.2; a p measured without p − 1, as
    water-filling packs c at once, is filled in from the α fit); d and β from
    scaling (RubberBand: the first doubling that stops paying). Times kept
    from the history are rescaled by how this run's time alone compares with
    the history's, so ratios are never taken between two runs' loads. The
    compute share is at least 1/c: a utilization sampled while others load
    the machine reads low, and the packing measurement says how many fit.

    ``runnable`` is the measured share of time a trial alone was running or
    waiting to run on a *time-sliced* resource (a CPU stand-in's core; the
    profiler gives its highest sample: gaps at a trial's start, end or rung
    verdict only ever lower one): p
    trials there get at most ``min(p, 1/runnable)`` times one trial's
    throughput, so no packed time can be faster than ``p · T¹ / min(p, 1/runnable)``
    (:func:`slicing_floor`). Packed times measured at another moment than T¹
    (the machine's load changed in between) once read as a gain on a core a
    CPU-bound trial already filled, and ``auto`` packed a whole warm run.
    """
    pack, scale = _alone(dict(pack), dict(scale))
    pack = _merge(base.packing, pack)
    scale = _merge(base.scaling, scale)
    pack, scale = _alone(pack, scale)
    if runnable is not None and 1 in pack:
        pack = slicing_floor(pack, runnable, threshold)
    kw: dict[str, Any] = {"packing": pack, "scaling": scale, "demand": demand,
                          "resize_cost": resize_cost}
    if 1 in pack:
        kw["unit_time"] = t1 = pack[1]
        if len(pack) > 1:
            kw["alpha"] = alpha = fit_alpha({p: [t] for p, t in pack.items()})
            times = {p: [pack.get(p, t1 * alpha ** (p - 1))] for p in range(1, max(pack) + 1)}
            kw["c"] = c = packing_limit(times, threshold)
            if demand.compute < 1.0 / c:  # a share read on a busy machine, not a need: c says
                kw["demand"] = replace(demand, compute=1.0 / c)  # how many really fit
    if 1 in scale and len(scale) > 1:
        kw["d"] = scaling_limit(scale, min_gain)
        kw["beta"] = fit_beta(scale)
    return replace(base, **kw)


def slicing_floor(pack: Mapping[int, float], runnable: float,
                  threshold: float) -> dict[int, float]:
    """Packed times no faster than time-slicing allows, given the measured ``runnable`` share.

    Where the room ``1/runnable`` cannot repay a second trial by more than
    ``threshold``, p = 2 is entered at its floor when not measured: c = 1 is
    then known without a probe that would pack two trials on a full core.
    """
    t1 = pack[1]
    room = 1.0 / max(runnable, 1e-6)
    out = {p: max(t, p * t1 / min(p, room)) for p, t in pack.items()}
    if 2 not in out and room <= 1.0 + threshold:
        out[2] = 2 * t1 / min(2.0, room)
    return out


def _alone(pack: dict[int, float], scale: dict[int, float]) -> tuple[dict, dict]:
    """Alone on one GPU is both p = 1 and w = 1."""
    if 1 in pack and 1 not in scale:
        scale[1] = pack[1]
    if 1 in scale and 1 not in pack:
        pack[1] = scale[1]
    return pack, scale


def _merge(old: Mapping[int, float], new: Mapping[int, float]) -> dict[int, float]:
    """``new`` over ``old``, ``old`` rescaled to ``new``'s time alone (key 1) when both have it."""
    if 1 in old and 1 in new and old[1] > 0:
        k = new[1] / old[1]
        old = {p: t * k for p, t in old.items()}
    return {**old, **new}


def fit_resize_cost(raw: Sequence[tuple], pack: Mapping[int, float],
                    scale: Mapping[int, float]) -> float | None:
    """ε from intervals that spanned a resize: ``(old (p, w), new (p, w), t_before, t_after, units)``.

    Before the resize the trial trained at its old width's pace (units done =
    t_before / u_old); ε = t_after − (units left) · u_new. None until both
    widths' times per unit (``pack`` by p at w = 1, ``scale`` by w) are known.
    """
    def unit(key: tuple[int, int]) -> float | None:
        return pack.get(key[0]) if key[1] == 1 else scale.get(key[1])

    eps = []
    for old, new, before, after, units in raw:
        u_old, u_new = unit(old), unit(new)
        if u_old and u_new:
            eps.append(max(after - max(units - before / u_old, 0.0) * u_new, 0.0))
    return sum(eps) / len(eps) if eps else None
