"""Solvers (dense, randomized, lanczos, nystrom) x operators (stored, matrix-free) vs scipy.linalg.eigh.

Reference: ``scipy.linalg.eigh`` of the dense centred kernel H K H, with K
evaluated naively block by block exactly as the operator does (float64).

Spectra (n = 480, k = 6):

* ``fast``: 1-D Gaussian data, rbf -- eigenvalues fall geometrically (by
  ~0.3 per index; lambda_6 ~ 7e-3 lambda_1);
* ``slow``: isotropic Gaussian in 40-D, wide rbf -- lambda_{k+1}/lambda_k ~ 0.95,
  the hard case for subspace iteration;
* ``degenerate``: points on a circle (2-D), rbf -- the kernel matrix is
  (nearly) circulant, so eigenvalues come in pairs (lambda_1 = lambda_2, ...)
  that agree to ~1e-8 lambda_1;
  individual eigenvectors are not defined there, so subspaces of the
  degenerate pairs are compared through principal angles.

Tolerances (float64 storage; ``tol = 1e-10`` for the iterative solvers):

* eigenvalues: a Ritz value with residual ``r`` lies within ``r^2 / delta``
  of an eigenvalue (delta: gap to the rest of the spectrum, >= 1e-3 lambda_1
  here), far below the asserted ``1e-8 * lambda_i`` per eigenvalue;
* subspaces: Davis-Kahan, ``sin angle <= ||R|| / gap``; asserted ``< 1e-6``
  for the top-k space and for each (near-)degenerate cluster, whose gap to
  the rest is >= 1e-3 lambda_1;
* reported residuals equal the true ``||K~ u - theta u||`` to 1e-9 lambda_1.

Pass budgets (products with K~ to reach tol = 1e-10; measured, then ~1.5x):

============  ====  ====  ==========
solver        fast  slow  degenerate
============  ====  ====  ==========
dense            1     1           1
randomized       5   150           8
lanczos          5    16           5
============  ====  ====  ==========

(measured over 4 seeds: randomized 2-3 / 80-100 / 4-5, lanczos 2-3 / 10-11 / 3)

and block Lanczos must need fewer passes than subspace iteration on ``slow``.
Nystroem is approximate: its eigenvalues are bounded above by the exact ones
(``K_nys <= K`` in the Loewner order, Weyl), its error is non-increasing in m
for nested landmark sets and decreases with m for the random methods, and it
is exact (1e-8) when every point is a landmark.
"""

import time
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.linalg
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.gram import build_gram
from dkpca.io import as_dask, scan
from dkpca.kernels import RBF, Linear
from dkpca.operator import InMemoryKernelOperator, MatrixFreeKernelOperator, StoredKernelOperator
from dkpca.planning import choose
from dkpca.solvers import SOLVERS, PassReport, get_solver, lanczos, postprocess, relaxed
from dkpca.solvers.lanczos import solve as lanczos_solve
from dkpca.solvers.randomized import solve as randomized_solve
from dkpca.storage import FitStore, SolverCheckpoint, gram_bytes

from .conftest import PrecisionSpy, centered, reference_eigh

N, K_COMP, BLOCK, TOL = 480, 6, 128, 1e-10

BUDGET = {
    ("dense", "fast"): 1, ("dense", "slow"): 1, ("dense", "degenerate"): 1,
    ("randomized", "fast"): 5, ("randomized", "slow"): 150, ("randomized", "degenerate"): 8,
    ("lanczos", "fast"): 5, ("lanczos", "slow"): 16, ("lanczos", "degenerate"): 5,
}


def _data(spectrum: str):
    rng = np.random.default_rng(2024)
    if spectrum == "fast":
        return rng.standard_normal((N, 1)), RBF(0.5)
    if spectrum == "slow":
        return rng.standard_normal((N, 40)), RBF(0.5 / 40)
    t = 2 * np.pi * np.arange(N) / N
    X = np.column_stack([np.cos(t), np.sin(t)]) + 1e-9 * rng.standard_normal((N, 2))
    return X, RBF(2.0)


def _dense_kernel(X, kernel, block=BLOCK, dtype=np.float64):
    """K as the operator sees it: upper blocks evaluated in ``dtype``, mirrored, as float64."""
    n = len(X)
    Kd = np.empty((n, n))
    for i in range(0, n, block):
        for j in range(i, n, block):
            blk = kernel.block(X[i:i + block], None if i == j else X[j:j + block], dtype)
            Kd[i:i + block, j:j + block] = blk
            Kd[j:j + block, i:i + block] = blk.T
    return Kd


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    """Per spectrum: X, kernel, dense centred K, reference eigenpairs, a float64 Gram store."""
    out = {}
    for spectrum in ("fast", "slow", "degenerate"):
        X, kernel = _data(spectrum)
        Kc = centered(_dense_kernel(X, kernel))
        lam, U = scipy.linalg.eigh(Kc)
        path = str(tmp_path_factory.mktemp(spectrum) / "s.dkpca.zarr")
        Xd = as_dask(X, block_rows=BLOCK)
        info = build_gram(FitStore.at(path), Xd, kernel, scan(Xd), dtype="float64")
        # the training data where dkpca.fit puts it (the nystrom solver reads it from a stored operator)
        zarr.open_group(path, mode="r+").create_array("data/X", data=X, chunks=(BLOCK, X.shape[1]))
        out[spectrum] = dict(X=X, kernel=kernel, Kc=Kc, lam=lam[::-1], U=U[:, ::-1], gram=info)
    return out


def _operator(p, mode):
    if mode == "stored":
        return StoredKernelOperator(p["gram"])
    return MatrixFreeKernelOperator(as_dask(p["X"], block_rows=BLOCK), p["kernel"], dtype=np.float64)


def _clusters(lam, k, rel=1e-6):
    """Index groups of eigenvalues within rel * lambda_1 of each other (top k)."""
    groups, cur = [], [0]
    for i in range(1, k):
        if lam[i - 1] - lam[i] <= rel * lam[0]:
            cur.append(i)
        else:
            groups.append(cur)
            cur = [i]
    groups.append(cur)
    return groups


def _max_angle_sin(A, B):
    return float(np.sin(np.max(scipy.linalg.subspace_angles(A, B))))


def test_problem_spectra_are_what_the_docstring_says(problems):
    lam = problems["fast"]["lam"]
    assert np.all(lam[1:K_COMP + 1] / lam[:K_COMP] < 0.6) and lam[K_COMP - 1] > 1e-3 * lam[0]
    lam = problems["slow"]["lam"]
    assert lam[K_COMP] / lam[K_COMP - 1] > 0.9 and lam[K_COMP - 1] > 0.5 * lam[0]
    lam = problems["degenerate"]["lam"]
    # pairs (lambda_1, lambda_2), (lambda_3, lambda_4), ... agree to 1e-7; gaps between pairs >= 1e-3
    groups = _clusters(lam, K_COMP + 2)
    assert groups == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert lam[K_COMP - 1] - lam[K_COMP] > 1e-3 * lam[0]


@pytest.mark.parametrize("mode", ["stored", "matrix-free"])
@pytest.mark.parametrize("spectrum", ["fast", "slow", "degenerate"])
@pytest.mark.parametrize("solver", ["dense", "randomized", "lanczos"])
def test_exact_solvers_against_eigh(problems, solver, spectrum, mode):
    p = problems[spectrum]
    op = _operator(p, mode)
    k = K_COMP  # degenerate: 3 whole pairs, so the top-k subspace is well defined
    res = postprocess(get_solver(solver)(op, k, tol=TOL, max_passes=200, rng=0), remove_zero=False)
    lam, U, Kc = p["lam"][:k], p["U"][:, :k], p["Kc"]
    assert res.converged and res.solver == solver
    np.testing.assert_allclose(res.eigenvalues, lam, rtol=1e-8, atol=0)
    # Davis-Kahan: whole top-k subspace and every (near-)degenerate cluster inside it
    assert _max_angle_sin(res.eigenvectors, U) < 1e-6
    for g in _clusters(p["lam"], k):
        assert _max_angle_sin(res.eigenvectors[:, g], U[:, g]) < 1e-6, g
    np.testing.assert_allclose(res.eigenvectors.T @ res.eigenvectors, np.eye(k), atol=1e-10)
    true_res = np.linalg.norm(Kc @ res.eigenvectors - res.eigenvectors * res.eigenvalues, axis=0)
    assert true_res.max() <= 10 * TOL * lam[0]
    if solver != "dense":
        np.testing.assert_allclose(res.residuals, true_res, rtol=0, atol=1e-9 * lam[0])
        assert len(res.history) == res.passes
    assert 1 <= res.passes <= BUDGET[solver, spectrum], res.passes
    assert op.passes == res.passes  # one operator product per reported pass


