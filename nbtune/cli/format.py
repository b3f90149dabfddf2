"""How the command line prints: tables, numbers, times, a store's name, a run's outcome.

Every ``nbtune`` command formats through here, so ``demo``, ``ls``, ``show``
and ``resume`` print the same things the same way.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from nbtune.core.resources import device_noun, device_of

if TYPE_CHECKING:
    from nbtune.experiment import Experiment
    from nbtune.store.store import Store

__all__ = ["fmt_value", "table", "columns", "outcome_rows", "utilization_row", "local_time",
           "store_label", "store_flag", "options_text", "space_text", "config_text",
           "cluster_text"]


def fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def table(rows: Sequence[tuple[str, str]], out: TextIO) -> None:
    """Two columns, key and value, between two rules."""
    width = max(len(k) for k, _ in rows)
    rule = "-" * min(78, width + 2 + max(len(v) for _, v in rows))
    print(rule, file=out)
    for k, v in rows:
        print(f"{k:<{width}}  {v}", file=out)
    print(rule, file=out)


def columns(rows: list[list[str]], right: set[int], out: Any) -> None:
    """Aligned columns; the indices in ``right`` are right-aligned (numbers)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        print("  ".join(cells).rstrip(), file=out)


def per_gpu_utilization(exp: Experiment) -> dict[int, float]:
    """Time-weighted utilization of each lane (GPU or CPU worker) over the makespan (0 for
    lanes never used)."""
    span = float(exp.makespan)
    out = {g.gpu_id: 0.0 for g in exp.engine.cluster.gpus}
    out.update({g: busy / span for g, busy in exp.busy_seconds().items()})
    return out


def cluster_text(cluster: Any, kind: str | None = None) -> str:
    """What the trials run on, in words: ``4 GPUs`` only on GPUs, ``2 CPU workers`` where
    CPU workers stand in for them; ``kind`` (a runtime's) adds ``simulated`` or ``on Dask``."""
    device = device_of(cluster)
    if device is None:
        return "not known yet (the run has not started)"
    text = device_noun(device, cluster.n_gpus)
    if kind == "sim":
        n, noun = text.split(" ", 1)
        return f"{n} simulated {noun}"
    if kind is not None:
        text = f"{text} on Dask"
    return f"{text} (standing in for GPUs)" if device == "CPU" else text


def utilization_row(exp: Experiment, kind: str) -> tuple[str, str]:
    """The summary's utilization row: per simulated lane, or measured on the Dask workers;
    ``GPU utilization`` only on GPUs, the workers' CPU share on CPU stand-ins."""
    device = device_of(exp.engine.cluster)
    if kind != "sim":
        if device == "GPU":
            return ("GPU utilization", f"mean {exp.mean_utilization():.1%} (measured on the "
                                       "GPUs)")
        return ("utilization", f"mean {exp.mean_utilization():.1%} (measured CPU of the workers)")
    util = per_gpu_utilization(exp)
    mean_util = sum(util.values()) / len(util) if util else 0.0
    lane = "GPU" if device == "GPU" else "worker"
    if len(util) <= 8:
        spread = f"per {lane} " + " ".join(f"{g}:{u:.0%}" for g, u in sorted(util.items()))
    else:
        spread = f"min {min(util.values()):.0%}, max {max(util.values()):.0%}"
    return (f"{lane} utilization", f"mean {mean_util:.1%}; {spread}")


def outcome_rows(exp: Experiment) -> list[tuple[str, str]]:
    """The rows every run summary prints: trials by state, the best result and its config."""
    df = exp.results()
    states = df["state"].value_counts().to_dict() if not df.empty else {}
    rows = [("trials", f"{len(df)} ("
             + ", ".join(f"{n} {s}" for s, n in sorted(states.items())) + ")")]
    best = exp.best
    if best is None:
        return rows + [(f"best {exp.metric}", "none (no trial reported)")]
    return rows + [
        (f"best {exp.metric}",
         f"{best[exp.metric]:.4f} (trial {best['trial_id']}, budget {best['budget_used']:g})"),
        ("best config", ", ".join(f"{k}={fmt_value(v)}" for k, v in best["config"].items())),
    ]


def local_time(t: datetime | None) -> str:
    if t is None:
        return "-"
    if t.tzinfo is None:  # SQLite hands back the stored UTC time without its zone
        t = t.replace(tzinfo=UTC)
    return t.astimezone().strftime("%Y-%m-%d %H:%M")


def store_label(st: Store) -> str:
    return str(st.path) if st.path is not None else st.url.render_as_string(hide_password=True)


def store_flag(st: Store, spec: str | None) -> str:
    """The ``--store`` argument a user would type again ('' for the default store)."""
    return "" if spec is None else f" --store {shlex.quote(spec)}"


def options_text(opts: Any) -> str:
    """Stored algorithm or allocator options, as `` (k=v, ...)``."""
    from nbtune.store.serialize import from_jsonable

    if opts is None:
        return " (an instance: options not stored)"
    opts = from_jsonable(opts)
    if not opts:
        return ""
    return " (" + ", ".join(f"{k}={fmt_value(v)}" for k, v in opts.items()) + ")"


def space_text(space: dict[str, Any]) -> str:
    """A stored search space, one ``name=kind(params)`` per dimension."""
    parts = []
    for name, d in space.items():
        kind = d.get("type")
        if kind in ("choice", "grid"):
            parts.append(f"{name}={kind}({', '.join(fmt_value(o) for o in d['options'])})")
        elif kind == "const":
            parts.append(f"{name}={fmt_value(d['value'])}")
        else:
            params = ", ".join(fmt_value(v) for k, v in d.items() if k != "type")
            parts.append(f"{name}={kind}({params})")
    return "; ".join(parts)


def config_text(r: Any, cols: list[str]) -> str:
    """A results row's config columns as ``k=v, ...`` (columns it does not have are left out)."""
    return ", ".join(f"{c.removeprefix('config/')}={fmt_value(r[c])}" for c in cols
                     if not (isinstance(r[c], float) and math.isnan(r[c])))
