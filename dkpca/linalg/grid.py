"""The block grid: how n rows are cut into square Gram blocks.

Sizing lives here, in one named function (:func:`default_block_size`), so that
the Gram build, the operators, planning and the model all agree on where a
block starts and ends.
"""

from __future__ import annotations

__all__ = ["DEFAULT_BLOCK", "BLOCK_BYTES", "default_block_size", "rows_per_block", "block_bounds", "n_blocks",
           "upper_pairs"]

#: Gram block edge used when the user gives none.  4096^2 float64 temporaries are
#: 128 MiB per task: large enough that a block is GEMM/exp bound, not overhead
#: bound, small enough for many concurrent tasks per worker.
DEFAULT_BLOCK = 4096

#: memory budget of one kernel block held by a loop or a task (a 4096^2 float64 block)
BLOCK_BYTES = DEFAULT_BLOCK * DEFAULT_BLOCK * 8


def default_block_size(n: int) -> int:
    """Square Gram block edge for ``n`` samples (the whole matrix when small)."""
    if n <= DEFAULT_BLOCK:
        return n
    # Balance the blocks so the last one is not a sliver.
    nb = -(-n // DEFAULT_BLOCK)
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


def upper_pairs(nb: int) -> list[tuple[int, int]]:
    """Block coordinates ``(I, J)`` with ``I <= J``: the stored half of a symmetric K."""
    return [(I, J) for I in range(nb) for J in range(I, nb)]
