"""Which experiments the running notebook kernels hold, for the JupyterLab sidebar.

A kernel that runs experiments keeps a small JSON file in Jupyter's runtime
dir (:mod:`nbtune.kernels.writer`); the server extension reads those files
(:mod:`nbtune.kernels.files`) to list, beside its configured store, every
store a live kernel uses and the experiments a kernel keeps in memory only.
Both sides live here, below the experiment's assembly (``build``) that
writes and the server that reads, so the file format is defined once.
"""

from __future__ import annotations

from nbtune.kernels.files import kernel_file, read_kernel_files, runtime_dir
from nbtune.kernels.writer import KernelFile, in_kernel, track, untrack

__all__ = ["KernelFile", "in_kernel", "kernel_file", "read_kernel_files", "runtime_dir",
           "track", "untrack"]
