"""The trial side stays light: a trial process imports it before the user's code.

Every warm trial process (and the fork server, before it forks them) imports the trial
entry point and the ``Trial`` API; ``distributed``, ``dask``, pandas or the engine there
would cost every process their import on a machine's few cores.
"""

from __future__ import annotations

import subprocess
import sys


def test_the_trial_side_imports_no_dask_pandas_or_engine():
    code = ("import sys\n"
            "import nbtune.runtimes.dask.trial_side.trial_process\n"
            "import nbtune.runtimes.dask.trial_side.trial_api\n"
            "import nbtune.runtimes.dask.trial_side.fused_child\n"
            "import nbtune.runtimes.dask.protocol\n"
            "heavy = {'distributed', 'dask', 'pandas', 'nbtune.engine.engine', 'nbtune.api',\n"
            "         'nbtune.runtimes.dask.driver_side', 'nbtune.runtimes.dask.worker_side'}\n"
            "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
