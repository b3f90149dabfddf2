"""The fast water-filling allocators decide exactly what the reference (pre-scaling) code decides.

``tests/allocators/fluid_reference.py`` holds the code as it was before the
incremental placement book. Here the two are compared on random inputs: the
placement function alone, the leftover filling, allocators called on
sequences of hand-built views that share one cluster (so the book kept
between calls must follow arbitrary changes, not only the engine's), and the
book's own state against a rebuild. Whole simulations:
``test_scaling_simulations.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbtune.allocators import (
    DynamicFluidAllocator,
    FluidKnapsackAllocator,
    StaticFluidAllocator,
)
from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator, SchedulingView
from nbtune.allocators.demand import DemandLookup
from nbtune.allocators.held_book import HeldBook
from nbtune.allocators.knapsack import cluster_room
from nbtune.allocators.waterfill import (
    fill_in_order,
    fill_leftover,
    fluid_widths,
    place_widths,
    widths_in_order,
)
from nbtune.core.overhead_model import OverheadModel
from nbtune.core.resources import GPU, ClusterSpec, Demand, Placement
from nbtune.core.space import uniform
from nbtune.core.trial import TrialRecord, TrialSpec, TrialState
from nbtune.workloads import SyntheticWorkload
from tests.allocators.fluid_reference import (
    ReferenceDynamicFluid,
    ReferenceStaticFluid,
    reference_fill_leftover,
    reference_fluid_widths,
    reference_place_widths,
)
from tests.allocators.fluid_views import View
from tests.allocators.knapsack_reference import ReferenceFluidKnapsack, reference_cluster_room

SHARES = [0.25, 1 / 3, 0.5, 0.2, 1 / 6, 0.75, 0.1, 0.3]


def _outcome(fn, *args, **kw) -> Any:
    """A call's result, or the type of what it raised (both sides must fail alike)."""
    try:
        return fn(*args, **kw)
    except Exception as e:  # noqa: BLE001 - compared, not swallowed
        return type(e)


