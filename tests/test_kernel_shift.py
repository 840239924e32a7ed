"""A stationary kernel's block is taken after shifting both operands by a common point, a robust one.

The shift keeps |x|^2 + |y|^2 - 2 x.y from cancelling where the data sit far from the origin; it was the mean
of the block's first operand, which one extreme row moves: a new row of 1e6 among rows of size 1 put the others'
float32 projections 0.37 off (0.64 in float64 at 1e12), and an extreme training row did the same to the rows of
its tile.  References: the projections of the same rows without the extreme one (float32: to 1e-5 of their
scale, float32 rounding of the kernel entries); eigh of sklearn's float64 rbf kernel (no shift) for a fit.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.kernels import RBF, Laplacian

from .conftest import make_data, reference_eigh

GAMMA = 0.2


@pytest.fixture(scope="module")
def model():
    return dkpca.fit(make_data(300, seed=31), 4, gamma=GAMMA, dtype="float32", solver="dense")


@pytest.mark.parametrize("big, dtype", [(1e12, np.float64), (1e200, np.float64)])
def test_a_new_rows_projection_does_not_depend_on_an_extreme_row_beside_it(model, big, dtype):
    Y = make_data(50, seed=32)
    alone = model.transform(Y.astype(dtype))
    Y[7] = big
    beside = np.delete(model.transform(Y.astype(dtype)), 7, axis=0)
    np.testing.assert_allclose(beside, np.delete(alone, 7, axis=0), rtol=0, atol=1e-5 * np.abs(alone).max())


def test_the_estimators_float32_projection_does_not_depend_on_an_extreme_row_beside_it():
    X = make_data(300, seed=31).astype(np.float32)
    est = dkpca.KernelPCA(n_components=4, kernel="rbf", gamma=GAMMA, eigen_solver="dense").fit(X)
    Y = make_data(250, seed=32).astype(np.float32)
    alone = est.transform(Y)
    Y[5] = 1e6
    beside = np.delete(est.transform(Y), 5, axis=0)
    np.testing.assert_allclose(beside, np.delete(alone, 5, axis=0), rtol=0, atol=1e-5 * np.abs(alone).max())


def test_an_extreme_training_row_leaves_the_fit_of_the_others_accurate():
    X = make_data(200, seed=33)
    X[0] = 1e4  # its kernel row is 0 but its own entry; in float32 with the mean shift the others lost ~1e-2
    lam_ref, _ = reference_eigh(rbf_kernel(X, gamma=GAMMA), 4)
    model = dkpca.fit(X, 4, gamma=GAMMA, dtype="float32", solver="dense")
    np.testing.assert_allclose(model.eigenvalues_, lam_ref, rtol=1e-5)


@pytest.mark.parametrize("kernel", [RBF(gamma=GAMMA), Laplacian(gamma=GAMMA)], ids=["rbf", "laplacian"])
def test_a_far_offset_block_is_as_accurate_as_one_at_the_origin(kernel):
    """What the shift is for: float32 data at 1e4 from the origin (|x|^2 ~ 1e9, where float32 resolves ~1e2),
    their float32 entries within 1e-5 of the float64 kernel of the same values."""
    X = (make_data(100, seed=34) + 1e4).astype(np.float32)
    np.testing.assert_allclose(kernel.block(X, None, np.float32), kernel.block(X.astype(np.float64), None, np.float64),
                               rtol=0, atol=1e-5)
