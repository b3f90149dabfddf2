"""nbtune: Jupyter-first, resource-aware hyperparameter tuning.

The public surface is small: :func:`tune`, :class:`Experiment`, the search
space helpers, and the runtimes. Everything else lives in subpackages.
"""

from __future__ import annotations

from nbtune.api import tune
from nbtune.core.space import choice, grid, loguniform, qloguniform, quniform, randint, uniform
from nbtune.experiment import Experiment
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload, TraceWorkload

__version__ = "0.1.0"

__all__ = [
    "tune", "Experiment", "SimRuntime", "SyntheticWorkload", "TraceWorkload",
    "choice", "grid", "loguniform", "qloguniform", "quniform", "randint", "uniform",
    "__version__",
]
