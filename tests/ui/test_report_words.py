"""Issue #27: the dashboard's and the report's words fit the hardware: lanes of CPU workers
standing in for GPUs are worker lanes, never GPU lanes."""

from __future__ import annotations

import pytest

import nbtune
from nbtune.core.resources import ClusterSpec
from nbtune.runtimes.sim import SimRuntime
from nbtune.ui.export import report_html
from nbtune.ui.figures import Figures, alloc_title
from nbtune.workloads import SyntheticWorkload

SPACE = {"lr": nbtune.loguniform(1e-4, 1e-1)}


def sim_run(cluster):
    return nbtune.tune(SyntheticWorkload(SPACE), algorithm="random", metric="loss",
                       max_budget=3, num_trials=4, seed=0, runtime=SimRuntime(cluster=cluster))


def test_alloc_title_says_gpu_lanes_only_on_gpus():
    assert alloc_title("GPU") == "allocation (trials on GPU lanes; stacked = packed)"
    assert alloc_title("CPU") == "allocation (trials on worker lanes; stacked = packed)"
    assert "GPU" not in alloc_title(None)  # not known yet: no word that may be wrong
    fig = Figures("loss", "min")
    assert "GPU" not in fig.alloc.title.text
    hover = [t for tool in fig.alloc.tools if hasattr(tool, "tooltips")
             for t in (tool.tooltips or [])]
    assert ("lane", "@gpu") in hover and not any(label == "GPU" for label, _ in hover)


@pytest.mark.parametrize(("cluster", "lanes", "not_there"), [
    (ClusterSpec.homogeneous(2, kind="cpu"), "worker lanes", "GPU lanes"),
    (2, "GPU lanes", "worker lanes"),
])
def test_the_report_names_the_lanes_by_what_they_are(cluster, lanes, not_there):
    html = report_html(sim_run(cluster))
    assert f"allocation (trials on {lanes}; stacked = packed)" in html
    assert not_there not in html
