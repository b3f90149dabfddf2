"""Notebook 04 (fusion) executes top to bottom and shows what it claims."""

from __future__ import annotations

import re

import pytest

from tests.notebooks.run import all_outputs, execute


@pytest.mark.slow
def test_notebook_04_executes():
    nb = execute("04-fusion.ipynb")
    text = "".join(o.get("text", "") for o in all_outputs(nb))
    assert "speedup" in text
    diff = float(re.search(r"max \|fused - separate\| over all parameters: (\S+)", text)[1])
    assert diff <= 1e-5  # SGD: fused == separate to float32 rounding
    assert "members left: 4" in text
    # a fused run through nbtune.tune: several units, members stopped one by one
    units = re.search(r"fused units: (\d+), members per unit: \[([\d, ]+)\]", text)
    assert units and int(units[1]) >= 2 and max(map(int, units[2].split(","))) > 1
    assert "'completed'" in text and "'stopped'" in text  # ASHA stopped some members only
