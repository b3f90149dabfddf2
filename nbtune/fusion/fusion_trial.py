"""One ordinary training loop for unfused and fused trials.

A training function gets its model, optimizer and loss through the trial, and reports
per-member metrics; the same ``train(config, trial)`` then runs one trial (F = 1) or a
fused group of F trials::

    def train(config, trial):
        model = trial.model(make_model)                      # make_model(config) -> nn.Module
        opt = trial.optimizer(torch.optim.SGD, model, lr="lr", momentum=0.9)
        for step in trial.steps():
            for x, y in batches(config["batch_size"]):      # shape keys: same for all members
                loss, _ = trial.loss(F.cross_entropy, model(x), y)
                opt.zero_grad(); loss.backward(); opt.step()
            trial.report(step, accuracy=member_accuracy(model(x_val), y_val))

A string hyperparameter names a config key, read per member (``lr="lr"``); anything else
is one value for all. ``report`` splits ``(F,)`` vectors to the members; a member whose
own trial says stop is sliced out with :meth:`FusedModel.keep` and the rest go on.

Members are the runtime's ordinary per-trial objects: anything with
``report(step, **metrics)`` and, optionally, ``should_stop() -> bool``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from .checkpoint import member_checkpoint, restore_members
from .fused_model import FusedModel, fuse
from .loss import fused_loss
from .optim import FusedOptimizer, fused_optimizer


class Member(Protocol):
    def report(self, step: int, **metrics: float) -> object: ...


class FusionTrial:
    """The trial a fused (or F = 1) training function sees."""

    def __init__(self, configs: Sequence[Mapping[str, Any]], members: Sequence[Member],
                 budget: int, start_step: int = 0, impl: str = "auto") -> None:
        if len(configs) != len(members) or not configs:
            raise ValueError("FusionTrial: one member per config, at least one")
        self.configs = list(configs)
        self.members = list(members)
        self.budget = budget
        self.start_step = start_step
        self.impl = impl
        self.alive = list(range(len(configs)))  # original member indices, in fused order
        self._model: FusedModel | None = None
        self._surrogate: Any = None  # the members' shared µP rules (a Hydro surrogate)
        self._optimizer: FusedOptimizer | None = None
        self._last: list[int] = []  # the members that ended together at the last report

    @property
    def config(self) -> Mapping[str, Any]:
        """The first member's config: its shape keys are every member's."""
        return self.configs[self.alive[0]]

    def model(self, build: Callable[[Mapping[str, Any]], Any]) -> FusedModel:
        """``build(config)`` once per member, fused (forward returns ``(F, N, ...)``).

        ``build`` returns an ``nn.Module``, or a Hydro surrogate
        (``nbtune.surrogate.build(make_model, config)``: anything with ``module`` and
        ``lr_multipliers``/``weight_decay_multipliers``); its modules are fused and
        :meth:`optimizer` applies its per-layer µP rules to every member.
        """
        built = [build(self.configs[i]) for i in self.alive]
        self._surrogate = _surrogate_of(built)
        modules = [getattr(b, "module", b) if self._surrogate is not None else b for b in built]
        self._model = fuse(modules, impl=self.impl)
        return self._model

    def optimizer(self, cls: type[torch.optim.Optimizer], model: FusedModel,
                  **hparams: Any) -> FusedOptimizer:
        """``cls`` per member; a ``str`` value is the config key to read per member.
        The lr is the *target's*: a surrogate's layers get theirs scaled (µP)."""
        resolved = {k: [self.configs[i][v] for i in self.alive] if isinstance(v, str) else v
                    for k, v in hparams.items()}
        sur = self._surrogate if model is self._model else None
        if sur is not None:
            resolved["lr_mults"] = sur.lr_multipliers(cls)
            resolved["wd_mults"] = sur.weight_decay_multipliers(cls)
        self._optimizer = fused_optimizer(cls, model, **resolved)
        saved = [_restored(self.members[i]) for i in self.alive]
        if any(ck is not None for ck in saved):
            restore_members(model, self._optimizer, saved)
        return self._optimizer

    def checkpoint(self, step: int | None = None) -> None:
        """Each member saves its own checkpoint (weights + optimizer state slice) through
        its trial's ``checkpoint(state, step)``, the format an unfused F = 1 run saves, so a
        paused member resumes alone or fused with others (``optimizer`` restores it)."""
        if self._model is None:
            raise RuntimeError("checkpoint: call trial.model(...) first")
        for pos, i in enumerate(self.alive or self._last):
            save = getattr(self.members[i], "checkpoint", None)
            if callable(save):
                save(member_checkpoint(self._model, self._optimizer, pos), step=step)

    def loss(self, loss_fn: Callable[..., torch.Tensor] | nn.Module, output: torch.Tensor,
             target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sum of each member's mean loss, and the per-member losses."""
        return fused_loss(loss_fn, output, target)

    def steps(self) -> Iterator[int]:
        """Steps up to the budget; a member's runtime may raise its budget on the way (a
        trial held at a rung and promoted in place), so the budget is read at every step."""
        step = self.start_step + 1
        while self.alive and step <= self._budget():
            yield step
            step += 1

    def _budget(self) -> int:
        live = [getattr(self.members[i], "budget", None) for i in self.alive]
        given = [int(math.floor(float(b) + 1e-9)) for b in live if b is not None]
        return max(given) if given else self.budget

    def report(self, step: int, **metrics: Any) -> None:
        """Send each member its own metrics; slice out the members told to stop."""
        f = len(self.alive)
        values = {k: _per_member(k, v, f) for k, v in metrics.items()}
        for pos, i in enumerate(self.alive):
            self.members[i].report(step, **{k: v[pos] for k, v in values.items()})
        survivors = [pos for pos, i in enumerate(self.alive) if not _stops(self.members[i])]
        if len(survivors) < f:
            if survivors and self._model is not None:
                self._model.keep(survivors)
            else:  # all stop at once (a segment's end): the model still holds every one
                self._last = list(self.alive)
            self.alive = [self.alive[pos] for pos in survivors]


