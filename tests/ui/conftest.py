"""Fixtures for the UI tests: real experiments on the simulator, and a comm that keeps messages.

Outside a kernel, ipywidgets talks through ``comm.create_comm``; the
recording comm below is the kernel's end of that protocol (it keeps what
would go to the browser), so a test can check that an update reaches the
wire without a running kernel or browser.
"""

from __future__ import annotations

from typing import Any

import comm
import pytest
from comm.base_comm import BaseComm

from nbtune import SyntheticWorkload, choice, loguniform, uniform
from nbtune.algorithms import make_algorithm
from nbtune.allocators import make_allocator
from nbtune.build import build_experiment, make_runtime
from nbtune.core.resources import Demand
from nbtune.engine.engine import Engine
from nbtune.experiment import Experiment

SPACE = {"lr": loguniform(1e-4, 1e-1), "batch_size": choice([32, 64, 128, 256]),
         "dropout": uniform(0.0, 0.5), "opt": choice(["adam", "sgd"])}


def workload(seed: int = 0, max_budget: float = 27) -> SyntheticWorkload:
    return SyntheticWorkload(
        SPACE, unit_time=lambda c: 2.0 + c["batch_size"] / 32.0, launch_overhead=3.0,
        demand=lambda c: Demand(compute=min(1.0, 0.2 + c["batch_size"] / 320.0)),
        max_budget_hint=max_budget, seed=seed)


def experiment(algorithm: str = "asha", *, trials: int = 40, gpus: int = 4,
               max_budget: float = 27, allocator: str = "fifo", seed: int = 0,
               report_every: float = 1.0, **options: Any) -> Experiment:
    """An experiment built but not started (``exp.runtime.start(exp.engine, exp.trainable)``)."""
    wl = workload(seed, max_budget)
    if algorithm in ("asha", "bohb"):
        options.setdefault("type", "promotion")  # the views show paused and promoted trials
    algo = make_algorithm(algorithm, SPACE, metric="loss", mode="min", max_budget=max_budget,
                          num_trials=trials, seed=seed, **options)
    engine = Engine(algo, make_allocator(allocator), hints={"workload": wl}, validate=True)
    rt = make_runtime("sim", cluster=gpus, report_every=report_every)
    return build_experiment("ui-test", engine, rt, wl, start=False)


def run(exp: Experiment) -> Experiment:
    exp.runtime.start(exp.engine, exp.trainable)
    return exp


class RecordingComm(BaseComm):
    sent: list[tuple[str, Any, list[Any]]] = []
    #: the same messages, by the comm (the widget) that sent them
    by_comm: dict[str, list[tuple[str, Any, list[Any]]]] = {}

    def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None,
                    buffers: Any = None, **keys: Any) -> None:
        msg = (msg_type, data, list(buffers or []))
        RecordingComm.sent.append(msg)
        RecordingComm.by_comm.setdefault(self.comm_id, []).append(msg)


@pytest.fixture
def wire(monkeypatch):
    """Messages widgets send to the (absent) browser, in order."""
    RecordingComm.sent = []
    RecordingComm.by_comm = {}
    monkeypatch.setattr(comm, "create_comm", RecordingComm)
    return RecordingComm.sent
