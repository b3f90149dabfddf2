"""benchmarks/gpu_session.sh, the one call a lent GPU machine gets, dry-run on CPU stand-ins.

The dry run is the script itself with ``GPU_SESSION_DRY_RUN=1``: every step on the CPU with
tiny sizes (``gpu_packing --cpu``, ``--device cpu``; the GPU tests skip themselves, but
pytest runs), nothing appended to ``benchmarks/results.jsonl``. A bug in any step, in the
plan or in the JSON the call brings back fails here, not on the device's minutes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"
ORDER = ["gpu_packing", "fusion_cuda", "bubbles", "gpu_tests"]
NAMES = {"gpu_packing": "gpu_packing", "fusion_cuda": "fusion_throughput",
         "bubbles": "bubble_squeeze", "gpu_tests": "gpu_tests"}

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils' timeout")


def _load(name: str):
    """benchmarks/<name>.py as a module (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}",
                                                  ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def session_env(out: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "NBTUNE_", "GPU_SESSION_", "GPU_TESTS", "T_", "PACK_",
                                 "BUB_", "STEPS"))}
    return {**env, "OUT": str(out), "PYTHON": sys.executable, **extra}


def read(path: Path):
    return json.loads(path.read_text())


@pytest.mark.integration
def test_the_dry_run_runs_every_step_in_order_and_brings_back_each_steps_json(tmp_path):
    results = ROOT / "benchmarks" / "results.jsonl"
    before = results.read_bytes() if results.exists() else None
    p = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True,
                       timeout=4 * 540 + 120, env=session_env(tmp_path, GPU_SESSION_DRY_RUN="1"))
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    session = read(tmp_path / "session.json")
    assert session["dry_run"] is True
    assert [s["name"] for s in session["plan"]] == ORDER
    assert sum(s["budget_s"] for s in session["plan"]) <= session["session_budget_s"] == 540
    assert [s["name"] for s in session["steps"]] == ORDER
    for s in session["steps"]:
        log = (tmp_path / f"{s['name']}.log").read_text()
        # pytest's 5: no tests collected, every module in tests/gpu skips itself without a GPU
        assert s["rc"] in ((0, 5) if s["name"] == "gpu_tests" else (0,)), (s, log[-3000:])
        # CPU stand-ins under 4 budgets each: their time on a loaded machine is no GPU's
        assert s["limit_s"] == 4 * s["budget_s"], s
        assert s["json"] and not s["timed_out"] and 0 < s["seconds"] < s["limit_s"], s
        got = read(tmp_path / f"{s['name']}.json")
        assert got["name"] == NAMES[s["name"]] and "figures" in got and "met" in got, got
        assert got["met"] == s["met"]

    pack = read(tmp_path / "gpu_packing.json")["figures"]
    assert pack["device"] == "cpu stand-ins" and pack["reuse_processes"] is True
    assert pack["rounds_done"] == pack["rounds"] == 1 and pack["trials"] == 2
    assert pack["errors"] == 0 and not pack["interrupted"]
    nb = ["fifo", "auto", "waterfill"]
    assert set(pack["median_s"]) == {*nb, "optuna"}
    for s in nb:  # read from the store's event log: a launch, then the trial's first report
        assert 0 <= pack["launch_s"][s] <= pack["first_report_s"][s], pack
    # the runtime's own utilization: None only for a run shorter than its first sample
    util = [pack["runtime_util"][s] for s in nb]
    assert any(u is not None for u in util) and all(u is None or 0 <= u <= 1 for u in util), pack
    assert pack["gpu_util"] == {s: None for s in [*nb, "optuna"]}  # no NVML here
    assert pack["cold_launch_s"] > 0 and 0 < pack["cold_first_report_s"] < pack["first_auto_run_s"]
    fusion = read(tmp_path / "fusion_cuda.json")["figures"]
    assert fusion["device"] == "cpu" and fusion["members"] == 2
    tests = read(tmp_path / "gpu_tests.json")["figures"]
    assert sorted(m["nodeid"] for m in tests["skipped_modules"]) == [
        "tests/gpu/test_bubbles_gpu.py", "tests/gpu/test_gpu_paths.py"]
    assert tests["exitstatus"] == 5 and tests["collected"] == 0
    after = results.read_bytes() if results.exists() else None
    assert after == before  # NBTUNE_BENCH_NO_RECORD: a dry run records nothing


