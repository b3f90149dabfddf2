"""The Hydro / µP parametrization of a shrunk model: per-parameter learning-rate rules.

Hydro (OSDI '23, §4.1) and Microsoft's ``mup`` both take the *target* model as the
base shape (it trains in standard parametrization) and give the surrogate, whose
width multiplier is ``m = 1/S``, per-tensor learning-rate multipliers so that every
layer's activations move by the same amount per step at any width. What a tensor
gets depends on how many of its dimensions are *widths* (dimensions the shrinker
divided by ``S``), read off the real shapes, as ``mup.InfShape`` does:

==========================  ======================  =====================
tensor                       SGD-like                Adam-like
==========================  ======================  =====================
no width dimension           x1                      x1
one width dimension          x m (input W, biases,   x1
  ("vector-like")             norms, readout W)
two width dimensions         x fanout_m / fanin_m    x 1/m (hidden W)
  ("matrix-like")             (x1 for hidden W)
==========================  ======================  =====================

Weight decay moves the other way (``lr * wd`` per step stays width-independent),
as in ``mup`` 1.0.0. The readout layer's input is multiplied by ``1/m`` (``mup``'s
``MuReadout``, Hydro's ``Multiply(S)``): :class:`Multiply` is that layer.

Hydro's own SGD rule also multiplies the *hidden* weights' lr by ``S``; ``mup``
leaves them at x1. We follow ``mup``: a hidden weight's update on an input ``x``
is ``lr * delta * |x|^2``, the gradient coordinates ``delta`` scale as ``1/n``
(the readout multiplier) and ``|x|^2`` as ``n``, so the update is ``Theta(lr)`` at
every width only with a width-independent lr. Hydro's extra ``S`` makes hidden
layers of narrower surrogates learn faster than the target, and the coordinate
check (:func:`nbtune.surrogate.coord_check`) shows it as activations that shrink
with width (docs/surrogates.rst has the measurement).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = ["Multiply", "Surrogate", "optimizer_kind"]

#: optimizers whose update is linear in the gradient (mup's "SGD-like")
_SGD_LIKE = (torch.optim.SGD, torch.optim.ASGD)
#: optimizers that normalise the gradient entrywise (mup's "Adam-like")
_ADAM_LIKE = (torch.optim.Adam, torch.optim.AdamW, torch.optim.Adamax, torch.optim.NAdam,
              torch.optim.RAdam, torch.optim.RMSprop, torch.optim.Adagrad)


class Multiply(nn.Module):
    """Multiply the input by a constant: the readout multiplier (Hydro's ``Multiply(S)``).

    A plain, parameter-free layer so the surrogate stays an ordinary ``nn.Module``
    that :mod:`nbtune.fusion` can fuse: it acts elementwise, on any shape.
    """

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = float(factor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor

    def extra_repr(self) -> str:
        return f"factor={self.factor:g}"


def optimizer_kind(optimizer: type) -> str:
    """``"sgd"`` or ``"adam"``: which µP rule an optimizer class needs."""
    if isinstance(optimizer, type) and issubclass(optimizer, _SGD_LIKE):
        return "sgd"
    if isinstance(optimizer, type) and issubclass(optimizer, _ADAM_LIKE):
        return "adam"
    raise TypeError(
        f"no µP rule for {optimizer!r}: pass an optimizer class, SGD-like "
        f"({', '.join(c.__name__ for c in _SGD_LIKE)}) or Adam-like "
        f"({', '.join(c.__name__ for c in _ADAM_LIKE)})")


@dataclass
class Surrogate:
    """A shrunk, parametrized copy of a target model and the rules to train it.

    ``module`` is an ordinary ``nn.Module`` of standard layers (plus
    :class:`Multiply` before each readout). ``dim_mults[name]`` holds, for every
    parameter, each dimension's width multiplier ``surrogate / target`` (1.0 for a
    dimension that is not a width): the data a fused optimizer broadcasts per
    member. With ``parametrized=False`` (the standard-parametrization baseline)
    every multiplier is 1 and nothing is re-initialised.
    """

    module: nn.Module
    scale: float
    parametrized: bool = True
    dim_mults: dict[str, tuple[float, ...]] = field(default_factory=dict)
    #: layer name -> (target width, surrogate width) of every layer that was shrunk
    widths: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: names of the readout (output) layers; their input is multiplied by ``readout_mult``
    readouts: list[str] = field(default_factory=list)
    readout_mult: float = 1.0
    #: how it was built: "fx" (traced) or "factory" (``make_model(width_mult)``)
    method: str = "fx"

    def _rule(self, name: str, kind: str) -> tuple[float, float]:
        """(lr multiplier, weight-decay multiplier) of parameter ``name``, mup's rules."""
        if not self.parametrized:
            return 1.0, 1.0
        dims = self.dim_mults[name]
        inf = [i for i, m in enumerate(dims) if m != 1.0]
        if len(inf) > 2:
            raise NotImplementedError(f"{name}: more than two width dimensions {dims}")
        if kind == "adam":
            if len(inf) == 2:  # matrix-like: lr / width_mult of the fan-in (mup's main dim)
                m = dims[inf[-1]]
                return 1.0 / m, m
            return 1.0, 1.0
        if len(inf) == 1:  # vector-like: lr * width_mult
            m = dims[inf[0]]
            return m, 1.0 / m
        if len(inf) == 2:  # matrix-like: lr / (fanin_mult / fanout_mult)
            ratio = dims[1] / dims[0]
            return 1.0 / ratio, ratio
        return 1.0, 1.0

    def lr_multipliers(self, optimizer: type | str) -> dict[str, float]:
        """Per-parameter learning-rate multipliers for an optimizer class (or "sgd"/"adam")."""
        kind = optimizer if isinstance(optimizer, str) else optimizer_kind(optimizer)
        return {n: self._rule(n, kind)[0] for n in self.dim_mults}

    def weight_decay_multipliers(self, optimizer: type | str) -> dict[str, float]:
        """Per-parameter weight-decay multipliers (the inverse of the lr ones, as in mup)."""
        kind = optimizer if isinstance(optimizer, str) else optimizer_kind(optimizer)
        return {n: self._rule(n, kind)[1] for n in self.dim_mults}

    def param_groups(self, optimizer: type, **hparams: Any) -> list[dict[str, Any]]:
        """Parameter groups with the per-layer rules applied to ``lr`` and ``weight_decay``.

        Parameters with the same multipliers share a group; each group carries its
        ``lr_mult`` so a scheduler or a fused optimizer can read it back.
        """
        if "lr" not in hparams:
            raise TypeError(f"{optimizer.__name__} needs lr=...: Surrogate.optimizer(SGD, lr=0.1)")
        kind = optimizer_kind(optimizer)
        lr, wd = float(hparams["lr"]), float(hparams.get("weight_decay", 0.0))
        groups: dict[tuple[float, float], dict[str, Any]] = {}
        named = dict(self.module.named_parameters())
        for name, p in named.items():
            if not p.requires_grad:
                continue
            lm, wm = self._rule(name, kind)
            g = groups.setdefault((lm, wm), {"params": [], "lr": lr * lm, "lr_mult": lm,
                                             "weight_decay": wd * wm})
            g["params"].append(p)
        return list(groups.values())

    def optimizer(self, optimizer: type, **hparams: Any) -> torch.optim.Optimizer:
        """``optimizer(surrogate params, **hparams)`` with µP's per-layer lr / wd rules.

        ``Surrogate.optimizer(torch.optim.SGD, lr=0.1, momentum=0.9)``: the lr you
        give is the lr of the *target*; the surrogate's layers get theirs scaled.
        """
        return optimizer(self.param_groups(optimizer, **hparams), **hparams)

    def describe(self) -> Mapping[str, Any]:
        """A JSON-able summary: scale, method, shrunk widths, readouts, multiplier."""
        return {"scale": self.scale, "method": self.method, "parametrized": self.parametrized,
                "widths": dict(self.widths), "readouts": list(self.readouts),
                "readout_mult": self.readout_mult}
