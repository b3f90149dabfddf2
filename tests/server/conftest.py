"""jupyter_server's pytest fixtures (``jp_fetch``, ``jp_serverapp`` ...) for these tests only.

pytest allows ``pytest_plugins`` only in the root conftest, so the fixtures are
imported here instead; they run an in-process Jupyter server per test.
"""

from __future__ import annotations

from pytest_jupyter.jupyter_server import *  # noqa: F403
