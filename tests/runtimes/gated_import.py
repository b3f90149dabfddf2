"""A preload whose import waits for a file: holds warm processes in their imports until told.

The path comes from ``NBTUNE_TEST_GATE`` (imported elsewhere, without it, it returns
at once). Tests open the gate once they have checked what must happen before the
imports end, so nothing depends on how fast the machine is.
"""

from __future__ import annotations

import os
import time

_gate = os.environ.get("NBTUNE_TEST_GATE", "")
_deadline = time.monotonic() + 120
while _gate and not os.path.exists(_gate) and time.monotonic() < _deadline:
    time.sleep(0.05)
