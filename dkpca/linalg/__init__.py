"""Linear algebra shared by every path: the block grid, block products, tree sums, centring.

Nothing here knows about stores, solvers or dask clusters.
"""

from .centering import Centering, ProjectionWeights, center_block, center_diagonal, center_precomputed
from .eigh import top_eigh
from .grid import (
    BLOCK_BYTES,
    DEFAULT_BLOCK,
    FAN_IN,
    INLINE_PASS_BYTES,
    SCHEDULING_SHARE,
    PassCost,
    balanced_block,
    block_bounds,
    carried_pass,
    cluster_block_size,
    curve_order,
    default_block_size,
    n_blocks,
    pair_weights,
    pass_cost,
    pass_tasks,
    product_strip_rows,
    rows_per_block,
    sweep_entries,
    task_memory,
    upper_pairs,
)
from .orthonormal import cholesky_qr, extend_basis, swept_orthonormal
from .products import (
    add,
    add_outputs,
    as_dense,
    block_products,
    dense_rows,
    formed_block_products,
    gather_sum,
    group_products,
    kernel_block_products,
    kernel_matrix,
    kernel_product,
    matrix_product,
    scatter_sum,
    touched_rows,
    tree_sum,
)
from .rowblocks import RowBlocks
from .taskgraph import TaskGraph
from .workspace import retire, scratch

__all__ = ["top_eigh", "Centering", "ProjectionWeights", "center_block", "center_diagonal", "center_precomputed",
           "BLOCK_BYTES", "DEFAULT_BLOCK",
           "SCHEDULING_SHARE", "PassCost", "balanced_block", "block_bounds", "cluster_block_size", "default_block_size",
           "n_blocks", "sweep_entries", "pair_weights", "pass_cost", "pass_tasks", "carried_pass", "INLINE_PASS_BYTES",
           "product_strip_rows",
           "rows_per_block", "task_memory", "curve_order",
           "upper_pairs", "add", "add_outputs", "block_products", "kernel_block_products", "formed_block_products",
           "as_dense", "dense_rows", "kernel_product",
           "scatter_sum", "tree_sum", "touched_rows", "group_products", "gather_sum", "FAN_IN", "scratch", "retire",
           "kernel_matrix", "matrix_product", "TaskGraph", "cholesky_qr", "extend_basis", "swept_orthonormal",
           "RowBlocks"]
