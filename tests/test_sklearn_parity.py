"""scikit-learn parity: scikit-learn's own KernelPCA tests, run against dkpca.

Reference: ``sklearn/decomposition/tests/test_kernel_pca.py`` of the installed
scikit-learn (its expectations and tolerances, unchanged), with the module's
``KernelPCA`` name bound to :class:`dkpca.KernelPCA`.  Nothing of scikit-learn's
code is copied: the module is imported from the installed package and run by
pytest in a subprocess (its fixtures, e.g. ``global_random_seed``, come from
scikit-learn's own conftest).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import sklearn
from sklearn.metrics.pairwise import sigmoid_kernel
from sklearn.preprocessing import KernelCenterer
from sklearn.utils.estimator_checks import check_estimator

import dkpca
from dkpca import KernelPCA
from dkpca.io import as_dask
from dkpca.kernels import NonFiniteKernelError, Sigmoid
from dkpca.operator import MatrixFreeKernelOperator
from dkpca.solvers import ConvergenceWarning, get_solver, postprocess
from dkpca.sparse import SparseKernelPCA
from dkpca.storage import FitStore, SolverCheckpoint

from .conftest import reference_eigh

SITE = os.path.dirname(os.path.dirname(sklearn.__file__))
SKLEARN_TESTS = os.path.join(os.path.dirname(sklearn.__file__), "decomposition", "tests", "test_kernel_pca.py")

#: the run: pytest on scikit-learn's file with a plugin that rebinds the module's KernelPCA after collection
#: (the name is looked up when each test runs, so every test fits dkpca's estimator)
RUNNER = textwrap.dedent("""
    import sys
    import pytest
    import dkpca

    class UseDkpca:
        def pytest_collection_modifyitems(self, items):
            for item in items:
                item.module.KernelPCA = dkpca.KernelPCA

    # confcutdir: site-packages, so that scikit-learn's conftest (its fixtures) is loaded
    sys.exit(pytest.main([sys.argv[1], "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--confcutdir", sys.argv[2],
                          "-W", "ignore::DeprecationWarning"], plugins=[UseDkpca()]))
