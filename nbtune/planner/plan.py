"""The planner's answer: an allocation per stage plus predictions to compare it with.

A :class:`Plan` answers "what will this cost and how long will it take?"
before anything runs: predicted JCT and cost of the cheapest static cluster,
the naive elastic policy and the planned schedule, and the schedule itself as
a table shaped like the paper's Table 3 (epoch range, trials, GPUs per trial,
cluster size). It renders as text, as HTML in Jupyter, and as a Bokeh chart.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from nbtune.planner.dag import Prediction, StageAllocation, stage_layout
from nbtune.planner.profiles import ZERO_LATENCY, CloudProfile, Latency, ScalingProfile
from nbtune.planner.spec import ExperimentSpec

__all__ = ["Plan", "fmt_duration"]


def fmt_duration(seconds: float) -> str:
    """``mm:ss`` (``h:mm:ss`` past an hour), as the paper's tables print JCT."""
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


@dataclass(frozen=True)
class Plan:
    """An allocation plan with its predicted JCT and cost (and the baselines')."""

    spec: ExperimentSpec
    profile: ScalingProfile
    cloud: CloudProfile
    deadline: float
    allocation: StageAllocation
    planned: Prediction
    static: Prediction
    naive: Prediction | None
    static_instances: int
    simulations: int = 0
    greedy_steps: int = 0
    planning_s: float = 0.0
    #: instances the cluster held when the job was planned, and when they are ready
    held: int = 0
    held_ready: Latency = ZERO_LATENCY

    # ------------------------------------------------------------ numbers
    @property
    def cost_ratio(self) -> float:
        """Planned cost over the cheapest static cluster's (the paper's headline)."""
        return self.planned.cost / self.static.cost if self.static.cost else 1.0

    def rows(self) -> list[dict[str, Any]]:
        """One dict per stage: the Table 3 columns plus predicted start and end."""
        out = []
        for i, st in enumerate(self.spec.stages):
            gpus = self.allocation.gpus[i]
            slots, per_trial = stage_layout(st.trials, gpus)
            out.append({
                "stage": i,
                "job": st.job,
                "epochs": f"{st.start:g}-{st.end:g}",
                "trials": st.trials,
                "gpus_per_trial": per_trial,
                "parallel_trials": slots,
                "gpus": gpus,
                "instances": self.allocation.instances[i],
                "start_s": round(self.planned.stage_start[i], 1),
                "end_s": round(self.planned.stage_end[i], 1),
            })
        return out

    def summary(self) -> list[dict[str, Any]]:
        """Predicted JCT and cost per policy (the rows of the paper's Table 2)."""
        rows = []
        for name, p in (("static", self.static), ("naive elastic", self.naive),
                        ("planned", self.planned)):
            if p is None:
                rows.append({"policy": name, "jct_s": None, "jct": "infeasible", "cost": None,
                             "cost_std": None, "max_instances": None})
                continue
            rows.append({"policy": name, "jct_s": round(p.jct, 1), "jct": fmt_duration(p.jct),
                         "cost": round(p.cost, 2), "cost_std": round(p.cost_std, 2),
                         "max_instances": max(p.instances)})
        return rows

    def table(self) -> Any:
        """The schedule as a pandas DataFrame (Table 3's columns and more)."""
        import pandas as pd

        return pd.DataFrame(self.rows()).set_index("stage")

    def summary_table(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.summary()).set_index("policy")

    # ---------------------------------------------------------- rendering
    def _headline(self) -> str:
        c = self.cloud
        return (
            f"Plan for {self.spec.name} ({self.spec.num_stages()} stages) on {c.name} "
            f"(${c.price_per_hour:g}/h, {c.gpus_per_instance} GPU/instance), deadline "
            f"{fmt_duration(self.deadline)}: predicted {fmt_duration(self.planned.jct)} and "
            f"${self.planned.cost:.2f} vs static {self.static_instances} instances "
            f"{fmt_duration(self.static.jct)} and ${self.static.cost:.2f} "
            f"({self.cost_ratio:.2f}x)"
            + (f", from the {self.held} instances held (ready in {self.held_ready.mean:.1f} s)"
               if self.held else "")
            + f"; planned in {self.planning_s:.2f} s"
        )

    def __str__(self) -> str:
        return "\n".join([
            self._headline(),
            self.summary_table().to_string(),
            self.table()[["epochs", "trials", "gpus_per_trial", "instances", "start_s",
                          "end_s"]].to_string(),
        ])

    def __repr__(self) -> str:
        return (f"Plan(deadline={self.deadline:g}, gpus={self.allocation.gpus}, "
                f"instances={self.allocation.instances}, jct={self.planned.jct:.1f}, "
                f"cost={self.planned.cost:.2f}, static_cost={self.static.cost:.2f})")

    def _repr_html_(self) -> str:
        parts = [f"<p><b>{html.escape(self._headline())}</b></p>",
                 self.summary_table().to_html(), self.table().to_html()]
        try:
            from nbtune.planner.chart import plan_chart_html

            parts.append(plan_chart_html(self))
        except ImportError:  # bokeh is optional for the table
            pass
        return "\n".join(parts)

    def plot(self) -> Any:
        """A Bokeh layout: cluster size over time, static vs naive vs planned, JCT and cost."""
        from nbtune.planner.chart import plan_figure

        return plan_figure(self)
