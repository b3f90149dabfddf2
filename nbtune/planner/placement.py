"""RubberBand's placement controller (§4.4.1, Alg. 3): co-location and ``tryMakeSpace``.

A trial's workers should sit on as few hosts as possible: data-parallel
training across hosts pays network overhead the plan did not price. When the
free GPUs are fragmented — enough in total, but spread over hosts by other
trials — :func:`co_located` alone would spread the new trial too. The paper's
displacement step moves (resizes through a checkpoint) already-placed trials
with *smaller* allocations to make room; :func:`try_make_space` does that as a
sticky first-fit-decreasing repack: trials are placed widest first, each keeps
its GPUs when they are still free and on the fewest hosts, and the others
(the new trial, displaced ones) go where they fit on the fewest hosts,
preferring hosts that are free now so that as few trials move as possible.

For a homogeneous cluster whose widths divide the host size (or are
multiples of it) — what RubberBand's fair division produces — the repack
always puts every trial on its minimum number of hosts when the total width
fits: after each placement every host's free count stays a multiple of the
next (smaller) width. Pure functions over ``{host: [gpu ids]}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["co_located", "hosts_of", "min_hosts", "try_make_space"]


def co_located(idle_by_node: Mapping[str, Sequence[int]], width: int) -> list[int] | None:
    """``width`` idle GPUs on the fewest nodes: the best-fitting node, else largest first."""
    fits = [(len(g), n) for n, g in idle_by_node.items() if len(g) >= width]
    if fits:
        _, node = min(fits)
        return sorted(idle_by_node[node])[:width]
    out: list[int] = []
    for node in sorted(idle_by_node, key=lambda n: (-len(idle_by_node[n]), n)):
        out.extend(sorted(idle_by_node[node])[: width - len(out)])
        if len(out) == width:
            return out
    return None


def min_hosts(host_sizes: Sequence[int], width: int) -> int:
    """Fewest hosts (of these sizes) whose GPUs add up to ``width``; ``len + 1`` if none do."""
    total = 0
    for k, size in enumerate(sorted(host_sizes, reverse=True), start=1):
        total += size
        if total >= width:
            return k
    return len(host_sizes) + 1


def hosts_of(gpus: Sequence[int], node_of: Mapping[int, str]) -> int:
    """How many hosts a placement spans."""
    return len({node_of[g] for g in gpus})


def try_make_space(
    gpus_by_node: Mapping[str, Sequence[int]],
    placed: Mapping[int, Sequence[int]],
    new: Mapping[int, int],
) -> dict[int, list[int]] | None:
    """Place ``new`` trials (id -> width) on the fewest hosts, displacing narrower ones.

    ``gpus_by_node`` is the domain the controller may use (GPUs held by trials
    it must not move are left out), ``placed`` the movable trials' current
    GPUs inside it. Returns every trial's GPUs after the repack (unchanged
    entries mean "stays"), or ``None`` when no repack puts every trial on its
    minimum number of hosts — the caller then keeps the current placement.
    Only trials narrower than a trial being placed are ever displaced: a
    trial is placed before all narrower ones and keeps its GPUs when they are
    still free.
    """
    node_of = {g: n for n, gs in gpus_by_node.items() for g in gs}
    for tid, gpus in placed.items():
        if any(g not in node_of for g in gpus):
            raise ValueError(f"trial {tid} holds GPUs outside the placement domain")
    sizes = [len(gs) for gs in gpus_by_node.values()]
    widths = {tid: len(g) for tid, g in placed.items()} | dict(new)
    if sum(widths.values()) > len(node_of):
        return None
    idle_now = set(node_of) - {g for gs in placed.values() for g in gs}
    free = {n: sorted(gs) for n, gs in gpus_by_node.items()}
    out: dict[int, list[int]] = {}
    # widest first; among equals, trials that may stay go first (fewest moves)
    for tid in sorted(widths, key=lambda t: (-widths[t], t in new, t)):
        w, need = widths[tid], min_hosts(sizes, widths[tid])
        cur = placed.get(tid)
        if cur is not None and hosts_of(cur, node_of) == need and all(
            g in free[node_of[g]] for g in cur
        ):
            gpus = list(cur)
        else:
            gpus = _fewest_hosts(free, idle_now, w, need)
            if gpus is None:
                return None
        for g in gpus:
            free[node_of[g]].remove(g)
        out[tid] = gpus
    return out


def _fewest_hosts(free: Mapping[str, list[int]], idle_now: set[int], width: int,
                  need: int) -> list[int] | None:
    """``width`` free GPUs on ``need`` hosts, preferring GPUs idle now, else ``None``."""
    def order(n: str) -> tuple[int, int, str]:
        return (-len(free[n]), -sum(g in idle_now for g in free[n]), n)

    if need == 1:
        fits = [n for n in free if len(free[n]) >= width]
        if not fits:
            return None
        # the host that displaces fewest trials, then the tightest fit
        node = min(fits, key=lambda n: (-sum(g in idle_now for g in free[n]), len(free[n]), n))
        return sorted(free[node], key=lambda g: (g not in idle_now, g))[:width]
    out: list[int] = []
    for node in sorted(free, key=order)[:need]:
        out.extend(sorted(free[node], key=lambda g: (g not in idle_now, g))[: width - len(out)])
    return out if len(out) == width else None
