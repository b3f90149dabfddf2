"""A script that starts a local cluster at module level gets a clear error at once, not a hang."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TRAIN = '''
import nbtune
from nbtune import uniform


def train(config, trial):
    for step in range(1, 3):
        if trial.report(step, loss=config["x"] / step):
            return
'''


def run(tmp_path: Path, body: str, timeout: float) -> subprocess.CompletedProcess:
    script = tmp_path / "tune_script.py"
    script.write_text(textwrap.dedent(TRAIN) + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)


def test_module_level_tune_is_refused_before_any_cluster_starts(tmp_path):
    out = run(tmp_path, '''
        exp = nbtune.tune(train, {"x": uniform(0, 1)}, metric="loss", max_budget=2,
                          algorithm="random", num_trials=2)
        exp.wait()
    ''', timeout=60)
    assert out.returncode != 0
    assert "MainGuardError" in out.stderr and "tune_script.py, line" in out.stderr
    assert 'if __name__ == "__main__":' in out.stderr


@pytest.mark.parametrize("guard", ['if __name__ == "__main__":', "if '__main__' == __name__:"])
def test_a_guarded_call_is_not_flagged(tmp_path, guard):
    out = run(tmp_path, f'''
        from nbtune.runtimes.dask.driver_side.main_guard import unguarded_main_call

        def probe():
            return unguarded_main_call()

        print("unguarded:", probe())
        {guard}
            print("guarded:", probe())
    ''', timeout=60)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(": ", 1) for line in out.stdout.splitlines())
    assert lines["guarded"] == "None"
    assert lines["unguarded"].endswith(", 16)") and "tune_script.py" in lines["unguarded"]
