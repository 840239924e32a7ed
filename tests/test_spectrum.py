"""One spectrum policy (scikit-learn's) on every path, and solvers that honour it on indefinite kernels.

Policy units (:func:`dkpca.solvers.postprocess`) use hand-made spectra whose
expected output follows from scikit-learn's rules (``_check_psd_eigenvalues``
and ``svd_flip`` in ``KernelPCA._fit_transform``): float64 thresholds 1e-5
(ratio) and 1e-10 (absolute) for significant negatives, 1e-12 of the largest
for numerically zero; float32: 5e-3, 1e-6, 2e-7.

Solver checks compare with ``scipy.linalg.eigh`` of the dense centred kernel
(``reference_eigh``).  The sigmoid problem (X: 300 x 5 standard normal,
gamma = 0.03, coef0 = 1, k = 6) is indefinite: lambda_1..5 = 4.5 .. 2.97,
lambda_6 = 0.0129, lambda_7 = 0.0102, and about 250 negative eigenvalues down
to -0.293, i.e. larger in magnitude than lambda_6.  Tolerances: a residual
r = 1e-10 * lambda_1 bounds eigenvalue errors by r^2 / gap (gap lambda_6 -
lambda_7 = 2.7e-3: 1e-16) and sines of eigenvector angles by r / gap (2e-7).
"""

import numpy as np
import pytest
import scipy.linalg
import sklearn.exceptions
from sklearn.decomposition import KernelPCA as SKKernelPCA
from sklearn.metrics.pairwise import rbf_kernel, sigmoid_kernel
from sklearn.utils.extmath import svd_flip

import dkpca
from dkpca import KernelPCA
from dkpca.io import as_dask
from dkpca.kernels import RBF, Linear, Sigmoid
from dkpca.operator import MatrixFreeKernelOperator
from dkpca.solvers import ConvergenceWarning, EigResult, flip_signs, get_solver, postprocess

from .conftest import reference_eigh


def _result(lam, U=None):
    lam = np.asarray(lam)
    U = np.eye(lam.size) if U is None else U
    return EigResult(lam, U, passes=1, residuals=np.arange(lam.size, dtype=float), converged=True, solver="test")


@pytest.fixture(scope="module")
def sigmoid_problem():
    X = np.random.default_rng(0).standard_normal((300, 5))
    K = sigmoid_kernel(X, gamma=0.03, coef0=1)
    return X, K


def _sin_angle(A, B):
    return float(np.sin(np.max(scipy.linalg.subspace_angles(A, B))))


# -- the policy ------------------------------------------------------------------------------


def test_ranked_by_value_not_magnitude():
    # -4e-11 is a round-off negative (|.| < 1e-10): it becomes 0 and ranks below 1e-11, which a
    # ranking by magnitude would not do; vectors and residuals follow their eigenvalues.
    res = postprocess(_result([1e-11, 5.0, -4e-11, 2.0]), remove_zero=False)
    np.testing.assert_array_equal(res.eigenvalues, [5.0, 2.0, 1e-11, 0.0])
    np.testing.assert_array_equal(res.eigenvectors, np.eye(4)[:, [1, 3, 0, 2]])
    np.testing.assert_array_equal(res.residuals, [1.0, 3.0, 0.0, 2.0])


def test_signs_follow_svd_flip():
    U = np.random.default_rng(1).standard_normal((30, 5))
    expected, _ = svd_flip(U.copy(), None)
    np.testing.assert_array_equal(flip_signs(U), expected)
    res = postprocess(_result([3.0, 2.0, 1.0, 0.5, 0.25], U), remove_zero=False)
    np.testing.assert_array_equal(res.eigenvectors, expected)


def test_significant_negative_raises_sklearn_message():
    # an indefinite "kernel": scikit-learn raises on it; dkpca's message starts with scikit-learn's
    K = np.diag([5.0, 3.0, -1.0, 0.0])
    with pytest.raises(ValueError, match="There are significant negative eigenvalues") as sk:
        SKKernelPCA(kernel="precomputed").fit(K)
    with pytest.raises(ValueError, match="There are significant negative eigenvalues") as ours:
        KernelPCA(kernel="precomputed").fit(K)
    assert str(ours.value).startswith(str(sk.value))
    with pytest.raises(ValueError, match=r"There are significant negative eigenvalues \(0.2 of the maximum positive\)"):
        postprocess(_result([5.0, -1.0]), remove_zero=False)


def test_all_negative_raises():
    with pytest.raises(ValueError, match=r"All eigenvalues are negative \(maximum is -1\)"):
        postprocess(_result([-5.0, -1.0]), remove_zero=False)


@pytest.mark.parametrize("lam, precision", [
    ([5.0, -4e-5], "float64"),    # ratio 8e-6 < 1e-5
    ([5.0, -1e-11], "float64"),   # absolute 1e-11 < 1e-10
    ([5.0, -1e-3], "float32"),    # ratio 2e-4 < 5e-3 (float64 would raise)
])
def test_small_negatives_become_zero(lam, precision):
    res = postprocess(_result(lam), remove_zero=False, precision=precision)
    np.testing.assert_array_equal(res.eigenvalues, [5.0, 0.0])


