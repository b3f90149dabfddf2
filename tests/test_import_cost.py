"""``import nbtune`` stays light: no torch unless a trial or the fusion API needs it.

Every Dask worker imports nbtune when it unpickles nbtune's worker plugins, and the
driver imports it first thing: torch pulled in through ``nbtune.fusion``'s package
imports would be most of a worker's start-up.
"""

from __future__ import annotations

import subprocess
import sys


def test_nbtune_and_its_worker_plugins_import_without_torch():
    code = ("import sys, nbtune, nbtune.runtimes.dask.worker_side.plugin, nbtune.engine.engine\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "from nbtune.fusion import FusedSGD, fuse, fused_loss\n"
            "assert 'torch' in sys.modules and FusedSGD.__name__ == 'FusedSGD'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr


def _run(code: str) -> None:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr


def test_worker_side_imports_leave_out_pandas_and_the_experiment():
    # every Dask worker imports the plugin module to unpickle the warm-pool plugin, and the
    # fork server runs its own module: neither needs tune() or the engine, which would
    # cost CPU each at a cluster's start-up
    _run("import sys, nbtune.runtimes.dask.worker_side.plugin, nbtune.runtimes.dask.forkserver_side.forkserver\n"
         "heavy = {'pandas', 'nbtune.api', 'nbtune.experiment', 'nbtune.engine.engine',\n"
         "         'nbtune.runtimes.sim'} & set(sys.modules)\n"
         "assert not heavy, heavy\n")


def test_the_public_names_import_on_first_use():
    # `import nbtune` is light, yet every public name, `from nbtune import ...`,
    # `import *` and dir() work as when they were imported eagerly
    _run("import sys, nbtune\n"
         "assert 'pandas' not in sys.modules and 'nbtune.api' not in sys.modules\n"
         "listed = set(dir(nbtune))\n"
         "assert set(nbtune.__all__) <= listed, set(nbtune.__all__) - listed\n"
         "from nbtune import tune, Experiment, TrialsFailed, SimRuntime, SyntheticWorkload\n"
         "from nbtune.api import tune as api_tune\n"
         "from nbtune.experiment import Experiment as Exp\n"
         "assert tune is api_tune and Experiment is Exp and nbtune.tune is tune\n"
         "ns = {}\n"
         "exec('from nbtune import *', ns)\n"
         "missing = set(nbtune.__all__) - set(ns)\n"
         "assert not missing, missing\n"
         "assert callable(nbtune.resume) and callable(nbtune.load_ipython_extension)\n"
         "try:\n"
         "    nbtune.no_such_name\n"
         "except AttributeError:\n"
         "    pass\n"
         "else:\n"
         "    raise AssertionError('an unknown name resolved')\n"
         "import nbtune.runtimes as r\n"
         "assert r.SimRuntime is SimRuntime and 'SimRuntime' in dir(r)\n")


def test_an_experiment_reaches_the_notebook_ui_without_the_facade_importing_it():
    # the facade plugs the UI in at `import nbtune`; the experiment, imported later and
    # directly, still finds it (the registry is below both)
    _run("import nbtune.experiment as e\n"
         "from nbtune.core.frontend import frontend\n"
         "assert type(frontend()).__name__ == '_NotebookUI'\n"
         "assert e._front() is frontend()\n")


def test_the_trial_side_imports_no_dask_pandas_or_engine():
    # every warm trial process (and the fork server, before it forks them) imports the trial
    # entry point and the Trial API: distributed, dask, pandas or the engine there would
    # cost every process their import on a machine's few cores
    _run("import sys\n"
         "import nbtune.runtimes.dask.trial_side.trial_process\n"
         "import nbtune.runtimes.dask.trial_side.trial_api\n"
         "import nbtune.runtimes.dask.trial_side.fused_child\n"
         "import nbtune.runtimes.dask.protocol\n"
         "heavy = {'distributed', 'dask', 'pandas', 'nbtune.engine.engine', 'nbtune.api',\n"
         "         'nbtune.runtimes.dask.driver_side', 'nbtune.runtimes.dask.worker_side'}\n"
         "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n")
