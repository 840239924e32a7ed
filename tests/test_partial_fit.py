"""``KernelPCA.partial_fit`` (issue 38, item 4): a fit grown by batches equals a fit on all the rows.

References: ``scipy.linalg.eigh`` of the dense centred kernel (``conftest.reference_eigh``) and
``KernelPCA.fit`` on the concatenation.  Tolerances: the in-memory iterative solvers stop at a
relative residual of 1e-10, so eigenvalues agree to 1e-8 relative and unit eigenvectors, up to
sign, to 1e-6 (residual / gap); the dense solver to rounding.
"""

from __future__ import annotations

import os
import pickle

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
import dkpca.eigensolve
import dkpca.incremental
import dkpca.sklearnparams
from dkpca import KernelPCA
from tests.conftest import reference_eigh

GAMMA = 0.1


def data(n: int, seed: int = 0, d: int = 10) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d))


def latent(n: int, seed: int = 0) -> np.ndarray:
    """Rows near a 4-dimensional subspace of R^20: a spectrum with gaps, where a good start saves passes."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, 4)) * [3, 2, 1.5, 1]
    return Z @ rng.standard_normal((4, 20)) / 2 + 0.05 * rng.standard_normal((n, 20))


def grown(batches, **params) -> KernelPCA:
    est = KernelPCA(**{"n_components": 5, "kernel": "rbf", "gamma": GAMMA, "random_state": 0, **params})
    for b in batches:
        est.partial_fit(b)
    return est


def assert_matches_eigh(est: KernelPCA, X: np.ndarray, k: int = 5) -> None:
    lam, U = reference_eigh(rbf_kernel(X, gamma=GAMMA), k)
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=1e-8)
    np.testing.assert_allclose(np.abs(est.eigenvectors_), np.abs(U), atol=1e-6)


@pytest.mark.parametrize("solver", ["auto", "arpack", "lanczos", "randomized", "dense"])
def test_a_sequence_equals_eigh_of_the_concatenation(solver):
    X = data(600)
    est = grown(np.split(X, [200, 350, 351]), eigen_solver=solver)
    assert est.n_samples_seen_ == 600 and est.X_fit_.shape == (600, 10)
    assert_matches_eigh(est, X)


@pytest.mark.parametrize("n_components", [None, 0.8])
def test_all_components_and_a_fraction_grow_exactly(n_components):
    """n_components=None (every non-zero component) and a fraction of explained variance: k follows the rows
    seen, as in fit on the concatenation (the dense solver, no warm start); reference: fit on all rows."""
    X = data(300)
    est = grown([X[:120], X[120:]], n_components=n_components)
    ref = KernelPCA(n_components, kernel="rbf", gamma=GAMMA, random_state=0).fit(X)
    assert est.eigenvalues_.shape == ref.eigenvalues_.shape
    np.testing.assert_allclose(est.eigenvalues_, ref.eigenvalues_, rtol=1e-8, atol=1e-10 * ref.eigenvalues_[0])
    np.testing.assert_allclose(est.explained_variance_ratio_, ref.explained_variance_ratio_, atol=1e-10)


def test_the_first_call_fits():
    X = data(300)
    est, ref = grown([X]), KernelPCA(5, kernel="rbf", gamma=GAMMA, random_state=0).fit(X)
    np.testing.assert_array_equal(est.eigenvalues_, ref.eigenvalues_)  # the same code: bit for bit
    np.testing.assert_array_equal(est.eigenvectors_, ref.eigenvectors_)
    assert est.n_samples_seen_ == 300 and est.n_features_in_ == 10


def test_transform_between_calls_is_the_fit_of_the_rows_so_far():
    X, Xt = data(500), data(7, seed=1)
    est = KernelPCA(4, kernel="rbf", gamma=GAMMA, random_state=0)
    for start, stop in ((0, 150), (150, 320), (320, 500)):
        est.partial_fit(X[start:stop])
        ref = KernelPCA(4, kernel="rbf", gamma=GAMMA, random_state=0).fit(X[:stop])
        # scores scale with sqrt(lambda): compare relative to the largest (signs are fit's, deterministic)
        np.testing.assert_allclose(est.transform(Xt), ref.transform(Xt), atol=1e-7 * np.sqrt(ref.eigenvalues_[0]))


def test_a_feature_count_other_than_the_first_batch_is_refused():
    est = grown([data(100)])
    with pytest.raises(ValueError, match="X has 9 features, but KernelPCA is expecting 10 features as input"):
        est.partial_fit(data(20, d=9))
    assert est.n_samples_seen_ == 100  # nothing changed


def test_kernel_parameters_changed_between_calls_are_refused():
    """The kept K is of the fitted kernel: new rows of another one would be a quiet wrong answer."""
    est = grown([data(100)])
    for change in ({"gamma": 0.5}, {"kernel": "laplacian"}, {"kernel": "precomputed"}):
        with pytest.raises(ValueError, match="kernel parameters changed since this KernelPCA was fitted"):
            est.set_params(**change).partial_fit(data(10, seed=1))
        est.set_params(kernel="rbf", gamma=GAMMA)
    est.set_params(n_components=3).partial_fit(data(10, seed=1))  # other parameters may change
    assert est.eigenvalues_.shape == (3,) and est.n_samples_seen_ == 110


def test_one_row_batches():
    X = data(203)
    est = grown([X[:200], X[200:201], X[201:202], X[202:203]])
    assert_matches_eigh(est, X)
    with pytest.raises(ValueError, match="minimum of 2 is required"):  # the first call fits: fit's minimum
        KernelPCA(2).partial_fit(X[:1])


def test_a_batch_larger_than_all_rows_seen():
    X = data(450)
    assert_matches_eigh(grown([X[:50], X[50:]]), X)


def test_a_sparse_and_a_callable_kernel_grow_too():
    X = data(260)
    est = grown([sp.csr_matrix(X[:200]), sp.csr_matrix(X[200:])])
    assert sp.issparse(est.X_fit_)
    assert_matches_eigh(est, X)
    est = KernelPCA(5, kernel=lambda a, b: np.exp(-GAMMA * np.sum((a - b) ** 2)), random_state=0)
    for b in (X[:200], X[200:]):
        est.partial_fit(b)
    assert_matches_eigh(est, X)


@pytest.mark.parametrize("solver", ["randomized", "lanczos"])
def test_the_start_is_the_nystroem_extension_and_saves_passes(monkeypatch, solver):
    """The warm start: the old eigenvectors extended by k~(x)^T U / lambda (computed here from its formula)
    span the start block's first columns, and on data whose spectrum has gaps the solve needs fewer passes
    than the cold one ``fit`` makes (measured: randomized 14 vs 18, lanczos 6 vs 8 at tol 1e-6)."""
    X, n_old = latent(800), 720
    seen, phase = {}, ["first"]
    original = dkpca.eigensolve.solve_kernel_matrix

    def spy(K, k, name, **kw):  # fit and partial_fit solve through one in-memory solve (dkpca.sklearnparams)
        res, c = original(K, k, name, **kw)
        seen[phase[0]] = (kw.get("start"), res.passes)
        return res, c

    monkeypatch.setattr(dkpca.sklearnparams, "solve_kernel_matrix", spy)
    params = dict(n_components=8, kernel="rbf", gamma=1 / 20, eigen_solver=solver, tol=1e-6, random_state=0)
    est = KernelPCA(**params).partial_fit(X[:n_old])
    U, lam = est.eigenvectors_, est.eigenvalues_
    phase[0] = "grow"
    est.partial_fit(X[n_old:])
    start, warm = seen["grow"]
    phase[0] = "fit"
    KernelPCA(**params).fit(X)
    cold = seen["fit"][1]
    # the extension from its definition: k~(x) = k(x) - r - mean(k(x)) + c, u(x) = k~(x)^T U / lambda
    K = rbf_kernel(X, gamma=1 / 20)
    Kx, Ko = K[n_old:, :n_old], K[:n_old, :n_old]
    Kxc = Kx - Ko.mean(axis=1)[None, :] - Kx.mean(axis=1)[:, None] + Ko.mean()
    ext = np.vstack([U, Kxc @ U / lam])
    ext /= np.linalg.norm(ext, axis=0)
    Q = start[:, :8]
    assert np.linalg.norm(ext - Q @ (Q.T @ ext)) < 1e-10
    assert warm < cold, (warm, cold)
    np.testing.assert_allclose(est.eigenvalues_, reference_eigh(K, 8)[0], rtol=1e-5)  # tol=1e-6 here


@pytest.mark.parametrize("n, m", [(1, 1), (300, 1), (1000, 700), (5, 3000)])
def test_the_grown_matrix_is_the_old_one_bordered_by_the_batch_s_rows(n, m):
    """``grown_matrix`` (strips of rows on threads) against ``np.block`` of its pieces, exactly."""
    A = np.random.default_rng(n + m).standard_normal((n + m, n + m))
    A += A.T
    kept = dkpca.incremental.KeptKernel.of(A[:n, :n].copy())
    got = dkpca.incremental.grown_matrix(kept, A[n:, :n].copy(), A[n:, n:].copy())
    np.testing.assert_array_equal(got.matrix, A)
    assert got.owned and got.buffer.shape[0] == int(dkpca.incremental.GROWTH * (n + m))


def test_a_batch_that_fits_in_the_kept_buffer_is_written_in_place_and_one_that_does_not_copies_k_once():
    """After a first growth the buffer has room for 50 % more rows: the next batches within it write only their
    rows and columns into the same buffer (K's entries are not moved), a batch past it moves K to a new buffer;
    every grown matrix equals the bordered one exactly."""
    from dkpca.incremental import KeptKernel, grown_matrix

    A = np.random.default_rng(0).standard_normal((700, 700))
    A += A.T
    kept = grown_matrix(KeptKernel.of(A[:200, :200].copy()), A[200:300, :200], A[200:300, 200:300])  # 450 rows
    first = kept.buffer
    for a, b in ((300, 400), (400, 450)):
        kept = grown_matrix(kept, A[a:b, :a], A[a:b, a:b])
        assert kept.buffer is first and np.shares_memory(kept.matrix, first)
        np.testing.assert_array_equal(kept.matrix, A[:b, :b])
    kept = grown_matrix(kept, A[450:700, :450], A[450:700, 450:700])
    assert kept.buffer is not first and kept.buffer.shape == (1050, 1050)
    np.testing.assert_array_equal(kept.matrix, A)


def test_a_kernel_matrix_of_the_users_is_never_written_into():
    """A precomputed K given as a view of a larger array has room beyond it, but is not dkpca's buffer."""
    from dkpca.incremental import KeptKernel, grown_matrix

    big = np.random.default_rng(1).standard_normal((400, 400))
    before = big.copy()
    grown = grown_matrix(KeptKernel.of(big[:100, :100]), np.ones((50, 100)), np.eye(50))
    np.testing.assert_array_equal(big, before)
    assert not np.shares_memory(grown.buffer, big)


def test_partial_fit_keeps_one_buffer_while_batches_fit_in_it():
    """The estimator's kept K grows in place: two batches after the first growth reuse its buffer, and the fit
    equals eigh of the concatenation."""
    X = data(400)
    est = KernelPCA(5, kernel="rbf", gamma=GAMMA, random_state=0).partial_fit(X[:200]).partial_fit(X[200:260])
    buffer = vars(est)[dkpca.incremental.KEPT].buffer  # 1.5 x 260 = 390 rows
    est.partial_fit(X[260:330]).partial_fit(X[330:390])
    assert vars(est)[dkpca.incremental.KEPT].buffer is buffer
    assert_matches_eigh(est, X[:390])


def test_auto_rebuilds_k_in_float64_when_the_rows_grown_need_it():
    """Before: the first batch's precision stayed: 3 rows measured float32 fine, and the 600 after them were solved
    in float32, 5.6e-6 lambda_1 off (fit on them holds K in float64: float32 would put ~4e-3 into the top 10).
    Reference: eigh of the centred float64 kernel, to fit's 1e-8."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4, 3))[rng.integers(0, 4, 600)] * 3 + 0.5 * rng.standard_normal((600, 3))
    est = KernelPCA(10, kernel="rbf", gamma=1e-3, dtype="auto", random_state=0).partial_fit(X[:3])
    assert est.precision_.dtype == "float32"
    est.partial_fit(X[3:])
    fit = KernelPCA(10, kernel="rbf", gamma=1e-3, dtype="auto").fit(X)
    assert est.precision_.dtype == "float64" == fit.precision_.dtype
    lam, _ = reference_eigh(rbf_kernel(X, gamma=1e-3), 10)
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=0, atol=1e-8 * lam[0])


def test_auto_keeps_k_in_float32_while_the_rows_grown_allow_it():
    """float32 input, dtype auto: a batch whose sample still says float32 grows the float32 K (fit's choice too)."""
    X = latent(300).astype(np.float32)
    est = KernelPCA(5, kernel="rbf", gamma=GAMMA, random_state=0).partial_fit(X[:200]).partial_fit(X[200:])
    assert est.precision_.dtype == "float32" == KernelPCA(5, kernel="rbf", gamma=GAMMA).fit(X).precision_.dtype
    assert est.__dict__[dkpca.incremental.KEPT].buffer.dtype == np.float32


def test_auto_solves_a_warm_call_by_block_lanczos_where_a_fit_would_take_arpack():
    """``eigen_solver="auto"``: the first call (a fit of 300 rows, k = 5) by ARPACK, a later call by block Lanczos
    from the extended eigenvectors (``planning.inmemory.WARM_SOLVER``); an explicit "arpack" stays ARPACK.  Both equal
    eigh of the concatenation."""
    X = data(500)
    est = KernelPCA(5, kernel="rbf", gamma=GAMMA, random_state=0).partial_fit(X[:300])
    assert est.eigen_solver_ == "arpack"
    est.partial_fit(X[300:])
    assert est.eigen_solver_ == "lanczos"
    assert_matches_eigh(est, X)
    assert grown([X[:300], X[300:]], eigen_solver="arpack").eigen_solver_ == "arpack"


def test_arpack_starts_from_the_extension(monkeypatch):
    """ARPACK's v0 lies in the span of the extended eigenvectors (a random v0 would not)."""
    X = latent(400)
    got = {}
    original = dkpca.eigensolve.solve_kernel_matrix

    def spy(*a, **kw):
        got["v0"] = kw.get("start")
        return original(*a, **kw)

    monkeypatch.setattr(dkpca.sklearnparams, "solve_kernel_matrix", spy)  # the last call: partial_fit's
    est = KernelPCA(6, kernel="rbf", gamma=1 / 20, eigen_solver="arpack", random_state=0).partial_fit(X[:300])
    U, lam, cen = est.eigenvectors_, est.eigenvalues_, est._centering
    est.partial_fit(X[300:])
    ext = dkpca.incremental.extend_eigenvectors(rbf_kernel(X[300:], X[:300], gamma=1 / 20), lam, U, cen)
    Q, _ = np.linalg.qr(ext)
    v0 = got["v0"] / np.linalg.norm(got["v0"])
    assert v0.shape == (400,) and np.linalg.norm(v0 - Q @ (Q.T @ v0)) < 1e-10


def test_a_fit_then_partial_fit_and_a_pickle_round_trip():
    X = data(330)
    est = KernelPCA(5, kernel="rbf", gamma=GAMMA, random_state=0).fit(X[:200])
    est.partial_fit(X[200:260])
    blob = pickle.dumps(est)
    assert dkpca.incremental.KEPT in vars(est) and len(blob) < 200 * 260 * 8  # the kept K (n^2) is not pickled
    est = pickle.loads(blob).partial_fit(X[260:])
    assert_matches_eigh(est, X)
    est.fit(X[:100])  # a fit starts afresh: nothing of the grown fit is kept
    assert est.n_samples_seen_ == 100 and dkpca.incremental.KEPT not in vars(est)


# -- kernel="precomputed" --------------------------------------------------------------------------------------


def test_precomputed_batches_are_rows_of_the_grown_kernel_matrix():
    X = data(400)
    K = rbf_kernel(X, gamma=GAMMA)
    est = KernelPCA(5, kernel="precomputed", random_state=0)
    est.partial_fit(K[:250, :250]).partial_fit(K[250:, :])
    ref = KernelPCA(5, kernel="precomputed", random_state=0).fit(K)
    np.testing.assert_allclose(est.eigenvalues_, ref.eigenvalues_, rtol=1e-8)
    assert est.n_features_in_ == 400 and est.n_samples_seen_ == 400
    np.testing.assert_allclose(est.transform(K[:5]), ref.transform(K[:5]), atol=1e-6)
    assert_matches_eigh(est, X)
    # the whole grown matrix, square, is accepted too
    est = KernelPCA(5, kernel="precomputed", random_state=0).partial_fit(K[:250, :250]).partial_fit(K)
    assert_matches_eigh(est, X)


def test_precomputed_batches_of_the_wrong_shape_or_not_symmetric_are_refused():
    K = rbf_kernel(data(100), gamma=GAMMA)
    est = KernelPCA(3, kernel="precomputed").partial_fit(K[:60, :60])
    with pytest.raises(ValueError, match=r"expecting 60 features as input, plus one per new row.*\(40, 100\)"):
        est.partial_fit(K[60:, :60])  # K(X_new, X_seen) alone: the batch's own columns are missing
    bad = K[60:].copy()
    bad[0, 61] += 1e-3
    with pytest.raises(ValueError, match=r"K\(X_batch, X_batch\).*not symmetric.*\(K \+ K.T\) / 2"):
        est.partial_fit(bad)
    assert est.n_samples_seen_ == 60 and est.n_features_in_ == 60


def test_a_first_precomputed_batch_that_is_not_square_is_refused_naming_the_shape():
    """The first call takes the square K(X_batch, X_batch): a (60, 70) one is refused by name (it was numpy's
    "operands could not be broadcast"), and nothing is fitted."""
    K = rbf_kernel(data(70), gamma=GAMMA)
    est = KernelPCA(3, kernel="precomputed")
    with pytest.raises(ValueError, match=r"first call takes the square kernel matrix.*\(60, 70\)"):
        est.partial_fit(K[:60, :70])
    assert not hasattr(est, "eigenvalues_")


# -- out of core -------------------------------------------------------------------------------------------------


def test_out_of_core_batches_need_a_store():
    est = KernelPCA(3, kernel="rbf")
    with pytest.raises(ValueError, match=r"pass store='path.dkpca.zarr' to KernelPCA"):
        est.partial_fit(da.from_array(data(100), chunks=50))


def test_with_a_store_each_batch_updates_it(tmp_path):
    """With store=, a later batch is dkpca.fit on the store's data copy and the batch: an update of the store
    (issue 38 item 1, dkpca/growth.py), whose report says so; the answer is eigh's (float64 K, tol 1e-10)."""
    X = data(600)
    est = KernelPCA(5, kernel="rbf", gamma=GAMMA, store=str(tmp_path / "s.dkpca.zarr"), dtype="float64",
                    tol=1e-10, random_state=0)
    est.partial_fit(X[:400])
    est.partial_fit(X[400:])
    assert est.n_samples_seen_ == 600 and est.X_fit_.shape == (600, 10)
    assert est.model_.report["update"]["rows_before"] == 400  # an update, not a fresh fit of all 600 rows
    lam, U = reference_eigh(rbf_kernel(X, gamma=GAMMA), 5)
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=1e-8)
    np.testing.assert_allclose(np.abs(est.eigenvectors_), np.abs(U), atol=1e-6)


def test_a_fresh_estimator_on_a_store_that_holds_a_fit_continues_it(tmp_path):
    """A nightly job in a new process: ``KernelPCA(store=S).partial_fit(X_night)`` adds the night's rows to the
    fit the store holds (README), the answer eigh's of all the rows (float64 K, tol 1e-10)."""
    X, store = data(600), str(tmp_path / "s.dkpca.zarr")
    KernelPCA(5, kernel="rbf", gamma=GAMMA, store=store, dtype="float64").partial_fit(X[:400])
    est = KernelPCA(5, kernel="rbf", gamma=GAMMA, store=store, dtype="float64", tol=1e-10, random_state=0)
    est.partial_fit(X[400:])
    assert est.n_samples_seen_ == 600 and est.model_.report["update"]["rows_before"] == 400
    lam, U = reference_eigh(rbf_kernel(X, gamma=GAMMA), 5)
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=1e-8)
    np.testing.assert_allclose(np.abs(est.eigenvectors_), np.abs(U), atol=1e-6)


