"""Workload models the simulator runs: synthetic learning curves and replayed traces."""

from __future__ import annotations

from nbtune.workloads.curves import PowerLawCurve, QualityLandscape
from nbtune.workloads.synthetic import SyntheticWorkload
from nbtune.workloads.trace import TraceTrial, TraceWorkload
from nbtune.workloads.workload_protocol import Neighbor, OverheadModel, WorkloadModel

__all__ = ["Neighbor", "OverheadModel", "WorkloadModel", "PowerLawCurve", "QualityLandscape",
           "SyntheticWorkload", "TraceTrial", "TraceWorkload"]
