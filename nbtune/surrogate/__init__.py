"""Hydro's surrogate models (OSDI '23 §4.1, §4.3): shrink a model's width by S, with µP.

``shrink(model, S)`` returns a :class:`Surrogate` whose ``module`` trains with
``Surrogate.optimizer(torch.optim.SGD | Adam | AdamW, **hparams)`` so that the
hyperparameters it ranks best transfer to the full-width target;
:func:`coord_check` verifies that on a few steps; :class:`EagerTransfer`
(``nbtune.tune(..., scaling=S)``) trains the best configuration on the target
while the surrogates are still being tuned (docs/surrogates.rst).
"""

from __future__ import annotations

from nbtune.surrogate.attention import MuMultiheadAttention
from nbtune.surrogate.coord_check import CoordCheck, ParametrizationWarning, coord_check
from nbtune.surrogate.eager_transfer import TARGET_ID_BASE, EagerTransfer, build
from nbtune.surrogate.parametrization import Multiply, Surrogate, optimizer_kind
from nbtune.surrogate.shrinker import DEFAULT_MIN_WIDTH, ShrinkError, shrink

__all__ = ["DEFAULT_MIN_WIDTH", "TARGET_ID_BASE", "CoordCheck",
           "EagerTransfer", "Multiply", "MuMultiheadAttention", "ParametrizationWarning",
           "ShrinkError", "Surrogate", "build", "coord_check", "optimizer_kind", "shrink"]