@pytest.fixture
def nightly_store(tmp_path):
    """``(X, store, kw)``: a store grown by two batches (400 rows, then 200) of X's 600 rows; kw makes estimators."""
    X, store = data(600), str(tmp_path / "s.dkpca.zarr")
    kw = dict(kernel="rbf", gamma=GAMMA, store=store, dtype="float64", tol=1e-10, random_state=0)
    KernelPCA(5, **kw).partial_fit(X[:400]).partial_fit(X[400:])
    return X, store, kw


def test_a_fresh_estimator_rerunning_the_last_batch_adds_nothing_and_warns(nightly_store):
    """A nightly job requeued after its partial_fit finished: before, its rows were added again (800 rows fitted,
    200 of them twice) without a word; now nothing is added and the estimator holds eigh's fit of the 600."""
    X, store, kw = nightly_store
    est = KernelPCA(5, **kw)
    with pytest.warns(dkpca.RepeatedBatchWarning, match="already the last 200 of the 600 rows .* nothing added"):
        est.partial_fit(X[400:])
    assert est.n_samples_seen_ == 600 and dkpca.load(store).n_samples == 600
    lam, _ = reference_eigh(rbf_kernel(X, gamma=GAMMA), 5)
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=1e-8)


def test_a_fresh_estimator_rerunning_from_the_first_batch_is_refused(nightly_store):
    """A script rerun from its first batch: before, the 400 rows were added again (1,000 rows fitted)."""
    X, store, kw = nightly_store
    with pytest.raises(ValueError, match=r"the batch's 400 rows are the first 400 of the 600 rows store .* would fit "
                                         r"them twice\. Pass only rows not yet added, or overwrite=True"):
        KernelPCA(5, **kw).partial_fit(X[:400])
    assert dkpca.load(store).n_samples == 600