def test_lanczos_needs_fewer_passes_than_subspace_iteration_on_slow_decay(problems):
    p = problems["slow"]
    counts = {}
    for name, solve in (("randomized", randomized_solve), ("lanczos", lanczos_solve)):
        op = _operator(p, "matrix-free")
        res = solve(op, K_COMP, tol=1e-8, max_passes=200, rng=1)
        assert res.converged
        counts[name] = res.passes
    # measured over 3 seeds: randomized 65-80, lanczos 9 -- require at least a factor 3
    assert 3 * counts["lanczos"] <= counts["randomized"], counts


@pytest.mark.parametrize("solver", ["dense", "randomized", "lanczos"])
def test_callback_reports_every_pass(problems, solver):
    """callback gets one PassReport per pass: numbers 1..passes, the residual history, a wall time."""
    op = _operator(problems["fast"], "matrix-free")
    reports: list[PassReport] = []
    res = get_solver(solver)(op, K_COMP, tol=TOL, max_passes=200, rng=0, callback=reports.append)
    assert [r.pass_number for r in reports] == list(range(1, res.passes + 1))
    # exact equality: the report carries the very float the solver appended to its history
    assert [r.max_relative_residual for r in reports] == res.history
    assert all(r.seconds >= 0 for r in reports)


def test_lanczos_is_one_block_product_per_pass(problems):
    p = problems["slow"]
    op = _operator(p, "matrix-free")
    widths = []
    orig = op.matmat

    def spy(V, single=False):
        widths.append(V.shape)
        return orig(V, single)

    op.matmat = spy
    res = lanczos_solve(op, K_COMP, tol=1e-8, max_passes=50, rng=0, width=16)
    assert len(widths) == res.passes and all(w == (N, 16) for w in widths)
    assert res.info["block_size"] == 16 and res.info["basis_size"] == 16 * res.passes


def test_lanczos_thick_restart_keeps_accuracy(problems):
    p = problems["slow"]
    op = _operator(p, "matrix-free")
    ell = 6 + 10
    res = postprocess(lanczos_solve(op, K_COMP, tol=TOL, max_passes=200, rng=0, max_basis=3 * ell),
                      remove_zero=False)
    assert res.converged and res.info["restarts"] >= 1 and res.info["basis_size"] <= 3 * ell
    np.testing.assert_allclose(res.eigenvalues, p["lam"][:K_COMP], rtol=1e-8)
    true_res = np.linalg.norm(p["Kc"] @ res.eigenvectors - res.eigenvectors * res.eigenvalues, axis=0)
    np.testing.assert_allclose(res.residuals, true_res, rtol=0, atol=1e-9 * p["lam"][0])


def test_lanczos_resumes_from_checkpoint(problems, tmp_path):
    p = problems["slow"]
    path = str(tmp_path / "ck.zarr")
    FitStore.at(path).open_for_write()
    ck = SolverCheckpoint(path, {"test": "lanczos"}, interval=0)
    first = lanczos_solve(_operator(p, "matrix-free"), K_COMP, tol=TOL, max_passes=4, rng=0, checkpoint=ck)
    assert not first.converged and ck.saves == 4 and ck.load().passes == 4
    op = _operator(p, "matrix-free")
    res = postprocess(lanczos_solve(op, K_COMP, tol=TOL, max_passes=BUDGET["lanczos", "slow"], rng=0,
                                    checkpoint=ck), remove_zero=False)
    assert res.info["resumed_at_pass"] == 4 and res.converged
    assert res.passes == 4 + op.passes <= BUDGET["lanczos", "slow"] and res.history[:4] == first.history
    np.testing.assert_allclose(res.eigenvalues, p["lam"][:K_COMP], rtol=1e-8)
    assert _max_angle_sin(res.eigenvectors, p["U"][:, :K_COMP]) < 1e-6
    # a checkpoint of another problem (other n) is not used
    other = lanczos_solve(MatrixFreeKernelOperator(p["X"][:200], p["kernel"], block=BLOCK), 3, tol=1e-8, rng=0,
                          checkpoint=ck)
    assert "resumed_at_pass" not in other.info


def test_lanczos_basis_stays_orthonormal_past_convergence():
    """Each product is orthogonalised against the newest blocks only, then the next block once against
    the whole basis.  On a spectrum halving at every index (top 6 converge within 2 passes of block 8)
    and tol=0, passes continue until the Krylov space is exhausted (eigenvalues below 1e3 eps): plain
    Lanczos would lose orthogonality there and return ghost copies of lambda_1 (without the sweep
    against the whole basis: Ritz values 1.006, 1.004, ..., U^T U off by 2.3).  Asserted: the exact
    eigenvalues to 1e-12 and orthonormal Ritz vectors to 1e-12."""
    rng = np.random.default_rng(0)
    n = 480
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lam = 0.5 ** np.arange(n)
    K = (Q * lam) @ Q.T

    class Operator:  # the solver's protocol: n, passes, matmat
        passes = 0

        def __init__(self):
            self.n = n

        def matmat(self, V, single=False):
            self.passes += 1
            return K @ V

    res = lanczos_solve(Operator(), K_COMP, tol=0.0, max_passes=30, rng=0, width=8)
    np.testing.assert_allclose(res.eigenvalues, lam[:K_COMP], rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.eigenvectors.T @ res.eigenvectors, np.eye(K_COMP), atol=1e-12)


@pytest.mark.parametrize("gram", ["store", "memory"])
def test_lanczos_on_a_flat_float32_spectrum_drops_what_the_basis_holds(tmp_path, gram):
    """123 Gaussian points in 37-D, rbf gamma 0.111: K is near I, K~'s spectrum flat. A single-precision pass
    left directions along the basis above the panel's floor, which the sweep against the basis emptied: numpy's
    "Matrix is not positive definite" ended the fit (K stored in float32). Now eigh's eigenvalues of the centred
    float64 K to 1e-5 lambda_1 (float32 K: entry errors ~6e-8, the eigenvalues ~1)."""
    from sklearn.metrics.pairwise import rbf_kernel

    X = np.random.default_rng(46).standard_normal((123, 37))
    gamma = 0.11115159731850881
    lam, _ = reference_eigh(rbf_kernel(X, gamma=gamma), 7)
    model = dkpca.fit(X, 7, gamma=gamma, solver="lanczos", gram=gram, dtype="float32", random_state=0,
                      store=tmp_path / "s.dkpca.zarr")
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=0, atol=1e-5 * lam[0])


def test_lanczos_on_a_vanishing_centred_kernel_finds_no_component():
    """Points 1e-8 apart, rbf: K~ is rounding (every solver: no component, a warning); block Lanczos raised numpy's
    LinAlgError from its panel's Cholesky QR."""
    X = np.random.default_rng(0).standard_normal((120, 22)) * 1e-8
    with pytest.warns(UserWarning, match="numerically zero"):
        model = dkpca.fit(X, 3, solver="lanczos", gram="memory", random_state=0)
    assert model.eigenvalues_.size == 0
    est = dkpca.KernelPCA(3, kernel="rbf", eigen_solver="lanczos", random_state=0).fit(X)
    assert np.all(est.eigenvalues_ == 0)


def test_randomized_stops_at_the_rounding_of_products_with_k():
    """300 points 1e-8 apart, laplacian: centring cancels all but ~1e-9 of K, so tol 1e-10 lambda_1 (the estimator's
    in memory) lies below what products with K resolve (~u n c sqrt(n)); all 296 components ran the 500 passes
    allowed. Now a few passes, eigh's eigenvalues to 1e-6 lambda_1 (dense's error here: ~1e-7)."""
    from sklearn.metrics.pairwise import laplacian_kernel

    from dkpca.eigensolve import solve_kernel_matrix

    X = np.random.default_rng(0).standard_normal((300, 17)) * 1e-8
    K = laplacian_kernel(X, gamma=0.005)
    lam, _ = reference_eigh(K, 296)
    res, _ = solve_kernel_matrix(K, 296, "randomized", tol=1e-10, max_passes=500, random_state=0, remove_zero=False)
    assert res.passes <= 5
    np.testing.assert_allclose(res.eigenvalues, lam, rtol=0, atol=1e-6 * lam[0])


