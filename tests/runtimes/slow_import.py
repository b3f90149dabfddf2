"""A module that takes a second to import: stands for torch in the warm pool's tests.

With ``NBTUNE_TEST_IMPORT_LOG`` set, each import appends its process id to that
file: a test can tell which processes imported it (a forked one does not).
"""

from __future__ import annotations

import os
import time

time.sleep(1.0)
if os.environ.get("NBTUNE_TEST_IMPORT_LOG"):
    with open(os.environ["NBTUNE_TEST_IMPORT_LOG"], "a") as _log:
        _log.write(f"{os.getpid()}\n")
