"""The block grid: how n rows are cut into square Gram blocks.

Sizing lives here, in one named function (:func:`default_block_size`), so that
the Gram build, the operators, planning and the model all agree on where a
block starts and ends.  Its cluster-aware sibling,
:func:`cluster_block_size`, is what ``dkpca.plan`` recommends for a cluster:
the smallest balanced block edge, from the default up, whose pass keeps the
scheduler's share under :data:`SCHEDULING_SHARE`, or the largest within the
workers' memory -- from plain numbers (rates, concurrency, memory), with the
cost of a pass at a block edge written once (:func:`pass_cost`).
:func:`pass_tasks` counts the tasks of one pass's graph and
:func:`task_memory` the bytes one running block task holds.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_BLOCK", "BLOCK_BYTES", "STRIP_ROWS", "product_strip_rows", "SCHEDULING_SHARE", "FAN_IN",
           "default_block_size", "balanced_block", "rows_per_block", "block_bounds", "n_blocks", "sweep_entries",
           "upper_pairs", "curve_order", "carried_pass", "INLINE_PASS_BYTES", "pass_tasks", "pair_weights",
           "task_memory", "PassCost", "pass_cost", "cluster_block_size"]

#: Gram block edge used when the user gives none.  4096^2 float64 temporaries are
#: 128 MiB per task: large enough that a block is GEMM/exp bound, not overhead
#: bound, small enough for many concurrent tasks per worker.
DEFAULT_BLOCK = 4096

#: memory budget of one kernel block held by a loop or a task (a 4096^2 float64 block)
BLOCK_BYTES = DEFAULT_BLOCK * DEFAULT_BLOCK * 8

#: most rows of a float32 block widened to float64 at a time in a product (:func:`product_strip_rows`)
STRIP_ROWS = 256

#: products with at most this many columns take :data:`SKINNY_STRIP_ROWS` rows a strip
SKINNY_WIDTH = 32
SKINNY_STRIP_ROWS = 64

#: largest share of a pass the scheduler may take at the block :func:`cluster_block_size` picks
SCHEDULING_SHARE = 0.05

#: operands of one sum task (tree sums), and the most task outputs a caller adds itself
#: (:func:`dkpca.linalg.gather_sum`)
FAN_IN = 8

#: most bytes of V a cluster pass's tasks carry in their arguments, V counted whole for each task
#: (:func:`carried_pass`); the caller then receives as many bytes of their partial sums.  Past FAN_IN
#: tasks a pass referred to piece tasks and summed by trees: each task waited for its pieces from the
#: workers that held them, and each sum for its parts.  Measured on the 2-core AMD EPYC (2026-11-27,
#: stored K, 20 columns, LocalClusters of single-thread workers, median of 5 passes): n = 16,000 (8 row
#: blocks) 0.56 s carried against 0.93 s with 9 workers, 0.51 against 0.94 s with 16; n = 40,000
#: (10 row blocks) 2.68 against 3.77 s with 9 workers, 2.85 against 4.37 s with 16 (57 MB carried, of
#: the 102 MB this bound counts).  Scattering the pieces to the workers that need them first did no
#: better (0.81-0.87 s at 16,000).  Carried pieces pass through the scheduler: across nodes at most this
#: many bytes a pass, ~0.1 s on a 10 Gb/s link (not measured on a multi-node cluster).
INLINE_PASS_BYTES = 128 << 20


def default_block_size(n: int) -> int:
    """Square Gram block edge for ``n`` samples (the whole matrix when small)."""
    return balanced_block(n, DEFAULT_BLOCK)


def product_strip_rows(width: int) -> int:
    """Rows of a float32 block widened to float64 at a time for a product with ``width`` columns.

    A skinny product (a solver block of k + 10 columns) is bound by moving
    the strip, not by its flops: 64-row strips (2 MiB at a 4096 edge) stay
    in the cache two threads share, where 256-row ones (8 MiB) do not.  A
    wide one is GEMM-bound and wants the long inner dimension of
    ``strip^T V``.  Measured, 4082^2 block, two processes at once, median of
    7 (ns an entry, 256 vs 64 rows): 20 columns 4.9 / 5.1 vs 4.2 / 4.4;
    40 columns even; 80 columns 12.1 / 11.0 vs 14.1 / 12.6; 266 columns
    31.8 vs 40.7 / 43.2.
    """
    return SKINNY_STRIP_ROWS if width <= SKINNY_WIDTH else STRIP_ROWS


def balanced_block(n: int, edge: int) -> int:
    """The edge at most ``edge`` that cuts ``n`` rows into as few blocks, balanced so the last is not a sliver."""
    if n <= edge:
        return n
    nb = -(-n // edge)
    return -(-n // nb)


def rows_per_block(cols: int, itemsize: int = 8, budget: int = BLOCK_BYTES) -> int:
    """Rows of a ``rows x cols`` kernel block that fit in ``budget`` bytes (at least 1).

    Every blocked "kernel times something" loop sizes its blocks here, from
    one memory budget, instead of from a constant of its own.
    """
    return max(1, int(budget // max(1, cols * itemsize)))


def block_bounds(n: int, block: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the row blocks of edge ``block`` (the last may be shorter)."""
    return [(s, min(s + block, n)) for s in range(0, n, block)]