def test_lanczos_leaves_out_the_ritz_pairs_of_passes_that_cannot_converge(problems, monkeypatch):
    # slow decay (10 passes): a pass whose residual, carried forward at the
    # rate of the last two computed, stays 10x above tol is not solved; the
    # result is the reference's all the same, from a computed last residual
    # (Ritz steps counted as costly, whatever they cost next to these small products)
    monkeypatch.setattr("dkpca.solvers.ritzsteps.RITZ_SHARE", 0.0)
    p = problems["slow"]
    res = postprocess(lanczos_solve(_operator(p, "stored"), K_COMP, tol=TOL, max_passes=BUDGET["lanczos", "slow"],
                                    rng=0), remove_zero=False)
    skipped = [i for i, h in enumerate(res.history) if np.isnan(h)]
    assert skipped and skipped[-1] < len(res.history) - 1 and res.history[-1] <= TOL
    assert "nan, nan, nan" not in str(res.history)  # at most two passes in a row
    assert not any(np.isnan(res.history[i]) for i in (0, 1))  # two residuals before any prediction
    np.testing.assert_allclose(res.eigenvalues, p["lam"][:K_COMP], rtol=1e-8)


class _SlowProducts:
    """An in-memory operator whose products take ``seconds`` each: a pass over a large K, to a solver."""

    def __init__(self, K, seconds):
        self.op, self.seconds = InMemoryKernelOperator(K), seconds

    def __getattr__(self, name):
        return getattr(self.op, name)

    def matmat(self, V, single=False):
        time.sleep(self.seconds)
        return self.op.matmat(V, single)


def test_lanczos_computes_every_ritz_step_that_costs_little_next_to_its_pass(problems, monkeypatch):
    # Leaving a pass's Ritz pairs out saves only their cost and risks a whole pass when the prediction is
    # late (issue 38: a warm start's fifth pass).  With products of 100 ms and "little" at most a product's
    # time, the slow problem's Ritz steps (T of order <= 160: milliseconds) are all taken, and the answer is
    # the reference's in no more passes.
    p = problems["slow"]
    K = p["kernel"].block(p["X"], None, np.float64)
    monkeypatch.setattr("dkpca.solvers.ritzsteps.RITZ_SHARE", 0.0)  # Ritz steps never cheap: the prediction decides
    fast = lanczos_solve(InMemoryKernelOperator(K), K_COMP, tol=TOL, max_passes=BUDGET["lanczos", "slow"], rng=0)
    assert any(np.isnan(fast.history))  # the same problem leaves some out
    monkeypatch.setattr("dkpca.solvers.ritzsteps.RITZ_SHARE", 1.0)
    slow = lanczos_solve(_SlowProducts(K, 0.1), K_COMP, tol=TOL, max_passes=BUDGET["lanczos", "slow"], rng=0)
    assert slow.converged and not any(np.isnan(slow.history)) and slow.passes <= fast.passes
    np.testing.assert_allclose(postprocess(slow, remove_zero=False).eigenvalues, p["lam"][:K_COMP], rtol=1e-8)


def test_lanczos_with_a_checkpoint_computes_every_pass_residual(problems, tmp_path):
    p = problems["slow"]
    path = str(tmp_path / "ck.zarr")
    FitStore.at(path).open_for_write()
    ck = SolverCheckpoint(path, {"test": "lanczos"}, interval=0)
    res = lanczos_solve(_operator(p, "stored"), K_COMP, tol=TOL, max_passes=BUDGET["lanczos", "slow"], rng=0,
                        checkpoint=ck)
    assert res.converged and not any(np.isnan(res.history))


def test_a_pass_without_a_residual_is_logged_in_words(problems, caplog, monkeypatch):
    # K in memory: no checkpoint, so Lanczos may leave passes out (Ritz steps counted as costly, whatever
    # they cost next to these small products)
    monkeypatch.setattr("dkpca.solvers.ritzsteps.RITZ_SHARE", 0.0)
    p = problems["slow"]
    with caplog.at_level("INFO", logger="dkpca"):
        dkpca.fit(p["X"], n_components=K_COMP, kernel=p["kernel"], solver="lanczos", gram="memory",
                  dtype="float64", tol=TOL, random_state=0)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pass ")]
    assert any("residual not computed" in line for line in lines) and "nan" not in " ".join(lines), lines


def test_lanczos_default_block_is_k_plus_ten_and_subspace_iteration_doubles_k():
    from dkpca.solvers import block_width

    assert block_width("lanczos", 10_000, 256) == 266
    assert block_width("randomized", 10_000, 256) == 512
    assert block_width("lanczos", 10_000, 10) == block_width("randomized", 10_000, 10) == 20
    assert block_width("lanczos", 100, 95) == 100  # capped at n


def test_lanczos_finds_invariant_subspace_of_low_rank_kernel():
    # linear kernel on 5 features: rank(K~) = 5 < block; the Krylov space closes after one pass
    rng = np.random.default_rng(3)
    X = rng.standard_normal((200, 5)) * np.array([5.0, 4, 3, 2, 1])
    op = MatrixFreeKernelOperator(as_dask(X, block_rows=64), Linear(), dtype=np.float64)
    res = postprocess(lanczos_solve(op, 3, tol=1e-12, max_passes=20, rng=0), remove_zero=False)
    lam = scipy.linalg.eigvalsh(centered(X @ X.T))[::-1][:3]
    assert res.converged and res.passes <= 2
    np.testing.assert_allclose(res.eigenvalues, lam, rtol=1e-10)


def test_lanczos_bad_options(problems):
    op = _operator(problems["fast"], "matrix-free")
    with pytest.raises(ValueError, match="width=3"):
        lanczos_solve(op, 6, width=3)
    with pytest.raises(ValueError, match="max_basis"):
        lanczos_solve(op, 6, max_basis=10)
    with pytest.raises(ValueError, match="start must have shape"):
        lanczos_solve(op, 6, start=np.ones((N, 2)))


# -- Nystroem ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["stored", "matrix-free"])
@pytest.mark.parametrize("spectrum", ["fast", "slow", "degenerate"])
def test_nystrom_with_every_point_a_landmark_is_exact(problems, spectrum, mode):
    p = problems[spectrum]
    op = _operator(p, mode)  # stored: X comes from the store's data/X
    k = K_COMP
    res = postprocess(get_solver("nystrom")(op, k, n_landmarks=N, rng=0, exact_residuals=True), remove_zero=False)
    lam = p["lam"][:k]
    np.testing.assert_allclose(res.eigenvalues, lam, rtol=1e-8)
    for g in _clusters(p["lam"], k):
        assert _max_angle_sin(res.eigenvectors[:, g], p["U"][:, g]) < 1e-6
    assert res.residuals.max() <= 1e-8 * lam[0]
    assert res.info["relative_trace_error"] < 1e-8
    c = res.info["centering"]
    np.testing.assert_allclose(c["row_means"], op.row_means, rtol=0, atol=1e-10)
    assert c["grand_mean"] == pytest.approx(op.grand_mean, rel=1e-10)


@pytest.mark.parametrize("threads", [1, 3, 7])
def test_nystrom_rows_split_among_any_number_of_threads_give_the_exact_result(problems, threads):
    """The passes over X run as one share of equal rows per thread, cut across X's row blocks (480 rows in
    blocks of 128: 7 threads cut every block); with every point a landmark the result is exact (1e-8)."""
    p = problems["fast"]
    op = _operator(p, "matrix-free")
    with dask.config.set(num_workers=threads):
        res = postprocess(get_solver("nystrom")(op, K_COMP, n_landmarks=N, rng=0), remove_zero=False)
    np.testing.assert_allclose(res.eigenvalues, p["lam"][:K_COMP], rtol=1e-8)
    np.testing.assert_allclose(res.info["centering"]["row_means"], op.row_means, rtol=0, atol=1e-10)


