"""Fused Linear and Embedding: per-member weight matrices on a leading member axis."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .fused_op import FusedOp, as_param, split, stack_from


class _BatchedLinear(torch.autograd.Function):
    """``y = x @ Wᵀ + b`` per member, with the backward ``nn.Linear`` has: the weight's
    gradient is computed as ``gradᵀ @ x``, straight into the ``(F, out, in)`` layout of the
    parameter. Left to autograd, ``baddbmm``'s backward returns it transposed, and
    AccumulateGrad copies it into the parameter's layout every step (a fifth of a fused
    MLP step on CPU)."""

    @staticmethod
    def forward(ctx, xs: torch.Tensor, weight: torch.Tensor,  # type: ignore[override]
                bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(xs, weight)
        ctx.has_bias = bias is not None
        w = weight.transpose(1, 2)
        return torch.bmm(xs, w) if bias is None else torch.baddbmm(bias.unsqueeze(1), xs, w)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        xs, weight = ctx.saved_tensors
        grad_x = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.bmm(grad.transpose(1, 2), xs) if ctx.needs_input_grad[1] else None
        grad_b = grad.sum(1) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


class FusedLinear(FusedOp):
    """F ``nn.Linear`` layers; ``batched`` is one ``baddbmm`` (Hydro's and HFTA's choice).

    The weight stays ``(F, out, in)`` like ``nn.Linear``'s: storing it ``(F, in, out)``
    (Hydro's layout) saves a transpose but sums the weight gradient in another order, and
    Adam, which divides by the gradient's own scale, turns that rounding into parameter
    differences from the unfused layers orders of magnitude larger than this layout's
    within a few dozen steps.
    """

    param_names = ("weight", "bias")

    def __init__(self, layers: Sequence[nn.Linear], impl: str = "auto") -> None:
        super().__init__(len(layers), impl)
        self.in_features = layers[0].in_features
        self.out_features = layers[0].out_features
        self.weight = as_param(stack_from(layers, "weight"))  # (F, out, in)
        self.bias = as_param(stack_from(layers, "bias"))  # (F, out) or None

    def forward_batched(self, x: torch.Tensor) -> torch.Tensor:
        f = self.members
        xs = x.reshape(f, -1, self.in_features)
        y = _BatchedLinear.apply(xs, self.weight, self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)

    def forward_loop(self, x: torch.Tensor) -> torch.Tensor:
        b = [None] * self.members if self.bias is None else self.bias
        return torch.cat([F.linear(xk, self.weight[k], b[k])
                          for k, xk in enumerate(split(x, self.members))])


class FusedEmbedding(FusedOp):
    """F ``nn.Embedding`` tables; ``batched`` offsets member k's indices by k·num_embeddings
    into one flattened table, so one lookup serves all members."""

    param_names = ("weight",)

    def __init__(self, layers: Sequence[nn.Embedding], impl: str = "auto") -> None:
        first = layers[0]
        if first.max_norm is not None or first.sparse:
            raise ValueError("fuse: nn.Embedding with max_norm or sparse=True is not supported "
                             "(both renormalise or update rows outside one member's table)")
        # padding_idx cannot be expressed in the offset table: loop only
        super().__init__(len(layers), "loop" if first.padding_idx is not None else impl)
        self.num_embeddings = first.num_embeddings
        self.padding_idx = first.padding_idx
        self.scale_grad_by_freq = first.scale_grad_by_freq
        self.weight = as_param(stack_from(layers, "weight"))  # (F, num, dim)

    def forward_batched(self, x: torch.Tensor) -> torch.Tensor:
        f = self.members
        offsets = torch.arange(f, device=x.device).view(f, *([1] * x.dim())) * self.num_embeddings
        idx = (x.view(f, x.shape[0] // f, *x.shape[1:]) + offsets).reshape(x.shape)
        table = self.weight.reshape(-1, self.weight.shape[-1])
        return F.embedding(idx, table, scale_grad_by_freq=self.scale_grad_by_freq)

    def forward_loop(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([F.embedding(xk, self.weight[k], self.padding_idx,
                                      scale_grad_by_freq=self.scale_grad_by_freq)
                          for k, xk in enumerate(split(x, self.members))])
