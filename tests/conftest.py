"""Shared test settings: hypothesis profiles sized for CI's 2 cores."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# `make test` runs the suite on CI's 2 cores in two phases: everything else on two
# pytest-xdist workers, then these files alone, because what they assert is measured
# time or CPU share (a second test beside them would be part of the measurement).
SERIAL = (
    "tests/runtimes/test_profiler_dask.py",  # packed vs alone step times -> c
    "tests/bubbles/test_stalls.py",  # makespan with and without packing into stalls
    "tests/bubbles/test_runtime.py",  # a live pipeline host's measured bubbles
    "tests/bubbles/test_host.py",  # a pipeline host's measured timeline
    "tests/bubbles/test_fidelity.py",  # probe-calibrated bubble model vs measured slowdown/fill
    "tests/bubbles/test_runtime_probe.py",  # a live host's start-up co-location probe
    # 27 trial processes waiting at rungs on 2 workers: beside another test it missed its 60 s
    "tests/runtimes/test_dask_barrier_fill.py",
    # Lab, chromium, a kernel and a cluster at once: beside another test a reload took > 60 s
    "tests/browser/test_dashboard_truth.py",
)


def pytest_collection_modifyitems(config, items):
    root = config.rootpath
    for item in items:
        if item.path.relative_to(root).as_posix() in SERIAL:
            item.add_marker("serial")
