"""Placing guests beside host stages: the memory check, and a guest's solo measurement.

Hydro profiles each HydroTrial's memory and puts it on a pipeline worker only
if it fits beside the stage (Fig. 9b's memory diagrams): a stage's memory
peaks at different heights on different workers (the first stage keeps the
most activations), so the check is per stage, from measured peaks, never from
a model of them. On CPU the measurement is the process's peak RSS; on a GPU
it would be the device's peak allocation.
"""

from __future__ import annotations

import queue
from collections.abc import Mapping, Sequence
from dataclasses import replace

from nbtune.allocators.bubble_windows import fits
from nbtune.bubbles.guest import GuestResult, GuestSpec, guest_main

__all__ = ["fits", "place", "run_alone"]


def place(guest_peaks: Mapping[str, int], stage_peaks: Sequence[int],
          limit: int) -> dict[int, str]:
    """One guest per stage, each where it fits; ``{stage: guest name}``.

    Largest guest first onto the stage with the most room left that takes it
    (the stages' peaks differ, so the big guest must get the small stage);
    a guest that fits nowhere is not placed.
    """
    free = sorted(range(len(stage_peaks)), key=lambda s: stage_peaks[s])
    out: dict[int, str] = {}
    for name in sorted(guest_peaks, key=lambda n: -guest_peaks[n]):
        for s in free:
            if fits(guest_peaks[name], stage_peaks[s], limit):
                out[s] = name
                free.remove(s)
                break
    return out


def run_alone(spec: GuestSpec, *, steps: int | None = None, cpu: int | None = None,
              timeout: float = 120.0) -> GuestResult:
    """Train the guest ungated in its own process: its solo step time, peak RSS and the
    weights a gated run must reproduce."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    if steps is not None:
        spec = replace(spec, steps=steps, stop_with_host=False)
    out = ctx.Queue()
    proc = ctx.Process(target=guest_main, args=(spec, None, out, cpu, 1.0), daemon=True)
    proc.start()
    try:
        while True:
            try:
                msg = out.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"guest {spec.name} did not finish in {timeout} s") from None
            if msg[0] == "error":
                raise RuntimeError(f"guest {spec.name} failed: {msg[2]}")
            if msg[0] == "guest":
                return msg[2]
    finally:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
