"""The trial process: ``python -m nbtune.runtimes.dask.trial_side.trial_process <fd> <preload>``, or forked.

Started ahead of time by a worker's warm pool (so torch is already imported
when a trial lands), it waits on a pipe for exactly one job, runs the user's
training function with a :class:`~nbtune.runtimes.dask.trial_side.trial_api.Trial`, sends
an :class:`~nbtune.runtimes.dask.protocol.Exit`. A process that ended cleanly (no error,
no stray threads) is handed back to the pool and serves the next trial without
re-importing. On GPUs it keeps its CUDA context, which was made for one GPU
and one MPS thread percentage: it says which (``Exit.cuda``, see
:func:`cuda_key`), and the pool gives it only trials with the same ones.
On a local CPU cluster it is forked by a :mod:`.forkserver` instead of started.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from nbtune.runtimes.dask.protocol import (
    Control,
    Exit,
    Import,
    Job,
    Ready,
    Started,
    StopRequest,
    TrialMessage,
    Verdict,
    decode,
    encode,
)

__all__ = ["cuda_key", "main"]

#: the environment that fixes a CUDA context: the GPU and the MPS thread percentage
_CUDA_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")


def cuda_key(env: Any) -> str:
    """What a CUDA context made under ``env`` is bound to (read once, at CUDA's first use)."""
    return "|".join(str(env.get(k, "")) for k in _CUDA_ENV)


def refusal(made: str | None, env: Any) -> str | None:
    """Why a process whose CUDA context is for ``made`` must not run a trial whose process
    environment is ``env`` (None: it may). The pool matches keys (``WarmPool.take``), so a
    refusal is nbtune's bug; run anyway, the trial would use another GPU or share."""
    if made is None or made == cuda_key(env):
        return None
    return (f"this trial process's CUDA context is for {made!r}, not {cuda_key(env)!r} "
            "(nbtune bug: please report it)")


def _cuda_made() -> str | None:
    """This process's CUDA context's :func:`cuda_key`, or None while it has none. Call it
    while the trial's environment is in place: the key is the environment CUDA read.

    The trial's cached GPU blocks are released here, so an idle process holds
    only its context, not the memory of the trial it ran.
    """
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        torch.cuda.empty_cache()
    except Exception:  # a broken CUDA state: not a process to hand a trial again
        return "broken"
    return cuda_key(os.environ)


class PipeChannel:
    """Trial <-> relay over the inherited pipe; a closed pipe means the worker is gone."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()

    def send(self, msg: TrialMessage | Ready) -> None:
        raw = encode(msg)
        raw.setdefault("t", time.time())
        try:
            with self.lock:
                self.conn.send(raw)
        except (BrokenPipeError, EOFError, OSError):
            os._exit(3)

    def wait_control(self, timeout: float) -> list[Control]:
        """Control messages, waiting up to ``timeout`` s for the first (a held trial)."""
        try:
            if not self.conn.poll(timeout):
                return []
        except (BrokenPipeError, EOFError, OSError):
            os._exit(3)
        return self.poll_control()

    def poll_control(self) -> list[Control]:
        out = []
        try:
            with self.lock:
                while self.conn.poll(0):
                    msg = decode(self.conn.recv())
                    if isinstance(msg, Control):
                        out.append(msg)
        except (BrokenPipeError, EOFError, OSError):
            os._exit(3)
        return out


def _watch_parent(worker: int | None = None) -> None:
    """Exit if the worker dies: an orphaned trial must not keep a GPU (or a CPU) busy.

    ``worker``: its pid, for a process forked by a fork server (:mod:`.forkserver`),
    whose parent is that server, not the worker.
    """
    parent = os.getppid()

    def gone() -> bool:
        if worker is None:
            return os.getppid() != parent
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False

    def loop() -> None:
        while True:
            time.sleep(0.5)
            if gone():
                os._exit(3)

    threading.Thread(target=loop, name="nbtune-parent-watch", daemon=True).start()


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    return name == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def _takes_trial(fn: Any) -> bool:
    """``train(config, trial)`` (nbtune, Optuna-like) or ``train(config)`` (Ray Tune)."""
    import inspect

    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): the documented form
        return True
    return True


_ALL_CORES: set[int] | None = None


def _pin(cores: str) -> None:
    """Run on the slot's cores (a CPU stand-in for a GPU), or on all again when none are given.

    A reused process may serve a slot with other cores next; its children
    (data loaders) inherit the set.
    """
    global _ALL_CORES
    if not hasattr(os, "sched_setaffinity"):
        return
    if _ALL_CORES is None:
        _ALL_CORES = set(os.sched_getaffinity(0))
    want = {int(c) for c in cores.split(",") if c} or _ALL_CORES
    with contextlib.suppress(OSError):  # a core taken offline: run where the OS lets us
        os.sched_setaffinity(0, want)


def run_job(job: dict[str, Any], channel: PipeChannel) -> Exit:
    """Run one training function in this trial process; return the exit message (never raises)."""
    import cloudpickle

    for p in job.get("sys_path", ()):
        if p not in sys.path:
            sys.path.append(p)
    os.environ.update({k: str(v) for k, v in job.get("env", {}).items()})
    _pin(os.environ.get("NBTUNE_CPU_CORES", ""))
    threads = job.get("threads")
    if threads and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))
    return call_trainable(job, channel, lambda: cloudpickle.loads(job["fn"]), in_thread=False)


def call_trainable(job: dict[str, Any], channel: Any, load: Any, *,
                   in_thread: bool) -> Exit:
    """Call the training function ``load()`` returns with a Trial on ``channel``; return the
    exit message (never raises). Shared by trial processes and thread mode (:mod:`.threads`):
    the user's error, whatever it is, becomes the trial's error, never the caller's."""
    from nbtune.runtimes.dask.trial_side import ddp
    from nbtune.runtimes.dask.trial_side.trial_api import Trial, TrialInterrupted, running

    trial = Trial(job, channel)
    error: str | None = None
    oom: bool | None = None
    grouped = False
    try:
        fn = load()
        if trial.world_size > 1:
            ddp.init_group(job)
            grouped = True
        channel.send(Started(pid=os.getpid()))
        with running(trial, in_thread=in_thread):
            if job.get("members"):  # a fused unit: one call for all its member trials
                from nbtune.runtimes.dask.trial_side.fused_child import run_fused

                run_fused(fn, job, channel)
            elif _takes_trial(fn):
                fn(trial.config, trial)
            else:  # Ray-style train(config) reporting through nbtune.report(...)
                fn(trial.config)
    except TrialInterrupted:
        pass
    except BaseException as exc:  # the user's error, whatever it is, becomes TrialFailed
        if not (trial.told_to_stop and type(exc).__name__ == "TrialPruned"):  # optuna.TrialPruned
            error, oom = traceback.format_exc(), _is_oom(exc)
    finally:
        if grouped:
            with contextlib.suppress(Exception):
                ddp.destroy_group()
    return Exit(ok=error is None, error=error, oom=oom, step=trial.step,
                reason=trial.stop_reason)


#: modules a preloaded package imports lazily on first use, warmed with it: torch's
#: ``Optimizer.__init__`` imports ``torch._dynamo`` (seconds of CPU), which the first
#: trial in every warm process would otherwise pay inside its first epoch
_LAZY_COMPANIONS: dict[str, tuple[str, ...]] = {"torch": ("torch._dynamo",)}

#: imported with any preload, so that trial processes are born with them: ``import nbtune``
#: imports pandas lazily, but scikit-learn and most data loading import it; without it
#: here, each process's first trial would import it inside its first epoch
WITH_PRELOAD: tuple[str, ...] = ("pandas",)


def _import(modules: list[str], preload: bool = False) -> None:
    """Import what trials will need; a module that fails here fails (or not) in the trial.

    ``preload``: ``modules`` is a pool's preload, which brings :data:`WITH_PRELOAD` along.
    """
    if preload and modules:
        modules = [*modules, *WITH_PRELOAD]
    for mod in modules:
        for name in (mod, *_LAZY_COMPANIONS.get(mod, ())):
            with contextlib.suppress(Exception):
                __import__(name)


def main(argv: list[str]) -> None:
    fd = int(argv[1])
    preload = [m for m in (argv[2].split(",") if len(argv) > 2 else []) if m]
    imports = [m for m in (argv[3].split(",") if len(argv) > 3 else []) if m]
    serve(fd, preload, imports)


def serve(fd: int, preload: list[str], imports: list[str], watch: int | None = None) -> None:
    """Import, say ready on pipe ``fd``, then run the jobs that come; exits the process."""
    _watch_parent(watch)
    conn = Connection(fd)
    _import(preload, preload=True)
    channel = PipeChannel(conn)
    channel.send(Ready())  # imports done: WarmPool.wait_ready counts this process warm
    _import(imports)  # the trainables' modules (WarmPool.add_imports): a job may queue behind
    made: str | None = None  # the key of this process's CUDA context, once it has one
    while True:
        try:
            msg = decode(conn.recv())
        except (EOFError, OSError):
            os._exit(0)
        if isinstance(msg, Import):  # an experiment's trainable: its modules, ahead of its jobs
            _import(list(msg.modules))
            continue
        if isinstance(msg, StopRequest | Verdict):
            continue  # addressed to the previous trial, which had already returned
        if not isinstance(msg, Job):
            os._exit(0)
        job = msg.spec
        saved_env = dict(os.environ)
        why = (None if made is None  # no CUDA context yet: any trial may use this process
               else refusal(made, {**os.environ, **job.get("env", {})}))
        if why is not None:
            channel.send(Exit(ok=False, oom=False, reusable=False, error=why))
            os._exit(0)
        out = run_job(job, channel)
        out.cuda = made = _cuda_made() or made  # read before the environment is restored
        # serve the next trial (no re-import), unless it failed or left threads behind
        out.reusable = (bool(job.get("reuse")) and out.ok and out.cuda != "broken"
                        and threading.active_count() <= 2)
        channel.send(out)
        sys.stdout.flush()
        sys.stderr.flush()
        if not out.reusable:
            conn.close()
            os._exit(0)  # user threads (data loaders) must not keep the process alive
        os.environ.clear()
        os.environ.update(saved_env)


if __name__ == "__main__":
    main(sys.argv)
