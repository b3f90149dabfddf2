"""Hydro's surrogate models (OSDI '23 §4.1): shrink a model's width by S, with µP.

``shrink(model, S)`` returns a :class:`Surrogate` whose ``module`` trains with
``Surrogate.optimizer(torch.optim.SGD | Adam | AdamW, **hparams)`` so that the
hyperparameters it ranks best transfer to the full-width target;
:func:`coord_check` verifies that on a few steps (docs/surrogates.rst).
"""

from __future__ import annotations

from nbtune.surrogate.attention import MuMultiheadAttention
from nbtune.surrogate.parametrization import Multiply, Surrogate, optimizer_kind
from nbtune.surrogate.shrinker import DEFAULT_MIN_WIDTH, ShrinkError, shrink

__all__ = ["DEFAULT_MIN_WIDTH", "Multiply", "MuMultiheadAttention", "ShrinkError", "Surrogate",
           "optimizer_kind", "shrink"]