@pytest.mark.parametrize("spectrum", ["fast", "slow"])
def test_nystrom_error_non_increasing_for_nested_landmarks(problems, spectrum):
    p = problems[spectrum]
    op = _operator(p, "matrix-free")
    perm = np.random.default_rng(5).permutation(N)
    lam_ref = p["lam"][:K_COMP]
    errs, traces = [], []
    K = _dense_kernel(p["X"], p["kernel"])
    for m in (20, 40, 80, 160, 320):
        res = postprocess(get_solver("nystrom")(op, K_COMP, landmarks=perm[:m]), remove_zero=False)
        # K_nys <= K (Loewner), so every eigenvalue of H K_nys H is below the exact one
        assert np.all(res.eigenvalues <= lam_ref * (1 + 1e-10))
        errs.append(float(np.max((lam_ref - res.eigenvalues) / lam_ref)))
        traces.append(res.info["trace_error"])
        # direct formula: trace(K - C W^+ C^T), and the centred approximation's spectrum
        S = np.sort(perm[:m])
        K_nys = K[:, S] @ np.linalg.pinv(K[np.ix_(S, S)], rcond=np.sqrt(np.finfo(float).eps), hermitian=True) @ K[S, :]
        assert res.info["trace_error"] == pytest.approx(np.trace(K - K_nys), rel=1e-6, abs=1e-9 * np.trace(K))
        lam_nys = scipy.linalg.eigvalsh(centered(K_nys))[::-1][:K_COMP]
        np.testing.assert_allclose(res.eigenvalues, lam_nys, rtol=1e-7)
        # the reported residual is an upper bound of the true one
        true_res = np.linalg.norm(p["Kc"] @ res.eigenvectors - res.eigenvectors * res.eigenvalues, axis=0)
        assert np.all(true_res <= res.residuals * (1 + 1e-8))
    assert all(b <= a * (1 + 1e-9) + 1e-12 for a, b in zip(errs, errs[1:], strict=False)), errs
    assert all(b <= a * (1 + 1e-9) + 1e-9 for a, b in zip(traces, traces[1:], strict=False)), traces
    assert errs[-1] < 0.5 * errs[0]


@pytest.mark.parametrize("method", ["uniform", "rpcholesky", "greedy"])
def test_nystrom_error_decreases_with_m(problems, method):
    p = problems["fast"]
    op = _operator(p, "matrix-free")
    lam_ref = p["lam"][:K_COMP]
    errs = []
    for m in (12, 48, 192):
        res = postprocess(get_solver("nystrom")(op, K_COMP, n_landmarks=m, landmarks=method, rng=7),
                          remove_zero=False)
        errs.append(float(np.max(np.abs(lam_ref - res.eigenvalues) / lam_ref)))
        assert res.info["n_landmarks"] == m and res.info["landmarks"] == method
    assert errs[1] < errs[0] and errs[2] < errs[1], errs
    assert errs[2] < 1e-2


def test_nystrom_pivoted_cholesky_beats_uniform_on_unbalanced_clusters():
    """RPCholesky controls the trace error of the approximation (Chen et al. 2022, Thm. 5.1).

    97 % of the points in one cluster: uniform landmarks rarely see the small
    clusters.  Measured relative trace errors at m = 32 over 4 seeds: uniform
    0.024-0.032, rpcholesky 0.003-0.005.
    """
    rng = np.random.default_rng(11)
    sizes = [466, 7, 7]
    centers = np.array([[0.0, 0], [6, 0], [0, 6]])
    X = np.vstack([c + 0.5 * rng.standard_normal((s, 2)) for c, s in zip(centers, sizes, strict=True)])
    kernel = RBF(1.0)
    op = MatrixFreeKernelOperator(as_dask(X, block_rows=BLOCK), kernel, dtype=np.float64)
    K = _dense_kernel(X, kernel)
    err = {}
    for method in ("uniform", "rpcholesky"):
        e = []
        for seed in range(3):
            res = get_solver("nystrom")(op, 4, n_landmarks=32, landmarks=method, rng=seed)
            e.append(res.info["relative_trace_error"])
        err[method] = float(np.mean(e))
    assert err["rpcholesky"] < 0.5 * err["uniform"], err
    assert 0 <= res.info["trace_error"] <= np.trace(K)


def test_nystrom_needs_data_and_valid_options(problems):
    p = problems["fast"]

    class Bare:
        n = N

    with pytest.raises(ValueError, match="needs the training data"):
        get_solver("nystrom")(Bare(), 2)
    res = get_solver("nystrom")(Bare(), 2, X=p["X"], kernel=p["kernel"], n_landmarks=50, rng=0)
    assert res.eigenvectors.shape == (N, 2)
    op = _operator(p, "matrix-free")
    with pytest.raises(ValueError, match="n_landmarks"):
        get_solver("nystrom")(op, 6, n_landmarks=3)
    with pytest.raises(ValueError, match="landmarks='best'"):
        get_solver("nystrom")(op, 6, landmarks="best")
    with pytest.raises(ValueError, match="distinct row indices"):
        get_solver("nystrom")(op, 6, landmarks=[0, 1, N + 5, 3, 4, 5])


# -- matrix-free operator ---------------------------------------------------------------------


@pytest.mark.parametrize("chunks", [(100, 40), (50, 20), ((200, 80, 200), (40,))])
def test_matrix_free_operator_any_chunking(problems, chunks):
    """Irregular row chunks or split columns are rechunked to one task per row block."""
    p = problems["slow"]
    X = da.from_array(p["X"], chunks=chunks)
    op = MatrixFreeKernelOperator(X, p["kernel"], dtype=np.float64, block=BLOCK)
    V = np.random.default_rng(0).standard_normal((N, 5))
    np.testing.assert_allclose(op.matmat(V), p["Kc"] @ V, rtol=0, atol=1e-11 * np.abs(p["Kc"]).sum(1).max())
    assert op.trace == pytest.approx(np.trace(p["Kc"]), rel=1e-12)
    assert op.setup_passes == 1 and op.passes == 1


def test_matrix_free_operator_numpy_input_float32_and_probe(problems):
    p = problems["fast"]
    V = np.random.default_rng(1).standard_normal((N, 4))
    op = MatrixFreeKernelOperator(p["X"], p["kernel"], dtype=np.float32, block=BLOCK, probe=V)
    # float32 blocks, float64 accumulation: the error is the float32 rounding of K only
    Kc32 = centered(_dense_kernel(p["X"], p["kernel"], dtype=np.float32))
    got = op.matmat(V)  # primed: fused into the statistics pass
    assert op.fused_passes == 1
    np.testing.assert_allclose(got, Kc32 @ V, rtol=0, atol=1e-9 * np.abs(Kc32 @ V).max())
    np.testing.assert_allclose(got, p["Kc"] @ V, rtol=0, atol=1e-5 * np.abs(p["Kc"] @ V).max())


def test_matrix_free_without_statistics_refuses_products(problems):
    p = problems["fast"]
    op = MatrixFreeKernelOperator(p["X"], p["kernel"], block=BLOCK, statistics=False)
    assert op.setup_passes == 0 and op.centering is None
    with pytest.raises(ValueError, match="statistics=False"):
        op.matmat(np.ones((N, 1)))
    with pytest.raises(ValueError, match="probe needs statistics"):
        MatrixFreeKernelOperator(p["X"], p["kernel"], block=BLOCK, statistics=False, probe=np.ones((N, 1)))


# -- through dkpca.fit: both gram modes, report ------------------------------------------------


@pytest.mark.parametrize("gram", ["store", "recompute"])
@pytest.mark.parametrize("solver", ["lanczos", "randomized"])
def test_fit_iterative_both_gram_modes(problems, tmp_path, solver, gram):
    p = problems["slow"]
    model = dkpca.fit(p["X"], n_components=K_COMP, kernel=p["kernel"], solver=solver, gram=gram,
                      dtype="float64", tol=TOL, chunk_size=BLOCK, store=tmp_path / "m.zarr", random_state=0,
                      max_passes=BUDGET[solver, "slow"])
    np.testing.assert_allclose(model.eigenvalues_, p["lam"][:K_COMP], rtol=1e-8)
    assert _max_angle_sin(model.eigenvectors_, p["U"][:, :K_COMP]) < 1e-6
    r = model.report
    assert r["solver"] == solver and r["gram"]["mode"] == gram and r["converged"]
    assert len(r["residuals"]) == K_COMP and r["max_relative_residual"] <= TOL
    assert len(r["pass_seconds"]) == r["passes"] == len(r["history"]) <= BUDGET[solver, "slow"]
    # the first product is fused into the Gram build (store: one read pass saved) or into the
    # centering pass that the matrix-free operator makes anyway
    assert r["fused_passes"] == 1 and r["passes_over_K"] == r["passes"] - (gram == "store")
    assert ("gram" in zarr.open_group(str(tmp_path / "m.zarr"), mode="r")) == (gram == "store")


