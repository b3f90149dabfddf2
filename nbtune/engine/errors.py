"""The engine's own error, apart so that its helper modules raise it without a cycle."""

from __future__ import annotations

__all__ = ["EngineError"]


class EngineError(RuntimeError):
    """The algorithm or allocator broke the contract, or the experiment cannot progress."""
