"""Chaos in CI, bounded: short real trials while a worker is SIGKILLed every ~4 s.

The full version (200 trials, a kill every 10 s, with the figures) is
``python benchmarks/chaos.py``; this one runs the same harness small enough
for CI and asserts the guarantees: every trial finishes, no reported result
is lost, a killed trial is not counted as a failure, and the kills happened
and were recovered from checkpoints.
"""

from __future__ import annotations

import pytest

from benchmarks.chaos import chaos_run

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_trials_survive_a_worker_killed_every_few_seconds():
    figures = chaos_run(24, 4.0, steps=4, step_time=0.3, timeout=120)
    print(figures)
    assert figures["completed_in_time"]
    assert figures["worker_kills"] >= 2
    assert figures["finished"] == 24
    assert figures["results_lost"] == 0
    assert figures["trial_failures"] == 0
    assert figures["trials_requeued"] >= 1
    assert figures["restarts_from_checkpoint"] >= 1
