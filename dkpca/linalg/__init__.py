"""Linear algebra shared by every path: the block grid, block products, tree sums, centring.

Nothing here knows about stores, solvers or dask clusters.
"""

from .centering import Centering, ProjectionWeights, center_block, center_diagonal
from .grid import BLOCK_BYTES, DEFAULT_BLOCK, block_bounds, default_block_size, n_blocks, rows_per_block, upper_pairs
from .products import add, as_dense, block_products, dense_rows, kernel_product, scatter_sum, tree_sum
from .workspace import scratch

__all__ = ["Centering", "ProjectionWeights", "center_block", "center_diagonal", "BLOCK_BYTES", "DEFAULT_BLOCK",
           "block_bounds", "default_block_size", "n_blocks", "rows_per_block", "upper_pairs", "add", "block_products",
           "as_dense", "dense_rows", "kernel_product", "scatter_sum", "tree_sum", "scratch"]
