"""The fused-op base: one layer of F members, with per-member parameters on a leading axis.

Why a *merged* batch layout: between fused layers the activations travel as one tensor of
shape ``(F*N, ...)`` (member-major), so the template model's own ``forward`` code runs
unchanged — ``x.flatten(1)``, ``x.view(x.size(0), -1)``, ``torch.relu`` all act per sample
exactly as for one model. Only layers that own parameters or statistics (Linear, Conv,
BatchNorm, LayerNorm, Embedding) need to know F; they view their input as ``(F, N, ...)``.

Each fused layer offers more than one implementation (``batched``: one batched kernel over
all members; ``loop``: the ordinary op once per member) and picks the faster one by a short
measurement on the machine the first time it sees an input shape (:mod:`.select`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from .select import choose


class FusedOp(nn.Module):
    """A layer holding F members' parameters and buffers, each with a leading member axis."""

    #: names of the per-member parameters (leading axis F) copied to/from the ordinary layer
    param_names: tuple[str, ...] = ()
    #: names of the per-member buffers
    buffer_names: tuple[str, ...] = ()

    def __init__(self, members: int, impl: str = "auto") -> None:
        super().__init__()
        if impl not in ("auto", *self.impls()):
            raise ValueError(f"{type(self).__name__}: impl must be 'auto' or one of "
                             f"{self.impls()}, got {impl!r}")
        self.members = members
        self.impl = impl
        self.chosen: dict[tuple, str] = {}

    # -- implementations ---------------------------------------------------------------
    @classmethod
    def impls(cls) -> tuple[str, ...]:
        return ("batched", "loop")

    def forward_batched(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward_loop(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] % self.members:
            raise ValueError(f"{type(self).__name__}: the merged batch axis ({x.shape[0]}) "
                             f"is not a multiple of the member count F={self.members}")
        name = self.impl
        if name == "auto":
            key = (tuple(x.shape), x.dtype, x.device.type, self.training, self.members)
            name = self.chosen.get(key) or self._measure(key, x)
        return getattr(self, f"forward_{name}")(x)

    def _measure(self, key: tuple, x: torch.Tensor) -> str:
        """Time each implementation on this input (forward + backward) and remember the best."""
        # a detached copy: the measurement's backward must not touch the real graph
        probe = x.detach().requires_grad_(x.requires_grad)
        fns: dict[str, Callable[[], torch.Tensor]] = {
            n: (lambda n=n: getattr(self, f"forward_{n}")(probe)) for n in self.impls()}
        self.chosen[key] = best = choose(fns, self)
        return best

    # -- member bookkeeping ------------------------------------------------------------
    def _tensors(self) -> list[tuple[str, torch.Tensor | None]]:
        return [(n, getattr(self, n)) for n in (*self.param_names, *self.buffer_names)]

    def export(self, k: int, layer: nn.Module) -> None:
        """Copy member k's parameters and buffers into the ordinary layer ``layer``."""
        with torch.no_grad():
            for name, t in self._tensors():
                if t is not None:
                    target = getattr(layer, name)
                    target.copy_(t[k].reshape(target.shape))

    def load_member(self, k: int, layer: nn.Module) -> None:
        """Copy an ordinary layer's parameters and buffers into member slot k."""
        with torch.no_grad():
            for name, t in self._tensors():
                if t is not None:
                    t[k].copy_(getattr(layer, name).reshape(t[k].shape))

    def keep(self, indices: Sequence[int]) -> dict[nn.Parameter, nn.Parameter]:
        """Drop every member not in ``indices`` (in that order), in place.

        Parameters are replaced by new ones (autograd caches a leaf's shape, so resizing a
        Parameter's data would break the next backward); the returned ``{old: new}`` map
        lets an optimizer move its parameters and state over.
        """
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        remap: dict[nn.Parameter, nn.Parameter] = {}
        with torch.no_grad():
            for name, t in self._tensors():
                if t is None:
                    continue
                sliced = t.detach().index_select(0, idx.to(t.device)).contiguous()
                if isinstance(t, nn.Parameter):
                    new = nn.Parameter(sliced, requires_grad=t.requires_grad)
                    if t.grad is not None:
                        new.grad = t.grad.index_select(0, idx.to(t.device)).contiguous()
                    remap[t] = new
                    setattr(self, name, new)
                else:
                    setattr(self, name, sliced)
        self.members = len(idx)
        self.chosen.clear()
        return remap


def stack_from(layers: Sequence[nn.Module], name: str) -> torch.Tensor | None:
    """Stack one attribute of F ordinary layers on a new leading axis (None stays None)."""
    first = getattr(layers[0], name)
    if first is None:
        return None
    return torch.stack([getattr(m, name).detach() for m in layers]).clone()


def as_param(t: torch.Tensor | None, requires_grad: bool = True) -> nn.Parameter | None:
    return None if t is None else nn.Parameter(t, requires_grad=requires_grad)


def split(x: torch.Tensor, members: int) -> list[torch.Tensor]:
    """The merged batch ``(F*N, ...)`` as F per-member views ``(N, ...)``."""
    return list(x.view(members, x.shape[0] // members, *x.shape[1:]).unbind(0))