def n_blocks(n: int, block: int) -> int:
    """Number of row blocks."""
    return -(-n // block)


def sweep_entries(n: int, block: int) -> float:
    """Entries of K's upper-triangular blocks at edge ``block``, counted whole (as their tasks run and their
    chunks are stored, edge chunks padded): what a pass sweeps and a build writes."""
    nb = n_blocks(n, min(block, n))
    return nb * (nb + 1) // 2 * float(min(block, n)) ** 2


def upper_pairs(nb: int) -> list[tuple[int, int]]:
    """Block coordinates ``(I, J)`` with ``I <= J``: the stored half of a symmetric K."""
    return [(I, J) for I in range(nb) for J in range(I, nb)]


def carried_pass(tasks: int, *, n: int = 0, width: int = 0, cluster: bool = False, itemsize: int = 8) -> bool:
    """Whether a pass's ``tasks`` carry their pieces of V (n x ``width``) in their own arguments, their
    outputs added by the caller (:func:`dkpca.linalg.gather_sum`), rather than refer to piece tasks, their
    outputs summed by trees of tasks (:func:`dkpca.linalg.scatter_sum`).

    Up to :data:`FAN_IN` tasks always.  On a cluster (one task per worker
    thread) also more, while V counted whole for each task stays within
    :data:`INLINE_PASS_BYTES`.  Without one the tasks are the blocks: the
    pieces are views of V, and the threads add the trees as the blocks
    finish, where the caller would add every output after the last.
    """
    if tasks <= FAN_IN:
        return True
    return cluster and tasks * n * width * itemsize <= INLINE_PASS_BYTES


def pass_tasks(nb: int, fan_in: int = FAN_IN, shares: int | None = None, carried: bool | None = None) -> int:
    """Tasks in the graph of one pass over ``nb`` row blocks, as ``raw_matmat`` builds it.

    One task per upper-triangular block (``P = nb (nb + 1) / 2``), or on a
    cluster one per worker thread (``shares``, at most P;
    :func:`dkpca.execution.shares`).  Tasks that carry their pieces of V in
    their arguments (``carried``; None: :func:`carried_pass` without a
    cluster's budget) have their outputs added by the caller: nothing else.
    Otherwise the pass needs one piece of V per row block and per row block a
    tree of ``fan_in``-way sums over the tasks contributing to it
    (:func:`dkpca.linalg.scatter_sum`).
    """
    pairs = nb * (nb + 1) // 2
    tasks = pairs if shares is None else min(pairs, max(1, shares))
    if carried if carried is not None else carried_pass(tasks):
        return tasks
    sums, m = 0, min(nb, tasks)  # a row block receives from at most nb blocks
    while True:
        m = -(-m // fan_in)
        sums += m
        if m <= 1:
            break
    return nb + tasks + nb * sums


#: What a block costs besides its products, in products: reading (or
#: evaluating and writing) it.  Measured per 4000 x 4000 float32 block at
#: n = 20,000 on two threads: a pass's diagonal block (one product) took
#: 0.038 s and an off-diagonal one (two) 0.064 s in single precision, 0.089 s
#: and 0.16 s in float64; a build's 0.18-0.21 s and 0.26-0.28 s.  That puts
#: a diagonal block at 0.56-0.70 of an off-diagonal one, where area alone
#: said 0.5; one figure serves both, since a build and its passes place each
#: block on the same worker (its node's page cache holds what it wrote).
BLOCK_FIXED_COST = 0.5


def pair_weights(bounds: list[tuple[int, int]], pairs: list[tuple[int, int]]) -> list[float]:
    """The relative cost of each block task ``(I, J)`` of a pass or a build.

    Its area times its products (two off the diagonal: ``K_IJ V_J`` and
    ``K_IJ^T V_I``) plus :data:`BLOCK_FIXED_COST` for reading or writing it;
    edge blocks are smaller.  Used to balance a pass's blocks over a
    cluster's workers.
    """
    return [(bounds[I][1] - bounds[I][0]) * (bounds[J][1] - bounds[J][0]) * ((1 if I == J else 2) + BLOCK_FIXED_COST)
            for I, J in pairs]


def curve_order(pairs: list[tuple[int, int]]) -> list[int]:
    """The indices of ``pairs`` (blocks ``(I, J)`` of the grid) in the order of a Hilbert curve over the grid.

    Consecutive blocks on the curve are neighbours, so any stretch of it
    covers a compact patch of K, which touches few row blocks: a cluster
    share made of such a stretch carries few pieces of V and returns few
    partial sums (:func:`dkpca.execution.balance`).
    """
    side = 1
    while side <= max((max(p) for p in pairs), default=0):
        side *= 2

    def index(x: int, y: int) -> int:  # the curve's position of cell (x, y) on a side x side grid
        d, s = 0, side // 2
        while s:
            rx, ry = int(x & s > 0), int(y & s > 0)
            d += s * s * ((3 * rx) ^ ry)
            if not ry:
                if rx:
                    x, y = s - 1 - x, s - 1 - y
                x, y = y, x
            s //= 2
        return d

    return sorted(range(len(pairs)), key=lambda i: index(*pairs[i]))


def task_memory(block: int, d: int, ell: int, itemsize: int) -> int:
    """Bytes one running block task holds.

    The kernel block and the block read back for a pass (both kept as
    per-thread scratch), a float64 strip for widening, two row blocks of X,
    and the two V slices with their products.
    """
    return 2 * block * block * itemsize + STRIP_ROWS * block * 8 + 2 * block * d * 8 + 4 * block * ell * 8


@dataclass(frozen=True)
class PassCost:
    """One sweep over the upper-triangular blocks of K at one block edge (seconds).

    ``compute`` is the block work spread over the concurrent tasks, ``io``
    the bytes moved at the filesystem's aggregate bandwidth (0 when not
    bounded), ``scheduler`` the scheduler's serial time for the graph's
    tasks.  The scheduler is counted on top of the larger of the other two:
    graph submission does not overlap the work.
    """

    block: int
    tasks: int
    compute: float
    io: float
    scheduler: float

    @property
    def seconds(self) -> float:
        return max(self.compute, self.io) + self.scheduler

    @property
    def share(self) -> float:
        """The scheduler's share of the sweep, in [0, 1]."""
        return self.scheduler / self.seconds if self.seconds > 0 else 0.0

    @property
    def bound(self) -> str:
        """``"filesystem"`` when moving the bytes takes longer than the block work, else ``"compute"``."""
        return "filesystem" if self.io > self.compute else "compute"


def pass_cost(n: int, block: int, *, concurrency: int, entry_seconds: float, task_seconds: float,
              bytes_per_entry: float = 0.0, bandwidth: float | None = None, shares: int | None = None,
              width: int | None = None) -> PassCost:
    """The cost of one sweep over K's upper-triangular blocks of edge ``block``.

    ``entry_seconds`` is one thread's time per entry of a block (its work
    scales with the entries), ``task_seconds`` the scheduler's per task;
    ``bytes_per_entry`` are moved through a filesystem of aggregate
    ``bandwidth`` bytes/s (None: it keeps up).  The blocks are counted whole
    (``P block^2`` entries), as the tasks run them.  ``shares``: the graph's
    block tasks are one per worker thread (a pass on a cluster; see
    :func:`pass_tasks`; ``width``: V's columns, which decide whether those
    carry their pieces of V, :func:`carried_pass`; None: as at most
    ``FAN_IN`` do).  The block tasks run in waves of ``concurrency``:
    fewer, larger blocks than threads leave threads idle, so ``compute``
    grows with the edge once the blocks are fewer than the threads.
    """
    block = min(block, n)
    nb = n_blocks(n, block)
    pairs = nb * (nb + 1) // 2
    entries = sweep_entries(n, block)
    running = pairs if shares is None else min(pairs, max(1, shares))
    waves = -(-running // max(1, concurrency))
    io = entries * bytes_per_entry / bandwidth if bandwidth else 0.0
    carried = carried_pass(running, n=n, width=width, cluster=shares is not None) if width else None
    tasks = pass_tasks(nb, shares=shares, carried=carried)
    return PassCost(block, tasks, waves * entries * entry_seconds / running, io, tasks * task_seconds)


def cluster_block_size(n: int, *, concurrency: int, entry_seconds: float, task_seconds: float,
                       memory_per_task: float | None, d: int, ell: int, itemsize: int,
                       bytes_per_entry: float = 0.0, bandwidth: float | None = None,
                       share: float = SCHEDULING_SHARE, shares: int | None = None) -> int:
    """Block edge for ``concurrency`` tasks at once: the scheduler under ``share`` of a pass, within memory.

    Every balanced edge from :func:`default_block_size` up (one row block
    fewer at each step) is a candidate; the first whose :func:`pass_cost`
    has the scheduler at most ``share`` of the pass is chosen.  When memory
    ends the search first (the next edge's :func:`task_memory` exceeds
    ``memory_per_task`` bytes; None: unknown, not limited) the largest edge
    within it is, and the plan reports the share it leaves.  Never smaller
    than the default.  The arguments are :func:`pass_cost`'s and
    :func:`task_memory`'s.
    """
    block = default_block_size(n)
    for nb in range(n_blocks(n, block), 0, -1):
        edge = -(-n // nb)
        if n_blocks(n, edge) != nb:
            continue  # no edge cuts n into nb balanced blocks: this one is a neighbour's
        if memory_per_task is not None and edge > block and task_memory(edge, d, ell, itemsize) > memory_per_task:
            break
        block = edge
        cost = pass_cost(n, block, concurrency=concurrency, entry_seconds=entry_seconds, task_seconds=task_seconds,
                         bytes_per_entry=bytes_per_entry, bandwidth=bandwidth, shares=shares, width=ell)
        if cost.share <= share:
            break
    return block