def test_fit_lanczos_float32_store_reaches_float64_accuracy_of_rounded_K(problems, tmp_path):
    # the fused probe of a float32 build is float64 for lanczos (a float32 product would cap accuracy)
    p = problems["slow"]
    model = dkpca.fit(p["X"], n_components=K_COMP, kernel=p["kernel"], solver="lanczos", gram="store",
                      dtype="float32", tol=1e-9, chunk_size=BLOCK, store=tmp_path / "m.zarr", random_state=0)
    assert model.report["converged"] and model.report["max_relative_residual"] <= 1e-9
    np.testing.assert_allclose(model.eigenvalues_, p["lam"][:K_COMP], rtol=1e-5)


@pytest.mark.parametrize("gram", ["store", "recompute"])
def test_fit_lanczos_on_a_float32_rbf_k_multiplies_late_passes_in_float32_only_where_k_is_read(problems, tmp_path,
                                                                                              monkeypatch, gram):
    """Through dkpca.fit: a stored float32 K's late passes are single (report ``solver_info.single_passes``),
    a recomputed one's never (its passes are the kernel's evaluation); both give eigh's eigenvalues of the
    centred fl32(K) to 1e-9 relative.  Every Ritz step is made (their skipping is timed)."""
    monkeypatch.setattr(lanczos, "cheap_ritz", lambda *a: True)
    p = problems["slow"]
    lam, _ = reference_eigh(_dense_kernel(p["X"], p["kernel"], dtype=np.float32), K_COMP)
    model = dkpca.fit(p["X"], n_components=K_COMP, kernel=p["kernel"], solver="lanczos", gram=gram,
                      dtype="float32", tol=1e-10, chunk_size=BLOCK, store=tmp_path / "m.zarr", random_state=0)
    r = model.report
    assert r["converged"] and r["max_relative_residual"] <= 1e-10
    assert (r["solver_info"]["single_passes"] >= 1) == (gram == "store")
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-9)


def test_lanczos_multiplies_the_pass_that_completes_the_space_in_float64(tmp_path):
    """n = 300, k = 100: block Lanczos's third panel fills the space, which makes its Ritz pairs exact -- from
    float64 products only.  That pass was single before: its bound (6.0e-6 of lambda_1) stood as the residual of
    a space with no room left to lower it -- NOT converged, with a ConvergenceWarning, though the eigenvalues were
    right.  Now: converged, no warning, eigh's eigenvalues of the centred fl32(K) to tol = 1e-6 of lambda_1
    (measured 6e-8: the rounding of the float32 eigenvalues_)."""
    X = np.random.default_rng(5).standard_normal((300, 4))
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.3).astype(np.float32), 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dkpca.solvers.ConvergenceWarning)
        model = dkpca.fit(X, 100, gamma=0.3, solver="lanczos", gram="store", store=tmp_path / "s.zarr",
                          random_state=0, dtype="float32")
    r = model.report
    assert r["converged"] and r["solver_info"]["single_passes"] == 0 and r["solver_info"]["basis_size"] >= 300
    np.testing.assert_allclose(model.eigenvalues_.astype(np.float64), lam, rtol=0, atol=1e-6 * lam[0])


def test_fit_nystrom_transform_and_report(problems, tmp_path):
    p = problems["fast"]
    Xn = p["X"][:50] + 0.05
    model = dkpca.fit(p["X"], n_components=4, kernel=p["kernel"], solver="nystrom", dtype="float64",
                      chunk_size=BLOCK, store=tmp_path / "m.zarr", random_state=0)
    r = model.report
    assert r["solver"] == "nystrom" and r["gram"]["mode"] == "none" and r["passes_over_K"] == 0
    assert "gram" not in zarr.open_group(str(tmp_path / "m.zarr"), mode="r")
    assert len(r["pass_seconds"]) == r["passes"] and r["solver_info"]["n_landmarks"] == N
    # n_landmarks defaults to min(n, max(10 k, 500)) = n here: exact, and transform agrees with the exact formula
    lam, U = p["lam"][:4], p["U"][:, :4]
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)
    Kx = p["kernel"].block(Xn, p["X"], np.float64)
    K = _dense_kernel(p["X"], p["kernel"])
    r_, c = K.mean(axis=1), K.mean()
    Kxc = Kx - r_[None, :] - Kx.mean(axis=1, keepdims=True) + c
    Z_ref = Kxc @ U / np.sqrt(lam)
    Z = model.transform(Xn)
    np.testing.assert_allclose(np.abs(Z), np.abs(Z_ref), rtol=0, atol=1e-7 * np.abs(Z_ref).max())
    with pytest.raises(ValueError, match="gram='store' does not apply"):
        dkpca.fit(p["X"], n_components=2, solver="nystrom", gram="store", store=tmp_path / "x.zarr")


# -- auto --------------------------------------------------------------------------------------

_CHEAP_KERNEL = {"kernel_block": 0.01, "write_block": 0.2, "read_block": 0.2, "product_block": 0.01, "passes": 20}
_CHEAP_DISK = {"kernel_block": 0.5, "write_block": 0.02, "read_block": 0.02, "product_block": 0.01, "passes": 20}


@pytest.mark.parametrize("kw, solver, gram, why", [
    (dict(n=200, k=5), "dense", "store", "dense eigh"),
    (dict(n=2000, k=5), "lanczos", "store", "block Lanczos"),
    (dict(n=2000, k=5, temporary=True), "arpack", "memory", "ARPACK"),
    # MEMORY_GRAM_BYTES (128 MiB) counts K in its own precision: n <= 5,792 in float32, 4,096 in float64
    (dict(n=5792, k=5, gram="auto", temporary=True, memory_bytes=16 * 10**9), "arpack", "memory", "ARPACK"),
    (dict(n=5793, k=5, gram="auto", temporary=True, memory_bytes=16 * 10**9), "lanczos", "store", "block Lanczos"),
    (dict(n=4096, k=5, gram="auto", temporary=True, memory_bytes=16 * 10**9, dtype="float64"), "arpack", "memory",
     "ARPACK"),
    (dict(n=4097, k=5, gram="auto", temporary=True, memory_bytes=16 * 10**9, dtype="float64"), "lanczos", "store",
     "block Lanczos"),
    (dict(n=2000, k=300, temporary=True), "dense", "memory", "share of the spectrum"),
    # LANCZOS_MIN_K = 64 components: block Lanczos on a K in memory (USPS-like: n = 7,291, k = 256)
    (dict(n=7291, k=256, temporary=True, dtype="float64", memory_bytes=16 * 10**9, gram="memory"), "lanczos",
     "memory", "one GEMM a pass"),
    (dict(n=5000, k=64, temporary=True), "lanczos", "memory", "one GEMM a pass"),
    (dict(n=5000, k=63, temporary=True), "arpack", "memory", "ARPACK"),
    (dict(n=2000, k=5, temporary=True, fraction=True), "dense", "memory", "fraction"),
    # a small K (not measured) in float32 keeps block Lanczos: 3 passes at n = 20,000 against subspace
    # iteration's 4, no slower, and its Ritz record starts an update better
    (dict(n=20_000, k=5, temporary=True), "lanczos", "store", "block Lanczos"),
    (dict(n=21_000, k=10), "lanczos", "store", "K is small"),
    (dict(n=20_000, k=5, dtype="float64"), "lanczos", "store", "block Lanczos"),
    (dict(n=19_000, k=5), "lanczos", "store", "block Lanczos"),
    (dict(n=2000, k=5, solver="arpack"), "arpack", "memory", "only with K in memory"),
    (dict(n=10_000, k=3000), "dense", "store", "most of the spectrum"),
    # measured: both solvers weighed (issue 40), block Lanczos's ~9 passes beat subspace iteration's 20
    (dict(n=50_000, k=10, measured=_CHEAP_DISK), "lanczos", "store", "measured pass"),
    (dict(n=50_000, k=10, measured=_CHEAP_KERNEL), "lanczos", "recompute", "measured pass"),
    (dict(n=50_000, k=10, free_bytes=10**9), "lanczos", "recompute", "free at the store"),
    (dict(n=50_000, k=10, memory_bytes=10**8, measured=_CHEAP_DISK), "randomized", "store", "would not fit"),
    (dict(n=50_000, k=10, solver="nystrom"), "nystrom", "recompute", "never reads K"),
    (dict(n=50_000, k=10, solver="randomized", gram="recompute"), "randomized", "recompute", "requested"),
])
def test_choose_rules(kw, solver, gram, why):
    kw = {"memory_bytes": 16 * 10**9, "free_bytes": 10**13, "block": 4096, "workers": 2, "solver": "auto",
          "gram": "auto", **kw}
    n, k = kw.pop("n"), kw.pop("k")
    c = choose(n, k, kw.pop("solver"), kw.pop("gram"), **kw)
    assert (c.solver, c.gram) == (solver, gram), c.reason
    assert why in c.reason and c.reason.startswith("solver=")
    if "measured" in kw:
        est = c.details["estimated_seconds"]
        assert (est["store"] <= est["recompute"]) == (gram == "store")
        # the mode is weighed for block Lanczos where its basis fits, which is expected to need fewer
        # passes than subspace iteration's 20
        assert (c.details["expected_passes"] < 20) == ("would not fit" not in c.reason)