""")


def run_sklearn_tests(tmp_path) -> subprocess.CompletedProcess:
    # cwd outside the repository: pytest's rootdir and ini are scikit-learn's, not dkpca's
    return subprocess.run([sys.executable, "-c", RUNNER, SKLEARN_TESTS, SITE], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.skipif(not os.path.exists(SKLEARN_TESTS), reason="scikit-learn installed without its tests")
def test_sklearn_kernel_pca_tests_pass_against_dkpca(tmp_path):
    """All of scikit-learn's test_kernel_pca.py passes with dkpca.KernelPCA in place of scikit-learn's."""
    proc = run_sklearn_tests(tmp_path)
    tail = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, tail
    # all passed, none failed, errored or skipped: e.g. "39 passed, 30 warnings in 3.21s" (scikit-learn 1.9: 39 tests)
    summary = re.fullmatch(r"(\d+) passed(, \d+ warnings?)? in .*", proc.stdout.strip().splitlines()[-1])
    assert summary and int(summary.group(1)) >= 39, tail



# -- the loose ends found by those tests and by check_estimator -------------------------------------------


def test_non_symmetric_precomputed_kernel_is_centred_as_kernel_centerer():
    """Reference: sklearn.preprocessing.KernelCenterer (row and column means apart).

    K = S + a 1^T + 1 b^T with S symmetric and doubly centred, all integers: KernelCenterer gives S exactly,
    so the fit on K must equal the fit on S bit for bit; new rows are centred as KernelCenterer.transform
    centres them (scores to rounding, 1e-10 of their largest).
    """
    rng = np.random.default_rng(0)
    n = 32  # means of integers divide exactly: KernelCenterer gives S bit for bit
    A = rng.integers(-9, 10, (n, n))
    A = A + A.T + 4 * n * np.eye(n, dtype=int)
    S = n * n * A - n * A.sum(0)[None, :] - n * A.sum(1)[:, None] + A.sum()  # n^2 H A H, integers
    K = (S + rng.integers(-50, 50, n)[:, None] + rng.integers(-50, 50, n)[None, :]).astype(float)
    centerer = KernelCenterer().fit(K)
    np.testing.assert_array_equal(centerer.transform(K), S)
    for solver in ("dense", "arpack", "randomized"):
        est = KernelPCA(3, kernel="precomputed", eigen_solver=solver, random_state=0).fit(K)
        ref = KernelPCA(3, kernel="precomputed", eigen_solver=solver, random_state=0).fit(S.astype(float))
        np.testing.assert_array_equal(est.eigenvalues_, ref.eigenvalues_)
        np.testing.assert_array_equal(est.eigenvectors_, ref.eigenvectors_)
    new = rng.standard_normal((4, n)) * 100
    expected = centerer.transform(new) @ (est.eigenvectors_ / np.sqrt(est.eigenvalues_))
    np.testing.assert_allclose(est.transform(new), expected, rtol=0, atol=1e-10 * np.abs(expected).max())


@pytest.mark.parametrize("solver", ["dense", "arpack", "lanczos"])
def test_a_precomputed_kernel_not_symmetric_even_centred_is_refused(solver):
    """Before: accepted without a word -- dense, arpack and randomized gave three answers (scikit-learn's dense
    solver reads the lower triangle only) and lanczos raised numpy's LinAlgError from its orthonormalisation."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((80, 4))
    K = X @ X.T + 0.5 * rng.standard_normal((80, 80))
    with pytest.raises(ValueError, match=r"not symmetric, even centred .* symmetrise it: \(K \+ K\.T\) / 2"):
        KernelPCA(3, kernel="precomputed", eigen_solver=solver).fit(K)
    fitted = KernelPCA(3, kernel="precomputed", eigen_solver=solver, random_state=0).fit((K + K.T) / 2)
    assert fitted.eigenvalues_.shape == (3,)


def test_sparse_n_components_above_kernels_kept_keeps_them_and_warns():
    """scikit-learn's convention for fewer components than asked: keep what there is (n_components_ says how
    many), warn; reference: the same fit with n_components=None."""
    X = np.random.default_rng(0).standard_normal((60, 3))
    every = SparseKernelPCA(noise_variance=0.1, random_state=0).fit(X)
    with pytest.warns(UserWarning, match=f"n_components=50 exceeds the {every.n_components_} components"):
        est = SparseKernelPCA(n_components=50, noise_variance=0.1, random_state=0).fit(X)
    assert est.n_components_ == every.n_components_ < 50
    np.testing.assert_array_equal(est.transform(X), every.transform(X))


def test_sparse_check_estimator_with_n_components():
    """check_estimator fits tiny data (a kernel or two kept) with n_components=3: every check passes.

    max_iter=300 keeps it fast: its tiny data sit on flat likelihood ridges (about 24,000
    updates to tol), and the checks test conventions, not convergence."""
    check_estimator(SparseKernelPCA(n_components=3, max_iter=300))


def test_poly_overflow_names_the_kernel():
    """dkpca.fit(10 * X, kernel="poly", degree=400): a ValueError naming the kernel and its parameters
    (was IndexError: index -1 is out of bounds), in memory, and the same from the estimator."""
    X = np.random.default_rng(0).standard_normal((200, 5))
    with pytest.raises(ValueError, match=r"non-finite .*'poly'.*'degree': 400") as err:
        dkpca.fit(10 * X, 3, kernel="poly", degree=400)
    assert isinstance(err.value, NonFiniteKernelError)
    with pytest.raises(ValueError, match=r"non-finite .*'poly'.*'degree': 400"):
        KernelPCA(3, kernel="poly", degree=400).fit(10 * X)