def _same(a: Any, b: Any) -> bool:
    """Equal, and for dicts equal in iteration order too (the engine applies them in order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a.items()) == list(b.items())
    return a == b


@st.composite
def clusters(draw, max_gpus: int = 16) -> ClusterSpec:
    n = draw(st.integers(1, max_gpus))
    ids = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n, unique=True))
    n_nodes = draw(st.integers(1, max(1, n // 2)))
    return ClusterSpec.of([GPU(g, f"n{draw(st.integers(0, n_nodes - 1))}") for g in ids])


@st.composite
def placements(draw, cluster: ClusterSpec, n: int, first_id: int = 0) -> dict[int, Placement]:
    """Random running placements: fractions (odd ones too), whole and multi-GPU, stray GPUs."""
    ids = [g.gpu_id for g in cluster.gpus]
    out: dict[int, Placement] = {}
    for tid in range(first_id, first_id + n):
        kind = draw(st.integers(0, 9))
        if kind < 5:
            out[tid] = ((draw(st.sampled_from(ids)), draw(st.sampled_from(SHARES))),)
        elif kind < 9:
            k = draw(st.integers(1, min(3, len(ids))))
            gs = draw(st.lists(st.sampled_from(ids), min_size=k, max_size=k, unique=True))
            out[tid] = tuple((g, 1.0) for g in gs)
        else:
            out[tid] = ((99, 1.0),)  # a GPU the cluster no longer has
    return out


# ------------------------------------------------------------------ the functions alone
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_place_widths_matches_the_reference(data):
    cluster = data.draw(clusters())
    running = data.draw(placements(cluster, data.draw(st.integers(0, 14))))
    c = data.draw(st.integers(1, 4))
    ids = [g.gpu_id for g in cluster.gpus]
    caps = data.draw(st.sampled_from(["one", "wide", "map"]))
    max_share: Any = {"one": 1.0, "wide": 1.5}.get(caps) or {
        g: data.draw(st.sampled_from([0.5, 1.0, 1.0, 2.0, 1.25])) for g in ids}
    movable = [t for t, pl in running.items() if all(g in ids for g, _ in pl)]
    tids = data.draw(st.lists(st.sampled_from(movable + list(range(100, 110))), unique=True,
                              max_size=10))
    widths = {t: data.draw(st.sampled_from([1 / c, 0.25, 1 / 3, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]))
              for t in tids}
    shrink = data.draw(st.booleans())
    a = _outcome(reference_place_widths, widths, cluster, running, c=c, max_share=max_share,
                 shrink_to_fit=shrink)
    b = _outcome(place_widths, widths, cluster, running, c=c, max_share=max_share,
                 shrink_to_fit=shrink)
    assert _same(a, b), (widths, running, a, b)


@settings(max_examples=300, deadline=None)
@given(h=st.lists(st.floats(0.0, 100.0), min_size=1, max_size=12),
       ws=st.lists(st.sampled_from([0.25, 1 / 3, 1.0, 2.0, 3.0]), min_size=12, max_size=12),
       n=st.integers(0, 30), c=st.integers(1, 4), d=st.integers(1, 4),
       alpha=st.floats(1.0, 1.6), beta=st.floats(1.0, 1.3))
def test_fill_leftover_matches_the_reference(h, ws, n, c, d, alpha, beta):
    oh = OverheadModel(alpha, beta)
    widths = {i: ws[i] for i in range(len(h))}

    def runtime(tid: int, w: float) -> float:
        return h[tid] * oh.factor(w)

    a = reference_fill_leftover(widths, runtime, n, c, d)
    b = fill_leftover(widths, runtime, n, c, d)
    assert _same(a, b)


def _batch(h: list[float], oh: OverheadModel):
    """``runtime`` for many trials at once, as FluidEstimator.runtimes gives it (same floats)."""
    def runtimes(tids, ws):
        ws = np.asarray(ws, dtype=float)
        fs = np.array([oh.factor(w) for w in ws.ravel().tolist()]).reshape(ws.shape)
        return np.array([h[t] for t in tids]) * fs
    return runtimes


@settings(max_examples=400, deadline=None)
@given(h=st.lists(st.one_of(st.sampled_from([0.0, 1.0, 5.0]), st.floats(0.0, 100.0)),
                  min_size=1, max_size=60),
       ws=st.lists(st.one_of(st.sampled_from([0.25, 1.0]),
                             st.sampled_from([1 / 3, 0.5, 2.0, 3.0, 5.0])), min_size=60,
                   max_size=60),
       n=st.integers(0, 120), c=st.integers(1, 4), d=st.integers(1, 6),
       alpha=st.floats(1.0, 1.6), beta=st.floats(1.0, 1.3))
def test_batched_fill_leftover_matches_the_reference(h, ws, n, c, d, alpha, beta):
    """With ``runtimes`` the heap pass is one sort over each trial's ladder: same widths, same order.

    Few distinct runtimes and widths, so equal keys (broken by position) often
    meet the last spare GPU.
    """
    oh = OverheadModel(alpha, beta)
    widths = {i: ws[i] for i in range(len(h))}

    def runtime(tid: int, w: float) -> float:
        return h[tid] * oh.factor(w)

    a = reference_fill_leftover(widths, runtime, n, c, d)
    b = fill_leftover(widths, runtime, n, c, d, runtimes=_batch(h, oh))
    assert _same(a, b), (a, b)


@settings(max_examples=400, deadline=None)
@given(h=st.lists(st.one_of(st.floats(0.0, 1e6), st.sampled_from([0.0, 1.0, 7.5])),
                  min_size=0, max_size=60),
       ids=st.permutations(range(60)), n=st.integers(0, 600), c=st.integers(1, 4),
       d=st.integers(1, 8))
def test_fluid_widths_matches_the_reference(h, ids, n, c, d):
    """The array arithmetic and sort give the scalar loop's widths bit for bit, ties by id."""
    h1 = {ids[i] * 3: v for i, v in enumerate(h)}  # ids not in order, ties among h values
    assert _same(reference_fluid_widths(h1, n, c, d), fluid_widths(h1, n, c, d))


@settings(max_examples=300, deadline=None)
@given(h=st.lists(st.one_of(st.floats(0.0, 1e4), st.sampled_from([0.0, 1.0, 7.5])),
                  min_size=0, max_size=40),
       ids=st.permutations(range(40)), n=st.integers(0, 120), c=st.integers(1, 4),
       d=st.integers(1, 6), alpha=st.floats(1.0, 1.6), beta=st.floats(1.0, 1.3))
def test_the_array_forms_give_the_mappings(h, ids, n, c, d, alpha, beta):
    """widths_in_order and fill_in_order (DynamicFluid's plan on arrays) give exactly what
    fluid_widths and fill_leftover give, in the same order; the positions map back to h."""
    tids = [ids[i] * 3 for i in range(len(h))]
    h1 = dict(zip(tids, h, strict=True))
    want = fluid_widths(h1, n, c, d)
    order, w, pos = widths_in_order(tids, h, n, c, d)
    assert order == list(want) and w.tolist() == list(want.values())
    assert [tids[i] for i in pos.tolist()] == order
    oh = OverheadModel(alpha, beta)
    by_id = dict(zip(tids, range(len(h)), strict=True))
    per = _batch(h, oh)

    def runtimes(ts, ws):
        return per([by_id[t] for t in ts], ws)

    def runtime(tid: int, x: float) -> float:
        return h[by_id[tid]] * oh.factor(x)

    filled = fill_leftover(want, runtime, n, c, d, runtimes=runtimes)
    assert fill_in_order(order, w, runtimes, n, c, d).tolist() == list(filled.values())


