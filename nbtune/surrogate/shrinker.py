"""Hydro's Model Shrinker (§4.1): trace the target, divide its widths by S, parametrize.

``shrink(model, scale)`` traces ``model`` with ``torch.fx`` and follows each
tensor's *channel width* through the graph: data enters unscaled; a Linear /
Conv / Embedding / MultiheadAttention whose input is unscaled is an **input
layer** (only its outputs shrink), one with no such layer downstream is an
**output layer** (only its inputs shrink), every other one is **hidden** (both);
norms follow the width they receive. Input and output layers are found by data
flow, not by position in the module list (Hydro's fragile part). When tracing
fails (data-dependent control flow), pass a factory ``make_model(width_mult)``
instead: the shrinker then compares the shapes of ``make_model(1.0)`` and
``make_model(1/S)`` parameter by parameter, as ``mup.set_base_shapes`` does.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import fx, nn

from nbtune.surrogate.attention import MuMultiheadAttention, ShrinkError
from nbtune.surrogate.parametrization import Multiply, Surrogate

__all__ = ["DEFAULT_MIN_WIDTH", "ShrinkError", "shrink"]

#: Hydro's per-layer width check: a layer narrower than this is refused
DEFAULT_MIN_WIDTH = 4

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_WIDTH = (nn.Linear, *_CONV, nn.Embedding, nn.MultiheadAttention)
_BN = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
_NORM = (*_BN, nn.LayerNorm, nn.GroupNorm)

Width = tuple[int, int] | None  # (target, surrogate) channel width of a tensor; None: not a width


def shrink(model: nn.Module | Callable[[float], nn.Module], scale: float,
           example_input: Any = None, *, parametrize: bool = True,
           min_width: int = DEFAULT_MIN_WIDTH) -> Surrogate:
    """A surrogate of ``model`` with its widths divided by ``scale`` (Hydro's S).

    ``model`` is the target ``nn.Module`` (traced with ``torch.fx``) or a factory
    ``make_model(width_mult) -> nn.Module`` for models fx cannot trace.
    ``example_input`` (a tensor or a tuple of them), when given, is run through
    the surrogate so a shape error shows here, not in the first trial.
    ``parametrize=False`` gives the standard-parametrization baseline (no µP).
    """
    if not (isinstance(scale, int | float) and math.isfinite(scale) and scale >= 1):
        raise ShrinkError(f"scale must be a number >= 1 (Hydro's S), got {scale!r}")
    if isinstance(model, nn.Module):
        sur = _shrink_traced(model, float(scale), parametrize, min_width)
    elif callable(model):
        sur = _shrink_factory(model, float(scale), parametrize, min_width)
    else:
        raise ShrinkError(f"shrink() takes an nn.Module or a make_model(width_mult) factory, "
                          f"got {type(model).__name__}")
    if example_input is not None:
        args = example_input if isinstance(example_input, tuple) else (example_input,)
        try:
            with torch.no_grad():
                sur.module.eval()(*args)
        except Exception as exc:
            raise ShrinkError(f"the shrunk model (scale {scale}) fails on example_input: {exc}. "
                              "A hard-coded width in forward()? Pass a make_model(width_mult) "
                              "factory instead") from exc
        sur.module.train()
    return sur


def _narrow(name: str, width: int, scale: float, min_width: int) -> int:
    new = max(1, round(width / scale))
    if new < min_width:
        raise ShrinkError(f"layer {name!r}: width {width} / scale {scale:g} = {new} is narrower "
                          f"than the floor min_width={min_width}; use a smaller scale")
    return new


def _rescaled(name: str, n: int, w: Width) -> int:
    """``n`` input features fed by a tensor of channel width ``w`` (a flatten keeps the ratio)."""
    if w is None:
        return n
    old, new = w
    if (n * new) % old:
        raise ShrinkError(f"layer {name!r}: {n} input features do not follow its input's "
                          f"channels {old} -> {new}")
    return n * new // old


def _new_layer(name: str, mod: nn.Module, w_in: Width, out: int | None) -> nn.Module:
    """A fresh standard layer (default init) with input width ``w_in`` and ``out`` outputs."""
    dev = {"device": next(mod.parameters()).device} if any(True for _ in mod.parameters()) else {}
    if isinstance(mod, nn.Linear):
        return nn.Linear(_rescaled(name, mod.in_features, w_in), out or mod.out_features,
                         bias=mod.bias is not None, **dev)
    if isinstance(mod, _CONV):
        cin = _rescaled(name, mod.in_channels, w_in)
        cout = out or mod.out_channels
        groups = cin if mod.groups == mod.in_channels and mod.groups > 1 else mod.groups
        if cin % groups or cout % groups:
            raise ShrinkError(f"layer {name!r}: {cin} -> {cout} channels not divisible "
                              f"by groups={groups}")
        return type(mod)(cin, cout, mod.kernel_size, mod.stride, mod.padding, mod.dilation,
                         groups, mod.bias is not None, mod.padding_mode, **dev)
    if isinstance(mod, nn.Embedding):
        return nn.Embedding(mod.num_embeddings, out or mod.embedding_dim,
                            padding_idx=mod.padding_idx, **dev)
    if isinstance(mod, _BN):
        return type(mod)(_rescaled(name, mod.num_features, w_in), mod.eps, mod.momentum,
                         mod.affine, mod.track_running_stats, **dev)
    if isinstance(mod, nn.LayerNorm):
        shape = list(mod.normalized_shape)
        shape[-1] = _rescaled(name, shape[-1], w_in)
        return nn.LayerNorm(shape, mod.eps, mod.elementwise_affine, bias=mod.bias is not None,
                            **dev)
    if isinstance(mod, nn.GroupNorm):
        ch = _rescaled(name, mod.num_channels, w_in)
        groups = math.gcd(mod.num_groups, ch)
        return nn.GroupNorm(groups, ch, mod.eps, mod.affine, **dev)
    raise AssertionError(type(mod))


def _flat_nodes(args: Any) -> list[fx.Node]:
    out: list[fx.Node] = []
    fx.node.map_arg(args, out.append)
    return out


def _shrink_traced(model: nn.Module, scale: float, parametrize: bool,
                   min_width: int) -> Surrogate:
    try:
        gm = fx.symbolic_trace(copy.deepcopy(model))
    except Exception as exc:
        raise ShrinkError(
            f"torch.fx cannot trace {type(model).__name__} ({type(exc).__name__}: {exc}). "
            "Pass a make_model(width_mult) factory instead: shrink(lambda width_mult: "
            "MyModel(width=int(256 * width_mult)), scale)") from exc
    nodes = list(gm.graph.nodes)
    mods = dict(gm.named_modules())
    for n in nodes:
        if n.op == "get_attr" and isinstance(getattr(gm, str(n.target), None), nn.Parameter):
            raise ShrinkError(f"parameter {n.target!r} is used by a functional call; the shrinker "
                              "can only resize nn.Module layers. Use nn.Linear/nn.Conv, or pass a "
                              "make_model(width_mult) factory")

    def is_width(n: fx.Node) -> bool:
        return n.op == "call_module" and isinstance(mods[str(n.target)], _WIDTH)

    downstream: dict[fx.Node, bool] = {}
    for n in reversed(nodes):
        downstream[n] = any(is_width(u) or downstream[u] for u in n.users)

    width: dict[fx.Node, Width] = {}
    new_mods: dict[str, tuple[nn.Module, Width]] = {}
    widths: dict[str, tuple[int, int]] = {}
    readouts: list[str] = []
    for n in nodes:
        ins = [width.get(a) for a in _flat_nodes((n.args, n.kwargs))]
        w_in = next((w for w in ins if w is not None), None)
        if n.op != "call_module" or not isinstance(mods[str(n.target)], _WIDTH + _NORM):
            width[n] = w_in
            continue
        name, mod = str(n.target), mods[str(n.target)]
        if isinstance(mod, _NORM):
            new, w_out = _new_layer(name, mod, w_in, None), w_in
        else:
            hidden_out = downstream[n]
            if not hidden_out and w_in is not None:
                readouts.append(name)
            old_out = (mod.embed_dim if isinstance(mod, nn.MultiheadAttention) else
                       mod.embedding_dim if isinstance(mod, nn.Embedding) else
                       getattr(mod, "out_features", getattr(mod, "out_channels", None)))
            if isinstance(mod, nn.MultiheadAttention):
                if w_in is None:
                    raise ShrinkError(f"layer {name!r}: attention right on the input is not "
                                      "supported; embed the input first")
                new, w_out = MuMultiheadAttention.shrunk(name, mod, w_in[1], parametrize), w_in
            else:
                new_out = _narrow(name, old_out, scale, min_width) if hidden_out else old_out
                new = _new_layer(name, mod, w_in, new_out)
                w_out = (old_out, new_out) if hidden_out else None  # a width even at S = 1
            if w_out is not None:
                widths[name] = w_out
        if name in new_mods and new_mods[name][1] != w_in:
            raise ShrinkError(f"layer {name!r} is called on inputs of different widths")
        new_mods[name] = (new, w_in)
        width[n] = w_out
    if scale > 1 and all(o == n for o, n in widths.values()):
        raise ShrinkError(f"{type(model).__name__} has no hidden width to shrink (one layer "
                          "between input and output at least)")
    readout_mult = 1.0
    for name, (new, _) in new_mods.items():
        if name in readouts:
            w_in = new_mods[name][1]
            readout_mult = w_in[0] / w_in[1]
            if parametrize:
                new = nn.Sequential(Multiply(readout_mult), new)
        parent, _, leaf = name.rpartition(".")
        setattr(gm.get_submodule(parent) if parent else gm, leaf, new)  # keeps the order
    gm.recompile()
    return _finish(gm, model, scale, parametrize, widths, readouts, readout_mult, "fx")


def _dim_mults(target: nn.Module, sur: nn.Module) -> dict[str, tuple[float, ...]]:
    """Per-parameter per-dimension width multipliers, matched by name after the readout wrap."""
    base = {n: p.shape for n, p in target.named_parameters()}
    out: dict[str, tuple[float, ...]] = {}
    for name, p in sur.named_parameters():
        key = name if name in base else _unwrap_name(name)
        shape = base.get(key)
        if shape is None or len(shape) != p.dim():
            raise ShrinkError(f"parameter {name!r} of the surrogate has no counterpart "
                              f"{key!r} in the target")
        out[name] = tuple(s / b for s, b in zip(p.shape, shape, strict=True))
    return out


def _unwrap_name(name: str) -> str:
    """``head.1.weight`` (a readout wrapped with its Multiply) -> ``head.weight``."""
    parts = name.split(".")
    return ".".join(parts[:-2] + parts[-1:]) if len(parts) >= 3 and parts[-2] == "1" else name


def _finish(sur: nn.Module, target: nn.Module, scale: float, parametrize: bool,
            widths: dict[str, tuple[int, int]], readouts: list[str], readout_mult: float,
            method: str) -> Surrogate:
    dims = _dim_mults(target, sur)
    if parametrize:
        _hydro_init(sur, readouts)
    return Surrogate(module=sur, scale=scale, parametrized=parametrize, dim_mults=dims,
                     widths=widths, readouts=readouts, readout_mult=readout_mult, method=method)


def _hydro_init(sur: nn.Module, readouts: list[str]) -> None:
    """Hydro's init: readout weights and all biases zero.

    The other weights keep PyTorch's fan-in init of the fresh layers (variance
    ~ 1/fan_in: the µP init of input and hidden layers), so ``shrink(model, 1)``
    differs from the target only where Hydro says it must.
    """
    with torch.no_grad():
        for name, p in sur.named_parameters():
            layer = name.rsplit(".", 1)[0]
            if name.endswith("bias") or layer in readouts or layer.rsplit(".", 1)[0] in readouts:
                p.zero_()


def _shrink_factory(make_model: Callable[[float], nn.Module], scale: float, parametrize: bool,
                    min_width: int) -> Surrogate:
    target, sur = make_model(1.0), make_model(1.0 / scale)
    if not isinstance(target, nn.Module) or not isinstance(sur, nn.Module):
        raise ShrinkError("make_model(width_mult) must return an nn.Module")
    widths: dict[str, tuple[int, int]] = {}
    readouts: list[str] = []
    readout_mult = 1.0
    tshapes = dict(target.named_parameters())
    for lname, mod in list(sur.named_modules()):
        w = getattr(mod, "weight", None)
        if not isinstance(mod, _WIDTH) or w is None or f"{lname}.weight" not in tshapes:
            continue
        tw = tshapes[f"{lname}.weight"]
        if isinstance(mod, nn.Embedding):
            dims_t, dims_s = (tw.shape[1], None), (w.shape[1], None)
        else:
            dims_t, dims_s = (tw.shape[0], tw.shape[1]), (w.shape[0], w.shape[1])
        if dims_s[0] != dims_t[0]:
            widths[lname] = (int(dims_t[0]), int(dims_s[0]))
            if dims_s[0] < min_width:
                raise ShrinkError(f"layer {lname!r}: make_model(1/{scale:g}) gives width "
                                  f"{dims_s[0]} < min_width={min_width}")
        elif dims_s[1] is not None and dims_s[1] != dims_t[1]:
            readouts.append(lname)
            readout_mult = dims_t[1] / dims_s[1]
            if parametrize:
                parent, _, leaf = lname.rpartition(".")
                holder = sur.get_submodule(parent) if parent else sur
                setattr(holder, leaf, nn.Sequential(Multiply(readout_mult), mod))
    if scale > 1 and not widths:
        raise ShrinkError("make_model(1.0) and make_model(1/scale) have the same widths: the "
                          "factory must divide its widths by 1/width_mult")
    return _finish(sur, target, scale, parametrize, widths, readouts, readout_mult, "factory")
