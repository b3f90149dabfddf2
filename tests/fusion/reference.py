"""Fused and separate float32 training measured against a float64 reference of the same run.

Shared by tests/fusion/test_reference.py (CPU, and CUDA where present) and tests/gpu: every
member starts from the same weights and sees the same batches in three trainings — a
float64 copy trained alone with torch's optimizer (the reference), a float32 copy trained
alone, and all members fused in float32 — and :func:`errors` says how far each float32
run ended from the reference, per member and parameter.

Why a reference and not fused == separate: float32 rounding differs between a batched
matrix product and F separate ones on a GPU, and Adam divides every gradient by its own
running scale, so the two float32 runs can part by more than rounding even when both are
right. Fusion is correct when it ends within 1e-5 of the exact training, or, where that
amplification pushes float32 further, no further from it than separate float32 training.

The model is smooth (Tanh, SiLU): at a ReLU kink one rounding bit decides whether a unit
passes a sample, Adam turns the resulting near-zero gradient into a full step, and which
float32 run lands further from the reference is then chance rather than correctness.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from nbtune.fusion import fuse, fused_loss, fused_optimizer

#: the bound every fused parameter meets unless separate float32 training misses it too
ATOL = 1e-5

#: per-member hyperparameters (four members, each different), as torch's optimizers take them
HPARAMS: dict[str, list[dict]] = {
    "SGD": [{"lr": 0.02, "momentum": 0.9, "weight_decay": 0.0},
            {"lr": 0.05, "momentum": 0.8, "weight_decay": 1e-3},
            {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-2},
            {"lr": 0.2, "momentum": 0.5, "weight_decay": 0.0}],
    "Adam": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0},
             {"lr": 3e-3, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 1e-3},
             {"lr": 1e-2, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2},
             {"lr": 3e-2, "betas": (0.5, 0.9), "eps": 1e-4, "weight_decay": 0.0}],
}
OPTIMIZERS = {"SGD": torch.optim.SGD, "Adam": torch.optim.Adam}


def per_member(hps: list[dict]) -> dict[str, list[float]]:
    """Per-member dicts as the per-member vectors ``fused_optimizer`` takes."""
    out: dict[str, list[float]] = {}
    for h in hps:
        for k, v in h.items():
            if k == "betas":
                out.setdefault("beta1", []).append(v[0])
                out.setdefault("beta2", []).append(v[1])
            else:
                out.setdefault(k, []).append(v)
    return out


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 48), nn.Tanh(), nn.Linear(48, 48), nn.SiLU(),
                         nn.Linear(48, 5))


@dataclass(frozen=True)
class Error:
    """max |w - w_ref| of one member's parameter after training, fused and separate, and
    how far the reference moved it from its initial value."""

    member: int
    name: str
    fused: float
    separate: float
    moved: float

    def ok(self, atol: float = ATOL) -> bool:
        return self.fused <= atol or self.fused <= self.separate


def errors(device: str | torch.device, kind: str, *, steps: int = 40, batch: int = 32,
           seed: int = 0, fused_hparams: dict | None = None) -> list[Error]:
    """Train the members three ways on ``device`` (TF32 off) and measure both float32 runs.

    ``fused_hparams`` replaces the fused optimizer's per-member hyperparameters (a test
    that the comparison notices a wrong one); by default it gets the members' own.
    """
    dev = torch.device(device)
    hps = HPARAMS[kind]
    cls = OPTIMIZERS[kind]
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        torch.manual_seed(seed)
        models = [mlp().to(dev) for _ in hps]
        ref = [copy.deepcopy(m).double() for m in models]
        init = [{n: p.detach().clone() for n, p in m.named_parameters()} for m in ref]
        alone = [copy.deepcopy(m) for m in models]
        fm = fuse([copy.deepcopy(m) for m in models], impl="batched")
        fopt = fused_optimizer(cls, fm, **(fused_hparams or per_member(hps)))
        ref_opts = [cls(m.parameters(), **h) for m, h in zip(ref, hps, strict=True)]
        opts = [cls(m.parameters(), **h) for m, h in zip(alone, hps, strict=True)]
        gen = torch.Generator().manual_seed(seed + 1)
        for _ in range(steps):
            x = torch.randn(batch, 16, generator=gen).to(dev)
            y = torch.randint(0, 5, (batch,), generator=gen).to(dev)
            total, _ = fused_loss(F.cross_entropy, fm(x), y)
            fopt.zero_grad()
            total.backward()
            fopt.step()
            for group, xb in ((zip(ref, ref_opts, strict=True), x.double()),
                              (zip(alone, opts, strict=True), x)):
                for m, o in group:
                    o.zero_grad()
                    F.cross_entropy(m(xb), y).backward()
                    o.step()
        out = []
        for k, (r, a) in enumerate(zip(ref, alone, strict=True)):
            got = dict(fm.defuse(k).named_parameters())
            sep = dict(a.named_parameters())
            for name, want in r.named_parameters():
                out.append(Error(k, name,
                                 (got[name].double() - want).abs().max().item(),
                                 (sep[name].double() - want).abs().max().item(),
                                 (want - init[k][name]).abs().max().item()))
        return out
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def assert_fused_matches_reference(errs: list[Error]) -> None:
    """Every fused parameter within ATOL of the reference, or no further than separate."""
    bad = [e for e in errs if not e.ok()]
    assert not bad, "fused training further from the float64 reference than allowed:\n" + \
        "\n".join(f"  member {e.member} {e.name}: |fused - ref| {e.fused:.3g}, "
                  f"|separate - ref| {e.separate:.3g}" for e in bad)
