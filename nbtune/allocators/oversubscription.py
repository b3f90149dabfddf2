"""Picking HyperSack's oversubscription ratio r per GPU type from profiling (§III-A, §V-D).

A GPU's compute capacity is scaled by r so that lightweight jobs, which leave
the GPU idle while they wait for data, overlap in time. Too small an r leaves
bubbles, too large oversaturates the CUDA cores and the CPU cores feeding
them: HyperSack measures a throughput peak near r = 3 on an A100 and 2.5 on
an H100. These functions turn such measurements into the ``kind -> r``
mapping the knapsack allocators take, instead of hand-set constants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["DEFAULT_RATIO", "choose_ratio", "choose_ratios"]

#: what an allocator assumes for a GPU kind nobody profiled: no oversubscription
DEFAULT_RATIO = 1.0


def choose_ratio(samples: Iterable[tuple[float, float]], *, tolerance: float = 0.01) -> float:
    """The ratio with the highest measured throughput among ``(r, throughput)`` samples.

    Repeated measurements of one ratio are averaged. Among ratios within
    ``tolerance`` (relative) of the best mean, the smallest wins: on a plateau
    a lower r gives the same throughput with less memory and CPU pressure and
    less exposure to the degradation past the peak.
    """
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
    sums: dict[float, list[float]] = {}
    for item in samples:
        try:
            r, thr = (float(x) for x in item)
        except (TypeError, ValueError):
            raise ValueError(
                f"each sample must be a pair (ratio, throughput), got {item!r}"
            ) from None
        if not r > 0:
            raise ValueError(f"oversubscription ratio must be > 0, got {r}")
        if not thr >= 0:
            raise ValueError(f"throughput must be >= 0, got {thr} at ratio {r}")
        acc = sums.setdefault(r, [0.0, 0.0])
        acc[0] += thr
        acc[1] += 1
    if not sums:
        raise ValueError("no (ratio, throughput) samples: profile at least one ratio")
    means = {r: s / n for r, (s, n) in sums.items()}
    best = max(means.values())
    return min(r for r, m in means.items() if m >= best * (1.0 - tolerance))


def choose_ratios(
    samples: Mapping[str, Iterable[tuple[float, float]]], *, tolerance: float = 0.01
) -> dict[str, float]:
    """:func:`choose_ratio` for each GPU kind: ``{"A100": [(1, 40.0), (3, 95.1), ...]}``."""
    return {kind: choose_ratio(s, tolerance=tolerance) for kind, s in samples.items()}