# ------------------------------------------------------------------ allocators on views
@dataclass
class RandomView(View):
    """A SchedulingView with every field random (the engine's views are one special case):
    placements may name GPUs no longer in the cluster, and some trials have measured times."""

    measured: dict[int, tuple[float, float]] = field(default_factory=dict)
    max_budget: float = 27.0

    def unit_time(self, tid: int) -> tuple[float, float] | None:
        return self.measured.get(tid)


@st.composite
def views(draw, cluster: ClusterSpec, keep: dict[int, Placement], wl: SyntheticWorkload):
    """A view on ``cluster``; some trials keep the very placement objects of ``keep``."""
    n_run = draw(st.integers(0, 12))
    running = draw(placements(cluster, n_run, first_id=draw(st.integers(0, 6))))
    running = {t: pl for t, pl in running.items() if all(g != 99 for g, _ in pl)}
    for t, pl in keep.items():  # the same objects as last time, somewhere in the order
        if draw(st.booleans()):
            running[t] = pl
    order = draw(st.permutations(list(running)))
    running = {t: running[t] for t in order}
    now = draw(st.floats(0.0, 100.0))
    trials, measured = {}, {}
    for t, pl in running.items():
        used = draw(st.floats(0.0, 20.0))
        target = used + draw(st.floats(0.5, 10.0))
        last = draw(st.floats(0.0, now))
        tr = TrialRecord(t, {"i": t}, TrialState.RUNNING, target_budget=target, budget_used=used,
                   results=[(last, used, {})] if draw(st.booleans()) else [],
                   share_since=draw(st.floats(0.0, now)))
        trials[t] = tr
        if draw(st.booleans()):
            w = sum(s for _, s in pl) if draw(st.booleans()) else 1.0
            measured[t] = (draw(st.floats(0.1, 5.0)), w)
    pending = []
    for t in range(50, 50 + draw(st.integers(0, 6))):
        trials[t] = TrialRecord(t, {"i": t}, TrialState.PENDING)
        pending.append(TrialSpec(t, {"i": t}, draw(st.floats(1.0, 27.0))))
    return RandomView(cluster, trials, running, pending, {"workload": wl}, measured, now,
                      max_concurrent=draw(st.sampled_from([None, None, 4, 20])))


def _fluid_pair(kind: str, **kw: Any) -> tuple[BaseAllocator, BaseAllocator]:
    if kind == "waterfill":
        return DynamicFluidAllocator(**kw), ReferenceDynamicFluid(**kw)
    if kind == "waterfill-static":
        kw.pop("resize_overhead", None)
        return StaticFluidAllocator(**kw), ReferenceStaticFluid(**kw)
    return FluidKnapsackAllocator(**kw), ReferenceFluidKnapsack(**kw)


def _check_call(fast: BaseAllocator, ref: BaseAllocator, view: SchedulingView) -> Allocation:
    assert _same(_outcome(fast.capacity, view), _outcome(ref.capacity, view))
    a, b = _outcome(fast.allocate, view), _outcome(ref.allocate, view)
    if isinstance(a, Allocation) and isinstance(b, Allocation):
        assert _same(a.launch, b.launch), (a, b)
        assert _same(a.resize, b.resize), (a, b)
    else:
        assert a == b, (a, b)
    return a


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), kind=st.sampled_from(["waterfill", "waterfill-static", "fluid+knapsack"]),
       c=st.integers(1, 4), d=st.integers(1, 4), alpha=st.floats(1.0, 1.5),
       beta=st.floats(1.0, 1.25), eps=st.sampled_from([0.0, 0.5, 5.0]), fill=st.booleans())
