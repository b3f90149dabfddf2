"""How fast the Dask runtime's channels are, on a real 2-worker LocalCluster.

Part 1 compares the ways a worker can stream small messages to the driver
(the choice behind :mod:`nbtune.runtimes.dask.worker_side.rank_runner`): ``log_event`` +
``subscribe_topic`` (push), ``distributed.Queue`` (scheduler-held, polled),
``distributed.Variable`` (set/get), and the control path ``client.run``.
(``distributed.Pub``/``Sub`` no longer exist in this Dask release.)

Part 2 measures the runtime end to end: a trial's ``report`` reaching
``engine.handle``, a stop request reaching the trial's ``should_stop``, and
the launch overhead (Launch command -> TrialStarted) for a trial landing on a
process that is warm vs one started cold, and for torch trials with and
without the warm pool (the pool is what keeps torch's import off the launch).

Goals: report latency p50 <= 50 ms, stop latency p50 <= 250 ms, warm launch
<= 1.0 s. Prints its figures and ends with one JSON line.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import cloudpickle
from _results import record  # benchmarks/_results.py: notes the load at start

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

N = 200


# what this benchmark measures: summary.py marks its figure stale when these change
MEASURES = ("nbtune/runtimes/dask/", "nbtune/engine/engine.py")
WALL_CLOCK = True  # a figure in its goal is time on this machine: needs a quiet machine


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(int(q * len(xs)), len(xs) - 1)] * 1000.0


def _emit_events(topic: str, n: int) -> None:
    from distributed import get_worker

    w = get_worker()
    for _ in range(n):
        w.log_event(topic, [{"t": time.time()}])
        time.sleep(0.005)


def _emit_queue(name: str, n: int) -> None:
    from distributed import Queue, get_client

    q = Queue(name, client=get_client())
    for _ in range(n):
        q.put(time.time())
        time.sleep(0.005)


def bench_channels(client) -> dict[str, float]:
    from distributed import Queue, Variable

    from nbtune.runtimes.dask.protocol import Verdict, encode
    from nbtune.runtimes.dask.worker_side.rank_runner import deliver

    out: dict[str, float] = {}
    lat: list[float] = []
    client.subscribe_topic("bench", lambda e: lat.append(time.time() - e[1][0]["t"]))
    client.submit(_emit_events, "bench", N, pure=False).result()
    deadline = time.time() + 10
    while len(lat) < N and time.time() < deadline:
        time.sleep(0.01)
    out["log_event_p50_ms"], out["log_event_p95_ms"] = pct(lat, 0.5), pct(lat, 0.95)

    q = Queue("bench-q", client=client)
    fut = client.submit(_emit_queue, "bench-q", N, pure=False)
    qlat = []
    for _ in range(N):
        sent = q.get(timeout=30)
        qlat.append(time.time() - sent)
    fut.result()
    out["queue_p50_ms"], out["queue_p95_ms"] = pct(qlat, 0.5), pct(qlat, 0.95)

    v = Variable("bench-v", client=client)
    rt = []
    for _ in range(50):
        t0 = time.time()
        v.set(t0)
        v.get()
        rt.append(time.time() - t0)
    out["variable_set_get_p50_ms"] = pct(rt, 0.5)

    w = sorted(client.scheduler_info()["workers"])[0]
    rt = []
    for _ in range(50):
        t0 = time.time()
        client.run(deliver, ["nobody/0"], encode(Verdict(step=0.0)), workers=[w])
        rt.append(time.time() - t0)
    out["client_run_p50_ms"] = pct(rt, 0.5)
    return out


def train_fast(config, trial):
    flag = Path(trial.checkpoint_dir) / f"stopped-{trial.trial_id}"
    for step in trial.steps():
        time.sleep(0.01)
        if trial.report(step=step, loss=1.0, sent=time.time()):
            flag.write_text(repr(time.time()))
            return


def bench_runtime(client) -> dict[str, float]:
    from nbtune.core import events as ev
    from nbtune.core.commands import Launch
    from nbtune.core.space import uniform
    from nbtune.engine.engine import Engine
    from nbtune.runtimes.dask import DaskRuntime
    from tests.engine.toy import OneShot

    out: dict[str, float] = {}
    report_lat: list[float] = []
    launches: dict[int, float] = {}
    starts: dict[int, float] = {}

    def observe(events, cmds):
        now = time.time()
        for e in events:
            if isinstance(e, ev.TrialReported) and "sent" in e.metrics:
                report_lat.append(now - e.metrics["sent"])
            if isinstance(e, ev.TrialStarted):
                starts.setdefault(e.trial_id, now)
        for c in cmds:
            if isinstance(c, Launch):
                launches.setdefault(c.trial_id, now)

    def one(budget: float, stop_after: float | None, n: int = 1, warm_up: float = 0.0,
            **options):
        algo = OneShot({"x": uniform(0, 1)}, metric="loss", max_budget=budget, num_trials=n,
                       seed=0)
        eng = Engine(algo)
        eng.subscribe(observe)
        ckdir = Path(tempfile.mkdtemp(prefix="nbtune-bench-"))
        options = {"preload": (), "warm_processes": 1, **options}
        rt = DaskRuntime(client, checkpoint_dir=ckdir, **options)
        rt.connect()
        time.sleep(warm_up)  # let the pool's processes finish importing
        launches.clear()
        starts.clear()
        rt.start(eng, train_fast)
        stop_t = None
        if stop_after is not None:
            while not eng.trials or eng.trials[0].budget_used < stop_after:
                time.sleep(0.005)
            stop_t = time.time()
            rt.submit(ev.TrialStopRequested(rt.clock.now(), 0))
        assert rt.wait(120)
        rt.close()
        overhead = [starts[t] - launches[t] for t in starts if t in launches]
        stop_lat = None
        if stop_t is not None:
            stop_lat = float((ckdir / "stopped-0").read_text()) - stop_t
        return overhead, stop_lat

    cold, _ = one(3, None)  # first trials on a fresh pool
    warm, _ = one(3, None)  # the same processes, handed back after the first run
    report_lat.clear()
    _, _ = one(N, None)
    out["report_p50_ms"], out["report_p95_ms"] = pct(report_lat, 0.5), pct(report_lat, 0.95)
    stops = [one(10_000, 20)[1] for _ in range(5)]
    out["stop_p50_ms"] = statistics.median(stops) * 1000.0
    out["launch_first_s"] = max(cold)
    out["launch_warm_s"] = max(warm)
    # torch-importing trials: a fresh process per launch vs a warm pool that imported it
    no_pool, _ = one(2, None, preload=("torch",), warm_processes=0, reuse_processes=False)
    pooled, _ = one(2, None, warm_up=25.0, preload=("torch",), warm_processes=1,
                    reuse_processes=False)
    out["launch_torch_no_pool_s"] = max(no_pool)
    out["launch_torch_warm_pool_s"] = max(pooled)
    return out


def main() -> None:
    import distributed

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None,
                                       resources={"GPU": 1})
    client = distributed.Client(cluster, set_as_default=False)
    t0 = time.time()
    try:
        figures = {**bench_channels(client), **bench_runtime(client)}
    finally:
        client.close()
        cluster.close()
    figures = {k: round(v, 3) for k, v in figures.items()}
    for k, v in figures.items():
        print(f"{k:28s} {v:10.3f}")
    print(f"total {time.time() - t0:.1f} s")
    goal = {"report_p50_ms": "<= 50", "stop_p50_ms": "<= 250", "launch_warm_s": "<= 1.0"}
    met = (figures["report_p50_ms"] <= 50 and figures["stop_p50_ms"] <= 250
           and figures["launch_warm_s"] <= 1.0)
    record({"name": "dask_runtime_latency", "figures": figures, "goal": goal,
            "met": met})


if __name__ == "__main__":
    main()
