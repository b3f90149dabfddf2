"""The scheduler places trials into a real pipeline host's bubbles (``runtime=BubbleRuntime``).

One real run (module fixture): a 2-stage 1F1B host in two gloo processes
publishes its measured windows; ``nbtune.tune(..., allocator="bubbles")``
picks the trials and where they go; each runs as a gated guest process beside
its stage. Checked from what the processes measured: every trial the engine
launched ran on a host stage, its results equal the same function run alone,
and no guest computed while its stage computed (timestamps, tolerance 0).
"""

from __future__ import annotations

import math

import pytest

import nbtune
from nbtune.allocators import BubblesAllocator
from nbtune.bubbles import HostSpec, overlap
from nbtune.bubbles.bubble_runtime import BubbleRuntime
from nbtune.bubbles.timeline import subtract
from nbtune.core.space import choice
from nbtune.runtimes.dask.trial_side.trial_api import Trial
from tests.runtimes.test_dask_trial_api import MemoryChannel

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SPEC = HostSpec(iterations=80, warmup=2, width=256, depth=4, batch=64, microbatches=4,
                grace=0.02, timeout=240.0)
SPACE = {"lr": choice([0.01, 0.03, 0.1]), "seed": choice([1, 2, 3, 4])}


def train(config, trial):
    """An ordinary trial: a small MLP on synthetic regression data, reproducible from its config."""
    import torch

    from nbtune.bubbles.guest_trial import gate_layers

    torch.manual_seed(config["seed"])
    model = gate_layers(torch.nn.Sequential(
        torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    gen = torch.Generator().manual_seed(config["seed"] + 1)
    w = torch.randn(32, 1, generator=gen)
    for step in trial.steps():
        for _ in range(20):
            x = torch.randn(16, 32, generator=gen)
            loss = torch.nn.functional.mse_loss(model(x), torch.tanh(x @ w))
            opt.zero_grad()
            loss.backward()
            opt.step()
        trial.report(step=step, loss=loss.item())


def alone(config, budget):
    """The same function, in this process, ungated: its reports in order."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the guest process
    ch = MemoryChannel()
    try:
        train(config, Trial({"trial_id": 0, "config": config, "start_step": 0, "budget": budget,
                             "checkpoint_dir": "."}, ch))
    finally:
        torch.set_num_threads(threads)
    return [(m["step"], m["metrics"]) for m in ch.sent if m["k"] == "report"]


def tune_on(rt: BubbleRuntime, num_trials: int, max_budget: float):
    """``nbtune.tune`` of :func:`train` on ``rt``'s host (bounded); the experiment, the
    runtime and the host's measured run."""
    try:
        exp = nbtune.tune(train, SPACE, algorithm="random", num_trials=num_trials,
                          max_budget=max_budget, metric="loss", allocator="bubbles", runtime=rt,
                          seed=0)
        assert exp.wait(timeout=200), "the experiment did not end"
        run = rt.host_run(timeout=200)
    finally:
        rt.close()
    return exp, rt, run


@pytest.fixture(scope="module")
def tuned():
    # normal scheduling class (nice 19): on a crowded CI box a SCHED_IDLE guest may hardly run
    return tune_on(BubbleRuntime(SPEC, idle_class=False, memory_limit=64e9), 3, 2)


def test_the_scheduler_places_trials_on_the_hosts_stages(tuned):
    exp, rt, run = tuned
    assert isinstance(exp.engine.allocator, BubblesAllocator)
    res = exp.results()
    assert len(res) == 3 and (res["state"] == "completed").all()
    # every launch went to a stage worker, one guest per stage at a time
    alloc = exp.allocations()
    assert set(alloc["gpu_id"]) <= {0, 1} and len(set(alloc["gpu_id"])) == 2
    for _, rows in alloc.groupby("gpu_id"):
        spans = sorted(zip(rows["start"], rows["end"], strict=True))
        assert all(b[0] >= a[1] - 1e-9 for a, b in zip(spans, spans[1:], strict=False))
    # the allocator read windows the host measured (idle share of its stages), never a formula
    t0, first = rt.published[0]
    for s in (0, 1):
        (w,) = first[s]
        assert 0.0 < w.capacity < 1.0 and w.kind == "pipeline"
        assert math.isfinite(w.room_gb) and w.room_gb < 64.0
    assert len(rt.published) > 3  # republished as the host went on


def test_guest_results_equal_running_alone(tuned):
    exp, rt, _ = tuned
    for tid, recs in rt.guests.items():
        cfg = exp.engine.trials[tid].config
        assert len(recs) == 1
        assert recs[0].reports == alone({k: cfg[k] for k in SPACE}, 2)


def test_no_guest_computes_while_its_stage_computes(tuned):
    _, rt, run = tuned
    gated_s = 0.0
    for recs in rt.guests.values():
        for rec in recs:
            ran = subtract([iv for iv in rec.intervals if iv[0] == "run"], run.stopped[rec.stage])
            stage = [iv for it in run.iterations for iv in it[rec.stage]]
            assert overlap(ran, stage) == 0.0
            gated_s += sum(e - s for _, s, e in ran)
    assert gated_s > 0.1  # the guests did run gated, inside the host's bubbles


def test_the_memory_check_keeps_a_trial_off_a_stage_it_does_not_fit():
    from nbtune.allocators.bubble_windows import published_room
    from nbtune.allocators.bubbles import IdleWindow
    from nbtune.allocators.profiling import InMemoryProfileStore, Profile, model_signature
    from nbtune.core.resources import GPU, ClusterSpec, Demand
    from nbtune.core.trial import TrialSpec
    from tests.allocators.fluid_views import View

    # measured peaks (GB) by model signature, as the runtime's profiler keeps them
    profiles = InMemoryProfileStore([
        Profile(model_signature(cfg), demand=Demand(memory_gb=gb))
        for cfg, gb in (({"size": "big"}, 3.0), ({"size": "small"}, 1.0))])

    view = View(ClusterSpec.of([GPU(0, "host", "bubble", 1.0, 8.0),
                                GPU(1, "host", "bubble", 1.0, 8.0)]), trials={}, running={},
                pending=[TrialSpec(1, {"size": "big"}, 1.0), TrialSpec(2, {"size": "small"}, 1.0)])
    view.hints = {"profiles": profiles, "bubbles": {
        0: [IdleWindow(0, 0.0, 10.0, "pipeline", 0.4, room_gb=2.0)],
        1: [IdleWindow(1, 0.0, 10.0, "pipeline", 0.4, room_gb=0.5)]}}
    assert published_room(view) == {0: 2.0, 1: 0.5}
    alloc = BubblesAllocator().allocate(view)
    assert alloc.launch == {2: ((0, 1.0),)}  # the big one fits nowhere; the small one on stage 0