def test_allocators_match_the_reference_on_sequences_of_random_views(
        data, kind, c, d, alpha, beta, eps, fill):
    wl = SyntheticWorkload({"i": uniform(0, 1)}, unit_time=lambda cfg: 1.0 + cfg["i"] % 7,
                           alpha=alpha, beta=beta)
    fast, ref = _fluid_pair(kind, c=c, d=d, fill=fill, resize_overhead=eps)
    cluster = data.draw(clusters(max_gpus=12))
    keep: dict[int, Placement] = {}
    for _ in range(data.draw(st.integers(1, 4))):
        if data.draw(st.integers(0, 5)) == 0:  # now and then the cluster itself changes
            cluster = data.draw(clusters(max_gpus=12))
            keep = {}
        view = data.draw(views(cluster, keep, wl))
        out = _check_call(fast, ref, view)
        # next view: what this one ran, resized as decided, kept as the same objects
        keep = dict(view.running)
        if isinstance(out, Allocation):
            keep.update(out.resize)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), alpha=st.floats(1.0, 1.5), beta=st.floats(1.0, 1.25),
       prior=st.booleans())
def test_h1_matches_the_reference_estimator_exactly(data, alpha, beta, prior):
    wl = SyntheticWorkload({"i": uniform(0, 1)}, unit_time=lambda cfg: 1.0 + cfg["i"] % 7,
                           alpha=alpha, beta=beta)
    view = data.draw(views(data.draw(clusters(max_gpus=8)), {}, wl))
    if not prior:
        view.hints = {}  # no workload: unmeasured trials take the mean of the measured ones
    fast = DynamicFluidAllocator().estimator(view)
    ref = ReferenceDynamicFluid().estimator(view)
    targets = {t: view.trials[t].target_budget for t in view.running}
    targets.update({s.trial_id: s.budget for s in view.pending})
    assert _same(fast.h1(targets), ref.h1(targets))


