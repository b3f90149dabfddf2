"""Small target models the surrogate tests share (plain torch, as users write them)."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """input -> hidden -> LayerNorm -> readout: one layer of each kind."""

    def __init__(self, width: int = 256, d_in: int = 64, d_out: int = 10) -> None:
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.hid = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.norm(self.hid(torch.relu(self.inp(x))))))


def cnn(channels: int = 32) -> nn.Sequential:
    """Conv -> BN -> Conv -> pool -> flatten -> Linear: the flatten keeps the channel ratio."""
    return nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        nn.Flatten(), nn.Linear(8 * channels, 10))


class TinyTransformer(nn.Module):
    def __init__(self, d: int = 64, vocab: int = 20) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.att = nn.MultiheadAttention(d, 4, batch_first=True)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        a, _ = self.att(h, h, h)
        return self.head(self.ln(h + a))
