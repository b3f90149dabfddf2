"""A preload that takes seconds to import: holds the warm processes in their imports.

Used by the start-up fault test so that the runtime is reliably inside
``client.run(wait_pool_ready, ...)`` when a worker is killed.
"""

from __future__ import annotations

import time

time.sleep(4.0)
