"""The overhead probe's messages after its worker closed (a script ending right after a run)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from nbtune.runtimes.dask.worker_side.overhead import call_soon


def test_a_message_after_the_loop_closed_is_dropped_not_raised() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    with pytest.raises(RuntimeError):  # what a probe thread met before: a traceback at exit
        loop.call_soon_threadsafe(print)
    call_soon(loop, print)  # dropped


def test_a_message_on_a_running_loop_arrives() -> None:
    loop = asyncio.new_event_loop()
    got: list[str] = []
    t = threading.Thread(target=loop.run_forever)
    t.start()
    try:
        call_soon(loop, got.append, "exit")
        call_soon(loop, loop.stop)
        t.join(60)
    finally:
        loop.close()
    assert got == ["exit"]
