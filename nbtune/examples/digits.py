"""The canonical nbtune example: a small CNN on scikit-learn's handwritten digits.

``nbtune demo`` tunes this module's :func:`train`; it is also the template for
your own training function. Its shape, stripped to the rules of
:mod:`nbtune.runtimes.dask.trial_side.trial_api`::

    def train(config, trial):
        model, opt = build(config)                   # anything: torch, sklearn, JAX ...
        state = trial.restore()                      # None on a fresh start
        if state is not None:                        # a promoted / resized / resumed trial
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
        for step in trial.steps():                   # start_step+1 .. the budget granted
            train_one_epoch(model, opt)
            trial.report(step=step, accuracy=evaluate(model))
            trial.checkpoint({"model": model.state_dict(), "opt": opt.state_dict()})

and how it is tuned (what ``nbtune demo`` does, plus a progress printer)::

    import nbtune
    from nbtune.examples.digits import SPACE, train

    exp = nbtune.tune(train, SPACE, algorithm="asha", metric="accuracy", mode="max",
                      max_budget=27, num_trials=48, allocator="waterfill",
                      runtime="dask", store=True)
    exp.wait()
    print(exp.summary())
    exp.report("report.html")

One budget unit is one epoch over the 1,437 training images (8x8 pixels, 10
classes; chance is 10 % accuracy). The data ships inside scikit-learn, so
the example needs no download. The split and the model's initial weights
are seeded (from the config's ``seed`` key when present), so a trial that
restarts from its checkpoint continues exactly where it stopped. This module
is importable by the trial processes the Dask runtime starts: a function
defined in a notebook works too (it is pickled by value), but one in a
module is what the workers can import by name.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from nbtune.core.space import choice, loguniform, uniform

__all__ = ["SPACE", "load_data", "make_model", "train"]

#: the demo's search space: learning rate, width, batch size, dropout
SPACE: dict[str, Any] = {
    "lr": loguniform(1e-3, 0.3),
    "channels": choice([4, 8, 16]),
    "batch_size": choice([32, 64, 128]),
    "dropout": uniform(0.0, 0.5),
}


@cache
def load_data(seed: int = 0) -> tuple[Any, Any, Any, Any]:
    """Digits as torch tensors ``(x_train, y_train, x_val, y_val)``, a fixed 80/20 split.

    Cached per process: a reused trial process loads the data once.
    """
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)

    def t(a: Any) -> Any:
        return torch.tensor(a, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0

    return (t(x_tr), torch.tensor(y_tr, dtype=torch.long),
            t(x_va), torch.tensor(y_va, dtype=torch.long))


def make_model(config: dict[str, Any]) -> Any:
    """Two 3x3 convolutions, a pooling step and a linear head: ~1-10k weights."""
    from torch import nn

    c = int(config["channels"])
    return nn.Sequential(
        nn.Conv2d(1, c, 3, padding=1), nn.ReLU(),
        nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(float(config["dropout"])), nn.Linear(2 * c * 16, 10),
    )


def train(config: dict[str, Any], trial: Any) -> None:
    """Train for the trial's budget (epochs), reporting validation accuracy and loss each epoch."""
    import torch
    from torch import nn

    seed = int(config.get("seed", 0))
    x_tr, y_tr, x_va, y_va = load_data()
    torch.manual_seed(seed)
    model = make_model(config)
    opt = torch.optim.SGD(model.parameters(), lr=float(config["lr"]), momentum=0.9)
    state = trial.restore()
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    loss_fn = nn.CrossEntropyLoss()
    bs = int(config["batch_size"])
    for step in trial.steps():
        model.train()
        gen = torch.Generator().manual_seed(seed * 1000 + int(step))  # same order on resume
        order = torch.randperm(len(x_tr), generator=gen)
        for i in range(0, len(order), bs):
            idx = order[i:i + bs]
            opt.zero_grad()
            loss_fn(model(x_tr[idx]), y_tr[idx]).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            out = model(x_va)
            val_loss = float(loss_fn(out, y_va))
            acc = float((out.argmax(1) == y_va).float().mean())
        trial.report(step=step, accuracy=acc, val_loss=val_loss)
        trial.checkpoint({"model": model.state_dict(), "opt": opt.state_dict()})
