"""The device layer of bubble squeezing, on the CPU: the MPS share's checks, the
synchronizer's choice, and the stage wrapper that a CUDA host runs through.

``"cpu:0"`` takes the wrapper's path (layers behind CPU boundaries, static
shapes given to ``PipelineStage``) on a CPU, so the code a GPU host runs is
exercised here too, to the bit, against one process's training. The GPU itself
is in ``tests/gpu/test_bubbles_gpu.py``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from nbtune.bubbles import GuestSpec, HostSpec, PipelineHost, overlap, reference_weights
from nbtune.bubbles.colocate import run_alone
from nbtune.bubbles.device import MPS_SHARE_ENV, OnDevice, synchronizer, use_mps_share


def test_the_mps_share_is_checked_and_exported(monkeypatch):
    monkeypatch.setenv(MPS_SHARE_ENV, "")  # restored (to unset) after the test
    monkeypatch.delenv(MPS_SHARE_ENV)
    use_mps_share(None)
    assert MPS_SHARE_ENV not in os.environ
    for bad in (0, 101, -5):
        with pytest.raises(ValueError, match="mps_percentage"):
            use_mps_share(bad)
    use_mps_share(50)
    assert os.environ[MPS_SHARE_ENV] == "50"


def test_the_cpu_needs_no_synchronizer_and_other_devices_are_refused():
    assert synchronizer("cpu") is None and synchronizer("cpu:0") is None
    with pytest.raises(ValueError, match="'cpu' or a CUDA device"):
        synchronizer("meta")


def test_the_wrapper_passes_shapes_and_gradients_through():
    import torch

    part = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    wrapped = OnDevice(part, "cpu:0")
    meta = wrapped(torch.empty(4, 8, device="meta"))
    assert meta.is_meta and meta.shape == (4, 8)
    x = torch.randn(4, 8, requires_grad=True)
    wrapped(x).sum().backward()
    assert x.grad is not None and part[0].weight.grad is not None
    assert sorted(wrapped.state_dict()) == ["part.0.bias", "part.0.weight"]


@pytest.mark.slow
@pytest.mark.integration
def test_a_host_through_the_device_wrapper_trains_as_one_process_with_gated_guests():
    spec = HostSpec(stages=2, microbatches=4, batch=64, width=64, depth=4, iterations=6,
                    warmup=1, device="cpu:0", grace=30.0, timeout=240.0)
    guests = {s: GuestSpec(name=f"g{s}", seed=s, steps=1_000_000, stop_with_host=True,
                           device="cpu:0", idle_class=False) for s in range(2)}
    run = PipelineHost(spec).run(guests)
    ref = reference_weights(spec)
    for s in range(2):
        assert sorted(run.weights[s]) == sorted(ref[s])  # the wrapper's "part." is not in them
        assert all(np.array_equal(ref[s][k], run.weights[s][k]) for k in ref[s])
        res = run.guests[f"g{s}"]
        assert res.mps_share is None and res.peak_rss > 0
        assert overlap(run.guest_ran(s, f"g{s}"), [iv for it in run.iterations for iv in it[s]]) == 0
        if res.step_ends:
            alone = run_alone(guests[s], steps=len(res.step_ends))
            assert all(np.array_equal(v, res.weights[k]) for k, v in alone.weights.items())


def test_cpu_side_work_of_a_gpu_guest_leaves_the_slot_to_the_stage():
    import multiprocessing as mp

    from nbtune.bubbles.gate import Gate, GuestSide, HostSide

    gate = Gate(mp.get_context("spawn"))
    host, side = HostSide(gate, grace=5.0), GuestSide(gate, max_wait=5.0, sync=lambda: None)
    host.start()
    side.start()  # the guest holds the slot, as between two checkpoints
    gate.guest_pid.value = 0  # one process plays both sides: never SIGSTOP it
    # the guest draws a batch; the stage takes the slot at once: nothing to wait for
    with side.off_device(), host.busy("F"):
        pass
    assert host.handoffs[-1] < 1.0 and gate.stops.value == 0
    assert side._held  # and the guest has it back for its next kernels
    side.finish()
    host.end()
    assert [k for k, *_ in side.intervals] == ["run", "run"]
