"""Bubble squeezing for real: guest trials that compute only in a pipeline host's idle windows.

Hydro §5.1 (Bubble Squeezer, Fig. 9): a 1F1B pipeline stage idles (p−1)/(m+p−1)
of each iteration; a tuning trial beside it can use those bubbles if it pauses
whenever the stage computes. This package does it with real processes:
:class:`PipelineHost` trains a real ``torch.distributed.pipelining`` 1F1B job,
one process per stage, each stage timing its own compute; :mod:`.gate` keeps a
co-located guest trial out of the stage's compute (cooperative pause at layer
or step boundaries, ``SIGSTOP``/``SIGCONT`` as the fallback, timeouts so nobody
waits forever); :func:`fits` is the memory check a guest passes before it is
placed beside a stage; :class:`~nbtune.bubbles.bubble_runtime.BubbleRuntime` (imported
on first use) lets ``nbtune.tune`` place its trials there. It runs processes
and reads clocks, so it sits just above the runtimes; nothing below imports it.
"""

from __future__ import annotations

from typing import Any

from nbtune.bubbles.colocate import fits, place, run_alone
from nbtune.bubbles.gate import Gate, GuestSide, HostSide
from nbtune.bubbles.guest import GuestResult, GuestSpec, train_guest
from nbtune.bubbles.host import HostRun, HostSpec, PipelineHost, reference_weights
from nbtune.bubbles.timeline import bubble_ratio, idle_windows, one_f_one_b_bubble, overlap

__all__ = ["BubbleRuntime", "fits", "place", "run_alone", "Gate", "GuestSide", "HostSide", "GuestResult", "GuestSpec", "train_guest",
           "HostRun", "HostSpec", "PipelineHost", "reference_weights", "bubble_ratio",
           "idle_windows", "one_f_one_b_bubble", "overlap"]


def __getattr__(name: str) -> Any:
    if name == "BubbleRuntime":  # pandas and the profiler: only when a run asks for it
        from nbtune.bubbles.bubble_runtime import BubbleRuntime

        return BubbleRuntime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
