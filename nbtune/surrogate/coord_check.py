"""Hydro's correctness check (§4.1): do activation sizes stay bounded as width grows?

Like gradient checking for autograd, a few training steps at two or three widths
reveal a wrong parametrization before any trial is wasted: under µP the average
coordinate size (L1, ``|x|.mean()``) of every layer's output is the same at any
width at every step; under a wrong rule it grows (or shrinks) as a power of the
width after the first update. ``coord_check`` trains ``shrink(model, S)`` for each
S for ``steps`` steps, fits ``log l1 ~ slope * log width`` per layer and step, and
flags every layer whose |slope| exceeds ``tol`` after an update: a Python
:class:`ParametrizationWarning`, and in a notebook a red banner and a Bokeh plot.
"""

from __future__ import annotations

import html
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from nbtune.surrogate.parametrization import Surrogate
from nbtune.surrogate.shrinker import _NORM, _WIDTH, shrink

__all__ = ["CoordCheck", "ParametrizationWarning", "coord_check"]


class ParametrizationWarning(UserWarning):
    """The surrogate's activations depend on its width: hyperparameters may not transfer."""


@dataclass
class CoordCheck:
    """What :func:`coord_check` measured: ``l1[(layer, step)][i]`` at ``widths[i]``."""

    widths: list[float]
    steps: int
    l1: dict[tuple[str, int], list[float]]
    tol: float
    #: (layer, step) -> fitted exponent of l1 in the width
    slopes: dict[tuple[str, int], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        lw = [math.log(w) for w in self.widths]
        mx = sum(lw) / len(lw)
        den = sum((x - mx) ** 2 for x in lw)
        for key, vals in self.l1.items():
            if den == 0 or any(v <= 0 or not math.isfinite(v) for v in vals):
                continue  # a zero-initialised readout at step 0: no size to compare
            ly = [math.log(v) for v in vals]
            my = sum(ly) / len(ly)
            self.slopes[key] = sum((x - mx) * (y - my) for x, y in zip(lw, ly, strict=True)) / den

    @property
    def flagged(self) -> dict[str, float]:
        """Layer -> its worst slope after an update, for every layer beyond ``tol``."""
        worst: dict[str, float] = {}
        for (layer, step), s in self.slopes.items():
            if step >= 1 and abs(s) > self.tol and abs(s) > abs(worst.get(layer, 0.0)):
                worst[layer] = s
        return worst

    @property
    def ok(self) -> bool:
        return not self.flagged

    def message(self) -> str:
        if self.ok:
            return (f"coordinate check passed: every layer's activation size stays within "
                    f"width^{self.tol:g} over widths {self.widths}")
        parts = [f"{k} (l1 ~ width^{s:+.2f}, {'grows' if s > 0 else 'shrinks'})"
                 for k, s in self.flagged.items()]
        return ("coordinate check FAILED: activation sizes depend on the width, so the "
                "surrogate's best hyperparameters may not transfer: " + "; ".join(parts))

    def plot(self) -> Any:
        """A Bokeh row: per step, each layer's l1 against width (log-log); flat is right."""
        from bokeh.layouts import row
        from bokeh.palettes import Category10_10
        from bokeh.plotting import figure

        layers = sorted({k[0] for k in self.l1})
        figs = []
        for t in range(self.steps):
            f = figure(width=230, height=220, x_axis_type="log", y_axis_type="log",
                       title=f"step {t}", x_axis_label="width multiplier",
                       y_axis_label="mean |activation|" if t == 0 else "", toolbar_location=None)
            for i, layer in enumerate(layers):
                vals = self.l1.get((layer, t))
                if vals is None or any(v <= 0 for v in vals):
                    continue
                bad = layer in self.flagged
                legend = {"legend_label": layer} if t == self.steps - 1 else {}
                f.line(self.widths, vals, color=Category10_10[i % 10], line_width=3 if bad else 1,
                       line_dash="solid" if bad else "dashed", **legend)
                f.scatter(self.widths, vals, color=Category10_10[i % 10], size=4)
            figs.append(f)
        if figs[-1].legend:
            figs[-1].legend.label_text_font_size = "7pt"
            figs[-1].legend.location = "bottom_right"
        return row(*figs)

    def _repr_html_(self) -> str:
        color = "#1b7e3c" if self.ok else "#b00020"
        rows = "".join(
            f"<tr><td>{html.escape(k)}</td><td>{max(abs(s) for (kk, t), s in self.slopes.items() if kk == k and t >= 1):.2f}</td></tr>"
            for k in sorted({k for k, _ in self.slopes}))
        return (f'<div style="border-left:6px solid {color};padding:4px 8px;color:{color}">'
                f"<b>{html.escape(self.message())}</b></div>"
                f"<table><tr><th>layer</th><th>max |slope| after an update</th></tr>{rows}</table>")


def _layer_names(module: nn.Module) -> dict[nn.Module, str]:
    """Width-bearing and norm layers by their name (a readout's Linear under its own name)."""
    names: dict[nn.Module, str] = {}
    for name, m in module.named_modules():
        if isinstance(m, _WIDTH + _NORM):
            names[m] = name[:-2] if name.endswith(".1") and isinstance(
                module.get_submodule(name[:-2]), nn.Sequential) else name
    return names


def coord_check(model: nn.Module | Callable[[float], nn.Module], data: Any,
                loss_fn: Callable[[Any, Any], torch.Tensor], *,
                scales: Sequence[float] = (8, 4, 2), optimizer: type = torch.optim.SGD,
                steps: int = 4, seeds: int = 3, tol: float = 0.5, parametrize: bool = True,
                lr_multipliers: Callable[[Surrogate], Mapping[str, float]] | None = None,
                warn: bool = True, **hparams: Any) -> CoordCheck:
    """Train ``shrink(model, S)`` for each S in ``scales`` for ``steps`` steps and compare.

    ``data`` is one ``(x, y)`` batch or a sequence of batches (cycled);
    ``hparams`` go to ``Surrogate.optimizer`` (``lr=...``). ``lr_multipliers``
    replaces the µP rule (to test another one, e.g. Hydro's SGD rule), and
    ``parametrize=False`` checks the standard parametrization. Returns a
    :class:`CoordCheck`; with ``warn`` a failure is also a
    :class:`ParametrizationWarning`.
    """
    if len(scales) < 2 or steps < 2:
        raise ValueError("coord_check needs two widths at least (scales=(8, 4, 2)) and "
                         "two steps at least (steps=4)")
    batches = [data] if isinstance(data, tuple) and len(data) == 2 and torch.is_tensor(data[0]) \
        else list(data)
    sums: dict[tuple[str, int], list[float]] = {}
    order = sorted(scales, reverse=True)  # narrow to wide
    for i, s in enumerate(order):
        for seed in range(seeds):
            torch.manual_seed(seed)
            sur = shrink(model, s, parametrize=parametrize)
            opt = sur.optimizer(optimizer, **hparams)
            if lr_multipliers is not None:
                mults = lr_multipliers(sur)
                named = {id(p): n for n, p in sur.module.named_parameters()}
                opt = optimizer([{"params": [p], "lr": hparams["lr"] * mults[named[id(p)]]}
                                 for g in opt.param_groups for p in g["params"]], **hparams)
            names = _layer_names(sur.module)
            step_l1: dict[str, float] = {}

            def hook(mod: nn.Module, _inp: Any, out: Any, _n: Mapping = names,
                     _rec: dict = step_l1) -> None:
                t = out[0] if isinstance(out, tuple) else out
                _rec[_n[mod]] = float(t.detach().abs().float().mean())

            handles = [m.register_forward_hook(hook) for m in names]
            try:
                for t in range(steps):
                    x, y = batches[t % len(batches)]
                    step_l1.clear()
                    loss = loss_fn(sur.module(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    for layer, v in step_l1.items():
                        sums.setdefault((layer, t), [0.0] * len(order))[i] += v / seeds
            finally:
                for h in handles:
                    h.remove()
    result = CoordCheck(widths=[1.0 / s for s in order], steps=steps, l1=sums, tol=tol)
    if warn and not result.ok:
        warnings.warn(result.message(), ParametrizationWarning, stacklevel=2)
    return result
