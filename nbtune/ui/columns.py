"""The columns the dashboard's figures are fed: trials, allocation rectangles, utilization.

Plain data shaping, no figures: which values go out as numbers, when a column
goes out as a binary buffer, and how a search space becomes table columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from bokeh.palettes import Category20

from nbtune.core.space import Choice, Domain
from nbtune.ui.dashboard_model import Rect, Segment

__all__ = ["TRIAL_COLORS", "NAN", "num", "arrays", "rect_cols", "seg_cols", "config_columns",
           "cell"]

TRIAL_COLORS = Category20[20]
NAN = float("nan")


def num(v: Any) -> float:
    return NAN if v is None else float(v)


def arrays(cols: dict[str, list[Any]]) -> dict[str, Any]:
    """Columns to send: numpy arrays when long, plain lists when short.

    Bokeh encodes a list value by value in Python, and a numpy array as one
    block of bytes, gzipped and base64-encoded inline in the dashboard's one
    patch message (:func:`nbtune.ui.dashboard.patch_message`: no extra
    message); the block has a fixed cost of about a hundred values' encoding,
    so short columns go out as lists.
    """
    n = max((len(v) for v in cols.values()), default=0)
    if 0 < n < _ARRAY_FROM:
        return {k: list(v) for k, v in cols.items()}
    out: dict[str, Any] = {}
    for k, v in cols.items():
        if v and isinstance(v[0], str):
            out[k] = np.array(v, dtype=str)
        elif not v and k in _STRING_COLUMNS:
            out[k] = np.array([], dtype=str)
        else:
            out[k] = np.asarray(v, dtype=float)
    return out


_STRING_COLUMNS = {"state", "role", "error"}
_ARRAY_FROM = 100  # values from which a column goes out as a numpy array


def rect_cols(rects: Iterable[Rect]) -> dict[str, list[Any]]:
    rs = list(rects)
    return {
        "left": [r.start for r in rs], "right": [r.end for r in rs],
        "bottom": [r.bottom + 0.04 * r.share for r in rs],
        "top": [r.top - 0.04 * r.share for r in rs],
        "trial": [r.trial_id for r in rs], "gpu": [r.gpu_id for r in rs],
        "share": [r.share for r in rs],
        "cidx": [r.trial_id % len(TRIAL_COLORS) for r in rs],
    }


def seg_cols(segs: Iterable[Segment]) -> dict[str, list[Any]]:
    ss = list(segs)
    return {
        "left": [s.start for s in ss], "right": [s.end for s in ss],
        "bottom": [s.lane + 0.02 for s in ss], "top": [s.lane + 0.98 for s in ss],
        "gpu": [s.gpu_id for s in ss], "util": [s.util for s in ss],
    }


def config_columns(space: Mapping[str, Any]) -> dict[str, bool]:
    """Table columns for a search space: name -> whether its values are numbers."""
    out = {}
    for k, dom in space.items():
        if isinstance(dom, Choice):
            out[k] = all(is_num(o) for o in dom.options)
        else:
            out[k] = isinstance(dom, Domain) or is_num(dom)
    return out


def is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def cell(v: Any, numeric: bool) -> Any:
    """A config value as its table column holds it (numbers sort as numbers)."""
    if numeric:
        return float(v) if is_num(v) else NAN
    return str(v)