def test_budgets_over_the_session_start_nothing(tmp_path):
    p = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env=session_env(tmp_path, GPU_SESSION_DRY_RUN="1",
                                                   T_PACK="400"))
    assert p.returncode == 2 and "more than the session's 540 s" in p.stdout, p.stdout
    assert not (tmp_path / "session.json").exists()
    p = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env=session_env(tmp_path, GPU_SESSION_DRY_RUN="1",
                                                   STEPS="gpu_packing nope"))
    assert p.returncode == 2 and "unknown step 'nope'" in p.stdout, p.stdout


def test_check_fails_a_step_that_failed_or_left_no_json(tmp_path, capsys):
    gs = _load("_gpu_session")
    gs.plan(tmp_path, "0", "540", ["fusion_cuda=40", "bubbles=190"])
    (tmp_path / "fusion_cuda.log").write_text(
        'noise\n{"name": "fusion_throughput", "figures": {"x": 1}, "met": true}\n'
        '{"name": "other"}\nstderr after the line\n')
    gs.step(tmp_path, "fusion_cuda", "40", "0", "10.0", "22.5")
    assert read(tmp_path / "fusion_cuda.json") == {
        "name": "fusion_throughput", "figures": {"x": 1}, "met": True}
    assert gs.check(tmp_path) == 1  # bubbles never ran
    (tmp_path / "bubbles.log").write_text("Traceback ...\nKeyboardInterrupt\n")
    gs.step(tmp_path, "bubbles", "190", "124", "22.5", "212.5")
    steps = read(tmp_path / "session.json")["steps"]
    assert steps[0] == {"name": "fusion_cuda", "budget_s": 40, "limit_s": 40, "rc": 0,
                        "seconds": 12.5,
                        "timed_out": False, "json": True, "met": True}
    assert steps[1]["timed_out"] and not steps[1]["json"] and steps[1]["met"] is None
    assert not (tmp_path / "bubbles.json").exists()
    assert gs.check(tmp_path) == 1
    (tmp_path / "bubbles.log").write_text(
        '{"name": "bubble_squeeze", "figures": {}, "met": false}\n')
    session = read(tmp_path / "session.json")
    session["steps"].pop()
    (tmp_path / "session.json").write_text(json.dumps(session))
    gs.step(tmp_path, "bubbles", "190", "0", "22.5", "100.0")
    assert gs.check(tmp_path) == 0
    assert "bubbles      ok" in capsys.readouterr().out


def test_the_pytest_summary_says_what_ran_first_and_what_an_interrupt_left_not_run(tmp_path):
    (tmp_path / "test_some.py").write_text(
        "import os, signal, pytest\n"
        "def test_a(): pass\n"
        "def test_b(): assert 1 == 2\n"
        "def test_c(): pytest.skip('no GPU')\n"
        "def test_d(): os.kill(os.getpid(), signal.SIGINT)\n"
        "def test_e(): pass\n")
    out = tmp_path / "summary.json"
    env = {**session_env(tmp_path), "NBTUNE_PYTEST_JSON": str(out),
           "NBTUNE_PYTEST_FIRST": "test_e nothing_matches test_b",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # SIGINT as an interactive shell leaves it: a background job of a script (`make test &`)
    # starts with it ignored, and Python then raises no KeyboardInterrupt for test_d's signal
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-p", "benchmarks._pytest_json", "test_some.py"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, env=env,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.returncode == 2, p.stdout  # interrupted
    got = read(out)
    f = got["figures"]
    a, b, c, d, e = (f"test_some.py::test_{x}" for x in "abcde")
    assert got["name"] == "gpu_tests" and f["collected"] == 5
    # e and b first (NBTUNE_PYTEST_FIRST), then the others in order; d interrupts the run
    assert (f["passed"], f["failed"], f["skipped"]) == ([e, a], [b], [c])
    assert f["not_run"] == [d] and f["exitstatus"] == 2 and got["met"] is False
    assert list(f["seconds"]) == [e, b, a, c, d]  # the order they started in