@pytest.mark.parametrize("n, solver, gram, passes, threads, compiled", [
    (20_000, "randomized", "store", None, 2, False),      # 1e8 entries a thread: not worth ~3 s of compiling
    (60_000, "randomized", "store", None, 2, False),      # 9e8
    (80_000, "randomized", "store", None, 2, True),       # 1.6e9
    (40_000, "lanczos", "recompute", None, 2, True),      # 4 assumed passes: 1.6e9
    (40_000, "lanczos", "recompute", 2, 2, False),        # 2 estimated passes: 8e8
    (200_000, "lanczos", "recompute", 5, 64, True),       # 1.6e9 on a 64-thread cluster
    (200_000, "lanczos", "recompute", 5, 128, False),     # 7.8e8 on 128 threads
    (5_000, "arpack", "memory", None, 2, False),
    (500_000, "nystrom", "recompute", 5, 2, False),       # n x m slices only
])
def test_use_compiled_exp_counts_entries_a_thread(n, solver, gram, passes, threads, compiled, nothing_compiled):
    from dkpca.planning import use_compiled_exp

    got, why = use_compiled_exp(n, solver, gram, passes, threads)
    assert got == compiled, why
    assert ("compiled" in why) == compiled


@pytest.mark.parametrize("value, n, compiled", [
    (False, 200_000, False),     # a count that would compile (1e11 entries a thread), switched off
    ("false", 200_000, False),   # as an environment variable or YAML string gives it
    (True, 2_000, True),         # a count that would not (1e6), switched on
    ("TRUE", 2_000, True),
    ("auto", 2_000, False),      # the count decides
])
def test_dask_config_compiled_exp_overrides_the_count(value, n, compiled):
    from dkpca.planning import use_compiled_exp

    with dask.config.set({"dkpca.compiled-exp": value}):
        got, why = use_compiled_exp(n, "lanczos", "recompute", 5, 2)
    assert got is compiled, why
    assert ("dkpca.compiled-exp" in why) == (str(value).lower() != "auto")


def test_dask_config_compiled_exp_does_not_apply_to_k_in_memory():
    from dkpca.planning import use_compiled_exp

    with dask.config.set({"dkpca.compiled-exp": True}):
        assert use_compiled_exp(2_000, "arpack", "memory")[0] is False


def test_a_bad_dask_config_compiled_exp_is_refused_by_name():
    with dask.config.set({"dkpca.compiled-exp": "sometimes"}), pytest.raises(ValueError, match="dkpca.compiled-exp"):
        choose(200_000, 10, "lanczos", "recompute", workers=2, memory_bytes=16 * 10**9)


def test_choose_records_the_exp_decision(nothing_compiled):
    c = choose(200_000, 10, "lanczos", "recompute", workers=2, memory_bytes=16 * 10**9)
    assert c.compiled_exp and "G kernel entries a thread" in c.details["exp"]
    assert not choose(2000, 10, "lanczos", "store", workers=2).compiled_exp


def test_choose_solver_compat_and_names(tmp_path):
    assert choose(100, 2, "auto").solver == "dense"
    c = choose(100, 2, "lanczos")
    assert (c.solver, c.reason) == ("lanczos", "solver=lanczos: solver requested; gram=store: requested")
    assert set(SOLVERS) == {"auto", "dense", "randomized", "lanczos", "nystrom", "arpack"}
    # names are validated once, at the front end (dkpca.request), before any data is read
    X = np.zeros((10, 2))
    with pytest.raises(ValueError, match="solver='magic'"):
        dkpca.fit(X, 2, solver="magic", store=tmp_path / "m.zarr")
    with pytest.raises(ValueError, match="gram='disk'"):
        dkpca.fit(X, 2, gram="disk", store=tmp_path / "m.zarr")
    with pytest.raises(ValueError, match="solver='magic' is unknown"):
        get_solver("magic")


def test_fit_auto_small_gram_is_stored_without_measuring(tmp_path):
    """n just above the dense limit: auto picks lanczos; K (41 MB) is stored, no timing involved."""
    X = np.random.default_rng(0).standard_normal((3200, 3))
    model = dkpca.fit(X, n_components=3, gamma=0.5, store=tmp_path / "a.zarr", random_state=0, tol=1e-6)
    r = model.report
    assert (r["solver"], r["gram"]["mode"]) == ("lanczos", "store")
    assert "solver=lanczos" in r["solver_reason"] and "gram=store: K is small" in r["solver_reason"]
    assert "measured" not in r["auto"] and r["auto"]["gram_bytes"] == gram_bytes(3200, model.block, "float32")
    assert r["converged"] and len(r["pass_seconds"]) == r["passes"] and len(r["residuals"]) == 3
    assert "gram" in zarr.open_group(str(tmp_path / "a.zarr"), mode="r")


def test_fit_auto_measures_a_pass_for_large_gram(tmp_path, monkeypatch):
    """Above SMALL_GRAM_BYTES the gram mode comes from a measured block (here: threshold lowered)."""
    import dkpca.planning.auto

    monkeypatch.setattr(dkpca.planning.auto, "SMALL_GRAM_BYTES", 0)
    X = np.random.default_rng(0).standard_normal((3200, 3))
    model = dkpca.fit(X, n_components=3, gamma=0.5, store=tmp_path / "a.zarr", random_state=0, tol=1e-6)
    r = model.report
    mode = r["gram"]["mode"]
    assert r["solver"] == "lanczos" and mode in ("store", "recompute")
    assert f"gram={mode}: measured pass" in r["solver_reason"]
    assert set(r["auto"]["measured"]) >= {"kernel_block", "write_block", "read_block", "product_block", "passes"}
    est = r["auto"]["estimated_seconds"]
    assert (est["store"] <= est["recompute"]) == (mode == "store")
    assert ("gram" in zarr.open_group(str(tmp_path / "a.zarr"), mode="r")) == (mode == "store")
    assert r["converged"] and len(r["pass_seconds"]) == r["passes"]


# -- a float32 K held in memory (the estimator's K for float32 input) ----------------------------------
def test_float32_kernel_in_memory_multiplies_exactly_unless_single_is_asked(blobs):
    """Without ``single`` a float32 K's product is that of fl32(K) in float64 (to float64 rounding);
    with it, a float32 GEMM (to float32 rounding, ~1e-6 relative here)."""
    K32 = rbf_kernel(blobs, gamma=0.1).astype(np.float32)
    V = np.random.default_rng(0).standard_normal((K32.shape[0], 4))
    op = InMemoryKernelOperator(K32)
    exact = K32.astype(np.float64) @ V
    np.testing.assert_allclose(op.raw_matmat(V), exact, rtol=1e-12, atol=1e-12 * np.abs(exact).max())
    single = op.raw_matmat(V, single=True)
    assert single.dtype == np.float64
    np.testing.assert_allclose(single, exact, rtol=0, atol=1e-5 * np.abs(exact).max())


def _slow_float32(problems):
    """The ``slow`` problem's K in float32 (lambda_{k+1}/lambda_k ~ 0.95: some ten passes) as the operator of
    an rbf fit (entries > 0), and the reference: eigh of the centred fl32(K) in float64."""
    p = problems["slow"]
    K32 = _dense_kernel(p["X"], p["kernel"], dtype=np.float32).astype(np.float32)
    lam, U = reference_eigh(K32.astype(np.float64), K_COMP)
    return InMemoryKernelOperator(K32, p["kernel"]), lam, U


