"""The recorder: an engine subscriber that writes what happens to a :class:`Store`.

It must not slow the engine, so the engine's thread only keeps each batch
(events and commands are immutable) and copies the trials that changed; a
writer thread turns that into rows and commits them in one transaction every
``flush_interval`` seconds (0.5 by default), as soon as ``max_rows`` events
wait, and at once when a trial changes state (a launch, pause, stop,
completion or failure). The finish of the experiment is written synchronously
before the engine's ``handle`` returns. A failed commit (a locked or full
disk) keeps its rows and is retried first; the run goes on meanwhile.

What a crash can lose: only the rows handed over since the last commit, i.e.
at most the last ~0.5 s of reports (fewer when a state change woke the writer).
Everything committed stays; the event log in the store is always a *prefix*
of what the engine handled, batch by batch, which is exactly what
:func:`nbtune.store.resume.resume` needs to replay it.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.exc import IntegrityError

from nbtune.core import events as ev
from nbtune.core.commands import Command, Finish
from nbtune.core.trial import TrialState
from nbtune.engine.engine import Engine
from nbtune.store.serialize import (
    dump_event,
    to_jsonable,
)
from nbtune.store.store import (
    COMMAND_PREFIX,
    EMPTY_BATCH,
    Store,
    WriteBatch,
    command_payload,
)

__all__ = ["Recorder", "RecordingConflict"]

log = logging.getLogger(__name__)

_QUIET = (ev.TrialReported, ev.TrialStarted, ev.UtilizationSampled, ev.TrialSampled,
          ev.SnapshotRequested)


class RecordingConflict(RuntimeError):
    """Two processes recorded the same experiment; the later one stopped writing."""


class Recorder:
    """Persist every event, command, report, trial state and allocation of ``engine``.

    ``background=False`` writes in the engine's thread instead (tests, scripts
    that want every flush to have happened when ``handle`` returns).
    """

    def __init__(self, store: Store, name: str, engine: Engine, *,
                 flush_interval: float = 0.5, max_rows: int = 2000,
                 background: bool = True,
                 checkpoints: Callable[[int], tuple[float, str] | None] | None = None) -> None:
        if flush_interval <= 0 or max_rows < 1:
            raise ValueError("flush_interval must be > 0 and max_rows >= 1")
        self.store, self.name, self.engine = store, name, engine
        #: ``trial_id -> (budget, path)`` of its newest checkpoint (the runtime's), or None
        self.checkpoints = checkpoints
        self._ckpt_seen: dict[int, tuple[float, str]] = {}
        self._configs: dict[int, tuple[dict[str, Any], Any]] = {}
        self.experiment_id = store.experiment_id(name)
        self.flush_interval, self.max_rows = float(flush_interval), int(max_rows)
        seq, batch = store.last_seq(name)
        self._seq, self._batch = seq + 1, batch + 1
        self._pending = WriteBatch()  # trial/allocation snapshots
        self._raw: list[tuple[int, float, tuple[ev.Event, ...], list[Command]]] = []
        self._raw_rows = 0
        self._failed: WriteBatch | None = None  # rows whose commit failed, retried first
        self._lock = threading.Lock()  # guards _pending and _raw
        self._io = threading.Lock()  # serializes swaps+writes so commits keep their order
        self._wake = threading.Event()
        self._closed = False
        self.error: BaseException | None = None
        self.commits = 0
        #: engine batches this recorder has seen (0: the runtime never got going)
        self.batches = 0
        # what to snapshot next: everything at first, since a resumed engine's replayed
        # state may be ahead of the stored snapshots (they lag the event log a little)
        self._dirty: set[int] = set(engine.trials)
        self._live: set[int] = {t for t, tr in engine.trials.items() if not tr.state.is_terminal}
        self._alloc_written = 0
        self._alloc_open: set[int] = set()
        self._known = len(engine.trials)
        self._last_snapshot = self._last_write = time.monotonic()
        self._unsubscribe = engine.subscribe(self._on_handle)
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name=f"nbtune-recorder-{name}",
                                            daemon=True)
            self._thread.start()

    # ----------------------------------------------------- engine's thread
    def _on_handle(self, events: Sequence[ev.Event], cmds: list[Command]) -> None:
        """Keep the batch as it is (events and commands are immutable) and note what changed.

        Turning it into rows happens at flush time, off the engine's thread when
        the writer runs in the background; only trial snapshots (mutable) are taken here.
        """
        if self._closed:  # stays subscribed: unsubscribing here would make the engine's
            return        # loop over its subscribers skip the next one
        eng = self.engine
        touched: set[int] = set()
        urgent = bool(cmds)
        for e in events:
            tid = getattr(e, "trial_id", None)
            if tid is not None:
                touched.add(tid)
                if type(e) is ev.TrialReported:
                    t = eng.trials.get(tid)
                    urgent = urgent or (t is not None and t.state is not TrialState.RUNNING)
                    continue
            if not isinstance(e, _QUIET):
                urgent = True
        for c in cmds:
            tid = getattr(c, "trial_id", None)
            if tid is not None:
                touched.add(tid)
        if len(eng.trials) != self._known:  # admitted trials no event names yet
            touched.update(itertools.islice(eng.trials, self._known, None))
            self._known = len(eng.trials)
        self._dirty |= touched
        finished = any(isinstance(c, Finish) for c in cmds)
        out = WriteBatch()
        now = time.monotonic()
        due = now - self._last_snapshot >= self.flush_interval
        if urgent or finished or due:
            self._snapshot(out, full=finished or due)
            self._last_snapshot = now
        if finished:
            out.experiment["state"] = "done"
        with self._lock:
            self._raw.append((self._batch, float(eng.time), tuple(events), list(cmds)))
            self._raw_rows += len(events) + len(cmds)
            self._pending.extend(out)
            big = self._raw_rows >= self.max_rows
        self._batch += 1
        self.batches += 1
        if finished:
            self._close(unsubscribe=False)
        elif self._thread is None:
            if urgent or big or now - self._last_write >= self.flush_interval:
                self._flush_quietly()
        elif urgent or big:
            self._wake.set()

    def _rows(self, raw: list[tuple[int, float, tuple[ev.Event, ...], list[Command]]]
              ) -> WriteBatch:
        """Event, command, report and utilization rows of the raw batches, numbered in order."""
        eid, out = self.experiment_id, WriteBatch()
        events, metrics, util = out.events, out.metrics, out.utilization
        seq = self._seq
        for batch, now, evs, cmds in raw:
            if not evs:
                events.append({"experiment_id": eid, "seq": seq, "batch": batch, "time": now,
                               "kind": EMPTY_BATCH, "payload": {}})
                seq += 1
            for e in evs:
                kind, payload = dump_event(e)
                events.append({"experiment_id": eid, "seq": seq, "batch": batch,
                               "time": float(e.time), "kind": kind, "payload": payload})
                seq += 1
                if kind == "TrialReported":
                    metrics.append({"experiment_id": eid, "trial_id": payload["trial_id"],
                                    "time": payload["time"], "budget": payload["budget"],
                                    "metrics": payload["metrics"]})
                elif kind == "UtilizationSampled":
                    assert isinstance(e, ev.UtilizationSampled)
                    util.extend(
                        {"experiment_id": eid, "time": float(e.time), "gpu_id": int(g),
                         "util": float(u), "memory_gb": float(e.gpu_memory_gb.get(g, 0.0))}
                        for g, u in e.gpu_util.items())
            for c in cmds:
                kind, payload = command_payload(c)
                events.append({"experiment_id": eid, "seq": seq, "batch": batch, "time": now,
                               "kind": COMMAND_PREFIX + kind, "payload": payload})
                seq += 1
        self._seq = seq
        return out

    def _snapshot(self, out: WriteBatch, *, full: bool) -> None:
        """Copy the state of changed trials and allocation records into ``out``.

        ``full`` also copies every trial not yet terminal, catching changes no event
        named (a paused trial the algorithm retired); terminal trials never change.
        """
        eng, eid = self.engine, self.experiment_id
        ids = self._dirty | self._live if full else self._dirty
        for tid in ids:
            t = eng.trials.get(tid)
            if t is None:
                continue
            gpu_s = t.gpu_seconds_at(eng.time)
            cfg = self._configs.get(tid)
            if cfg is None or cfg[0] is not t.config:  # configs are replaced, never mutated
                cfg = self._configs[tid] = (t.config, to_jsonable(t.config))
            out.trials[tid] = {
                "experiment_id": eid, "trial_id": tid, "config": cfg[1],
                "state": t.state.value, "best": t.best, "last": t.last,
                "budget_used": float(t.budget_used), "target_budget": float(t.target_budget),
                "gpu_seconds": float(gpu_s), "start": t.start_time, "end": t.end_time,
                "failures": int(t.failures), "error": t.error, "group_id": t.group_id,
                "unit": t.unit,
            }
            if self.checkpoints is not None:
                self._checkpoint(out, tid)
            if t.state.is_terminal:
                self._live.discard(tid)
            else:
                self._live.add(tid)
        self._dirty.clear()
        log_ = eng.ledger.log
        closed = [i for i in self._alloc_open if log_[i].end is not None]
        self._alloc_open.difference_update(closed)
        for i in closed + list(range(self._alloc_written, len(log_))):  # ended or new
            r = log_[i]
            out.allocations[i] = {"experiment_id": eid, "idx": i, "trial_id": r.trial_id,
                                  "gpu_id": r.gpu_id, "share": float(r.share),
                                  "start": float(r.start), "end": r.end}
            if r.end is None:
                self._alloc_open.add(i)
        self._alloc_written = len(log_)
        out.experiment["time"] = float(eng.time)

    def _checkpoint(self, out: WriteBatch, tid: int) -> None:
        assert self.checkpoints is not None
        found = self.checkpoints(tid)
        if found is None or self._ckpt_seen.get(tid) == found:
            return
        self._ckpt_seen[tid] = found
        out.checkpoints.append({"experiment_id": self.experiment_id, "trial_id": tid,
                                "budget": float(found[0]), "uri": str(found[1])})
        out.trials[tid]["checkpoint"] = str(found[1])

    # ----------------------------------------------------------- writing
    def flush(self) -> None:
        """Commit everything handed over so far (in the calling thread)."""
        with self._io:
            with self._lock:
                raw, self._raw, self._raw_rows = self._raw, [], 0
                snap, self._pending = self._pending, WriteBatch()
            self._last_write = time.monotonic()
            batch = self._rows(raw)
            batch.extend(snap)
            if self._failed is not None:  # rows that failed to commit before go first
                self._failed.extend(batch)
                batch, self._failed = self._failed, None
            if not batch:
                return
            try:
                self.store.write(self.experiment_id, batch)
                self.commits += 1
            except IntegrityError as exc:
                # another process appended to this experiment (resumed it too) or deleted it:
                # writing on would interleave two histories, so this recorder stops
                self._closed = True
                self._failed = None
                self.error = RecordingConflict(
                    f"stopped recording {self.name!r}: another process wrote or deleted it in "
                    f"{self.store!r} ({exc.orig}); this run goes on unrecorded"
                )
                log.error("%s", self.error)
                raise self.error from exc
            except Exception as exc:  # keep the rows and retry: the run must go on
                self._failed = batch
                if self.error is None:
                    log.warning("nbtune store %r: write failed, will retry: %s", self.store, exc)
                self.error = exc
                raise

    def _flush_quietly(self) -> bool:
        try:
            self.flush()
        except Exception:  # logged by flush; the rows stay buffered for the next try
            return False
        return True

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            if not self._flush_quietly():
                time.sleep(self.flush_interval)

    def close(self) -> None:
        """Snapshot every trial, write what is left and stop recording (idempotent).

        Call it from the engine's thread (or once the engine is idle): it reads trial state.
        """
        self._close(unsubscribe=True)

    def _close(self, *, unsubscribe: bool) -> None:
        if unsubscribe:
            self._unsubscribe()
        if self._closed:
            return
        self._closed = True
        last = WriteBatch()
        self._snapshot(last, full=True)
        with self._lock:
            self._pending.extend(last)
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._flush_quietly()

    def abandon(self) -> None:
        """Stop without writing the buffer: what a killed process leaves behind (for tests)."""
        self._closed = True
        self._unsubscribe()
        with self._lock:
            self._pending, self._raw, self._failed = WriteBatch(), [], None
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def pending_rows(self) -> int:
        """Events and commands handed over but not yet committed."""
        with self._lock:
            return self._raw_rows + (self._failed.rows() if self._failed else 0)

    def __repr__(self) -> str:
        return f"<Recorder {self.name!r} -> {self.store!r}, {self.commits} commits>"
