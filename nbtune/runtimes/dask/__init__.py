"""The Dask runtime: training functions on a real (local or remote) Dask cluster.

.. code-block:: python

    import nbtune

    def train(config, trial):
        model = trial.ddp(make_model(config))      # DDP when the trial spans workers
        state = trial.restore()                    # None on a fresh start
        if state is not None:
            model.load_state_dict(state["model"])
        for step in trial.steps():                 # start_step+1 .. the Launch's budget
            loss = train_one_epoch(model, config)
            trial.report(step=step, loss=loss)     # True once the trial must stop
            trial.checkpoint({"model": model.state_dict()})

    with nbtune.DaskRuntime() as rt:               # or DaskRuntime("tcp://host:8786")
        exp = nbtune.tune(train, space, algorithm="asha", metric="loss",
                          max_budget=27, num_trials=32, runtime=rt)
        exp.wait()

The rules of ``report`` / ``should_stop`` / ``checkpoint`` are in
:mod:`.trial_side.trial_api`. Imported lazily: ``import nbtune`` must not import
``distributed``.

Laid out by the process the code runs in (docs/architecture.md has the map):
:mod:`.driver_side` (the user's kernel: ``DaskRuntime`` and its driver thread),
:mod:`.worker_side` (inside each Dask worker), :mod:`.forkserver_side` (the fork
server) and :mod:`.trial_side` (the trial process, kept light). What more than one
of them uses sits here: :mod:`.protocol` (every message between them),
:mod:`.checkpoints`, :mod:`.trial_env`, :mod:`.gpu` and :mod:`.dask_page` (also
served by the scheduler).
"""

from __future__ import annotations

from typing import Any

__all__ = ["DaskRuntime", "DaskRuntimeError", "Trial", "TrialInterrupted", "DaskClusterOptions",
           "DaskTrialOptions"]


def __getattr__(name: str) -> Any:
    if name in ("DaskRuntime", "DaskRuntimeError"):
        from nbtune.runtimes.dask.driver_side import runtime

        return getattr(runtime, name)
    if name in ("DaskClusterOptions", "DaskTrialOptions"):
        from nbtune.runtimes.dask.driver_side import dask_options

        return getattr(dask_options, name)
    if name in ("Trial", "TrialInterrupted"):
        from nbtune.runtimes.dask.trial_side import trial_api

        return getattr(trial_api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
