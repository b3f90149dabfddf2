"""Fused BatchNorm1d/2d (per-member running statistics) and LayerNorm."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .fused_op import FusedOp, as_param, split, stack_from


class FusedBatchNorm(FusedOp):
    """F ``nn.BatchNorm1d``/``nn.BatchNorm2d`` layers, each normalising over its own batch.

    Running mean/var are ``(F, C)`` and ``num_batches_tracked`` is ``(F,)``, so a defused
    member carries exactly the statistics it would have had alone. ``batched`` moves the
    member axis into the channels — ``(N, F*C, ...)`` — so one ``batch_norm`` call updates
    all members' statistics through views of the ``(F, C)`` buffers.
    """

    param_names = ("weight", "bias")
    buffer_names = ("running_mean", "running_var", "num_batches_tracked")

    def __init__(self, layers: Sequence[nn.BatchNorm1d | nn.BatchNorm2d],
                 impl: str = "auto") -> None:
        super().__init__(len(layers), impl)
        b = layers[0]
        self.eps, self.momentum = b.eps, b.momentum
        self.track_running_stats = b.track_running_stats
        self.weight = as_param(stack_from(layers, "weight"))
        self.bias = as_param(stack_from(layers, "bias"))
        for name in self.buffer_names:
            self.register_buffer(name, stack_from(layers, name))

    def _factor(self) -> float:
        """torch's exponential_average_factor, after counting this batch."""
        if not (self.training and self.track_running_stats):
            return 0.0
        self.num_batches_tracked.add_(1)
        if self.momentum is None:  # cumulative moving average; all members count together
            return 1.0 / float(self.num_batches_tracked[0])
        return self.momentum

    def _use_batch_stats(self) -> bool:
        return self.training or self.running_mean is None

    def forward_batched(self, x: torch.Tensor) -> torch.Tensor:
        f = self.members
        n = x.shape[0] // f
        factor = self._factor()
        xs = x.view(f, n, *x.shape[1:]).transpose(0, 1).reshape(n, -1, *x.shape[2:])
        flat = [None if t is None else t.view(-1) for t in
                (self.running_mean, self.running_var, self.weight, self.bias)]
        y = F.batch_norm(xs, flat[0], flat[1], flat[2], flat[3], self._use_batch_stats(),
                         factor, self.eps)
        return y.view(n, f, *x.shape[1:]).transpose(0, 1).reshape(x.shape)

    def forward_loop(self, x: torch.Tensor) -> torch.Tensor:
        factor = self._factor()

        def at(t: torch.Tensor | None, k: int) -> torch.Tensor | None:
            return None if t is None else t[k]

        return torch.cat([
            F.batch_norm(xk, at(self.running_mean, k), at(self.running_var, k),
                         at(self.weight, k), at(self.bias, k), self._use_batch_stats(),
                         factor, self.eps)
            for k, xk in enumerate(split(x, self.members))])


class FusedLayerNorm(FusedOp):
    """F ``nn.LayerNorm`` layers: one normalisation over all, then per-member affine."""

    param_names = ("weight", "bias")

    def __init__(self, layers: Sequence[nn.LayerNorm], impl: str = "auto") -> None:
        super().__init__(len(layers), impl)
        self.normalized_shape = tuple(layers[0].normalized_shape)
        self.eps = layers[0].eps
        self.weight = as_param(stack_from(layers, "weight"))  # (F, *shape) or None
        self.bias = as_param(stack_from(layers, "bias"))

    def forward_batched(self, x: torch.Tensor) -> torch.Tensor:
        f = self.members
        y = F.layer_norm(x, self.normalized_shape, None, None, self.eps)
        y = y.view(f, -1, *self.normalized_shape)
        if self.weight is not None:
            y = y * self.weight.unsqueeze(1)
        if self.bias is not None:
            y = y + self.bias.unsqueeze(1)
        return y.reshape(x.shape)

    def forward_loop(self, x: torch.Tensor) -> torch.Tensor:
        w = [None] * self.members if self.weight is None else self.weight
        b = [None] * self.members if self.bias is None else self.bias
        return torch.cat([F.layer_norm(xk, self.normalized_shape, w[k], b[k], self.eps)
                          for k, xk in enumerate(split(x, self.members))])
