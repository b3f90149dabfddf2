"""A module that takes a second to import: stands for torch in the warm pool's tests."""

from __future__ import annotations

import time

time.sleep(1.0)