def test_an_estimator_whose_store_was_grown_since_by_another_is_told_so(nightly_store):
    """Before: "fitted on different data ... Pass overwrite=True", which a later call does not take."""
    X, store, kw = nightly_store
    stale = KernelPCA(5, **kw).partial_fit(X[:0:-1][:50])  # continues the store: 650 rows
    KernelPCA(5, **kw).partial_fit(X[::7][:30])  # another estimator grows it to 680
    with pytest.raises(ValueError, match=r"holds a fit of 680 rows, grown since this estimator fitted its 650: "
                                         r"continue it with a new estimator"):
        stale.partial_fit(X[:20] + 1)
    assert stale.n_samples_seen_ == 650 and dkpca.load(store).n_samples == 680


def test_another_batch_after_one_killed_mid_update_is_refused_naming_the_killed_batch(tmp_path, monkeypatch):
    """The fit's refusal advised overwrite=True, which here refits the new batch alone (the 400 rows fitted lost);
    the killed batch again finishes it, then the other is added: eigh's answer for all 600 rows."""
    from dkpca.storage import GramStore

    class Killed(BaseException):
        pass

    def finish(self):
        raise Killed

    X, store = data(600), str(tmp_path / "s.dkpca.zarr")
    kw = dict(kernel="rbf", gamma=GAMMA, store=store, dtype="float64", tol=1e-10, random_state=0)
    KernelPCA(5, **kw).partial_fit(X[:400])
    with monkeypatch.context() as m:  # killed after the batch's rows were copied and its K blocks built
        m.setattr(GramStore, "finish", finish)
        with pytest.raises(Killed):
            KernelPCA(5, **kw).partial_fit(X[400:500])
    est = KernelPCA(5, **kw)
    for other in (X[500:], X[500:550]):  # as many rows as the killed batch (told apart by digest), and fewer
        with pytest.raises(ValueError, match=r"holds the fit of 400 rows and a batch being added to it \(rows 400 "
                                             r"to 499\) that was killed .* call partial_fit again with that batch"):
            est.partial_fit(other)
    est.partial_fit(X[400:500]).partial_fit(X[500:])
    lam, _ = reference_eigh(rbf_kernel(X, gamma=GAMMA), 5)
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=1e-8)


