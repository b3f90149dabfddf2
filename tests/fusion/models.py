"""Small model families covering every layer nbtune.fusion supports (shared by the tests)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class EmbedBag(nn.Module):
    """A custom forward with functional calls: the template's code runs on the merged batch."""

    def __init__(self, vocab: int, dim: int, classes: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.emb(idx)).mean(1)
        return self.head(F.gelu(h))


def build(family: str, width: int, classes: int = 3) -> nn.Module:
    """A fresh model of one family; convolutions feeding BatchNorm have no bias (its gradient
    is zero up to rounding, which Adam would amplify into noise)."""
    if family == "mlp":
        return nn.Sequential(nn.Linear(5, width), nn.Tanh(), nn.LayerNorm(width),
                             nn.Dropout(0.0), nn.Linear(width, width), nn.SiLU(),
                             nn.Linear(width, classes))
    if family == "mlp_bn":
        return nn.Sequential(nn.Linear(5, width, bias=False), nn.BatchNorm1d(width),
                             nn.LeakyReLU(0.1), nn.Linear(width, classes))
    if family == "conv1d":
        return nn.Sequential(nn.Conv1d(2, width, 3, padding=1, bias=False),
                             nn.BatchNorm1d(width), nn.ReLU(), nn.AvgPool1d(2),
                             nn.Conv1d(width, width, 3, padding=1, padding_mode="circular"),
                             nn.ELU(), nn.AdaptiveMaxPool1d(2), nn.Flatten(),
                             nn.Linear(2 * width, classes))
    if family == "conv2d":
        return nn.Sequential(nn.Conv2d(1, width, 3, padding=1, bias=False),
                             nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(width, width, 3, stride=2, groups=width),
                             nn.Sigmoid(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(width, classes), nn.LogSoftmax(dim=1))
    if family == "embed":
        return EmbedBag(7, width, classes)
    raise ValueError(family)


FAMILIES = ("mlp", "mlp_bn", "conv1d", "conv2d", "embed")


def inputs(family: str, n: int, gen: torch.Generator) -> torch.Tensor:
    shape = {"mlp": (n, 5), "mlp_bn": (n, 5), "conv1d": (n, 2, 8), "conv2d": (n, 1, 8, 8)}
    if family == "embed":
        return torch.randint(0, 7, (n, 4), generator=gen)
    return torch.randn(*shape[family], generator=gen)