@settings(max_examples=200, deadline=None)
@given(data=st.data(), r=st.sampled_from([1.0, 1.5, 2.0]))
def test_cluster_room_matches_the_reference_exactly(data, r):
    """The knapsack allocators' free compute, memory and cores (shared by all of them)."""
    wl = SyntheticWorkload({"i": uniform(0, 1)}, demand=lambda cfg: Demand(
        0.3, 1.5 + (cfg["i"] * 7) % 5.3, 0.7 + (cfg["i"] * 3) % 2.1))
    view = data.draw(views(data.draw(clusters(max_gpus=10)), {}, wl))
    if data.draw(st.booleans()):  # a trial still on a GPU the cluster lost
        view.running[77] = ((99, 1.0),) + tuple(view.running.get(0, ()))
        view.trials[77] = TrialRecord(77, {"i": 0.7}, TrialState.RUNNING)
    lookup = DemandLookup()
    a = reference_cluster_room(view, {"generic": r}, lookup)
    b = cluster_room(view, {"generic": r}, lookup)
    for name in ("compute", "memory", "gpu_node", "node_cpus", "speed", "ratio"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name
    assert (a.gpu_ids, a.nodes) == (b.gpu_ids, b.nodes)


# ------------------------------------------------------------------ the book's own invariants
def _rebuilt(book: HeldBook) -> tuple[dict[int, float], dict[int, int]]:
    """Loads as place_widths' rebuild computes them: ``held``'s shares added in its order."""
    load = dict.fromkeys(book.gpus, 0.0)
    count = dict.fromkeys(book.gpus, 0)
    for pl in book.held.values():
        for g, s in pl:
            if g in load:
                load[g] += s
                count[g] += 1
    return load, count


def _check_book(book: HeldBook) -> None:
    load, count = _rebuilt(book)
    assert book.load == load and book.count == count  # exact floats, not approximately
    assert list(book.pos) == list(book.held)
    assert list(book.pos.values()) == sorted(book.pos.values())
    idle = sorted(g for g in book.gpus if load[g] <= 1e-9)
    assert book._idle == idle
    free: dict[str, list[int]] = {}
    for g in idle:
        if book.cap[g] + 1e-9 >= 1.0:
            free.setdefault(book.node[g], []).append(g)
    assert {n: gs for n, gs in book._node_free.items() if gs} == free
    assert {k: v for k, v in book._bucket.items() if v} == {
        k: sorted(n for n, gs in free.items() if len(gs) == k)
        for k in {len(gs) for gs in free.values()}}
    shared: dict[float, list] = {}
    for g in book.gpus:
        if load[g] > 1e-9 and count[g] < book.c:
            shared.setdefault(book.cap[g], []).append((load[g], -g))
    assert {k: v for k, v in book._shared.items() if v} == {k: sorted(v)
                                                             for k, v in shared.items()}
    spread = set()
    for g in book.gpus:
        tids = [t for t, pl in book.held.items() for h, _ in pl if h == g]
        if tids and all(len(book.held[t]) == 1 and book.held[t][0][1] < 1 - 1e-9
                        for t in tids):
            share = min(book.cap[g], 1.0) / len(tids)
            if any(book.held[t][0][1] < share - 1e-9 for t in tids):
                spread.add(g)
    assert book.spreadable == spread
    # the spread step's groups (kept between calls, forgotten as their GPUs change)
    want = [(g, [t for p in sorted(book.on[g]) for t in [book.on[g][p][0]] * len(book.on[g][p][1])])
            for _, g in sorted((min(book.on[g]), g) for g in spread)]
    assert book.spread_groups() == want


@settings(max_examples=300, deadline=None)
@given(data=st.data(), c=st.integers(1, 4))
def test_the_held_book_matches_a_rebuild_after_any_sequence_of_changes(data, c):
    cluster = data.draw(clusters(max_gpus=8))
    caps = data.draw(st.sampled_from([1.0, {g.gpu_id: 2.0 for g in cluster.gpus}]))
    held = data.draw(placements(cluster, data.draw(st.integers(0, 10))))
    book = HeldBook(cluster, c, caps, held)
    _check_book(book)
    for _ in range(data.draw(st.integers(1, 12))):
        op = data.draw(st.sampled_from(["sync", "move", "append", "place"]))
        if op == "sync":  # some trials kept (same objects), some new, in a new order
            new = data.draw(placements(cluster, data.draw(st.integers(0, 10)), first_id=20))
            kept = {t: pl for t, pl in book.held.items() if data.draw(st.booleans())}
            merged = {**kept, **new}
            order = data.draw(st.permutations(list(merged)))
            book.sync({t: merged[t] for t in order})
        elif op == "move" and book.held:
            tid = data.draw(st.sampled_from(list(book.held)))
            book.move(tid, data.draw(placements(cluster, 1))[0])
        elif op == "append":
            book.append(data.draw(st.integers(40, 45)), data.draw(placements(cluster, 1))[0])
        elif book.held:
            tid = data.draw(st.sampled_from(list(book.held)))
            before = (dict(book.load), dict(book.count))
            w = data.draw(st.sampled_from([0.25, 1 / 3, 0.5, 1.0, 2.0, 3.0]))
            got = book.trial_placement(tid, w)
            assert (book.load, book.count) == before  # a question, not a change
            if all(g in book.gpus for g, _ in book.held[tid]):
                want = reference_place_widths({tid: w}, cluster, book.held, c=c,
                                              max_share=caps).get(tid, book.held[tid])
                assert got == want
        _check_book(book)


def _book_state(book: HeldBook) -> tuple:
    """Everything a decision can read from a book (its GPUs' entries in position order)."""
    on = {g: [(p, t, list(sh)) for p, (t, sh) in sorted(e.items())] for g, e in book.on.items()}
    return (dict(book.held), dict(book.load), dict(book.count), on, set(book.spreadable),
            list(book._idle), {n: list(v) for n, v in book._node_free.items() if v},
            book._n_free, {k: list(v) for k, v in book._bucket.items() if v},
            {k: list(v) for k, v in book._shared.items() if v})


@settings(max_examples=300, deadline=None)
@given(data=st.data(), c=st.integers(1, 4))
def test_a_rollback_puts_the_book_back_as_moving_every_trial_back_does(data, c):
    """DynamicFluid's undo of scale-downs: rollback == the moves back one by one (and commit keeps)."""
    cluster = data.draw(clusters(max_gpus=8))
    caps = data.draw(st.sampled_from([1.0, {g.gpu_id: 2.0 for g in cluster.gpus}]))
    held = data.draw(placements(cluster, data.draw(st.integers(1, 10))))
    book = HeldBook(cluster, c, caps, held)
    twin = HeldBook(cluster, c, caps, held)  # undone the old way: every trial moved back
    start = dict(book.held)
    book.checkpoint()
    for _ in range(data.draw(st.integers(1, 10))):
        tid = data.draw(st.sampled_from(list(book.held)))
        pl = data.draw(placements(cluster, 1))[0]
        book.move(tid, pl)
        twin.move(tid, pl)
        book.spread_groups()  # (asked between moves: what it keeps must follow the rollback)
    moved = _book_state(book)
    keep = data.draw(st.booleans())
    if keep:
        book.commit()
        assert _book_state(book) == moved
    else:
        book.rollback()
        for tid, pl in start.items():
            if twin.held[tid] is not pl:
                twin.move(tid, pl)
        assert _book_state(book) == _book_state(twin)
        assert all(book.held[t] is pl for t, pl in start.items())
    _check_book(book)
    tid = data.draw(st.sampled_from(list(book.held)))  # and it goes on as a book
    book.move(tid, data.draw(placements(cluster, 1))[0])
    _check_book(book)
