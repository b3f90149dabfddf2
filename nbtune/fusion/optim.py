"""Fused SGD / Adam / AdamW whose hyperparameters are per-member vectors.

Every parameter of a :class:`~nbtune.fusion.fused_model.FusedModel` has the member axis first, so
a hyperparameter vector of length F broadcast over that axis gives each member exactly the
update torch's own optimizer would give it alone (the single-tensor algorithms of
``torch.optim.SGD``/``Adam``/``AdamW``, step by step). Hydro's ``hydro/optim`` does the same;
this module is written from torch's documented update rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import nn

from .fused_model import FusedModel

#: per-member hyperparameters each optimizer takes (vectors of length F, or one scalar)
HPARAMS = {
    "SGD": {"lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0},
    "Adam": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0},
    "AdamW": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 1e-2},
}


def member_vector(name: str, value: float | Sequence[float] | torch.Tensor, members: int,
                  device: torch.device | None = None) -> torch.Tensor:
    """One hyperparameter as a float64 vector of length F (a scalar is repeated)."""
    t = torch.as_tensor(value, dtype=torch.float64).flatten()
    if t.numel() == 1:
        t = t.repeat(members)
    if t.numel() != members:
        raise ValueError(f"{name}: expected one value or {members} (one per member), "
                         f"got {t.numel()}")
    return t.to(device) if device is not None else t


class FusedOptimizer(torch.optim.Optimizer):
    """Base: one param group whose hyperparameters are ``(F,)`` tensors."""

    kind = ""

    def __init__(self, params: Iterable[nn.Parameter], members: int, *,
                 scales: Sequence[tuple[float, float]] | None = None, **hp) -> None:
        params = list(params)
        for p in params:
            if p.dim() == 0 or p.shape[0] != members:
                raise ValueError(f"{type(self).__name__}: every parameter needs the member "
                                 f"axis first (F={members}); got shape {tuple(p.shape)}")
        defaults = dict(HPARAMS[self.kind])
        unknown = set(hp) - set(defaults) - {"betas", "nesterov"}
        if unknown:
            raise TypeError(f"fused_optimizer({self.kind}): unknown hyperparameters "
                            f"{sorted(unknown)}; per-member ones: {sorted(defaults)}")
        if "betas" in hp:  # torch's spelling: a pair, or a pair of per-member sequences
            b1, b2 = hp.pop("betas")
            hp.setdefault("beta1", b1)
            hp.setdefault("beta2", b2)
        self.nesterov = bool(hp.pop("nesterov", False))
        device = params[0].device if params else None
        vecs = {k: member_vector(k, hp.get(k, v), members, device) for k, v in defaults.items()}
        self.members = members
        self.owner: FusedModel | None = None
        super().__init__(params, vecs)
        scales = [(1.0, 1.0)] * len(params) if scales is None else [
            (float(lm), float(wm)) for lm, wm in scales]
        if len(scales) != len(params):
            raise ValueError(f"{type(self).__name__}: {len(scales)} per-parameter scales for "
                             f"{len(params)} parameters")
        # a list, not a tensor: keep() slices the member axis and leaves it as it is
        self.param_groups[0]["scales"] = scales

    # torch's Optimizer pickles/copies only defaults, state and param_groups
    _extra = ("members", "owner", "nesterov")

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.update({k: getattr(self, k) for k in self._extra if hasattr(self, k)})
        return state

    # the hyperparameter vectors, as (F, 1, ..., 1) in the parameter's dtype
    @staticmethod
    def _b(v: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return v.to(p.dtype).view(-1, *([1] * (p.dim() - 1)))

    @staticmethod
    def _scaled(g: dict) -> Iterable[tuple[nn.Parameter, torch.Tensor, torch.Tensor]]:
        """Each parameter with its lr and weight-decay vectors times its own factors (µP's
        per-layer rules for a Hydro surrogate; 1 otherwise)."""
        for p, (lm, wm) in zip(g["params"], g.get("scales") or [(1.0, 1.0)] * len(g["params"]),
                               strict=True):
            lr = g["lr"] if lm == 1.0 else g["lr"] * lm
            yield p, lr, g["weight_decay"] if wm == 1.0 else g["weight_decay"] * wm

    def keep(self, indices: Sequence[int],
             remap: dict[nn.Parameter, nn.Parameter] | None = None) -> None:
        """Slice hyperparameters and state to the surviving members and move them to the
        replacement parameters ``remap`` (called by FusedModel.keep)."""
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        remap = remap or {}
        for group in self.param_groups:
            for k, v in list(group.items()):
                if isinstance(v, torch.Tensor):
                    group[k] = v.index_select(0, idx.to(v.device))
            new_params = []
            for p in group["params"]:
                st = self.state.pop(p, {})
                for k, v in list(st.items()):
                    if isinstance(v, torch.Tensor) and v.dim() > 0:
                        st[k] = v.index_select(0, idx.to(v.device)).contiguous()
                q = remap.get(p, p)
                if st:
                    self.state[q] = st
                new_params.append(q)
            group["params"] = new_params
        self.members = len(idx)

    def hparam(self, name: str) -> list[float]:
        """One hyperparameter per member (for reports)."""
        return self.param_groups[0][name].tolist()


class FusedSGD(FusedOptimizer):
    """``torch.optim.SGD`` per member: weight decay, momentum, dampening, nesterov."""

    kind = "SGD"

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 — torch's signature
        loss = None if closure is None else torch.enable_grad()(closure)()
        for g in self.param_groups:
            mom_v = g["momentum"]
            any_wd = bool((g["weight_decay"] != 0).any())
            all_mom, no_mom = bool((mom_v != 0).all()), bool((mom_v == 0).all())
            damped = bool((g["dampening"] != 0).any())
            for p, lr, wd in self._scaled(g):
                if p.grad is None:
                    continue
                d = p.grad
                if any_wd:
                    d = d.addcmul(p, self._b(wd, p))
                if no_mom:
                    step = d
                else:
                    mom = self._b(mom_v, p)
                    st = self.state[p]
                    buf = st.get("momentum_buffer")
                    if buf is None:  # torch: the first step's buffer is the gradient itself
                        buf = st["momentum_buffer"] = d.clone()
                    elif damped:
                        buf.mul_(mom).addcmul_(d, 1 - self._b(g["dampening"], p))
                    else:
                        buf.mul_(mom).add_(d)
                    step = d.addcmul(buf, mom) if self.nesterov else buf
                    if not all_mom:  # members with momentum 0 step on d (torch: no buffer)
                        step = torch.where(mom != 0, step, d)
                p.addcmul_(step, self._b(lr, p), value=-1)
        return loss


class FusedAdam(FusedOptimizer):
    """``torch.optim.Adam`` per member (L2 weight decay added to the gradient)."""

    kind = "Adam"
    decoupled = False

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102
        loss = None if closure is None else torch.enable_grad()(closure)()
        for g in self.param_groups:
            for p, lr, wd in self._scaled(g):
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float64)
                    st["exp_avg"] = torch.zeros_like(p)
                    st["exp_avg_sq"] = torch.zeros_like(p)
                st["step"] += 1
                t = float(st["step"])
                grad = p.grad
                if self.decoupled:
                    p.mul_(1 - self._b(lr * wd, p))
                else:
                    grad = grad + self._b(wd, p) * p
                b1, b2 = g["beta1"], g["beta2"]
                st["exp_avg"].lerp_(grad, self._b(1 - b1, p))
                st["exp_avg_sq"].mul_(self._b(b2, p)).addcmul_(
                    grad, grad * self._b(1 - b2, p))
                bc1 = 1 - b1 ** t
                bc2_sqrt = (1 - b2 ** t).sqrt()
                denom = (st["exp_avg_sq"].sqrt() / self._b(bc2_sqrt, p)).add_(
                    self._b(g["eps"], p))
                p.addcdiv_(st["exp_avg"] * self._b(-(lr / bc1), p), denom)
        return loss


class FusedAdamW(FusedAdam):
    """``torch.optim.AdamW`` per member (decoupled weight decay)."""

    kind = "AdamW"
    decoupled = True


_BY_TORCH = {torch.optim.SGD: FusedSGD, torch.optim.Adam: FusedAdam,
             torch.optim.AdamW: FusedAdamW}


def fused_optimizer(cls: type[torch.optim.Optimizer], fused: FusedModel, *,
                    lr_mults: Mapping[str, float] | None = None,
                    wd_mults: Mapping[str, float] | None = None,
                    **per_member_hparams) -> FusedOptimizer:
    """The fused counterpart of ``cls(model.parameters(), **hparams)`` for ``fused``.

    Each hyperparameter is one value for all members or a sequence of length F:
    ``fused_optimizer(torch.optim.SGD, fm, lr=[0.1, 0.01], momentum=0.9)``. Adam's
    ``betas`` may be a pair or per-member ``beta1=``/``beta2=`` sequences. The optimizer
    follows ``fused.keep(...)`` by itself.

    ``lr_mults`` / ``wd_mults`` (member parameter name, as in the unfused module, ->
    factor) scale one parameter's lr / weight decay for every member: the per-layer µP
    rules of a Hydro surrogate (:meth:`nbtune.surrogate.Surrogate.lr_multipliers`), which
    all members share because they share the width. A scheduler still scales the base lr.
    """
    if cls not in _BY_TORCH:
        raise TypeError(f"fused_optimizer: {getattr(cls, '__name__', cls)!r} is not supported; "
                        "use torch.optim.SGD, torch.optim.Adam or torch.optim.AdamW")
    if not isinstance(fused, FusedModel):
        raise TypeError("fused_optimizer: pass the FusedModel returned by fuse()")
    scales = None
    if lr_mults is not None or wd_mults is not None:
        names = [n.removeprefix("body.") for n, _ in fused.named_parameters()]
        for what, given in (("lr_mults", lr_mults), ("wd_mults", wd_mults)):
            missing = sorted(set(names) - set(given)) if given is not None else []
            if missing:
                raise ValueError(f"fused_optimizer: {what} has no factor for {missing}")
        scales = [((lr_mults or {}).get(n, 1.0), (wd_mults or {}).get(n, 1.0)) for n in names]
    opt = _BY_TORCH[cls](fused.parameters(), fused.members, scales=scales,
                         **per_member_hparams)
    opt.owner = fused
    fused.follow(opt)
    return opt

