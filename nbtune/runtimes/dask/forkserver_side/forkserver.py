"""One process per machine that imports torch once and forks the warm trial processes.

A warm process that imported torch (and ``torch._dynamo``) itself would spend
seconds of CPU on it; on a machine with few cores the workers' processes would
import side by side, behind the cluster's own start-up, and the next ones
compete with the first trials. A local CPU cluster nbtune starts gets a *fork server*:
started by the driver *before* the cluster (its import overlaps the workers'
start-up), it imports the preloads once and forks a trial process per request
in a few milliseconds. The workers' pools (:class:`.pool.WarmPool`) ask it
for processes over a Unix socket, passing the pipe end the process talks on.

What a trial process sees is kept as with a spawned one: its own session, the
requesting worker's environment (``os.environ``), fresh random seeds, and it
exits when that *worker* dies (it watches the worker's pid, not its parent).
The fork server exits with the process that started it. GPU clusters do not use
it: their processes must be born with the MPS daemon's environment.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import queue
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from nbtune.runtimes.dask.protocol import Fork, Forked, Import, Message, Reaped, decode, encode
from nbtune.runtimes.dask.trial_env import nanny_env, trial_env, worker_env

__all__ = ["ForkServer", "fork_client", "send_imports", "supported", "ForkedProcess",
           "start_early", "take_early", "DEFAULT_PRELOAD"]

#: what a DaskRuntime's warm processes import unless told otherwise
DEFAULT_PRELOAD: tuple[str, ...] = ("torch",)

CONNECT_TIMEOUT = 30.0  # seconds a worker retries connecting to a fork server still starting
_MSG = 1 << 20  # bytes: the largest request or reply (an environment fits)


class ForkServer:
    """The driver's handle on a fork server process: started now, importing ``preload``."""

    def __init__(self, preload: tuple[str, ...], env: dict[str, str] | None = None) -> None:
        self.preload = tuple(preload)
        self._dir = tempfile.mkdtemp(prefix="nbtune-fork-")
        self.address = os.path.join(self._dir, "sock")
        child_env = dict(os.environ if env is None else env)
        root = str(Path(__file__).resolve().parents[3])  # the directory holding `nbtune`
        child_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (root, child_env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nbtune.runtimes.dask.forkserver_side.forkserver", self.address,
             ",".join(preload), str(os.getpid())],
            env=child_env, start_new_session=True,  # a kernel interrupt is not for it
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        shutil.rmtree(self._dir, ignore_errors=True)


#: started before the runtime that will take it exists, with the nanny environment it assumed
_EARLY: list[tuple[ForkServer, dict[str, str]]] = []
_EARLY_LOCK = threading.Lock()


def start_early(preload: tuple[str, ...]) -> None:
    """Start a fork server now, for the local CPU cluster about to be made.

    ``tune()`` calls it (:func:`.shared.shared_runtime`) before importing ``distributed``
    and the runtime, so the torch import, a cold start-up's critical path, begins that
    much sooner. :func:`.worker_setup.local_cpu_start` takes it; one not taken (the experiment
    failed to build) waits for the next ``tune()`` and is closed at exit.

    Its environment takes the nanny's settings from ``distributed``'s defaults
    without importing ``dask`` (:func:`.trial_env.nanny_env`); a Dask config that
    changes them is seen by :func:`take_early`, which then starts a fresh one."""
    if not supported():
        return
    with _EARLY_LOCK:
        if _EARLY:
            return
        assumed = nanny_env(read_config=False)
        _EARLY.append((ForkServer(tuple(preload), worker_env(assumed)), assumed))
    atexit.register(_close_early)  # idempotent; a kernel starts a cold cluster rarely


def take_early(preload: tuple[str, ...]) -> ForkServer | None:
    """The fork server :func:`start_early` started, if it imports ``preload``, still runs and
    was born with the nanny environment the Dask config now asks for (OpenMP's thread
    count is read once, when torch loads)."""
    with _EARLY_LOCK:
        forks, assumed = _EARLY.pop() if _EARLY else (None, None)
    if forks is None:
        return None
    if (forks.preload != tuple(preload) or forks.proc.poll() is not None
            or assumed != nanny_env()):
        forks.close()
        return None
    return forks


def _close_early() -> None:
    with _EARLY_LOCK:
        while _EARLY:
            _EARLY.pop()[0].close()


