"""GPU-only paths: NVML queries, the dask-cuda cluster, the NVIDIA MPS control daemon.

Everything here is behind one switch, :func:`nvml_gpu_count` > 0 (or
``DaskRuntime(gpus=True)``): on a CPU-only machine none of it runs, and the
runtime treats every Dask worker as one GPU. The code is real, not a stub;
it just cannot be exercised without an NVIDIA driver.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["nvml_gpu_count", "nvml_devices", "sample_gpus", "make_cuda_cluster", "MPSDaemonPlugin",
           "mps_available", "visible_devices", "worker_devices"]

MPS_CONTROL = "nvidia-cuda-mps-control"


def _nvml() -> Any | None:
    """pynvml, initialised, or None when there is no NVIDIA driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver, no device: all mean "no GPU here"
        return None
    return pynvml


def nvml_gpu_count() -> int:
    nv = _nvml()
    if nv is None:
        return 0
    try:
        return int(nv.nvmlDeviceGetCount())
    except Exception:
        return 0


def visible_devices() -> list[int]:
    """Physical GPU indices this process may use (CUDA_VISIBLE_DEVICES, else all of them)."""
    n = nvml_gpu_count()
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return list(range(n))
    nv = _nvml()
    out = []
    for part in cvd.split(","):
        part = part.strip()
        if part.isdigit() and int(part) < n:
            out.append(int(part))
        elif part.startswith(("GPU-", "MIG-")) and nv is not None:  # a UUID, as dask-cuda allows
            try:
                out.append(int(nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetHandleByUUID(part))))
            except Exception:
                continue
    return out


def worker_devices(resources: dict[str, float]) -> list[int]:
    """The physical GPUs a worker owns.

    Its ``GPU`` resource says how many (the first ones of its visible
    devices); a dask-cuda worker, with a rotated ``CUDA_VISIBLE_DEVICES`` and
    no resource, owns the first; a plain worker on a GPU node owns them all.
    """
    devices = visible_devices()
    if "GPU" in resources:
        return devices[: max(int(resources["GPU"]), 0)]
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        return devices[:1]
    return devices


def nvml_devices(indices: list[int]) -> list[dict[str, Any]]:
    """Index, UUID, name and memory of the given physical GPUs.

    Trials are pinned by UUID: with MPS, indices are remapped by the server
    (NVIDIA's MPS guide recommends UUIDs in ``CUDA_VISIBLE_DEVICES``).
    """
    nv = _nvml()
    if nv is None:
        return []
    out = []
    for i in indices:
        h = nv.nvmlDeviceGetHandleByIndex(i)
        name = nv.nvmlDeviceGetName(h)
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        uuid = nv.nvmlDeviceGetUUID(h)
        out.append({"index": i, "name": name.decode() if isinstance(name, bytes) else str(name),
                    "uuid": uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    "memory_gb": mem.total / 1e9})
    return out


def sample_gpus(indices: list[int]) -> list[tuple[float, float]]:
    """``(util in [0,1], memory used in GB)`` per physical GPU, from NVML."""
    nv = _nvml()
    if nv is None:
        return [(0.0, 0.0) for _ in indices]
    out = []
    for i in indices:
        h = nv.nvmlDeviceGetHandleByIndex(i)
        util = nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0
        mem = nv.nvmlDeviceGetMemoryInfo(h).used / 1e9
        out.append((min(max(util, 0.0), 1.0), mem))
    return out


def make_cuda_cluster(host: str, dashboard_address: str | None, **kwargs: Any) -> Any:
    """A dask-cuda ``LocalCUDACluster``: one worker per GPU, each with ``CUDA_VISIBLE_DEVICES``."""
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as exc:
        raise ImportError(
            "NVML reports GPUs but dask-cuda is not installed: pip install 'nbtune[cuda]' "
            "(or pass DaskRuntime(gpus=False) to treat workers as CPU stand-ins)"
        ) from exc
    # each worker's CUDA_VISIBLE_DEVICES starts with its own GPU: worker_devices() takes that one
    return LocalCUDACluster(host=host, dashboard_address=dashboard_address, **kwargs)


def mps_available() -> bool:
    return shutil.which(MPS_CONTROL) is not None


class MPSDaemonPlugin(WorkerPlugin):
    """Start one MPS control daemon per GPU worker; stop it when the worker leaves.

    Packed trials (share < 1) then run as MPS clients limited by
    ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``. Each worker gets its own pipe and
    log directory, exported to the trial processes it starts.
    """

    name = "nbtune-mps"
    idempotent = True

    def setup(self, worker: Any) -> None:
        if not mps_available():
            return
        devices = nvml_devices(worker_devices(dict(worker.state.total_resources)))
        if not devices:
            return
        # the daemon serves only this worker's GPUs, named by UUID as the trials name them
        self.env = start_mps_daemon(",".join(d["uuid"] for d in devices))

    def teardown(self, worker: Any) -> None:
        env = getattr(self, "env", None)
        if env:
            stop_mps_daemon(env)


def start_mps_daemon(visible: str | None = None) -> dict[str, str]:
    """Start an MPS control daemon with pipe and log directories of its own (for the GPUs
    ``visible`` names, or every one) and export them into ``os.environ``, so the processes
    started from here on are its clients; returns those variables for :func:`stop_mps_daemon`."""
    base = tempfile.mkdtemp(prefix="nbtune-mps-")
    env = {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(base, "pipe"),
           "CUDA_MPS_LOG_DIRECTORY": os.path.join(base, "log")}
    for d in env.values():
        os.makedirs(d, exist_ok=True)
    os.environ.update(env)
    daemon_env = dict(os.environ) if visible is None else {**os.environ,
                                                          "CUDA_VISIBLE_DEVICES": visible}
    subprocess.run([MPS_CONTROL, "-d"], env=daemon_env, check=True, timeout=30)
    return env


def stop_mps_daemon(env: dict[str, str]) -> None:
    """Tell the daemon at ``env``'s pipe directory to quit (it waits for its clients to end)."""
    try:
        subprocess.run([MPS_CONTROL], input=b"quit\n", env={**os.environ, **env}, timeout=30,
                       check=False)
    except subprocess.TimeoutExpired:
        import logging

        logging.getLogger("nbtune.dask").warning("the MPS daemon did not quit within 30 s")