def test_a_fresh_estimator_of_another_kernel_on_a_store_is_refused_naming_it(tmp_path):
    X, store = data(500), str(tmp_path / "s.dkpca.zarr")
    KernelPCA(5, kernel="rbf", gamma=GAMMA, store=store, dtype="float64").partial_fit(X[:400])
    est = KernelPCA(5, kernel="rbf", gamma=2 * GAMMA, store=store, dtype="float64")
    with pytest.raises(ValueError, match="kernel differs"):
        est.partial_fit(X[400:])
    assert not hasattr(est, "eigenvalues_") and dkpca.load(store).n_samples == 400


def test_overwrite_starts_a_store_afresh_at_the_first_call_and_later_calls_update_it(tmp_path):
    """overwrite=True: a fresh estimator's first call replaces the store's fit of another kernel (refused
    without it, as above) with a fit of the batch alone; a later call is an update of that fit, not a rebuild
    (its report's rows_before).  Reference: eigh of the rows fitted (float64 K, tol 1e-10)."""
    X, store = data(500), str(tmp_path / "s.dkpca.zarr")
    KernelPCA(5, kernel="rbf", gamma=GAMMA, store=store, dtype="float64").partial_fit(X[:300])
    est = KernelPCA(5, kernel="rbf", gamma=2 * GAMMA, store=store, dtype="float64", tol=1e-10, random_state=0,
                    overwrite=True)
    est.partial_fit(X[300:400])
    assert est.n_samples_seen_ == 100 and "update" not in est.model_.report
    est.partial_fit(X[400:])
    assert est.n_samples_seen_ == 200 and est.model_.report["update"]["rows_before"] == 100
    lam, U = reference_eigh(rbf_kernel(X[300:], gamma=2 * GAMMA), 5)
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=1e-8)
    np.testing.assert_allclose(np.abs(est.eigenvectors_), np.abs(U), atol=1e-6)


