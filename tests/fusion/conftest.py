"""One torch thread in these tests: tiny ops on a shared 2-core machine run ~100x slower
when torch's intra-op threads contend with other processes."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
