"""A fused convolution pads as ``nn.Conv*`` does for every padding and padding mode."""

from __future__ import annotations

import pytest
from torch import nn

from nbtune.fusion.ops_conv import pad_widths


@pytest.mark.parametrize("conv", [
    nn.Conv2d(2, 3, (3, 4), padding="same", dilation=(1, 2), padding_mode="reflect"),
    nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode="circular"),
    nn.Conv2d(2, 3, 3, padding="valid", padding_mode="replicate"),
    nn.Conv1d(2, 3, 4, padding="same", padding_mode="reflect"),
    nn.Conv1d(2, 3, 5, padding=2, padding_mode="replicate"),
])
def test_the_widths_are_torchs(conv):
    assert pad_widths(conv) == tuple(conv._reversed_padding_repeated_twice)