@pytest.fixture(scope="module")
def sigmoid_problem():
    """Indefinite: lambda_1..5 = 4.5 .. 2.97, lambda_6 = 0.0129, lambda_7 = 0.0102 and 15 negative eigenvalues
    down to -0.293, all larger in magnitude than lambda_6 (tests/test_spectrum.py's problem)."""
    X = np.random.default_rng(0).standard_normal((300, 5))
    return X, sigmoid_kernel(X, gamma=0.03, coef0=1)


def test_randomized_indefinite_reaches_dense_eigenvalues_within_default_passes(sigmoid_problem):
    """Reference: scipy.linalg.eigh of the centred K; eigenvalues to 1e-6 relative within dkpca.fit's
    default 60 passes at tol 1e-10 (a residual r bounds eigenvalue errors by r^2 / gap)."""
    X, K = sigmoid_problem
    lam, _ = reference_eigh(K, 6)
    op = MatrixFreeKernelOperator(as_dask(X, block_rows=100), Sigmoid(gamma=0.03, coef0=1.0), dtype=np.float64)
    res = postprocess(get_solver("randomized")(op, 6, tol=1e-10, max_passes=60, rng=0), remove_zero=False)
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues, lam, rtol=1e-6)


def test_fit_randomized_indefinite_matches_dense(sigmoid_problem):
    """dkpca.fit's randomized solver with its defaults: the dense solver's eigenvalues to 1e-6 relative."""
    X, _ = sigmoid_problem
    kern = Sigmoid(gamma=0.03, coef0=1.0)
    dense = dkpca.fit(X, 6, kernel=kern, solver="dense")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        rnd = dkpca.fit(X, 6, kernel=kern, solver="randomized", random_state=0)
    np.testing.assert_allclose(rnd.eigenvalues_, dense.eigenvalues_, rtol=1e-6)


def test_randomized_widened_block_resumes_from_its_checkpoint(sigmoid_problem, tmp_path):
    """A block widened for the negative eigenvalues is saved at its width and resumed (not restarted):
    reference eigh, eigenvalues to 1e-8 relative after the resumed run converges."""
    X, K = sigmoid_problem
    lam, _ = reference_eigh(K, 6)
    path = str(tmp_path / "s.zarr")
    FitStore.at(path).open_for_write()
    ck = SolverCheckpoint(path, {"k": 6}, interval=0)
    op = MatrixFreeKernelOperator(as_dask(X, block_rows=100), Sigmoid(gamma=0.03, coef0=1.0), dtype=np.float64)
    part = get_solver("randomized")(op, 6, tol=1e-10, max_passes=5, rng=0, checkpoint=ck)
    assert not part.converged and ck.load().arrays["Q"].shape[1] == part.info["block_size"] > 16
    rest = get_solver("randomized")(op, 6, tol=1e-10, max_passes=60, rng=0, checkpoint=ck)
    assert rest.info["resumed_at_pass"] == 5 and rest.converged
    np.testing.assert_allclose(postprocess(rest, remove_zero=False).eigenvalues, lam, rtol=1e-8)


@pytest.mark.parametrize("q", [1, 2, 3])
def test_randomized_iterated_power_gets_scikit_learns_budget_and_accuracy(q):
    """An int ``iterated_power`` q is scikit-learn's budget of 2q + 2 products with K (range finder, two per power
    iteration, the projection).  Reference: eigh of the dense centred K; dkpca's top-5 eigenvalue error stays
    within 10x scikit-learn's at the same q (measured 1.6-5.6x: Rayleigh-Ritz on the iterate against singular
    values of one more product) -- at q + 1 passes (before) it was 3.7e-2 at q = 1 against 6e-6.  The warning that
    tol was not reached names iterated_power, the parameter that set the budget."""
    from sklearn.decomposition import KernelPCA as SKKernelPCA

    X = np.random.default_rng(0).standard_normal((300, 4))
    exact = SKKernelPCA(n_components=5, kernel="rbf", eigen_solver="dense").fit(X).eigenvalues_
    theirs = SKKernelPCA(n_components=5, kernel="rbf", eigen_solver="randomized", iterated_power=q,
                         random_state=0).fit(X).eigenvalues_
    with pytest.warns(ConvergenceWarning, match=rf"after {2 * q + 2} passes.*raise iterated_power"):
        ours = KernelPCA(n_components=5, kernel="rbf", eigen_solver="randomized", iterated_power=q,
                         random_state=0).fit(X).eigenvalues_
    assert np.abs(ours - exact).max() <= 10 * np.abs(theirs - exact).max()


