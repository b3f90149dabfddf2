"""The README's examples run as written: the first (a real training function on a local Dask
cluster) as a script in a fresh process, the second (the simulator) in this one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks() -> list[str]:
    usage = README.read_text(encoding="utf-8").split("## Usage", 1)[1]
    return re.findall(r"```python\n(.*?)```", usage, re.S)


@pytest.mark.integration
def test_the_first_example_tunes_a_training_function_on_dask(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(blocks()[0])
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert re.search(r"'accuracy': 0\.\d+, 'budget_used': 9\.0\}", p.stdout), p.stdout
    assert "27 trials" in p.stdout and "makespan" in p.stdout, p.stdout


def test_the_simulator_example_runs():
    scope: dict = {}
    exec(compile(blocks()[1], "README.md", "exec"), scope)  # noqa: S102
    exp = scope["exp"]
    assert exp.done and len(exp.engine.trials) == 27 and exp.best is not None
