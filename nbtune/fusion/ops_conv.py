"""Fused Conv1d/Conv2d: F members as one grouped convolution, or one call per member."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .fused_op import FusedOp, as_param, split, stack_from

_CONV = {1: F.conv1d, 2: F.conv2d}


def pad_widths(c: nn.Conv1d | nn.Conv2d) -> tuple[int, ...]:
    """``F.pad``'s widths for convolution ``c`` when its ``padding_mode`` is not zeros: each
    spatial dimension's (left, right), the last dimension first, as ``nn.Conv*`` pads;
    ``padding='same'`` splits ``dilation * (kernel - 1)`` with the odd one on the right."""
    if isinstance(c.padding, str):  # "same", or "valid" (no padding)
        out: list[int] = []
        for d, k in zip(reversed(c.dilation), reversed(c.kernel_size), strict=True):
            total = d * (k - 1) if c.padding == "same" else 0
            out += [total // 2, total - total // 2]
        return tuple(out)
    return tuple(p for p in reversed(c.padding) for _ in range(2))


class FusedConv(FusedOp):
    """F ``nn.Conv1d``/``nn.Conv2d`` layers.

    ``batched`` moves the member axis into the channels — ``(F*N, C, ...)`` becomes
    ``(N, F*C, ...)`` — and runs one convolution with ``groups = F·groups`` over the
    concatenated weights (Hydro's ``fuse_ops.Conv2d``); the transposes cost a copy, which
    is why a per-member ``loop`` sometimes wins on CPU and the choice is measured.
    """

    param_names = ("weight", "bias")

    def __init__(self, layers: Sequence[nn.Conv1d | nn.Conv2d], impl: str = "auto") -> None:
        super().__init__(len(layers), impl)
        c = layers[0]
        self.dims = 1 if isinstance(c, nn.Conv1d) else 2
        self.stride, self.padding, self.dilation = c.stride, c.padding, c.dilation
        self.groups, self.padding_mode = c.groups, c.padding_mode
        self.pad_twice = pad_widths(c)
        self.weight = as_param(stack_from(layers, "weight"))  # (F, out, in/groups, *k)
        self.bias = as_param(stack_from(layers, "bias"))  # (F, out) or None

    def _pad(self, x: torch.Tensor) -> tuple[torch.Tensor, object]:
        if self.padding_mode == "zeros":
            return x, self.padding
        return F.pad(x, self.pad_twice, mode=self.padding_mode), 0

    def forward_batched(self, x: torch.Tensor) -> torch.Tensor:
        f = self.members
        n = x.shape[0] // f
        x, padding = self._pad(x)
        xs = x.view(f, n, *x.shape[1:]).transpose(0, 1).reshape(n, -1, *x.shape[2:])
        w = self.weight.reshape(-1, *self.weight.shape[2:])
        b = None if self.bias is None else self.bias.reshape(-1)
        y = _CONV[self.dims](xs, w, b, self.stride, padding, self.dilation, self.groups * f)
        return y.view(n, f, -1, *y.shape[2:]).transpose(0, 1).reshape(f * n, -1, *y.shape[2:])

    def forward_loop(self, x: torch.Tensor) -> torch.Tensor:
        x, padding = self._pad(x)
        b = [None] * self.members if self.bias is None else self.bias
        conv = _CONV[self.dims]
        return torch.cat([conv(xk, self.weight[k], b[k], self.stride, padding, self.dilation,
                               self.groups) for k, xk in enumerate(split(x, self.members))])
