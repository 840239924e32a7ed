"""Task graphs written directly (``dkpca.linalg.TaskGraph``) and the in-memory K built blockwise.

References: plain numpy on the same inputs (sums: exact for these small
integers; kernel blocks: ``Kernel.block`` on all of X, the call the blockwise
build replaced, equal to rounding).
"""

from __future__ import annotations

import dask
import numpy as np
import pytest
from sklearn.metrics.pairwise import polynomial_kernel, rbf_kernel

from dkpca import linalg
from dkpca.execution import local_threads
from dkpca.kernels import RBF, Polynomial
from dkpca.linalg import TaskGraph, kernel_matrix, scatter_sum, touched_rows, upper_pairs


def two_outputs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return a + 1, b * 2


def total(parts: list, picks: list) -> np.ndarray:
    return sum(parts) + sum(outputs[i] for outputs, i in picks)


def test_references_inside_lists_are_resolved():
    g = TaskGraph("t")
    a, b = g.data(np.arange(3.0)), g.data(np.ones(3))
    pair = g.task(two_outputs, a, b)
    out = g.task(total, [a, b], [[pair, 0], [pair, 1]])  # lists, and lists in lists, holding references
    (got,) = dask.compute(*g.outputs([out]), scheduler="sync")
    np.testing.assert_array_equal(got, np.arange(3.0) + 1 + (np.arange(3.0) + 1) + 2)


def test_tree_sums_of_a_graph_equal_the_sums_of_the_block_outputs():
    # a pass's shape: one two-output task per upper-triangular block, 8-way sums per row block
    nb = 12
    g = TaskGraph("t")
    pieces = [g.data(np.full(2, float(i))) for i in range(nb)]
    pairs = upper_pairs(nb)
    tasks = [g.task(two_outputs, pieces[J], pieces[I]) for I, J in pairs]
    sums = dask.compute(*g.outputs(scatter_sum([touched_rows([p]) for p in pairs], tasks, nb, graph=g)),
                        scheduler="threads")
    for R in range(nb):
        want = sum(J + 1.0 for J in range(R, nb)) + sum(2.0 * I for I in range(R))
        np.testing.assert_array_equal(sums[R], np.full(2, want))


def test_annotated_tasks_keep_their_annotations_and_nothing_is_culled():
    # tasks placed on a worker go into their own layers; the layers must form a DAG, or culling (which a
    # distributed client does before submitting) drops keys: data -> placed products -> unplaced sums
    g = TaskGraph("t")
    pieces = [g.data(np.ones(2)) for _ in range(3)]
    placed = []
    for i, p in enumerate(pieces):
        with dask.annotate(workers=[f"tls://w{i % 2}"], allow_other_workers=True):
            placed.append(g.task(two_outputs, p, p))
    sums = scatter_sum([[0, 1]] * 3, placed, 2, graph=g)
    outs = g.outputs(sums)
    hlg = outs[0].__dask_graph__()
    everything = set(hlg.to_dict())
    assert len(everything) == 3 + 3 + 2  # pieces, products, one sum per row block
    assert set(hlg.cull({o.key for o in outs}).to_dict()) == everything
    workers = {layer.annotations["workers"][0] for layer in hlg.layers.values() if layer.annotations}
    assert workers == {"tls://w0", "tls://w1"}
    got = dask.compute(*outs, scheduler="sync")
    np.testing.assert_array_equal(got[0], np.full(2, 6.0))
    np.testing.assert_array_equal(got[1], np.full(2, 6.0))


@pytest.mark.parametrize("kernel, reference", [
    (RBF(0.3), lambda X: rbf_kernel(X, gamma=0.3)),
    (Polynomial(degree=3, gamma=0.2, coef0=1.0), lambda X: polynomial_kernel(X, degree=3, gamma=0.2, coef0=1.0)),
])
def test_kernel_matrix_built_blockwise_on_threads_equals_the_kernel(monkeypatch, kernel, reference):
    monkeypatch.setattr(linalg.products, "MEMORY_BLOCK", 64)  # 300 rows: 5 row blocks, the last short
    X = np.random.default_rng(0).standard_normal((300, 4))
    with local_threads() as pmap:
        K = kernel_matrix(kernel, X, np.float64, map=pmap)
    assert np.array_equal(K, K.T)  # mirrored, not evaluated twice: exactly symmetric
    np.testing.assert_allclose(K, reference(X), rtol=1e-12, atol=1e-13)  # scikit-learn's evaluation
    np.testing.assert_allclose(K, kernel.block(X, None, np.float64), rtol=1e-12, atol=1e-14)


def test_kernel_matrix_of_one_block_is_the_kernel_block():
    X = np.random.default_rng(1).standard_normal((50, 3))
    np.testing.assert_array_equal(kernel_matrix(RBF(0.5), X), RBF(0.5).block(X, None, np.float64))
