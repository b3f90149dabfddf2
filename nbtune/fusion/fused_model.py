"""``fuse(models) -> FusedModel``: F same-architecture modules trained as one.

The fused model is a copy of the first member whose parametric layers are replaced by fused
layers (:mod:`.ops_linear`, :mod:`.ops_conv`, :mod:`.ops_norm`); stateless layers
(activations, dropout, pooling, flatten) stay as they are, because activations travel as a
merged ``(F*N, ...)`` batch in which every sample still is one sample of one member. So the
template's own ``forward`` code runs unchanged, as long as it treats axis 0 as the batch and
never mixes samples (which a per-sample model does not).
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Sequence

import torch
from torch import fx, nn

from .fused_op import FusedOp
from .ops_conv import FusedConv
from .ops_linear import FusedEmbedding, FusedLinear
from .ops_norm import FusedBatchNorm, FusedLayerNorm

#: layer type -> fused layer (parametric layers; the member axis matters to them)
FUSED_LAYERS: dict[type, Callable[..., FusedOp]] = {
    nn.Linear: FusedLinear,
    nn.Conv1d: FusedConv,
    nn.Conv2d: FusedConv,
    nn.BatchNorm1d: FusedBatchNorm,
    nn.BatchNorm2d: FusedBatchNorm,
    nn.LayerNorm: FusedLayerNorm,
    nn.Embedding: FusedEmbedding,
}

#: stateless layers that act per sample: kept as they are on the merged batch
STATELESS_LAYERS: tuple[type, ...] = (
    nn.Identity, nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU,
    nn.Mish, nn.Sigmoid, nn.Tanh, nn.Softplus, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid,
    nn.Softmax, nn.LogSoftmax,
    nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.AlphaDropout,
    nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d, nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d,
    nn.Flatten, nn.Unflatten,
)

#: containers whose forward is the template's own code (a GraphModule's is generated code
#: that calls its submodules, so it is one too)
CONTAINERS: tuple[type, ...] = (nn.Sequential, nn.ModuleList, nn.ModuleDict, fx.GraphModule)


def supported_layers() -> list[str]:
    return sorted({t.__name__ for t in (*FUSED_LAYERS, *STATELESS_LAYERS)})


class FusionError(TypeError):
    """A model cannot be fused; the message names the layer and says why."""


def _check_stateless(name: str, m: nn.Module) -> None:
    """Stateless layers that would act across the batch axis are refused."""
    if isinstance(m, nn.Softmax | nn.LogSoftmax) and m.dim in (0, None):
        raise FusionError(f"fuse: layer {name!r} ({type(m).__name__}) must name dim >= 1: "
                          "dim=0/None would mix the members' samples")
    if isinstance(m, nn.Flatten) and m.start_dim == 0:
        raise FusionError(f"fuse: layer {name!r} (Flatten(start_dim=0)) flattens the batch axis")
    if isinstance(m, nn.Unflatten) and m.dim == 0:
        raise FusionError(f"fuse: layer {name!r} (Unflatten(dim=0)) splits the batch axis")


def _kind(m: nn.Module) -> object:
    """What must agree between members at one module: its type; for a traced
    ``GraphModule`` (torch.fx gives every instance a class of its own, e.g. a shrunk
    Hydro surrogate) its generated forward code instead."""
    return ("GraphModule", m.code) if isinstance(m, fx.GraphModule) else type(m)


def _check_same(models: Sequence[nn.Module]) -> None:
    ref = [(n, _kind(m)) for n, m in models[0].named_modules()]
    ref_state = {k: v.shape for k, v in models[0].state_dict().items()}
    for i, m in enumerate(models[1:], 1):
        if [(n, _kind(x)) for n, x in m.named_modules()] != ref:
            raise FusionError(f"fuse: model {i} has a different module structure from model 0")
        if {k: v.shape for k, v in m.state_dict().items()} != ref_state:
            raise FusionError(f"fuse: model {i} has different parameter shapes from model 0 "
                              "(shape-changing hyperparameters split trials into groups)")


def fuse(models: Sequence[nn.Module], impl: str = "auto") -> FusedModel:
    """Fuse F modules of one architecture into one :class:`FusedModel`.

    ``impl``: ``"auto"`` (each layer measures its implementations on first use and keeps
    the fastest), ``"batched"`` or ``"loop"`` (forced, e.g. for reproducible timing).
    Raises :class:`FusionError` naming the first layer that cannot be fused.
    """
    models = list(models)
    if not models:
        raise ValueError("fuse: no models given")
    if not all(isinstance(m, nn.Module) for m in models):
        raise TypeError("fuse: every member must be a torch.nn.Module")
    _check_same(models)
    template = copy.deepcopy(models[0])
    body = copy.deepcopy(models[0])
    for name, m in list(body.named_modules()):
        kind = type(m)
        if kind in FUSED_LAYERS:
            layers = [x.get_submodule(name) for x in models]
            fused = FUSED_LAYERS[kind](layers, impl=impl)
            if name:
                body.set_submodule(name, fused)
            else:
                body = fused
        elif kind in STATELESS_LAYERS:
            _check_stateless(name, m)
        elif isinstance(m, CONTAINERS) or (kind.__module__.split(".")[0] != "torch"):
            own = [n for n, _ in m.named_parameters(recurse=False)]
            own += [n for n, _ in m.named_buffers(recurse=False)]
            if own:
                raise FusionError(
                    f"fuse: module {name or '<root>'!r} ({kind.__name__}) holds parameters or "
                    f"buffers directly ({', '.join(own)}); put them in a supported layer")
        else:
            raise FusionError(f"fuse: layer {name or '<root>'!r} ({kind.__name__}) is not "
                              f"supported; supported layers: {', '.join(supported_layers())}")
    return FusedModel(body, template, len(models))


class FusedModel(nn.Module):
    """F members as one module; forward takes ``(N, ...)`` or ``(F, N, ...)``, returns
    ``(F, N, ...)``.

    Input layout: a tensor whose first axis has length F *and* whose rank is one more than
    the template expects (``input_ndim``, taken from the first parametric layer: Linear 2,
    Conv1d 3, Conv2d 4, BatchNorm 2/3/4) is per member; otherwise the same batch goes to
    every member. Pass ``stacked=True/False`` to say so explicitly (needed for Embedding
    inputs, whose rank says nothing).
    """

    def __init__(self, body: nn.Module, template: nn.Module, members: int) -> None:
        super().__init__()
        self.body = body
        self.members = members
        self._template = [template]  # a list: not a submodule, so no parameters of its own
        self._followers: list[weakref.ref] = []
        self.input_ndim = _input_ndim(template)

    # -- forward ----------------------------------------------------------------------
    def forward(self, *inputs: torch.Tensor, stacked: bool | None = None) -> torch.Tensor:
        f = self.members
        merged, n = [], None
        for x in inputs:
            per_member = stacked if stacked is not None else self._looks_stacked(x)
            if per_member:
                if x.shape[0] != f:
                    raise ValueError(f"FusedModel: a stacked input needs leading axis F={f}, "
                                     f"got shape {tuple(x.shape)}")
                n = x.shape[1]
                merged.append(x.reshape(f * n, *x.shape[2:]))
            else:
                n = x.shape[0]
                merged.append(x.unsqueeze(0).expand(f, *x.shape).reshape(f * n, *x.shape[1:]))
        out = self.body(*merged)
        return out.view(f, -1, *out.shape[1:])

    def _looks_stacked(self, x: torch.Tensor) -> bool:
        return (self.input_ndim is not None and x.dim() == self.input_ndim + 1
                and x.shape[0] == self.members)

    # -- members ----------------------------------------------------------------------
    def fused_ops(self) -> list[tuple[str, FusedOp]]:
        return [(n, m) for n, m in self.body.named_modules() if isinstance(m, FusedOp)]

    def defuse(self, k: int) -> nn.Module:
        """Member k as an ordinary module with identical weights and buffers."""
        if not -self.members <= k < self.members:
            raise IndexError(f"defuse: member {k} out of range for F={self.members}")
        k %= self.members
        module = copy.deepcopy(self._template[0])
        for name, op in self.fused_ops():
            op.export(k, module.get_submodule(name) if name else module)
        module.train(self.training)
        return module

    def load_member(self, k: int, module: nn.Module) -> None:
        """Copy an ordinary module's weights and buffers into member slot k."""
        for name, op in self.fused_ops():
            op.load_member(k, module.get_submodule(name) if name else module)

    def keep(self, indices: Sequence[int]) -> None:
        """Keep only the members ``indices`` (in that order) — in place, the others go.

        Fused optimizers and schedulers built on this model are sliced with it, so the
        survivors' training continues exactly as if the others had never been there.
        """
        idx = [int(i) for i in indices]
        if not idx:
            raise ValueError("keep: at least one member must stay")
        if len(set(idx)) != len(idx) or not all(0 <= i < self.members for i in idx):
            raise IndexError(f"keep: indices must be distinct members in [0, {self.members}), "
                             f"got {idx}")
        remap: dict[nn.Parameter, nn.Parameter] = {}
        for _, op in self.fused_ops():
            remap.update(op.keep(idx))
        alive = []
        for ref in self._followers:
            follower = ref()
            if follower is not None:
                follower.keep(idx, remap)
                alive.append(ref)
        self._followers = alive
        self.members = len(idx)

    def follow(self, obj: object) -> None:
        """Register an object with ``keep(indices, remap)`` (fused optimizer, scheduler)."""
        self._followers.append(weakref.ref(obj))

    def refollow(self, objs: Sequence[object]) -> None:
        """Make ``objs`` the only followers (a deep copy's followers are the copied ones,
        while its weak references still point at the originals')."""
        self._followers = [weakref.ref(obj) for obj in objs]


def _input_ndim(template: nn.Module) -> int | None:
    for m in template.modules():
        if isinstance(m, nn.Conv2d):
            return 4
        if isinstance(m, nn.Conv1d):
            return 3
        if isinstance(m, nn.Linear | nn.BatchNorm1d | nn.LayerNorm):
            return 2
        if isinstance(m, nn.BatchNorm2d):
            return 4
        if isinstance(m, nn.Embedding):
            return None
    return None