def test_numerically_zero_dropped_with_remove_zero():
    # 4e-12 < 1e-12 * 5: numerically zero; kept (as 0) or dropped on request
    kept = postprocess(_result([5.0, 4e-12, 1.0]), remove_zero=False)
    np.testing.assert_array_equal(kept.eigenvalues, [5.0, 1.0, 0.0])
    dropped = postprocess(_result([5.0, 4e-12, 1.0]), remove_zero=True)
    np.testing.assert_array_equal(dropped.eigenvalues, [5.0, 1.0])
    assert dropped.eigenvectors.shape == (3, 2) and dropped.residuals.shape == (2,)
    assert dropped.info["zero_eigenvalues_removed"] == 1


def test_fit_drops_zero_components(tmp_path):
    # rank-3 linear data, 5 components asked: dkpca.fit publishes only the 3 non-zero ones
    X = np.random.default_rng(0).standard_normal((120, 3)) @ np.random.default_rng(1).standard_normal((3, 6))
    model = dkpca.fit(X, n_components=5, kernel=Linear(), dtype="float64", store=tmp_path / "z.zarr")
    lam, _ = reference_eigh(X @ X.T, 3)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-10)
    assert model.eigenvectors_.shape == (120, 3)


# -- solvers on an indefinite kernel -----------------------------------------------------------


@pytest.mark.parametrize("solver", ["randomized", "lanczos"])
def test_iterative_solvers_rank_indefinite_spectrum_by_value(sigmoid_problem, solver):
    """The reproduction: randomized used to return -0.118 as component 6 (true: 0.0129), converged."""
    X, K = sigmoid_problem
    lam, U = reference_eigh(K, 6)
    op = MatrixFreeKernelOperator(as_dask(X, block_rows=100), Sigmoid(gamma=0.03, coef0=1.0), dtype=np.float64)
    res = postprocess(get_solver(solver)(op, 6, tol=1e-10, max_passes=1000, rng=0), remove_zero=False)
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues, lam, rtol=1e-8)
    assert _sin_angle(res.eigenvectors, U) < 1e-6


def test_randomized_shift_stays_zero_on_psd_kernel():
    # PSD: Ritz values are never significantly negative, so the iteration is plain subspace iteration
    X = np.random.default_rng(2).standard_normal((200, 3))
    op = MatrixFreeKernelOperator(as_dask(X, block_rows=100), RBF(0.5), dtype=np.float64)
    res = get_solver("randomized")(op, 4, tol=1e-10, max_passes=200, rng=0)
    assert res.converged and res.info["shift"] == 0.0


def test_estimator_randomized_sigmoid_default_params_matches_dense(sigmoid_problem):
    # scikit-learn's sigmoid defaults (gamma = 1 / n_features, coef0 = 1); scikit-learn's own randomized
    # solver ranks by magnitude and raises here.  Projections: eigenvector error <= r / gap (see module doc).
    X, _ = sigmoid_problem
    dense = KernelPCA(6, kernel="sigmoid", eigen_solver="dense").fit(X)
    rnd = KernelPCA(6, kernel="sigmoid", eigen_solver="randomized", random_state=0).fit(X)
    np.testing.assert_allclose(rnd.eigenvalues_, dense.eigenvalues_, rtol=1e-8)
    Z = dense.transform(X[:40])
    np.testing.assert_allclose(rnd.transform(X[:40]), Z, atol=1e-6 * np.abs(Z).max(), rtol=0)


def test_convergence_warning_is_sklearns(sigmoid_problem):
    X, _ = sigmoid_problem
    assert ConvergenceWarning is sklearn.exceptions.ConvergenceWarning
    est = KernelPCA(3, kernel="rbf", gamma=0.2, eigen_solver="lanczos", max_iter=1, tol=1e-12, random_state=0)
    with pytest.warns(sklearn.exceptions.ConvergenceWarning, match="stopped after 1 passes"):
        est.fit(X)


# -- ARPACK ------------------------------------------------------------------------------------


def test_arpack_solver_matches_dense():
    # ARPACK at tol=0 (machine precision) and eigh on the same operator: eigenvalues to 1e-10
    # relative, eigenvectors (same sign rule) to 1e-8 (eps * lambda_1 / gap with gap >= 1e-3 lambda_1)
    X = np.random.default_rng(7).standard_normal((250, 5)) * np.array([3.0, 2.0, 1.2, 0.7, 0.3])
    op = MatrixFreeKernelOperator(as_dask(X, block_rows=250), RBF(0.2), dtype=np.float64)
    arpack = postprocess(get_solver("arpack")(op, 4, tol=0.0, max_passes=None, rng=0), remove_zero=False)
    dense = postprocess(get_solver("dense")(op, 4), remove_zero=False)
    assert arpack.solver == "arpack" and arpack.converged
    np.testing.assert_allclose(arpack.eigenvalues, dense.eigenvalues, rtol=1e-10)
    np.testing.assert_allclose(arpack.eigenvectors, dense.eigenvectors, atol=1e-8)
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 4)
    np.testing.assert_allclose(arpack.eigenvalues, lam, rtol=1e-10)