@pytest.mark.parametrize("refusal", ["non-finite row", "kernel changed"])
def test_with_a_store_a_refused_batch_leaves_the_estimator_as_it_was(tmp_path, refusal):
    """As in memory: the fitted attributes kept, transform works, the next good batch grows the fit."""
    X = data(300)
    est = KernelPCA(4, kernel="rbf", gamma=GAMMA, store=str(tmp_path / "s.dkpca.zarr"), dtype="float64",
                    tol=1e-10, random_state=0).partial_fit(X[:100])
    before, Z = est.eigenvalues_.copy(), est.transform(X[:5])
    bad = X[100:110].copy()
    if refusal == "non-finite row":
        bad[2, 1] = np.nan
        with pytest.raises(ValueError, match=r"first in row 2, column"):  # the batch's own row, not 102
            est.partial_fit(bad)
    else:
        est.set_params(gamma=2 * GAMMA)
        with pytest.raises(ValueError, match="kernel differs"):
            est.partial_fit(bad)
        est.set_params(gamma=GAMMA)
    assert est.n_samples_seen_ == 100
    np.testing.assert_array_equal(est.eigenvalues_, before)
    np.testing.assert_allclose(est.transform(X[:5]), Z, rtol=0, atol=1e-12)
    est.partial_fit(X[100:150])
    assert est.n_samples_seen_ == 150
    assert_matches_eigh(est, X[:150], k=4)


