"""A fused training step for memory measurements (module level: a spawned process imports it)."""

from __future__ import annotations

from functools import partial


def _step(fm, opt, x, y):  # noqa: ANN001
    import torch.nn.functional as F

    from nbtune.fusion import fused_loss

    total, _ = fused_loss(F.cross_entropy, fm(x), y)
    opt.zero_grad()
    total.backward()
    opt.step()


def wide_mlp_step(members: int):
    """F members of a 4 MB-per-layer MLP under Adam: ~30 MB more per member."""
    import torch
    from torch import nn

    from nbtune.fusion import fuse, fused_optimizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                            nn.Linear(1024, 10)) for _ in range(members)]
    fm = fuse(models, impl="batched")
    opt = fused_optimizer(torch.optim.Adam, fm, lr=1e-3)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    return partial(_step, fm, opt, x, y)
