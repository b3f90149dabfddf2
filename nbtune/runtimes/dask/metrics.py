"""What a trial may report: the experiment's metric as a number, everything else msgpack-safe.

Checked in the trial's own process, so a wrong name or a text value fails
that trial with a message saying what to write, at the report that made the
mistake; the driver and the engine never see a value they cannot rank.
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = ["check_metric", "clean"]


def check_metric(trial_id: int, metric: str | None, metrics: dict[str, Any]) -> None:
    """The experiment's metric must be in every report, as a number (Ray Tune asks the same).

    Without it the algorithm ranks the trial as the worst at every rung and
    the best trial is meaningless; a string would make comparisons fail far
    away, in the driver. NaN and inf are numbers: ranked as the worst.
    Numpy and 0-d torch scalars are converted in place.
    """
    if metric is None:
        return
    if metric not in metrics:
        raise KeyError(
            f"trial {trial_id} reported {sorted(metrics)} but not the experiment's metric "
            f"{metric!r}: report it (trial.report(step, {metric}=...)) or pass the name you "
            "report as tune(..., metric=...)")
    v = metrics[metric]
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        try:
            if isinstance(v, bool | str | bytes) or v is None:
                raise TypeError
            v = float(v)
        except (TypeError, ValueError):
            raise TypeError(
                f"trial {trial_id} reported {metric}={v!r} ({type(v).__name__}); the "
                "experiment's metric must be a number (e.g. float(loss) or loss.item())"
            ) from None
        metrics[metric] = v


def clean(metrics: dict[str, Any]) -> dict[str, Any]:
    """Make metrics msgpack-safe: numpy/torch scalars become floats, other objects strings."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if isinstance(v, bool | str) or v is None:
            out[str(k)] = v
        elif isinstance(v, numbers.Integral):
            out[str(k)] = int(v)
        else:  # floats, numpy and 0-d torch scalars; anything else is shown as text
            try:
                out[str(k)] = float(v)
            except (TypeError, ValueError):
                out[str(k)] = str(v)
    return out