def frame(X: np.ndarray, columns: str = "abcdefghij"):
    pd = pytest.importorskip("pandas")
    return pd.DataFrame(X, columns=list(columns[:X.shape[1]]))


def test_with_a_store_a_batch_of_reordered_columns_is_refused_as_in_memory(tmp_path):
    """Before: the store path read data frames by position and kept no names: a batch with its columns in another
    order was appended (eigenvalues 0.225 off the correct fit's) and transform took reordered frames.  Now the
    fit's names are the first frame's, kept by every update, and checked as in memory (scikit-learn's refusal)."""
    X = data(600, d=4)
    est = KernelPCA(3, kernel="rbf", gamma=GAMMA, store=str(tmp_path / "s.dkpca.zarr"), dtype="float64", tol=1e-10)
    est.partial_fit(frame(X[:400]))
    with pytest.raises(ValueError, match="The feature names should match those that were passed during fit"):
        est.partial_fit(frame(X[400:])[list("dcba")])
    assert est.n_samples_seen_ == 400  # refused before any work: the estimator as it was
    est.partial_fit(frame(X[400:]))
    assert list(est.feature_names_in_) == list("abcd") and est.model_.feature_names == tuple("abcd")
    lam, _ = reference_eigh(rbf_kernel(X, gamma=GAMMA), 3)
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=1e-8)
    with pytest.raises(ValueError, match="The feature names should match"):
        est.transform(frame(X[:5])[list("dcba")])
    assert dkpca.load(est.model_.store).feature_names == tuple("abcd")  # and a fresh estimator on it checks them
    fresh = KernelPCA(3, kernel="rbf", gamma=GAMMA, store=est.model_.store, dtype="float64")
    with pytest.raises(ValueError, match="The feature names should match"):
        fresh.partial_fit(frame(X[:10])[list("badc")])


