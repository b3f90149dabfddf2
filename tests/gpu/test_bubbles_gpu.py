"""Bubble squeezing on a real GPU: a 1F1B host whose stages compute on CUDA, guests gated
into the idle SMs, each process under MPS at its stage's share where a daemon can run.

Skipped without CUDA (CI, this project's CPU machines). What it checks is what the
CPU tests check, with the GPU's asynchrony in the way: a guest's running
intervals never overlap its stage's compute (the gate waits for the guest's
kernels, not only its Python), a gated guest ends bit-identical to a solo run
on the same device, the host trains what one process would (to float
tolerance, CPU reference), and the guest process ran under the share it was given.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device here", allow_module_level=True)

from nbtune.bubbles import GuestSpec, HostSpec, PipelineHost, overlap, reference_weights  # noqa: E402
from nbtune.bubbles.colocate import run_alone  # noqa: E402

pytestmark = pytest.mark.integration
MPS = "nvidia-cuda-mps-control"


@pytest.fixture
def mps(monkeypatch):
    """An MPS daemon of this test's own, or None without the tool."""
    from nbtune.runtimes.dask.gpu import mps_available, start_mps_daemon, stop_mps_daemon

    if not mps_available():
        yield None
        return
    for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"):
        monkeypatch.delenv(k, raising=False)
        monkeypatch.setenv(k, "")  # restored after the test: start_mps_daemon exports them
    env = start_mps_daemon()
    try:
        yield 50
    finally:
        stop_mps_daemon(env)


def test_guests_fill_a_cuda_pipelines_bubbles_without_touching_its_compute(mps):
    spec = HostSpec(stages=2, microbatches=4, batch=1024, width=1024, depth=8, iterations=8,
                    warmup=2, grace=0.05, timeout=240.0, ab_block=1, device="cuda",
                    mps_percentage=mps)
    guests = {s: GuestSpec(name=f"g{s}", seed=s, width=1024, depth=4, batch=256,
                           steps=10_000_000, stop_with_host=True, device="cuda",
                           mps_percentage=mps) for s in range(spec.stages)}
    run = PipelineHost(spec).run(guests)

    ref = reference_weights(spec)  # one CPU process
    for s in range(spec.stages):
        assert sorted(run.weights[s]) == sorted(ref[s])
        for k in ref[s]:
            np.testing.assert_allclose(run.weights[s][k], ref[s][k], rtol=1e-3, atol=1e-5)
        assert run.peak_rss[s] > 0  # the stage's device memory: what a guest must fit beside
    for s, g in guests.items():
        res = run.guests[g.name]
        stage = [iv for it in run.iterations for iv in it[s]]
        assert res.step_ends, f"guest {g.name} made no progress in the bubbles"
        assert overlap(run.guest_ran(s, g.name), stage) == 0.0
        assert res.mps_share == (None if mps is None else str(mps))
        alone = run_alone(g, steps=len(res.step_ends), timeout=120.0)
        assert alone.mps_share == res.mps_share
        for k, v in alone.weights.items():
            assert np.array_equal(v, res.weights[k]), k  # resumed exactly where it paused
    assert run.stops == [0] * spec.stages or all(run.stopped)  # a SIGSTOP is logged


def test_an_mps_share_is_refused_once_cuda_is_up():
    # in a process of its own: this one must not hold a CUDA context beside later MPS daemons
    code = ("import torch; torch.zeros(1, device='cuda')\n"
            "from nbtune.bubbles.device import use_mps_share; use_mps_share(50)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "before its first CUDA call" in res.stderr


def test_a_guest_on_cuda_trains_as_on_the_cpu():
    g = GuestSpec(seed=3, width=256, depth=3, batch=64, steps=20)
    cpu, gpu = run_alone(g), run_alone(replace(g, device="cuda"))
    for k, v in cpu.weights.items():
        np.testing.assert_allclose(gpu.weights[k], v, rtol=1e-4, atol=1e-5)


def gpu_train(config, trial):
    """An ordinary trial on the GPU, checkpoints at its layers when it runs as a guest."""
    import torch as t

    from nbtune.bubbles.guest_trial import gate_layers

    t.manual_seed(config["seed"])
    model = gate_layers(t.nn.Sequential(t.nn.Linear(512, 512), t.nn.Tanh(),
                                        t.nn.Linear(512, 1)).cuda())
    opt = t.optim.SGD(model.parameters(), lr=config["lr"])
    for step in trial.steps():
        for _ in range(20):
            x = t.randn(256, 512, device="cuda")
            loss = (model(x) - x[:, :1].tanh()).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        trial.report(step=step, loss=loss.item())


def test_tune_places_gpu_trials_into_a_cuda_hosts_bubbles(mps):
    import nbtune
    from nbtune.bubbles.bubble_runtime import BubbleRuntime
    from nbtune.bubbles.timeline import subtract
    from nbtune.core.space import choice

    spec = HostSpec(stages=2, microbatches=4, batch=1024, width=1024, depth=8, iterations=150,
                    warmup=2, grace=0.05, timeout=240.0, device="cuda", mps_percentage=mps)
    rt = BubbleRuntime(spec, idle_class=False, memory_limit=64e9)
    try:
        exp = nbtune.tune(gpu_train, {"lr": choice([0.01, 0.1]), "seed": choice([1, 2])},
                          algorithm="random", num_trials=3, max_budget=2, metric="loss",
                          allocator="bubbles", runtime=rt, seed=0)
        assert exp.wait(timeout=200)
        run = rt.host_run(timeout=200)
    finally:
        rt.close()
    assert (exp.results()["state"] == "completed").all()
    gated = 0.0
    for recs in rt.guests.values():
        for rec in recs:
            ran = subtract([iv for iv in rec.intervals if iv[0] == "run"], run.stopped[rec.stage])
            assert overlap(ran, [iv for it in run.iterations for iv in it[rec.stage]]) == 0.0
            gated += sum(e - s for _, s, e in ran)
    assert gated > 0.0
