"""The GPU-only paths on a real GPU: dask-cuda workers, NVML sampling, MPS, fusion on CUDA.

Skipped where NVML sees no GPU (CI, this project's CPU machines): these paths
are real code behind ``nvml_gpu_count() > 0`` that only a GPU can exercise.
Run them on a GPU machine with ``pytest tests/gpu`` (``dask-cuda`` installed,
the ``cuda`` extra). What each trial process saw — its environment, its
device, whether the MPS server lists it as a client — is written to a file
by the training function itself and checked here, so the test reads what
the trial really got, not what the runtime meant to give it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

from nbtune.core.space import uniform

pytestmark = pytest.mark.integration
distributed = pytest.importorskip("distributed")
torch = pytest.importorskip("torch")

from nbtune.runtimes.dask import gpu  # noqa: E402

if gpu.nvml_gpu_count() == 0 or not torch.cuda.is_available():
    pytest.skip("no NVIDIA GPU here (NVML and torch see none)", allow_module_level=True)
pytest.importorskip("dask_cuda")
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SPACE = {"lr": uniform(0.01, 0.1)}


def mps_clients(env: dict[str, str]) -> set[int]:
    """PIDs the MPS control daemon at ``env``'s pipe directory lists as clients of its servers."""
    def ask(cmd: str) -> str:
        return subprocess.run([gpu.MPS_CONTROL], input=cmd + "\n", env=env, text=True,
                              capture_output=True, timeout=10).stdout

    out: set[int] = set()
    for server in ask("get_server_list").split():
        out.update(int(p) for p in ask(f"get_client_list {server}").split() if p.isdigit())
    return out


def gpu_train(outdir: str, steps: int = 3, size: int = 512, step_s: float = 0.5):
    """A training function that trains on the GPU and writes down what its process saw.

    Each step trains for ``step_s`` seconds, long enough for the 2 Hz samplers."""

    def train(config, trial):
        import torch as t

        x = t.randn(size, size, device="cuda")
        w = t.randn(size, size, device="cuda", requires_grad=True)
        opt = t.optim.SGD([w], lr=config["lr"])
        for step in range(1, steps + 1):
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < step_s:
                opt.zero_grad()
                loss = ((x @ w).tanh() - 0.5).pow(2).mean()
                loss.backward()
                opt.step()
            t.cuda.synchronize()
            env = {k: v for k, v in os.environ.items()
                   if k.startswith(("CUDA_", "NBTUNE_TRIAL"))}
            seen = {"pid": os.getpid(), "step": step, "env": env,
                    "device": t.cuda.get_device_name(), "count": t.cuda.device_count(),
                    "mps_client": (os.getpid() in mps_clients(dict(os.environ))
                                   if "CUDA_MPS_PIPE_DIRECTORY" in os.environ else None),
                    "seconds": time.perf_counter() - t0}
            name = f"{env.get('NBTUNE_TRIAL_ID', 'x')}-{os.getpid()}-{step}.json"
            Path(outdir, name).write_text(json.dumps(seen))
            if trial.report(step, loss=float(loss)):
                return

    return train


def records(outdir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(outdir.glob("*.json"))]


