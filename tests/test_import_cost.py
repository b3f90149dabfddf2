"""``import nbtune`` stays light: no torch unless a trial or the fusion API needs it.

Every Dask worker imports nbtune when it unpickles nbtune's worker plugins, and the
driver imports it first thing: torch pulled in through ``nbtune.fusion``'s package
imports cost 10 of a worker's 16 s start-up on the loaded 2-core machine (issue 15).
"""

from __future__ import annotations

import subprocess
import sys


def test_nbtune_and_its_worker_plugins_import_without_torch():
    code = ("import sys, nbtune, nbtune.runtimes.dask.plugin, nbtune.engine.engine\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "from nbtune.fusion import FusedSGD, fuse, fused_loss\n"
            "assert 'torch' in sys.modules and FusedSGD.__name__ == 'FusedSGD'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
