"""A preload that holds the warm processes in their imports until the test lets them go.

Used by the start-up fault test so that the runtime is inside
``client.run(wait_pool_ready, ...)`` when a worker is killed, however slow
the machine: the import waits until the file ``NBTUNE_TEST_PRELOAD_GATE``
names exists (the test creates it once the worker is dead).
"""

from __future__ import annotations

import os
import time

_gate = os.environ.get("NBTUNE_TEST_PRELOAD_GATE")
_deadline = time.monotonic() + 600  # never outlive the test by much
while _gate and not os.path.exists(_gate) and time.monotonic() < _deadline:
    time.sleep(0.02)