def check_reuse(seen: list[dict], at_least: int = 1) -> None:
    """A process served several trials, each with the GPU and MPS share its context has."""
    by_pid: dict[int, set] = {}
    keys: dict[int, set] = {}
    for r in seen:
        by_pid.setdefault(r["pid"], set()).add(r["env"]["NBTUNE_TRIAL_ID"])
        keys.setdefault(r["pid"], set()).add((r["env"]["CUDA_VISIBLE_DEVICES"],
                                              r["env"].get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")))
    assert sum(len(t) > 1 for t in by_pid.values()) >= at_least, by_pid
    assert all(len(k) == 1 for k in keys.values()), keys


@pytest.fixture(scope="module")
def cuda_client():
    """A dask-cuda LocalCUDACluster, one worker per GPU, as ``DaskRuntime()`` makes one."""
    from tests.dask_cluster import client_of

    with client_of(gpu.make_cuda_cluster("127.0.0.1", None)) as client:
        yield client


def test_default_tune_runs_trials_on_the_gpu_and_samples_nvml(tmp_path):
    """``nbtune.tune(fn, space, ...)`` with defaults: GPU workers, each trial pinned by UUID."""
    import nbtune

    out = tmp_path / "seen"
    out.mkdir()
    exp = nbtune.tune(gpu_train(str(out), steps=4, step_s=1.0), SPACE, metric="loss",
                      max_budget=4,
                      num_trials=4, seed=0, store=tmp_path / "nb.db")
    assert exp.wait(240)
    trials = exp.engine.trials.values()
    assert [t.error for t in trials if t.state.value == "error"] == []
    assert exp.runtime.gpus is True
    uuids = {d["uuid"] for d in gpu.nvml_devices(gpu.visible_devices())}
    seen = records(out)
    assert {r["env"]["NBTUNE_TRIAL_ID"] for r in seen} == {str(t) for t in exp.engine.trials}
    for r in seen:  # each process sees exactly its one GPU, named by UUID
        assert r["env"]["CUDA_VISIBLE_DEVICES"] in uuids and r["count"] == 1
    util = exp.utilization()
    assert len(util) > 0 and util["util"].max() > 0.0, "NVML never saw the GPU busy"
    measured = exp.runtime.profiler.measured().values()
    assert any(p.demand.memory_gb > 0 for p in measured), "no GPU memory measured"


def test_mps_trial_processes_join_mps_from_the_first_warm_process(cuda_client, tmp_path):
    """Every trial process — the pool's first ones too — is an MPS client.

    The MPS plugin runs before the warm pool fills (``worker_plugins``), and a
    packed trial gets ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` for its share.
    """
    import nbtune
    from nbtune.runtimes.dask import DaskRuntime

    if not gpu.mps_available():
        pytest.skip(f"{gpu.MPS_CONTROL} is not on PATH")
    out = tmp_path / "seen"
    out.mkdir()
    rt = DaskRuntime(cuda_client, mps=True, warm_processes=2, sample_interval=0.5)
    try:
        exp = nbtune.tune(gpu_train(str(out)), SPACE, algorithm="random", metric="loss",
                          max_budget=3, num_trials=4, allocator="waterfill", runtime=rt, seed=1,
                          store=tmp_path / "nb.db")
        assert exp.wait(240)
    finally:
        rt.close()
    assert rt.mps is True
    trials = exp.engine.trials.values()
    assert [t.error for t in trials if t.state.value == "error"] == []
    seen = records(out)
    assert len({r["pid"] for r in seen}) >= 2
    for r in seen:
        assert os.path.isdir(r["env"]["CUDA_MPS_PIPE_DIRECTORY"]) or r["mps_client"]
        assert r["mps_client"] is True, f"process {r['pid']} is not an MPS client: {r}"
    shares = exp.allocations()
    packed = shares[shares["share"] < 1.0]
    assert len(packed) > 0, "waterfill packed nothing on one GPU"
    pct = {r["env"].get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") for r in seen}
    assert pct - {None}, "no packed process got an MPS thread percentage"
    check_reuse(seen, at_least=0)  # reused or not, a process keeps its context's share


def test_a_reused_gpu_process_serves_only_trials_of_its_gpu_and_share(cuda_client, tmp_path):
    """``reuse_processes=True`` on GPUs: the next trial takes the last one's process and its
    CUDA context, never a context made for another GPU or MPS share (and no trial is refused:
    a key read after the environment is restored would refuse every reused process)."""
    import nbtune
    from nbtune.runtimes.dask import DaskRuntime

    out = tmp_path / "seen"
    out.mkdir()
    rt = DaskRuntime(cuda_client, reuse_processes=True, warm_processes=1, sample_interval=0.5)
    try:
        exp = nbtune.tune(gpu_train(str(out), steps=2, step_s=0.2), SPACE, algorithm="random",
                          metric="loss", max_budget=2, num_trials=6, allocator="fifo",
                          runtime=rt, seed=2, store=tmp_path / "nb.db")
        assert exp.wait(240)
    finally:
        rt.close()
    trials = exp.engine.trials.values()
    assert [t.error for t in trials if t.state.value == "error"] == []
    check_reuse(records(out), at_least=1)


@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_fused_training_on_cuda_matches_a_float64_reference(kind):
    """Fusion on a GPU (float32, TF32 off), SGD with momentum and Adam: every fused parameter
    within 1e-5 of a float64 reference of the same training, or no further from it than
    the member trained alone in float32."""
    from tests.fusion.reference import ATOL, assert_fused_matches_reference, errors

    errs = errors("cuda", kind)
    assert min(e.moved for e in errs) > 100 * ATOL
    assert_fused_matches_reference(errs)


def test_fmax_follows_cuda_memory():
    """The memory profile of fused Adam steps on CUDA sets F_max."""
    from torch import nn
    from torch.nn import functional as F

    from nbtune.fusion import fuse, fused_loss, fused_optimizer
    from nbtune.fusion.memory import fusion_limit, profile_memory

    dev = torch.device("cuda")
    torch.manual_seed(0)

    def make() -> nn.Module:
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(dev)

    def build_step(members: int):
        big = fuse([make() for _ in range(members)])
        opt = fused_optimizer(torch.optim.Adam, big, lr=[1e-3] * members)
        x = torch.randn(256, 64, device=dev)
        y = torch.randint(0, 10, (256,), device=dev)

        def step() -> None:
            total, _ = fused_loss(F.cross_entropy, big(x), y)
            opt.zero_grad()
            total.backward()
            opt.step()

        return step

    prof = profile_memory(build_step, device="cuda")
    assert prof.per_member > 0
    limit = int(prof.predict(16))  # room for exactly 16 members, by the profile's own line
    assert 12 <= fusion_limit(prof, limit, margin=0.1) <= 16
    assert fusion_limit(prof, int(prof.predict(16) * 100)) > 16