def test_a_batch_without_names_after_a_data_frame_warns_as_in_memory(tmp_path):
    """scikit-learn's warning, which validate_data gives in memory: the store path gave none (the batch is appended
    by position, its columns unchecked)."""
    X = data(500, d=4)
    says = "X does not have valid feature names, but KernelPCA was fitted with feature names"
    for store in (None, str(tmp_path / "s.dkpca.zarr")):
        est = KernelPCA(3, kernel="rbf", gamma=GAMMA, store=store, dtype="float64").partial_fit(frame(X[:400]))
        with pytest.warns(UserWarning, match=says):
            est.partial_fit(X[400:])
        assert est.n_samples_seen_ == 500


def test_a_fit_of_a_csv_file_checks_a_data_frames_columns_at_transform(tmp_path):
    """Before: feature_names_in_ was not set from a CSV's header, so a reordered frame was projected by position
    (0.48 off) with scikit-learn's false warning 'fitted without feature names'.  Reference: the same frame in
    the fitted order."""
    X = data(200, d=4)
    frame(X).to_csv(tmp_path / "x.csv", index=False)
    est = KernelPCA(2, kernel="rbf", gamma=GAMMA, dtype="float64").fit(str(tmp_path / "x.csv"))
    assert list(est.feature_names_in_) == list("abcd") and est.n_samples_seen_ == 200
    with pytest.raises(ValueError, match="The feature names should match"):
        est.transform(frame(X)[list("dcba")])
    np.testing.assert_allclose(est.transform(frame(X)), est.fit_transform(str(tmp_path / "x.csv")), atol=1e-8)


