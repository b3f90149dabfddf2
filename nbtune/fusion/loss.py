"""The fused loss: the sum over members of each member's mean loss.

Why the sum and not the mean: member k's parameters only receive gradient from its own
term, so ``sum_k mean_loss_k`` gives each member exactly the gradient it would get alone.
Averaging over members (Hydro's examples do) scales every member's gradient by 1/F, which
SGD turns into an F-times smaller learning rate.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def fused_loss(loss_fn: Callable[..., torch.Tensor] | nn.Module, output: torch.Tensor,
               target: torch.Tensor, *, stacked: bool | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(total, per_member)`` for fused output ``(F, N, ...)``.

    ``loss_fn`` is an elementwise-reducible loss such as ``F.cross_entropy``,
    ``F.mse_loss`` or an ``nn.CrossEntropyLoss()`` instance; it is called with
    ``reduction="none"``. ``target`` is ``(N, ...)`` (shared) or ``(F, N, ...)``; rank decides
    unless ``stacked`` says. ``total`` is the scalar to backpropagate; ``per_member`` is the
    detached ``(F,)`` vector of each member's mean loss (what each trial reports).
    """
    f, n = output.shape[0], output.shape[1]
    if stacked is None:
        # class indices (integer) have one axis fewer than the output; other targets match it
        per_member_rank = output.dim() - (1 if target.is_floating_point() else 2)
        stacked = target.dim() == per_member_rank + 1
    if not stacked:
        target = target.unsqueeze(0).expand(f, *target.shape)
    flat_out = output.reshape(f * n, *output.shape[2:])
    flat_tgt = target.reshape(f * n, *target.shape[2:])
    if isinstance(loss_fn, nn.Module):
        if not hasattr(loss_fn, "reduction"):
            raise TypeError(f"fused_loss: {type(loss_fn).__name__} has no 'reduction'")
        saved = loss_fn.reduction
        loss_fn.reduction = "none"
        try:
            per_elem = loss_fn(flat_out, flat_tgt)
        finally:
            loss_fn.reduction = saved
    else:
        per_elem = loss_fn(flat_out, flat_tgt, reduction="none")
    per_member = per_elem.reshape(f, -1).mean(1)
    return per_member.sum(), per_member.detach()


def member_accuracy(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-member classification accuracy ``(F,)`` for logits ``(F, N, C)``."""
    f = output.shape[0]
    if target.dim() == output.dim() - 2:
        target = target.unsqueeze(0).expand(f, *target.shape)
    return (output.argmax(-1) == target).float().reshape(f, -1).mean(1)
