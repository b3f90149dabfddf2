"""The process path's cost per report over the thread path's, measured on a worker.

:mod:`.execution_mode` decides between a trial process and a thread from this
number and the trials' own work per report. It is measured, not assumed:
what a boundary costs depends on the machine and its load (a pipe hop, the
relay thread that forwards control, the launch hand-off). :func:`measure_overhead`
runs on one worker, where it launches probe trials through the worker's own
launch path (:func:`.rank_runner.start_rank`) both ways, alternating: each
reports ``REPORTS`` times and waits for a verdict after each report (answered
at once by the probe, as the driver answers a trial at an ASHA rung), the way
a short trial spends its reports. The first round warms both paths (imports)
and is not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
import time
import uuid
from typing import Any

__all__ = ["measure_overhead", "probe_overhead", "REPORTS"]

log = logging.getLogger("nbtune.dask")

REPORTS = 4  #: reports per probe trial
ROUNDS = 2  #: counted rounds (each: one process trial, one thread trial)


def _probe_train(config: dict[str, Any], trial: Any) -> None:
    """The probe trial: no work, a report per step (each waits for its verdict)."""
    for step in trial.steps():
        trial.report(step, x=0.0)


async def _one(worker: Any, mode: str, fn: bytes, n: int) -> float | None:
    """Seconds from launch to exit of one probe trial run ``mode``'s way (None: it failed)."""
    from nbtune.runtimes.dask.protocol import Exit, Report, Verdict, decode, encode
    from nbtune.runtimes.dask.worker_side.rank_runner import deliver, start_rank

    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    ok: list[bool] = []
    key = f"nbtune-probe-{uuid.uuid4().hex[:8]}"

    def put(topic: str, batch: list[dict[str, Any]]) -> None:
        for m in map(decode, batch):
            if isinstance(m, Report):
                deliver([f"{key}/0"], encode(Verdict(step=m.step)))
            elif isinstance(m, Exit):
                ok.append(bool(m.ok))
                done.set()

    def emit(topic: str, batch: list[dict[str, Any]]) -> None:
        call_soon(loop, put, topic, batch)

    job = {"topic": "nbtune-probe", "run_key": key, "run_id": -1, "trial_id": -1, "rank": 0,
           "world_size": 1, "slot": 0, "config": {}, "start_step": 0.0, "budget": float(n),
           "max_budget": float(n), "fn": fn, "checkpoint_dir": "", "env": {}, "threads": 1,
           "verdicts": [float(i) for i in range(1, n + 1)], "hold": False, "reuse": True,
           "execution": mode, "sys_path": []}
    t0 = time.perf_counter()
    start_rank(worker, job, emit, put)
    try:
        await asyncio.wait_for(done.wait(), 30.0)
    except TimeoutError:
        return None
    return time.perf_counter() - t0 if ok and ok[0] else None


def call_soon(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """``fn(*args)`` on ``loop`` from a probe trial's thread; dropped once the loop is closed.

    The probe runs after an experiment, so a script that ends right after its run
    closes the worker under it: its thread trial's last message then met a closed
    loop and printed a ``RuntimeError`` traceback at the end of the user's output
    (the real trials' path, tornado's ``add_callback``, drops it the same way).
    """
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


async def _idle_process(pool: Any, wait: float = 2.0) -> bool:
    """An idle warm process is there, or comes back within ``wait`` s (the last probe's)."""
    deadline = time.monotonic() + wait
    while pool.idle == 0:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


async def measure_overhead(reports: int = REPORTS, rounds: int = ROUNDS,
                           dask_worker: Any = None) -> dict[str, Any]:
    """Run on one worker (``client.run``): per-report seconds of each path and their difference.

    ``{"overhead": s or None, "process": [s...], "thread": [s...]}`` (trial
    times); None when the worker has no idle warm process (a probe must not
    pay a process start) or a probe failed.
    """
    import cloudpickle

    from nbtune.runtimes.dask.worker_side.pool import get_pool

    fn = cloudpickle.dumps(_probe_train)
    times: dict[str, list[float]] = {"process": [], "thread": []}
    for r in range(rounds + 1):
        for mode in ("process", "thread") if r % 2 else ("thread", "process"):
            if mode == "process" and not await _idle_process(get_pool()):
                return {"overhead": None, **times}
            t = await _one(dask_worker, mode, fn, reports)
            if t is None:
                return {"overhead": None, **times}
            if r:  # round 0 warms both paths
                times[mode].append(t)
    diff = (statistics.median(times["process"]) - statistics.median(times["thread"])) / reports
    return {"overhead": max(diff, 0.0), **times}


def probe_overhead(client: Any, worker: str) -> float | None:
    """The process path's overhead per report on ``worker``, in seconds (None: not measured)."""
    try:
        out = client.run(measure_overhead, workers=[worker])[worker]
    except Exception as exc:  # noqa: BLE001 - unmeasured only means auto keeps processes
        # after an experiment its cluster may be closing: nothing for the user to act on
        log.debug("measuring the trial process overhead failed: %r", exc)
        return None
    log.debug("process overhead per report: %s", out)
    return out.get("overhead")