def test_an_estimator_unpickled_in_another_directory_grows_its_own_store(tmp_path, monkeypatch):
    """Before: a relative store= was resolved again in the new working directory, where partial_fit made a second
    store and left the fitted one at its old rows.  Now the model's absolute path is the store a call grows; a
    store= set after the fit is refused, naming both."""
    X = data(600)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    est = KernelPCA(5, kernel="rbf", gamma=GAMMA, store="s.dkpca.zarr", dtype="float64", tol=1e-10, random_state=0)
    blob = pickle.dumps(est.partial_fit(X[:400]))
    monkeypatch.chdir(tmp_path / "b")
    again = pickle.loads(blob).partial_fit(X[400:])
    assert again.model_.store == str(tmp_path / "a" / "s.dkpca.zarr") and not (tmp_path / "b" / "s.dkpca.zarr").exists()
    assert dkpca.load(str(tmp_path / "a" / "s.dkpca.zarr")).n_samples == 600
    assert_matches_eigh(again, X)
    with pytest.raises(ValueError, match=r"store='t.dkpca.zarr' was set after this KernelPCA was fitted into"):
        again.set_params(store="t.dkpca.zarr").partial_fit(X[:10])


def test_fit_sets_n_samples_seen_as_incremental_pca_does(tmp_path):
    X = data(120)
    assert KernelPCA(2).fit(X).n_samples_seen_ == 120
    assert KernelPCA(2, store=str(tmp_path / "s.dkpca.zarr")).fit(da.from_array(X, chunks=60)).n_samples_seen_ == 120


def test_an_estimator_whose_store_was_moved_says_so(tmp_path):
    """Before: transform said 'fit a model first (dkpca fit ...)' and partial_fit that the store's copy of the data
    was damaged; the store was moved."""
    X, store = data(300), str(tmp_path / "s.dkpca.zarr")
    blob = pickle.dumps(KernelPCA(3, kernel="rbf", gamma=GAMMA, store=store).fit(da.from_array(X, chunks=150)))
    os.rename(store, str(tmp_path / "moved.dkpca.zarr"))
    est = pickle.loads(blob)
    for call in (lambda: est.transform(X[:5]), lambda: est.partial_fit(X[:10])):
        with pytest.raises(FileNotFoundError, match=r"no longer exists \(moved or deleted since the model was fitted"):
            call()
