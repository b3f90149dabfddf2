"""The plain-text progress printer (one line per trial event), driven by a simulated run."""

from __future__ import annotations

import io
import re

from nbtune.algorithms import make_algorithm
from nbtune.allocators import make_allocator
from nbtune.console import ProgressPrinter
from nbtune.core.space import loguniform
from nbtune.engine.engine import Engine
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload

SPACE = {"lr": loguniform(1e-4, 1e-1)}


def test_one_line_per_launch_and_rung_with_a_status_tail() -> None:
    wl = SyntheticWorkload(SPACE, metric="loss", seed=0, unit_time=1.0)
    algo = make_algorithm("asha", SPACE, metric="loss", mode="min", max_budget=9,
                          num_trials=8, seed=0, type="promotion")  # prints promotions
    engine = Engine(algo, make_allocator("fifo"))
    out = io.StringIO()
    printer = ProgressPrinter(engine, total=8, out=out)
    SimRuntime(cluster=2).start(engine, wl)
    printer.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == printer.lines and lines
    assert all(re.match(r"^\[\s*\d+\.\ds\] trial\s+\d+ .* \| running \d+, started \d+/8, "
                        r"done \d+", ln) for ln in lines), lines
    starts = [ln for ln in lines if " start 0 -> 1 " in ln]
    assert len(starts) == 8  # every config launched once from scratch
    assert any(" promote 1 -> 3 " in ln for ln in lines)
    assert any(re.search(r"reached 9: loss \d+\.\d{4}", ln) for ln in lines)
    assert "done 8" in lines[-1] and "best " in lines[-1]
    # no carriage returns or escape codes: it reads the same in a CI log
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_catch_up_prints_trials_already_running() -> None:
    wl = SyntheticWorkload(SPACE, metric="loss", seed=0, unit_time=1.0)
    algo = make_algorithm("random", SPACE, metric="loss", mode="min", max_budget=1,
                          num_trials=3, seed=0)
    engine = Engine(algo, make_allocator("fifo"))
    from nbtune.core import events as ev
    from nbtune.core.resources import ClusterSpec

    engine.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    out = io.StringIO()
    ProgressPrinter(engine, total=3, out=out).close()
    text = out.getvalue()
    assert text.count(" running on gpu ") == 0 and text.count(" running on slot ") == 2
    del wl