@pytest.mark.parametrize("solver,k,limits", [
    ("auto", 70, {"tol": 1e-2}),                     # scikit-learn: dense (k >= 10); dkpca's auto: Lanczos
    ("auto", 20, {"max_iter": 3}),                   # scikit-learn: dense; dkpca's auto: ARPACK (failed to converge)
    ("randomized", 5, {"tol": 0.5, "max_iter": 1}),  # scikit-learn's randomized ignores both
], ids=["auto-lanczos-tol", "auto-arpack-max_iter", "randomized"])
def test_tol_and_max_iter_bind_only_where_scikit_learn_lets_them(solver, k, limits):
    """scikit-learn applies tol and max_iter to ARPACK alone and solves exactly elsewhere; they cut dkpca's solvers
    short there (projections 0.4 off, eigenvalues 40x too small, an ArpackNoConvergence traceback).  Reference:
    scikit-learn's dense solve of the same data, to 1e-8 relative (float64, machine-precision solves)."""
    from sklearn.decomposition import KernelPCA as SKKernelPCA

    X = np.random.default_rng(0).standard_normal((800, 8))
    ref = SKKernelPCA(n_components=k, kernel="rbf", eigen_solver="dense").fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        ours = KernelPCA(n_components=k, kernel="rbf", eigen_solver=solver, random_state=0, **limits).fit(X)
    assert ours.eigen_solver_ != "dense"  # the solver the limits would have cut short
    np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=1e-8)
    Z, Zref = ours.transform(X[:20]), ref.transform(X[:20])
    np.testing.assert_allclose(Z * np.sign(np.sum(Z * Zref, axis=0)), Zref, atol=1e-6 * np.abs(Zref).max())


@pytest.mark.parametrize("solver", ["arpack", "lanczos"])
def test_tol_still_binds_arpack_and_lanczos(solver):
    """Where scikit-learn applies tol (ARPACK), and in dkpca's Lanczos, a loose tol still stops the solve early: a
    residual above the default's 1e-10 (the report's), at fewer ARPACK iterations or passes."""
    X = np.random.default_rng(0).standard_normal((800, 8))
    loose = KernelPCA(n_components=5, kernel="rbf", eigen_solver=solver, tol=1e-3, random_state=0).fit(X)
    tight = KernelPCA(n_components=5, kernel="rbf", eigen_solver=solver, random_state=0).fit(X)
    np.testing.assert_allclose(loose.eigenvalues_, tight.eigenvalues_, rtol=1e-3)
    assert not np.allclose(loose.eigenvectors_, tight.eigenvectors_ * np.sign(np.sum(
        loose.eigenvectors_ * tight.eigenvectors_, axis=0)), rtol=0, atol=1e-12)


def test_arpack_asked_for_every_component_solves_by_eigh_as_scikit_learn_does():
    """n_components >= n with eigen_solver='arpack': scikit-learn's eigsh call solves its dense K by eigh with scipy's
    RuntimeWarning; dkpca does the same (it raised ValueError).  Reference: scikit-learn's eigenvalues, to rounding."""
    from sklearn.decomposition import KernelPCA as SKKernelPCA

    X = np.random.default_rng(1).standard_normal((80, 4))
    params = {"n_components": 80, "kernel": "rbf", "eigen_solver": "arpack", "random_state": 0}
    with pytest.warns(RuntimeWarning, match="k >= N"):
        theirs = SKKernelPCA(**params).fit(X).eigenvalues_
    with pytest.warns(RuntimeWarning, match=r"k >= N for N \* N square matrix"):
        ours = KernelPCA(**params).fit(X).eigenvalues_
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12 * theirs[0])