def test_a_float32_rbf_operator_bounds_its_single_precision_products_and_others_make_none(problems):
    """``single_error`` bounds ``||fl32(K) v - K v||`` for unit v (measured on this K: ~1e-2 of the bound);
    None for a float64 K or a kernel whose entries may be negative."""
    op, _, U = _slow_float32(problems)
    V = np.linalg.qr(np.hstack([U, np.random.default_rng(0).standard_normal((N, 10))]))[0]
    errors = np.linalg.norm(op.matmat(V, single=True) - op.matmat(V), axis=0)
    assert np.all(errors <= op.single_error) and errors.max() >= 1e-3 * op.single_error
    p = problems["slow"]
    assert InMemoryKernelOperator(op.K.astype(np.float64), p["kernel"]).single_error is None
    assert InMemoryKernelOperator(op.K, Linear()).single_error is None
    assert InMemoryKernelOperator(op.K).single_error is None  # the kernel not known


@pytest.fixture
def every_ritz_step(monkeypatch):
    """Block Lanczos makes every pass's Ritz step (it leaves out some whose cost, timed, is large next to a
    product's: on this small in-memory K that would depend on the machine), so that the residuals that
    decide its single-precision passes are known at every pass."""
    monkeypatch.setattr(lanczos, "cheap_ritz", lambda *a: True)


def test_lanczos_late_passes_multiply_in_single_precision_and_report_a_true_bound(problems, every_ritz_step):
    """Where the operator bounds a float32 product's error, passes that start from small residuals multiply
    in float32; every reported residual stays at least the true ``||K~ u - theta u||`` (a float64 product of
    fl32(K)) and at most tol; the eigenvalues equal eigh's to 1e-12 relative (a residual of 1e-10 lambda_1,
    squared, over a gap of ~1e-3 lambda_1: 1e-17; eigh's own rounding ~1e-14).  ``relaxed=False``: no
    product is single, the same eigenvalues.  (On this spectrum the bound, 1.9e-4 of lambda_1, lets only
    passes from residuals under ~1e-8 multiply in float32.)"""
    op, lam, _ = _slow_float32(problems)
    counted = PrecisionSpy(op)
    res = lanczos_solve(counted, K_COMP, tol=1e-10, max_passes=40, rng=0)
    assert res.converged and res.info["single_passes"] == counted.single >= 1
    true = np.linalg.norm(op.matmat(res.eigenvectors) - res.eigenvectors * res.eigenvalues, axis=0)
    assert np.all(true <= res.residuals) and res.residuals.max() <= 1e-10 * res.eigenvalues[0]
    np.testing.assert_allclose(res.eigenvalues, lam, rtol=1e-12)
    plain = PrecisionSpy(op)
    double = lanczos_solve(plain, K_COMP, tol=1e-10, max_passes=40, rng=0, relaxed=False)
    assert plain.single == 0 and double.info["single_passes"] == 0
    np.testing.assert_allclose(res.eigenvalues, double.eigenvalues, rtol=1e-12)


def test_lanczos_starts_again_in_float64_when_the_single_passes_bound_outgrows_its_budget(problems, every_ritz_step,
                                                                                          monkeypatch):
    """Single passes chosen from the first residual on (their predicted bound ignored) put a bound on the
    residuals far past tol, which no later pass could lower: before, the solver ran out of passes (or filled the
    whole space) NOT converged, and a fraction kept too few components (probe: 20 of 33).  Now, the bound measured
    past half of tol, it starts again from its Ritz vectors with every product float64, and converges to eigh's
    eigenvalues of the centred fl32(K) (1e-9 relative: tol 1e-8's residual squared over the gap)."""
    monkeypatch.setattr(relaxed, "relaxes", lambda history, eps, tol, spent=0.0: any(np.isfinite(history)))
    op, lam, _ = _slow_float32(problems)
    counted = PrecisionSpy(op)
    res = lanczos_solve(counted, K_COMP, tol=1e-8, max_passes=40, rng=0)
    assert res.converged and res.info["restarts"] >= 1 and res.info["single_passes"] == counted.single >= 1
    # every product after the restart float64: the reported residuals are the true ones (to rounding)
    true = np.linalg.norm(op.matmat(res.eigenvectors) - res.eigenvectors * res.eigenvalues, axis=0)
    np.testing.assert_allclose(true, res.residuals, rtol=1e-6)
    assert res.residuals.max() <= 1e-8 * res.eigenvalues[0]
    np.testing.assert_allclose(res.eigenvalues, lam, rtol=1e-9)


def test_lanczos_s_bound_holds_for_single_products_as_wrong_as_it_allows(problems, every_ritz_step):
    """Single products each off by the whole error the solver allows for (``single_error`` times sqrt(width),
    in the 2-norm, in a random direction): the true residuals (exact products) stay within the reported
    ones, which reach tol."""
    op, lam, _ = _slow_float32(problems)
    width = lanczos.default_width(N, K_COMP)
    counted = PrecisionSpy(op, noise=op.single_error * np.sqrt(width))
    res = lanczos_solve(counted, K_COMP, tol=1e-8, max_passes=40, rng=0)
    assert counted.single >= 1 and res.converged
    true = np.linalg.norm(op.matmat(res.eigenvectors) - res.eigenvectors * res.eigenvalues, axis=0)
    assert np.all(true <= res.residuals) and res.residuals.max() <= 1e-8 * res.eigenvalues[0]


def test_the_single_passes_bound_follows_ritz_vectors_through_a_restart_and_a_checkpoint():
    """``Relaxation.slack``: a single panel's error times 3 x the Ritz vector's weight on it plus its weight on
    the next panel; folded at a thick restart into the kept vectors (the panels go, each kept vector carries
    its bound, and a later Ritz vector the bound of its kept components); a checkpoint's saved bound comes back
    the same.  The operator's bound 0.5 on a panel of 4 columns: 1.0."""
    from dkpca.solvers.relaxed import Relaxation

    class Op:
        single_error = 0.5

    relax = Relaxation(Op(), width=4, size=20)
    assert relax.error == 1.0 and not relax.active
    relax.record(4, 8)
    S = np.zeros((12, 2))
    S[4:8, 0], S[8:12, 0], S[0, 1] = 0.1, 0.2, 1.0  # pair 0 on the single panel and the next; pair 1 off it
    np.testing.assert_allclose(relax.slack(S), [3 * 0.2 + 0.4, 0.0])
    relax.fold(S)  # keep the two Ritz vectors
    assert not relax.panels and relax.count == 1
    np.testing.assert_allclose(relax.carried[:3], [1.0, 0.0, 0.0])
    later = np.array([[0.6, 0.0], [0.8, 1.0]])  # new Ritz vectors over the two kept ones
    np.testing.assert_allclose(relax.slack(later), [0.6, 0.0])
    again = Relaxation(Op(), width=4, size=20, saved=relax.carried[:2])
    np.testing.assert_allclose(again.slack(later), relax.slack(later))
    assert Relaxation(Op(), width=4, size=20, enabled=False).error is None


def test_lanczos_resumed_after_a_single_pass_keeps_its_bound(problems, every_ritz_step, monkeypatch, tmp_path):
    """A fit killed right after a single pass resumes from a checkpoint that carries the pass's bound: with each
    single product off by the whole bound the solver allows (as above), the resumed run's true residuals stay
    within the reported ones, which reach tol; the eigenvalues equal eigh's to 1e-12.  (Without the saved
    bound the reported residuals were 2-8 % under the true ones here.)  Passes may be single from residuals
    up to ``tol`` (``RELAX_SHARE`` = 1, not 0.1, and ``RELAX_BUDGET`` = 10) so that one is, before the run is
    stopped."""
    monkeypatch.setattr("dkpca.solvers.relaxed.RELAX_SHARE", 1.0)
    monkeypatch.setattr("dkpca.solvers.relaxed.RELAX_BUDGET", 10.0)
    op, lam, _ = _slow_float32(problems)
    noise = op.single_error * np.sqrt(lanczos.default_width(N, K_COMP))
    whole = PrecisionSpy(op, noise=noise)
    lanczos_solve(whole, K_COMP, tol=1e-10, max_passes=40, rng=0)
    first_single = whole.asked.index(True) + 1
    path = str(tmp_path / "ck.zarr")
    FitStore.at(path).open_for_write()
    ck = SolverCheckpoint(path, {"test": "relaxed"}, interval=0)
    killed = PrecisionSpy(op, noise=noise)
    part = lanczos_solve(killed, K_COMP, tol=1e-10, max_passes=first_single, rng=0, checkpoint=ck)
    assert killed.asked[-1] and not part.converged and "slack" in ck.load().arrays
    res = lanczos_solve(PrecisionSpy(op, noise=noise), K_COMP, tol=1e-10, max_passes=40, rng=0, checkpoint=ck)
    assert res.info["resumed_at_pass"] == first_single and res.converged
    # within the reported residuals, to a float64 product's rounding (1e-14 lambda_1: where the carried bound is
    # all that keeps them above tol the run starts again with float64 products, whose residuals are the true ones)
    true = np.linalg.norm(op.matmat(res.eigenvectors) - res.eigenvectors * res.eigenvalues, axis=0)
    assert np.all(true <= res.residuals + 1e-14 * res.eigenvalues[0])
    assert res.residuals.max() <= 1e-10 * res.eigenvalues[0]
    np.testing.assert_allclose(res.eigenvalues, lam, rtol=1e-12)


