"""A kernel interrupt during ``exp.wait()`` interrupts the wait, not the experiment.

Jupyter interrupts a kernel with SIGINT to its whole process group, so the
local cluster's worker processes and the trial processes they start would get
it too. The driver runs in a subprocess here (its own session), so pytest is
not interrupted; the test signals that session's process group as Jupyter does.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent("""
    import json, os, signal, sys, threading, time, uuid
    # as a kernel does: a KeyboardInterrupt on SIGINT, even when started with SIGINT ignored
    # (a background job of a non-interactive shell: `make test &` in a script)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import nbtune
    from nbtune import uniform
    from nbtune.runtimes.dask import DaskRuntime

    GATE = sys.argv[1]  # a directory: trials say there that they run, and wait for "go"

    def train(config, trial):
        open(os.path.join(GATE, "running-" + uuid.uuid4().hex), "w").close()
        deadline = time.monotonic() + 600  # never outlive the test by much
        while not os.path.exists(os.path.join(GATE, "go")) and time.monotonic() < deadline:
            time.sleep(0.01)
        for step in trial.steps():
            time.sleep(0.3)
            trial.report(step, loss=config["x"] / step)

    def main():
        rt = DaskRuntime(n_workers=2, preload=(), warm_processes=1, sample_interval=0.25)
        exp = nbtune.tune(train, {"x": uniform(0.0, 1.0)}, algorithm="random", metric="loss",
                          max_budget=8, num_trials=4, runtime=rt)
        interrupted = False
        t0 = time.monotonic()
        try:
            print("WAITING", flush=True)
            exp.wait(120)
        except KeyboardInterrupt:
            interrupted = True
        waited = time.monotonic() - t0
        handler = repr(signal.getsignal(signal.SIGINT))  # said when the wait was not interrupted
        exp.wait(120)
        print(json.dumps({"interrupted": interrupted, "done": exp.done, "waited": waited,
                          "handler": handler, "threads": [t.name for t in threading.enumerate()],
                          "states": sorted(exp.results()["state"])}), flush=True)
        rt.close()

    if __name__ == "__main__":
        main()
""")


def test_sigint_to_the_process_group_interrupts_only_the_wait(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, str(script), str(gate)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        line = proc.stdout.readline() if ready else ""  # never block past the test's limit
        assert line.strip() == "WAITING", proc.stderr.read() if proc.stderr else ""
        # a trial runs in its process on each of the two workers, held there until "go":
        # the run cannot have ended before the interrupt
        deadline = time.monotonic() + 120
        while len(list(gate.glob("running-*"))) < 2:
            assert time.monotonic() < deadline and proc.poll() is None, "no trials ran"
            time.sleep(0.05)
        # and the driver's main thread blocks in the wait (a signal handled while it still ran
        # Python code could land in a gc callback, where an exception is only printed)
        blocked = 0
        while blocked < 3:
            assert time.monotonic() < deadline and proc.poll() is None, "the wait never blocked"
            blocked = blocked + 1 if main_thread_blocked(proc.pid) else 0
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)  # what Jupyter's interrupt does
        (gate / "go").touch()
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["interrupted"], ("the wait was not interrupted", result, err[-3000:])
    assert result["done"] and result["states"] == ["completed"] * 4, (result, err[-3000:])
    assert "KeyboardInterrupt" not in err.replace("except KeyboardInterrupt", ""), err[-3000:]


def main_thread_blocked(pid: int) -> bool:
    """Whether process ``pid``'s main thread sleeps in a futex (a lock or event wait); True
    where the kernel does not say (no ``/proc/<pid>/wchan``)."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        return True
    return wchan in ("", "0") or "futex" in wchan


def _sigint_ignored() -> bool:
    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_workers_of_a_cluster_nbtune_starts_ignore_sigint_also_after_a_restart():
    from nbtune.runtimes.dask.driver_side.cluster import close_cluster, connect

    # the driver's own handler, whatever pytest inherited (SIGINT is ignored in a background
    # job of a non-interactive shell); the inherited one is put back at the end
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _workers_ignore_sigint(connect, close_cluster)
    finally:
        signal.signal(signal.SIGINT, inherited)


def _workers_ignore_sigint(connect, close_cluster) -> None:
    client, cluster, _ = connect(None, gpus=False, n_workers=1, threads_per_worker=1,
                                 host="127.0.0.1", dashboard_address=None, memory_limit="1GiB")
    try:
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the driver's is back
        assert all(client.run(_sigint_ignored).values())
        client.restart_workers(list(client.scheduler_info()["workers"]))  # a fresh process
        client.wait_for_workers(1, timeout=60)
        assert all(client.run(_sigint_ignored).values())
    finally:
        client.close()
        close_cluster(cluster)  # as the runtime does (a loaded CI machine timed out here)
