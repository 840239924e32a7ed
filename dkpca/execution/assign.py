"""On a cluster, which worker runs which blocks: a fixed, balanced share per worker thread, the same every pass.

See the package's description (:mod:`dkpca.execution`) for why: left to
itself the scheduler follows the data and unbalances a pass.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Sequence

import dask

from ..linalg import curve_order
from .scheduler import active_client
from .watch import asking

__all__ = ["balance", "gathered", "placement", "shares", "placed"]


def balance(weights: Sequence[float], slots: int, pairs: Sequence[tuple[int, int]] | None = None) -> list[int]:
    """The slot (0 .. slots - 1) of each task, so that the heaviest slot's total weight is small.

    ``pairs``: each task's block ``(I, J)``; the slots then keep the same
    loads with each one's blocks near each other (:func:`gathered`).

    Largest task first to the least loaded slot (ties to the lowest slot),
    then moves and swaps between the heaviest and the lightest slot while
    they lower the heavier of the two.  Largest-first alone leaves up to one
    task's weight of imbalance: at n = 20,000 (5 x 5 blocks) on two workers
    it gave one share five off-diagonal blocks and three diagonal ones,
    0.434 s of a pass's 0.81 s of block work where 0.41 s is even; a swap
    makes it 0.42 s.  Deterministic: the same weights give the same slots.
    """
    slot = [0] * len(weights)
    load = [0.0] * max(1, slots)
    heap = [(0.0, i) for i in range(len(load))]
    for task in sorted(range(len(weights)), key=lambda i: -weights[i]):
        w, i = heapq.heappop(heap)
        slot[task] = i
        load[i] = w + weights[task]
        heapq.heappush(heap, (load[i], i))
    members: list[list[int]] = [[] for _ in load]
    for task, i in enumerate(slot):
        members[i].append(task)
    # Each step strictly lowers the heavier slot of a pair; the bound caps
    # the work (a step scans two slots' tasks) on many tasks and slots.
    for _ in range(min(4 * len(weights), 1000)):
        hi = max(range(len(load)), key=lambda i: (load[i], -i))
        lo = min(range(len(load)), key=lambda i: (load[i], i))
        gap = load[hi] - load[lo]
        # move a (or swap b for a): the pair's new maximum is
        # max(load[hi] - d, load[lo] + d) with d = w_a - w_b, lowest nearest gap / 2
        best, choice = load[hi], None
        partners = [None, *members[lo]]
        for a in members[hi]:
            for b in partners:
                d = weights[a] - (weights[b] if b is not None else 0.0)
                top = max(load[hi] - d, load[lo] + d)
                if 0 < d < gap and top < best:
                    best, choice = top, (a, b, d)
        if choice is None:
            break
        a, b, d = choice
        members[hi].remove(a)
        members[lo].append(a)
        slot[a] = lo
        if b is not None:
            members[lo].remove(b)
            members[hi].append(b)
            slot[b] = hi
        load[hi] -= d
        load[lo] += d
    return slot if pairs is None else gathered(slot, weights, pairs)


def gathered(slot: Sequence[int], weights: Sequence[float], pairs: Sequence[tuple[int, int]]) -> list[int]:
    """``slot``'s loads, with the blocks dealt out along a Hilbert curve: each slot's are a compact patch of K.

    Each slot keeps as many blocks of each weight as ``slot`` gave it (so the
    same loads), and takes them as one stretch of the curve
    (:func:`~dkpca.linalg.curve_order`): a slot's blocks then touch few row
    blocks, and a cluster share carries only their pieces of V and returns
    only their partial sums.  At n = 40,000 in 10 row blocks on 16 slots,
    the shares touched 89 row blocks in all where balancing alone gave
    them (5.6 a share), 63 dealt out (3.9); at 100,000 (25 row blocks),
    365 against 173.
    """
    quota: dict[tuple[int, float], int] = {}
    for s, w in zip(slot, weights, strict=True):
        quota[s, w] = quota.get((s, w), 0) + 1
    by_weight: dict[float, list[int]] = {}
    for task in curve_order(list(pairs)):
        by_weight.setdefault(weights[task], []).append(task)
    out = list(slot)
    for w, tasks in by_weight.items():
        stretch = iter(tasks)
        for s in sorted({s for s, v in quota if v == w}):
            for _ in range(quota[s, w]):
                out[next(stretch)] = s
    return out


def _assign(weights: Sequence[float], pairs: Sequence[tuple[int, int]] | None) -> list[tuple[str, int]] | None:
    """The worker thread slot ``(address, i)`` of each task (:func:`balance`); None without a cluster.

    Slots in address order: the same workers and weights always give the
    same assignment.
    """
    client = active_client()
    if client is None:
        return None
    with asking(client):
        threads = client.nthreads()
    if not threads:
        return None
    slots = [(addr, i) for addr, t in sorted(threads.items()) for i in range(max(1, t))]
    return [slots[i] for i in balance(weights, len(slots), pairs)]


def placement(weights: Sequence[float], pairs: Sequence[tuple[int, int]] | None = None) -> list[str | None]:
    """A worker for each task of the given relative weights, balancing the weight per worker thread.

    ``pairs``: each task's block ``(I, J)``, so that a worker's blocks share their rows (:func:`gathered`).

    The same workers and weights give the same placement, so each block goes
    to the same worker every pass or rerun.  Without a cluster, ``None`` for
    every task (the local scheduler needs no placement).
    """
    slots = _assign(weights, pairs)
    return [None] * len(weights) if slots is None else [addr for addr, _ in slots]


def shares(weights: Sequence[float],
           pairs: Sequence[tuple[int, int]] | None = None) -> list[tuple[str | None, list[int]]]:
    """The tasks grouped into one share per worker thread, balanced by weight: ``(worker, task indices)``.

    ``pairs``: each task's block ``(I, J)``, so that a share's blocks share their rows (:func:`gathered`).

    A share runs as one task: a pass then costs the scheduler a few tasks per
    worker thread instead of several per block (measured here, n = 20,000 with
    two single-thread workers: 7 tasks a pass instead of 50, and 1.28-1.30 s
    a pass instead of 1.4-1.8 s).  Without a cluster every task is its own
    share (worker None): the local scheduler's per-task cost is small.
    """
    slots = _assign(weights, pairs)
    if slots is None:
        return [(None, [i]) for i in range(len(weights))]
    groups: dict[tuple[str, int], list[int]] = {}
    for task, slot in enumerate(slots):
        groups.setdefault(slot, []).append(task)
    return [(addr, members) for (addr, _), members in sorted(groups.items())]


def placed(worker: str | None) -> contextlib.AbstractContextManager:
    """Tasks made inside run on ``worker`` (any other if it is gone); no constraint for None."""
    if worker is None:
        return contextlib.nullcontext()
    return dask.annotate(workers=[worker], allow_other_workers=True)
