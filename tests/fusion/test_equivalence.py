"""Fused training == separate training, for every supported layer and optimizer."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.fusion import fuse, fused_loss, fused_optimizer

from .models import FAMILIES, build, inputs

OPTIMS = {"SGD": torch.optim.SGD, "Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW}


@st.composite
def hparams(draw, kind: str, f: int) -> list[dict]:
    lr = st.floats(1e-3, 5e-2)
    out = []
    for _ in range(f):
        if kind == "SGD":
            out.append({"lr": draw(lr), "momentum": draw(st.sampled_from([0.0, 0.5, 0.9])),
                        "weight_decay": draw(st.sampled_from([0.0, 1e-3, 0.1])),
                        "dampening": draw(st.sampled_from([0.0, 0.1]))})
        else:
            out.append({"lr": draw(lr), "betas": (draw(st.floats(0.5, 0.95)),
                                                  draw(st.floats(0.9, 0.999))),
                        "weight_decay": draw(st.sampled_from([0.0, 1e-2]))})
    return out


def per_member(hps: list[dict]) -> dict:
    keys = {k for h in hps for k in h}
    out = {}
    for k in keys:
        if k == "betas":
            out["beta1"] = [h["betas"][0] for h in hps]
            out["beta2"] = [h["betas"][1] for h in hps]
        else:
            out[k] = [h[k] for h in hps]
    return out


def assert_members_equal(fm, models, atol=1e-5) -> None:
    for k, m in enumerate(models):
        got = fm.defuse(k).state_dict()
        for name, want in m.state_dict().items():
            torch.testing.assert_close(got[name].float(), want.float(), atol=atol, rtol=1e-4,
                                       msg=lambda s, k=k, name=name: f"member {k} {name}: {s}")


def train_both(family, f, kind, hps, impl, steps, seed, stacked):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    width = 4 + seed % 5
    models = [build(family, width) for _ in range(f)]
    alone = [copy.deepcopy(m) for m in models]
    fm = fuse(models, impl=impl)
    nesterov = kind == "SGD" and seed % 2 == 0 and all(h["momentum"] > 0 and
                                                       h["dampening"] == 0 for h in hps)
    extra = {"nesterov": True} if nesterov else {}
    opt = fused_optimizer(OPTIMS[kind], fm, **per_member(hps), **extra)
    opts = [OPTIMS[kind](m.parameters(), **h, **extra) for m, h in zip(alone, hps, strict=True)]
    n = 6
    for _ in range(steps):
        if stacked:
            xs = torch.stack([inputs(family, n, gen) for _ in range(f)])
            ys = torch.randint(0, 3, (f, n), generator=gen)
            out = fm(xs, stacked=True)
        else:
            xs, ys = inputs(family, n, gen), torch.randint(0, 3, (n,), generator=gen)
            out = fm(xs)
        assert out.shape[:2] == (f, n)
        total, losses = fused_loss(F.cross_entropy, out, ys)
        opt.zero_grad()
        total.backward()
        opt.step()
        for k, (m, o) in enumerate(zip(alone, opts, strict=True)):
            x_k, y_k = (xs[k], ys[k]) if stacked else (xs, ys)
            loss = F.cross_entropy(m(x_k), y_k)
            torch.testing.assert_close(losses[k], loss.detach(), atol=1e-5, rtol=1e-4)
            o.zero_grad()
            loss.backward()
            o.step()
    return fm, alone


@settings(max_examples=25)
@given(family=st.sampled_from(FAMILIES), f=st.integers(1, 4),
       kind=st.sampled_from(sorted(OPTIMS)), impl=st.sampled_from(["batched", "loop", "auto"]),
       seed=st.integers(0, 10_000), stacked=st.booleans(), data=st.data())
def test_fused_training_equals_separate_training(family, f, kind, impl, seed, stacked, data):
    hps = data.draw(hparams(kind, f))
    fm, alone = train_both(family, f, kind, hps, impl, steps=3, seed=seed, stacked=stacked)
    assert_members_equal(fm, alone)
    fm.eval()
    x = inputs(family, 5, torch.Generator().manual_seed(seed + 1))
    for k, m in enumerate(alone):
        m.eval()
        torch.testing.assert_close(fm(x)[k], m(x), atol=1e-5, rtol=1e-4)


def test_batched_and_loop_agree_on_every_family():
    for family in FAMILIES:
        torch.manual_seed(1)
        models = [build(family, 6) for _ in range(3)]
        x = inputs(family, 4, torch.Generator().manual_seed(2))
        a, b = fuse(models, impl="batched"), fuse(models, impl="loop")
        torch.testing.assert_close(a(x), b(x), atol=1e-6, rtol=1e-5)


def test_the_batched_linear_has_nn_linears_gradients_in_the_parameters_layout():
    """The fused Linear's own backward: its gradients are the exact ones (gradcheck, in
    float64) and the weight's arrives contiguous in the (F, out, in) layout of the
    parameter, so accumulating it copies nothing."""
    from nbtune.fusion.ops_linear import FusedLinear

    torch.manual_seed(0)
    layers = [torch.nn.Linear(5, 3).double() for _ in range(4)]
    fused = FusedLinear(layers, impl="batched")
    x = torch.randn(4 * 6, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, w, b: fused.forward_batched(x), (x, fused.weight, fused.bias))
    fused.forward_batched(x).square().sum().backward()
    assert fused.weight.grad.shape == (4, 3, 5) and fused.weight.grad.is_contiguous()
    for k, lin in enumerate(layers):  # member k's gradient is its own layer's
        xk = x.detach()[6 * k:6 * (k + 1)]
        lin(xk).square().sum().backward()
        assert torch.allclose(fused.weight.grad[k], lin.weight.grad)
        assert torch.allclose(fused.bias.grad[k], lin.bias.grad)
    bare = FusedLinear([torch.nn.Linear(5, 3, bias=False).double() for _ in range(2)],
                       impl="batched")
    assert torch.autograd.gradcheck(lambda x, w: bare.forward_batched(x),
                                    (x[:12].detach().requires_grad_(), bare.weight))
