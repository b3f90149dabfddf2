"""nbtune's version, in the lowest layer so every layer (the CLI too) can read it."""

from __future__ import annotations

__version__ = "0.1.0"
