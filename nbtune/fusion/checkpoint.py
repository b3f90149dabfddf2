"""Per-member checkpoints of a fused group, and fusing members again from them.

Why: on a fused run, SHA/Hyperband pause every member at a rung and later promote only
some; the promoted members come back as ordinary specs and must be fused again, possibly
with members from other units, and continue exactly as they would have alone. The same
holds when a unit is split onto idle workers (§5.3) through a checkpoint. A member's
checkpoint is therefore what the *unfused* trial would hold: its module's ``state_dict``
(via :meth:`FusedModel.defuse`), its slice of the fused optimizer's state (momentum
buffers, Adam moments, step count) and its own hyperparameters.

:func:`member_checkpoint` takes one member out; :func:`restore_members` loads a list of
them into a freshly fused model and its fused optimizer (built from the members' configs,
as :class:`~nbtune.fusion.fusion_trial.FusionTrial` builds them), slot by slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .fused_model import FusedModel
from .optim import FusedOptimizer

__all__ = ["member_checkpoint", "restore_members"]


def member_checkpoint(model: FusedModel, optimizer: FusedOptimizer | None, k: int
                      ) -> dict[str, Any]:
    """Member ``k``: ``{"model": state_dict, "optimizer": {...} | None}``, all copies."""
    if not 0 <= k < model.members:
        raise IndexError(f"member_checkpoint: member {k} out of range for F={model.members}")
    out: dict[str, Any] = {"model": model.defuse(k).state_dict(), "optimizer": None}
    if optimizer is None:
        return out
    if optimizer.members != model.members:
        raise ValueError(f"member_checkpoint: optimizer has {optimizer.members} members, "
                         f"model {model.members}")
    group = optimizer.param_groups[0]
    hparams = {n: float(v[k]) for n, v in group.items() if isinstance(v, torch.Tensor)}
    states = []
    for p in group["params"]:  # in model.parameters() order: the same for every fusion
        st = optimizer.state.get(p, {})
        states.append({n: (v[k].clone() if isinstance(v, torch.Tensor) and v.dim() > 0
                           else v.clone() if isinstance(v, torch.Tensor) else v)
                       for n, v in st.items()})
    out["optimizer"] = {"kind": optimizer.kind, "hparams": hparams, "state": states}
    return out


def restore_members(model: FusedModel, optimizer: FusedOptimizer | None,
                    checkpoints: Sequence[dict[str, Any] | None]) -> None:
    """Load ``checkpoints[i]`` into member slot ``i`` (``None`` leaves slot ``i`` as built).

    The optimizer's hyperparameters stay as built from the configs (a promotion may change
    none; PBT-style changes are the caller's); its state is stacked from the members'.
    Members whose optimizer states cannot be stacked (a step count that differs, a
    momentum buffer some have and others not) are refused with an error naming the slots.
    """
    if len(checkpoints) != model.members:
        raise ValueError(f"restore_members: {len(checkpoints)} checkpoints for "
                         f"F={model.members} members")
    for i, ck in enumerate(checkpoints):
        if ck is not None:
            member = model.defuse(i)  # an ordinary module of the right architecture
            member.load_state_dict(ck["model"])
            model.load_member(i, member)
    if optimizer is None:
        return
    given = [(i, ck["optimizer"]) for i, ck in enumerate(checkpoints)
             if ck is not None and ck.get("optimizer") is not None]
    if not given:
        return
    if len(given) != model.members:
        fresh = [i for i in range(model.members) if i not in dict(given)]
        raise ValueError(f"restore_members: slots {fresh} have no optimizer state while "
                         "others do; fuse fresh and resumed members in separate units")
    for _, o in given:
        if o["kind"] != optimizer.kind:
            raise ValueError(f"restore_members: a {o['kind']} checkpoint for a "
                             f"{optimizer.kind} optimizer")
    params = optimizer.param_groups[0]["params"]
    for j, p in enumerate(params):
        per = [o["state"][j] for _, o in given]
        names = set(per[0])
        if any(set(s) != names for s in per):
            raise ValueError(f"restore_members: parameter {j}: members' optimizer states "
                             f"differ in kind ({[sorted(s) for s in per]})")
        st: dict[str, Any] = {}
        for n in names:
            vals = [s[n] for s in per]
            if isinstance(vals[0], torch.Tensor) and vals[0].dim() == 0:
                if any(not torch.equal(v, vals[0]) for v in vals):
                    raise ValueError(f"restore_members: members disagree on {n!r} "
                                     f"({[float(v) for v in vals]}); fuse only members "
                                     "at the same step")
                st[n] = vals[0].clone()
            elif isinstance(vals[0], torch.Tensor):
                st[n] = torch.stack(vals).to(p.device, p.dtype).contiguous()
            else:
                st[n] = vals[0]
        if st:
            optimizer.state[p] = st