def test_arpack_on_a_float32_kernel_matches_the_dense_reference_to_single_precision(blobs):
    """ARPACK runs in single precision on a float32 K (as scikit-learn's eigsh does): eigenvalues of the
    centred fl32(K) to 1e-5 relative, eigenvectors to 1e-3 (the gap of this spectrum is ~1e-2 of lambda_1)."""
    K32 = rbf_kernel(blobs, gamma=0.1).astype(np.float32)
    lam, U = reference_eigh(K32.astype(np.float64), 4)
    res = get_solver("arpack")(InMemoryKernelOperator(K32), 4, rng=0)
    order = np.argsort(res.eigenvalues)[::-1]
    got, vec = res.eigenvalues[order], res.eigenvectors[:, order]
    assert got.dtype == np.float64 and vec.dtype == np.float64
    np.testing.assert_allclose(got, lam, rtol=1e-5)
    np.testing.assert_allclose(np.abs(np.sum(vec * U, axis=0)), 1, atol=1e-3)


# -- the Nystroem starting block of the iterative solvers ---------------------------------------------
def test_nystrom_start_block_is_orthonormal_and_holds_the_top_eigenvectors(blobs):
    """The block spans the leading eigenvectors of the dense centred K almost exactly (projection norm
    >= 0.999 for the top 3 of this well-separated spectrum; a random 8-column block of n=600 holds ~0.1)."""
    from dkpca.solvers import nystrom

    kernel = RBF(gamma=0.1)
    Q = nystrom.start_block(da.from_array(blobs, chunks=(200, -1)), kernel, 8, np.random.default_rng(0),
                            n_landmarks=100)
    np.testing.assert_allclose(Q.T @ Q, np.eye(8), atol=1e-12)
    _, U = reference_eigh(kernel.block(blobs, None, np.float64), 3)
    assert np.linalg.norm(Q.T @ U, axis=0).min() > 0.999


def test_nystrom_start_block_is_none_below_the_blocks_rank():
    """Duplicate points give a kernel of rank 2: no 4-column block; the caller keeps a random one."""
    from dkpca.solvers import nystrom

    X = np.repeat(np.array([[0.0, 0.0], [1.0, 1.0]]), 50, axis=0)
    assert nystrom.start_block(da.from_array(X, chunks=(40, -1)), RBF(gamma=1.0), 4, 0, n_landmarks=20) is None


def test_nystrom_start_from_large_n_or_wide_blocks_with_two_landmarks_a_column():
    from dkpca.solvers import nystrom

    assert nystrom.start_landmarks(5_000, 20) is None  # small n, narrow block: a random block
    assert nystrom.start_landmarks(nystrom.START_MIN_N, 20) == nystrom.START_LANDMARKS
    assert nystrom.start_landmarks(7_291, 266) == 532  # USPS, k = 256 (lanczos)
    assert nystrom.start_landmarks(50_000, 300) == 600


@pytest.mark.parametrize("solver", ["lanczos", "randomized"])
def test_fit_from_the_nystrom_start_matches_the_reference(tmp_path, blobs, monkeypatch, solver):
    """With the Nystroem start forced (normally from n = 10,000): the same eigenvalues as the dense
    reference (rtol 1e-8 at tol 1e-10), in no more passes than from a random block."""
    from dkpca.solvers import nystrom

    kw = dict(n_components=3, solver=solver, dtype="float64", tol=1e-10, random_state=0)
    lam, _ = reference_eigh(rbf_kernel(blobs, gamma=0.1), 3)
    random_start = dkpca.fit(blobs, kernel="rbf", gamma=0.1, store=tmp_path / "r.zarr", **kw)
    monkeypatch.setattr(nystrom, "START_MIN_N", 0)
    model = dkpca.fit(blobs, kernel="rbf", gamma=0.1, store=tmp_path / "n.zarr", **kw)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)
    assert model.report["passes"] <= random_start.report["passes"]


def test_lanczos_stops_at_an_invariant_subspace_found_on_a_pass_it_would_not_check():
    """Centred linear kernel of rank 20, k = 5 (block 15), tol 1e-13: the start block and the range span the whole
    Krylov space after two passes, so the third pass's remainder is rounding only.  That pass is one whose Ritz
    pairs the residual rate would skip (predicted ~1e-3); its empty next block (no direction above 1e3 eps
    ||K~||, however evenly the noise is spread) makes them due: exact, converged, 3 passes.  Eigenvalues against
    eigh of the centred kernel to 1e-10."""
    X = np.random.default_rng(1).standard_normal((600, 20))
    K = Linear().block(X, None, np.float64)
    res = lanczos_solve(InMemoryKernelOperator(K), 5, tol=1e-13, max_passes=50, rng=np.random.default_rng(0))
    assert res.converged and res.passes == 3 and np.isfinite(res.history[-1])
    np.testing.assert_allclose(res.eigenvalues, scipy.linalg.eigvalsh(centered(K))[::-1][:5], rtol=1e-10)


def test_arpack_on_a_zero_centred_kernel_returns_zero_eigenvalues():
    """K constant (identical points): K~ is exactly 0, so ARPACK's start vector maps to 0 (its error -9).

    Reference: every eigenvalue of the zero matrix is 0, and any orthonormal basis is an eigenbasis.
    """
    res = get_solver("arpack")(InMemoryKernelOperator(np.zeros((300, 300))), 2, rng=0)  # K~ v0 exactly 0
    np.testing.assert_array_equal(res.eigenvalues, 0.0)
    np.testing.assert_allclose(res.eigenvectors.T @ res.eigenvectors, np.eye(2), atol=1e-15)
    # all ones: K~ is 0 up to the corrections' rounding (1e-16 of ||K|| = 300 an entry)
    res = get_solver("arpack")(InMemoryKernelOperator(np.ones((300, 300))), 2, rng=0)
    assert np.abs(res.eigenvalues).max() <= 1e-12 * 300


def test_nystrom_on_data_of_lower_rank_than_k_keeps_the_rank_and_reports_the_rest_dropped():
    """A linear kernel on 3 features has rank 3: asked for 6, Nystroem (every point a landmark) gives the dense
    solver's 3 (eigenvalues to 1e-8 relative, |eigenvectors| to 1e-6) and the same report, as every solver does."""
    X = np.random.default_rng(0).standard_normal((50, 3))
    nys = dkpca.fit(X, 6, kernel="linear", solver="nystrom", dtype="float64")
    dense = dkpca.fit(X, 6, kernel="linear", solver="dense", dtype="float64")
    np.testing.assert_allclose(nys.eigenvalues_, dense.eigenvalues_, rtol=1e-8)
    np.testing.assert_allclose(np.abs(nys.eigenvectors_), np.abs(dense.eigenvectors_), atol=1e-6)
    assert nys.report["zero_components_dropped"] == dense.report["zero_components_dropped"] == 3


def test_the_dense_solver_reports_rounding_not_1e292_for_a_zero_centred_kernel():
    """Constant data: K~ = 0.  The pass log said "max relative residual 7.06e+292" (eps sqrt(n) over a tiny
    scale) while the summary said 0; the bound is eps ||K~|| sqrt(n), relative to lambda_1: rounding."""
    seen = []
    res = get_solver("dense")(InMemoryKernelOperator(np.ones((50, 50))), 3, callback=seen.append)
    assert res.history[0] <= 1e-12 and seen[0].max_relative_residual <= 1e-12
    assert np.all(res.residuals < 1e-300)  # eps sqrt(n) ||K~||, and ||K~|| is 0