def _surrogate_of(built: Sequence[Any]) -> Any:
    """The first member's surrogate when ``build`` gave surrogates (all members share one
    scale, so one set of per-layer rules), None for plain modules; a mix is refused."""
    is_sur = [hasattr(b, "module") and hasattr(b, "lr_multipliers") for b in built]
    if not any(is_sur):
        return None
    scales = {getattr(b, "scale", None) for b in built}
    if not all(is_sur) or len(scales) != 1:
        raise ValueError("trial.model: build(config) must give every member the same kind of "
                         f"model; got surrogates {is_sur} with scales {sorted(map(str, scales))}"
                         " (add the scaling key to shape_keys)")
    return built[0]


def _per_member(name: str, value: Any, f: int) -> list[float]:
    if isinstance(value, torch.Tensor):
        value = value.detach().flatten().tolist()
    if isinstance(value, int | float):
        return [float(value)] * f
    value = [float(v) for v in value]
    if len(value) != f:
        raise ValueError(f"report: metric {name!r} has {len(value)} values for {f} members")
    return value


def _restored(member: Member) -> dict[str, Any] | None:
    load = getattr(member, "restore", None)
    state = load() if callable(load) else None
    return state if isinstance(state, dict) and "model" in state else None


def _stops(member: Member) -> bool:
    check = getattr(member, "should_stop", None)
    return bool(check()) if callable(check) else False


def as_fusion_trial(trial: Any) -> FusionTrial:
    """A runtime's ordinary trial (``nbtune.runtimes.dask.trial_side.trial_api.Trial``: ``config``,
    ``start_step``, ``budget``, ``report``, ``should_stop``) as a one-member FusionTrial, so a
    loop written for fusion runs unfused with one added line: ``trial = as_fusion_trial(trial)``.
    """
    if isinstance(trial, FusionTrial):
        return trial
    budget = int(math.floor(float(trial.budget) + 1e-9))
    return FusionTrial([trial.config], [trial], budget, start_step=resume_step([trial]))


def resume_step(members: Sequence[Any]) -> int:
    """The step a (re)launched loop goes on after: its members' common checkpoint's step.

    A runtime trial (``restore_path``, ``restore_step``, ``start_step``) relaunched with no
    checkpoint to restore (a loop that keeps none, paused or resized or requeued after a
    lost worker) starts again from step 0: its weights are fresh, so going on at
    ``start_step`` would train a new model from the middle. The steps it had already done
    are reported again and counted as recomputed. Members whose checkpoints are at
    different steps, or some of which have none, all start fresh (their slots could not be
    fused at one step). Members without ``restore_path`` go on at ``start_step``.
    """
    if not all(hasattr(m, "restore_path") for m in members):
        return int(math.floor(min(float(m.start_step) for m in members) + 1e-9))
    steps = {float(m.restore_step) if m.restore_path else None for m in members}
    if len(steps) == 1 and None not in steps:
        return int(math.floor(steps.pop() + 1e-9))
    for m in members:
        m.restore_path = None
    return 0


def run_group(train: Callable[[Mapping[str, Any], FusionTrial], object],
              configs: Sequence[Mapping[str, Any]], members: Sequence[Member], budget: int,
              impl: str = "auto") -> FusionTrial:
    """Run ``train`` once for a fused group of trials; returns the trial (``.alive``)."""
    trial = FusionTrial(configs, members, budget, impl=impl)
    train(trial.config, trial)
    return trial
