"""On CPU workers the utilization panel says so, from the start and never otherwise: the CPU
share of each worker's trial processes (psutil), never a "GPU utilization"."""

from __future__ import annotations

import time

import pytest

import nbtune
from nbtune import uniform
from nbtune.ui import Dashboard
from tests.ui.conftest import experiment, run

pytestmark = pytest.mark.integration


def busy(config, trial):
    for step in trial.steps():
        t = time.time()
        while time.time() - t < 0.4:  # a CPU-bound step, as training is
            pass
        trial.report(step, loss=config["x"] / step)


def test_simulated_lanes_are_gpus_and_estimated(wire):
    dash = Dashboard(run(experiment("random", trials=4, gpus=2)))
    assert dash.figures.util.title.text == "GPU utilization (allocated)"
    dash.close()


def test_cpu_workers_show_their_trials_cpu_share_labelled_consistently(wire):
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(n_workers=2, preload=(), warm_processes=1, sample_interval=0.3)
    try:
        exp = nbtune.tune(busy, {"x": uniform(0.0, 1.0)}, algorithm="random", metric="loss",
                          max_budget=6, num_trials=4, runtime=rt)
        dash = Dashboard(exp, period=0.1)
        titles = {dash.figures.util.title.text}
        while not exp.done:
            time.sleep(0.2)
            titles.add(dash.figures.util.title.text)
        assert exp.wait(120)
        dash._thread.join(120)  # its last update, once it sees the experiment finished
        assert not dash._thread.is_alive()
        titles.add(dash.figures.util.title.text)
        # never "GPU", never "(allocated)", never a switch
        assert titles == {"CPU share of each worker's trial processes (measured with psutil)"}
        labels = dash.figures.util.yaxis[0].major_label_overrides
        assert sorted(labels.values()) == ["worker 0", "worker 1"]  # one labelled lane each
        # busy trials read busy, and the panel shows it. How busy depends on the machine's
        # load (tests/runtimes/test_cpu_meter.py checks the readings against the CPU clocks)
        util = exp.utilization()
        assert util["util"].max() > 0.0, util
        shown = list(dash.figures.util_src.data["util"])
        assert shown and max(shown) > 0.0
        dash.close()
    finally:
        rt.close()
