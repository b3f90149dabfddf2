"""The one float tolerance: budgets, shares and times closer than :data:`EPS` are equal.

Budgets are sums of report steps and shares are sums of fractions, so exact
comparison would split hairs that rounding made; every layer uses this one
number so that what the engine calls "reached" the allocators and runtimes do too.
"""

from __future__ import annotations

__all__ = ["EPS"]

EPS = 1e-9