def supported() -> bool:
    """Linux only: it needs ``fork`` and Unix sequenced-packet sockets (macOS has neither
    safely); elsewhere the workers start their processes themselves."""
    return sys.platform.startswith("linux") and hasattr(socket, "SOCK_SEQPACKET")


# ----------------------------------------------------------------- worker side
class _Client:
    """A worker's connection to a fork server: requests forks, learns how they exited."""

    def __init__(self, address: str) -> None:
        deadline = time.monotonic() + CONNECT_TIMEOUT
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                sock.connect(address)
                break
            except (FileNotFoundError, ConnectionRefusedError):  # not listening yet?
                sock.close()
                # its directory goes when it is closed: then it will never listen
                if time.monotonic() > deadline or not os.path.isdir(os.path.dirname(address)):
                    raise
                time.sleep(0.05)
        self.sock, self.address = sock, address
        self.lock = threading.Lock()  # one sender at a time; replies are matched by id
        self.replies: dict[int, queue.Queue[int | None]] = {}
        self.ids = itertools.count()
        self.codes: dict[int, int] = {}
        self.closed = False
        threading.Thread(target=self._read, name="nbtune-fork-client", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(_MSG)
            except OSError:
                data = b""
            if not data:  # the server is gone: spawns fail and the pool starts its processes itself
                self.closed = True
                self.sock.close()
                for q in list(self.replies.values()):
                    q.put(None)
                return
            msg = _loads(data)
            if isinstance(msg, Forked):
                with contextlib.suppress(KeyError):
                    self.replies.pop(int(msg.id)).put(int(msg.pid))
            elif isinstance(msg, Reaped):
                self.codes[int(msg.pid)] = int(msg.rc)

    def spawn(self, fd: int, imports: list[str], timeout: float) -> ForkedProcess:
        """A new trial process talking on ``fd`` (waits while the server still imports)."""
        rid, reply = next(self.ids), queue.Queue[int | None]()
        req = Fork(id=rid, env=trial_env(os.environ), worker=os.getpid(), imports=imports)
        self.replies[rid] = reply
        with self.lock:
            if self.closed:
                raise ConnectionError(f"the fork server at {self.address} is gone")
            socket.send_fds(self.sock, [_dumps(req)], [fd])
        try:
            pid = reply.get(timeout=timeout)
        except queue.Empty:
            pid = None
        finally:
            self.replies.pop(rid, None)
        if pid is None:
            raise ConnectionError(f"the fork server at {self.address} is gone")
        return ForkedProcess(pid, self)

    def send_imports(self, modules: list[str]) -> None:
        """The server imports ``modules`` too: processes forked later are born with them.

        Never waits for the server (called on the worker's event loop).
        """
        with self.lock, contextlib.suppress(OSError):
            self.sock.send(_dumps(Import(modules=modules)))


_CLIENTS: dict[str, _Client] = {}
_CLIENTS_LOCK = threading.Lock()  # held while connecting
_PENDING: dict[str, list[str]] = {}  # imports asked for while the connection is being made
_PENDING_LOCK = threading.Lock()  # never held while waiting


def fork_client(address: str) -> _Client:
    """This worker's connection to the fork server at ``address`` (made on first use)."""
    c = _CLIENTS.get(address)
    if c is not None and not c.closed:
        return c
    with _CLIENTS_LOCK:  # one connection per server
        c = _CLIENTS.get(address)
        if c is None or c.closed:
            c = _Client(address)
            with _PENDING_LOCK:
                _CLIENTS[address] = c
                pending = _PENDING.pop(address, [])
            if pending:
                c.send_imports(pending)
        return c


def send_imports(address: str, modules: list[str]) -> None:
    """Have the server at ``address`` import ``modules`` (processes forked later are born with
    them), now or as soon as this worker is connected; never waits (the worker's loop)."""
    with _PENDING_LOCK:
        c = _CLIENTS.get(address)
        if c is None or c.closed:
            _PENDING.setdefault(address, []).extend(modules)
            return
    c.send_imports(modules)


class ForkedProcess:
    """What :class:`subprocess.Popen` offers the pool, for a process the fork server made."""

    def __init__(self, pid: int, client: _Client) -> None:
        self.pid, self._client = pid, client
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            rc = self._client.codes.pop(self.pid, None)
            if rc is None and not _running(self.pid):
                deadline = time.monotonic() + 1.0  # exited: the server reaps it within 0.1 s
                while rc is None and time.monotonic() < deadline and not self._client.closed:
                    time.sleep(0.01)
                    rc = self._client.codes.pop(self.pid, None)
                rc = 1 if rc is None else rc  # its server died first: the code is lost
            self.returncode = rc
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# ----------------------------------------------------------------- server side
def _child(fd: int, req: Fork, closing: list[socket.socket], fds: list[int]) -> None:
    """In the forked process: become a trial process as if spawned by the worker; never returns."""
    try:
        for s in closing:
            s.close()
        for f in fds:  # other processes' pipe ends, received with this one
            os.close(f)
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(req.env)
        if "numpy" in sys.modules:  # spawned processes each drew their own seed
            sys.modules["numpy"].random.seed()
        from nbtune.runtimes.dask.trial_side import trial_process as trial

        trial.serve(fd, [], list(req.imports), watch=int(req.worker))
    finally:
        os._exit(1)


def serve(address: str, preload: list[str], parent: int | None = None) -> None:
    """The fork server's loop: listen first (workers queue up), import, then fork on request.

    It ends when ``parent`` (the driver that started it; default: its parent now) is no
    longer its parent: given by the driver, a server orphaned while still starting ends too.
    """
    from nbtune.runtimes.dask.trial_side.trial_process import _import

    parent = os.getppid() if parent is None else parent
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen(64)
    _import(preload, preload=True)
    conns: list[socket.socket] = []
    owner: dict[int, socket.socket] = {}  # forked pid -> the worker that asked for it
    while os.getppid() == parent:
        ready, _, _ = select.select([listener, *conns], [], [], 0.1)
        for pid, rc in _reaped():
            with contextlib.suppress(OSError, KeyError):
                owner.pop(pid).send(_dumps(Reaped(pid=pid, rc=rc)))
        if listener in ready:
            conns.append(listener.accept()[0])
        batch = [m for s in ready if s is not listener for m in _drain(s, conns)]
        # imports first: the first forks are asked for as the workers start, the
        # experiment's modules a little later, both while torch is still importing here;
        # forked after them, processes are born with them instead of each importing them
        batch.sort(key=lambda m: not isinstance(m[1], Import))
        for i, (s, req, fd) in enumerate(batch):
            if isinstance(req, Import):
                _import(list(req.modules))
                continue
            if fd is None or not isinstance(req, Fork):
                continue
            if s not in conns:  # its worker left meanwhile
                os.close(fd)
                continue
            _import(list(req.imports))  # the pool's modules: born with them
            pid = os.fork()
            if pid == 0:
                rest = [f for _, _, f in batch[i + 1:] if f is not None]
                _child(fd, req, [listener, *conns], rest)
            os.close(fd)
            owner[pid] = s
            with contextlib.suppress(OSError):
                s.send(_dumps(Forked(id=req.id, pid=pid)))
    os._exit(0)  # the driver is gone; trial processes end with their own workers


def _drain(s: socket.socket, conns: list[socket.socket],
           ) -> list[tuple[socket.socket, Message, int | None]]:
    """Every request waiting on ``s`` now, with the pipe end it carries (a closed ``s`` leaves
    ``conns``)."""
    out: list[tuple[socket.socket, Message, int | None]] = []
    while True:
        s.setblocking(False)  # socket.recv_fds ignores its flags before Python 3.12
        try:
            data, fds, _, _ = socket.recv_fds(s, _MSG, 1)
        except BlockingIOError:
            return out
        except OSError:
            data, fds = b"", []
        finally:
            if s.fileno() >= 0:
                s.setblocking(True)
        if not data:
            conns.remove(s)
            s.close()
            return out
        out.append((s, _loads(data), fds[0] if fds else None))


def _dumps(msg: Message) -> bytes:
    """One datagram on the fork server's socket: the message's wire form as JSON."""
    return json.dumps(encode(msg)).encode()


def _loads(data: bytes) -> Message:
    return decode(json.loads(data))


def _reaped() -> list[tuple[int, int]]:
    out = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return out
        if pid == 0:
            return out
        out.append((pid, os.waitstatus_to_exitcode(status)))


def main(argv: list[str]) -> None:
    """Serve; a server that fails removes its directory, so workers stop waiting for it."""
    try:
        serve(argv[1], [m for m in argv[2].split(",") if m],
              int(argv[3]) if len(argv) > 3 else None)
    except BaseException:
        shutil.rmtree(os.path.dirname(argv[1]), ignore_errors=True)
        raise


if __name__ == "__main__":
    main(sys.argv)
