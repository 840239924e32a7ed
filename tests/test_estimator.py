"""dkpca.KernelPCA against scikit-learn's KernelPCA and the dense reference.

In memory dkpca must give scikit-learn's results: eigenvalues to rel 1e-8
(float64; both are backward stable eigensolvers on the same matrix up to
kernel round-off ~1e-15), projections equal with the same signs (same sign
rule).  The iterative solvers stop at a relative residual of 1e-10, which
bounds eigenvalue errors by ~1e-20 relative and eigenvector errors by
~1e-10/gap, hence looser projection tolerances there.
"""

import os
import pickle

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from sklearn.datasets import load_digits
from sklearn.decomposition import KernelPCA as SKKernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression
from sklearn.metrics.pairwise import laplacian_kernel, rbf_kernel
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator, check_estimators_dtypes

import dkpca
from dkpca import KernelPCA
from dkpca.kernels import RBF, Linear
from dkpca.solvers import get_solver

from .conftest import centered, reference_eigh, write_data


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:300], y[:300]


@pytest.fixture(scope="module")
def gen():
    """Generated data with a well separated top spectrum (anisotropic Gaussian)."""
    rng = np.random.default_rng(7)
    return rng.standard_normal((250, 5)) * np.array([3.0, 2.0, 1.2, 0.7, 0.3])


def _lanczos_available() -> bool:
    try:
        get_solver("lanczos")
    except ValueError:
        return False
    return True


SOLVERS = ["dense", "arpack", "randomized"] + (["lanczos"] if _lanczos_available() else [])
KERNELS = [("linear", {}), ("rbf", {"gamma": 1e-3}), ("poly", {"gamma": 1e-3, "degree": 2, "coef0": 1.0}),
           ("cosine", {}), ("sigmoid", {"gamma": 1e-4, "coef0": 0.0})]


def _assert_same_projection(Za, Zb, rtol):
    scale = np.abs(Za).max()
    np.testing.assert_allclose(Zb, Za, atol=rtol * scale, rtol=0)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("kernel, params", KERNELS)
def test_matches_sklearn_digits(digits, kernel, params, solver):
    X, _ = digits
    k = 6
    ours = KernelPCA(k, kernel=kernel, eigen_solver=solver, random_state=0, **params).fit(X)
    # scikit-learn's randomized solver ranks eigenvalues by magnitude (the
    # sigmoid kernel is indefinite): compare with its dense solver instead.
    sk_solver = "dense" if solver in ("randomized", "lanczos") else solver
    ref = SKKernelPCA(k, kernel=kernel, eigen_solver=sk_solver, random_state=0, **params).fit(X)
    np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=1e-8)
    tol = 1e-10 if solver in ("dense", "arpack") else 1e-6
    _assert_same_projection(ref.transform(X[:40]), ours.transform(X[:40]), tol)
    _assert_same_projection(ref.eigenvectors_, ours.eigenvectors_, tol * 10)
    assert ours.eigen_solver_ == solver


@pytest.mark.parametrize("solver", SOLVERS)
def test_matches_dense_reference_generated(gen, solver):
    """Against scipy.linalg.eigh of H K H directly (not through scikit-learn)."""
    k = 4
    est = KernelPCA(k, kernel="rbf", gamma=0.2, eigen_solver=solver, random_state=1).fit(gen)
    lam, U = reference_eigh(rbf_kernel(gen, gamma=0.2), k)
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=1e-8)
    signs = np.sign(np.sum(U * est.eigenvectors_, axis=0))
    np.testing.assert_allclose(est.eigenvectors_, U * signs, atol=1e-6)
    # deterministic signs: the largest-magnitude entry of every vector is positive
    idx = np.argmax(np.abs(est.eigenvectors_), axis=0)
    assert np.all(est.eigenvectors_[idx, np.arange(k)] > 0)
    # training projections: fit_transform (shortcut) == transform (kernel rows)
    np.testing.assert_allclose(est.transform(gen), est.fit_transform(gen), atol=1e-9)
    Kc = centered(rbf_kernel(gen, gamma=0.2))
    np.testing.assert_allclose(est.explained_variance_ratio_, lam / np.trace(Kc), rtol=1e-8)


def test_auto_and_all_components_match_sklearn(digits, gen):
    X, _ = digits
    for data, kernel in [(X, "linear"), (gen, "rbf"), (X, "cosine")]:
        ours, ref = KernelPCA(kernel=kernel).fit(data), SKKernelPCA(kernel=kernel).fit(data)
        # n_components=None: every component with a positive eigenvalue (same count)
        assert ours.eigenvalues_.shape == ref.eigenvalues_.shape
        np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=1e-8, atol=1e-9 * ref.eigenvalues_[0])
        if kernel == "linear":
            assert ours.eigenvalues_.shape == (data.shape[1] - 9,)  # digits: 9 constant pixels in 300 samples
            np.testing.assert_allclose(ours.explained_variance_ratio_.sum(), 1.0, rtol=1e-10)
    # "auto" on n > 200, k < 10 runs ARPACK, as scikit-learn
    assert KernelPCA(3, kernel="rbf").fit(X).eigen_solver_ == "arpack"
    assert KernelPCA(30, kernel="rbf").fit(X).eigen_solver_ == "dense"


def test_sparse_callable_precomputed_match(digits):
    X, _ = digits
    X = X[:150]
    ref = SKKernelPCA(5, kernel="rbf", gamma=1e-3).fit(X)
    for Xin in (sp.csr_matrix(X), sp.csc_matrix(X)):
        ours = KernelPCA(5, kernel="rbf", gamma=1e-3).fit(Xin)
        np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=1e-8)
        _assert_same_projection(ref.transform(X), ours.transform(sp.csr_matrix(X)), 1e-10)

    def my_kernel(a, b, scale=1.0):
        return np.exp(-1e-3 * scale * np.sum((a - b) ** 2))

    ours = KernelPCA(5, kernel=my_kernel, kernel_params={"scale": 1.0}).fit(X)
    np.testing.assert_allclose(ours.eigenvalues_, ref.eigenvalues_, rtol=1e-8)
    _assert_same_projection(ref.transform(X[:20]), ours.transform(X[:20]), 1e-10)
    # precomputed (laplacian, which scikit-learn's KernelPCA does not name) vs dkpca's laplacian
    K = laplacian_kernel(X, gamma=0.01)
    pre = KernelPCA(5, kernel="precomputed").fit(K)
    ref_pre = SKKernelPCA(5, kernel="precomputed").fit(K)
    lap = KernelPCA(5, kernel="laplacian", gamma=0.01).fit(X)
    np.testing.assert_allclose(pre.eigenvalues_, ref_pre.eigenvalues_, rtol=1e-8)
    np.testing.assert_allclose(lap.eigenvalues_, ref_pre.eigenvalues_, rtol=1e-8)
    _assert_same_projection(ref_pre.transform(K[:20]), pre.transform(K[:20]), 1e-10)
    _assert_same_projection(ref_pre.transform(K[:20]), lap.transform(X[:20]), 1e-10)
    # a dkpca Kernel object is used natively (block evaluation), not per pair
    comb = KernelPCA(4, kernel=RBF(1e-3) + Linear()).fit(X)
    Kc = rbf_kernel(X, gamma=1e-3) + X @ X.T
    lam, _ = reference_eigh(Kc, 4)
    np.testing.assert_allclose(comb.eigenvalues_, lam, rtol=1e-8)


@pytest.mark.parametrize("solver", ["dense", "arpack"])
def test_precomputed_kernel_and_centred_kernel_agree(gen, solver):
    """scikit-learn's drop-in rule: centring an already centred kernel changes nothing.

    H (H K H) H = H K H exactly; in floating point the second centring moves
    entries by ~1e-16 |K|, so eigenvalues agree to 1e-10 (relative) and
    eigenvectors, with the same sign rule, to 1e-10 (gaps here >= 1e-2 lambda_1).
    """
    K = rbf_kernel(gen, gamma=0.2)
    a = KernelPCA(5, kernel="precomputed", eigen_solver=solver, random_state=0).fit(K)
    b = KernelPCA(5, kernel="precomputed", eigen_solver=solver, random_state=0).fit(centered(K))
    np.testing.assert_allclose(b.eigenvalues_, a.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(b.eigenvectors_, a.eigenvectors_, atol=1e-10)


def test_all_components_of_indefinite_kernel_raise_like_sklearn(gen):
    """n_components=None asks for every eigenvalue, negative ones included: scikit-learn raises, so does dkpca."""
    params = {"kernel": "sigmoid", "gamma": 0.2, "coef0": 1.0}
    with pytest.raises(ValueError, match="There are significant negative eigenvalues"):
        SKKernelPCA(**params).fit(gen)
    with pytest.raises(ValueError, match="There are significant negative eigenvalues"):
        KernelPCA(**params).fit(gen)


def test_float32_preserved_and_close(gen):
    X32 = gen.astype(np.float32)
    est = KernelPCA(3, kernel="rbf", gamma=0.2)
    Z = est.fit_transform(X32)
    assert Z.dtype == np.float32 and est.transform(X32).dtype == np.float32
    ref = KernelPCA(3, kernel="rbf", gamma=0.2).fit(gen)
    np.testing.assert_allclose(est.eigenvalues_, ref.eigenvalues_, rtol=1e-5)


FITTED = ("eigenvalues_", "eigenvectors_", "dual_coef_", "X_transformed_fit_")


def test_float32_fitted_arrays_and_pre_images_have_scikit_learn_s_types(gen):
    """scikit-learn keeps a float32 fit's arrays in float32, and its pre-images in the type of the scores given."""
    X32 = gen.astype(np.float32)
    ours, theirs = (E(3, kernel="rbf", gamma=0.2, fit_inverse_transform=True).fit(X32)
                    for E in (KernelPCA, SKKernelPCA))
    types = [{a: getattr(est, a).dtype for a in FITTED} for est in (ours, theirs)]
    assert types[0] == types[1] == dict.fromkeys(FITTED, np.float32)
    Z = ours.transform(X32)
    for scores in (Z, Z.astype(np.float64)):
        assert ours.inverse_transform(scores).dtype == theirs.inverse_transform(scores).dtype == scores.dtype
    wide = KernelPCA(3, kernel="rbf", gamma=0.2, dtype="float64").fit(X32)  # the precision asked for is kept
    assert wide.eigenvalues_.dtype == wide.eigenvectors_.dtype == np.float64


def test_float32_input_is_solved_in_single_precision_unless_dtype_says_otherwise(gen):
    """Default: scikit-learn's arithmetic for float32 input (its ARPACK agrees to single precision);
    dtype="float64" gives the float64 fit of the same numbers (to float64 rounding, rtol 1e-10)."""
    X32 = gen.astype(np.float32)
    params = {"n_components": 3, "kernel": "rbf", "gamma": 0.2, "eigen_solver": "arpack"}
    ours = KernelPCA(**params).fit(X32).eigenvalues_
    np.testing.assert_allclose(ours, SKKernelPCA(**params).fit(X32).eigenvalues_, rtol=1e-5)
    wide = KernelPCA(dtype="float64", **params).fit(X32).eigenvalues_
    np.testing.assert_allclose(wide, KernelPCA(**params).fit(X32.astype(np.float64)).eigenvalues_, rtol=1e-10)


@pytest.mark.parametrize("fit_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("new_dtype", [np.float32, np.float64, np.int64])
def test_transform_returns_scikit_learns_dtype(gen, fit_dtype, new_dtype):
    """transform's output is the common float type of the new data and the fit's (scikit-learn's, checked side by
    side): float32 only when both are -- a float64 fit's scores of float32 data were float32 (rounded, ~1e-7)."""
    X, new = gen.astype(fit_dtype), (gen[:5] * 10).astype(new_dtype)
    params = {"n_components": 3, "kernel": "rbf", "gamma": 0.2}
    ours = KernelPCA(**params).fit(X).transform(new).dtype
    assert ours == SKKernelPCA(**params).fit(X).transform(new).dtype
    assert KernelPCA(**params).fit(X).transform(da.from_array(new, chunks=(2, -1))).dtype == ours


def test_pipeline_and_gridsearch_same_as_sklearn(digits):
    X, y = digits
    grid = {"kpca__gamma": [1e-3, 3e-3], "kpca__n_components": [5, 12]}

    def search(kpca):
        pipe = Pipeline([("scale", StandardScaler()), ("kpca", kpca), ("clf", LogisticRegression(max_iter=2000))])
        return GridSearchCV(pipe, grid, cv=3).fit(X, y)

    ours = search(KernelPCA(kernel="rbf"))
    ref = search(SKKernelPCA(kernel="rbf"))
    # identical projections (same signs) -> identical classifier scores
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"], ref.cv_results_["mean_test_score"], atol=1e-12)
    assert ours.best_params_ == ref.best_params_
    assert ours.score(X, y) == pytest.approx(ref.score(X, y), abs=1e-12)


def test_set_output_pandas_and_feature_names(gen):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(gen, columns=[f"f{i}" for i in range(gen.shape[1])])
    est = KernelPCA(3, kernel="rbf", gamma=0.2).set_output(transform="pandas")
    out = est.fit_transform(df)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == ["kernelpca0", "kernelpca1", "kernelpca2"]
    assert list(est.feature_names_in_) == list(df.columns) and est.n_features_in_ == gen.shape[1]
    assert list(est.get_feature_names_out()) == list(SKKernelPCA(3).fit(df).get_feature_names_out())
    np.testing.assert_allclose(est.transform(df).to_numpy(), out.to_numpy(), atol=1e-9)


def test_not_fitted_errors(gen):
    est = KernelPCA(2)
    with pytest.raises(NotFittedError):
        est.transform(gen)
    with pytest.raises(NotFittedError):
        est.inverse_transform(np.zeros((1, 2)))
    est.fit(gen)
    with pytest.raises(NotFittedError, match="fit_inverse_transform"):
        est.inverse_transform(np.zeros((1, 2)))


@pytest.mark.parametrize("params, match", [
    ({"n_components": 0}, "n_components"),
    ({"n_components": 2.5}, "n_components"),
    ({"kernel": "gaussian"}, "kernel"),
    ({"kernel": 3}, "kernel"),
    ({"gamma": -1.0}, "gamma"),
    ({"kernel": "rbf", "gamma": 0.0}, "gamma"),
    ({"kernel": "poly", "degree": 2.5}, "degree"),
    ({"alpha": -1}, "alpha"),
    ({"eigen_solver": "lobpcg"}, "eigen_solver"),
    ({"tol": -1e-3}, "tol"),
    ({"max_iter": 0}, "max_iter"),
    ({"iterated_power": "many"}, "iterated_power"),
    ({"overwrite": "yes"}, "overwrite"),
    ({"remove_zero_eig": "yes"}, "remove_zero_eig"),
    ({"random_state": "seed"}, "random_state"),
    ({"dtype": "float16"}, "dtype"),
    ({"chunk_size": 0}, "chunk_size"),
    ({"n_landmarks": -3}, "n_landmarks"),
    ({"kernel": "rbf", "kernel_params": {"sigma": 1.0}}, "sigma"),
    ({"kernel": "precomputed", "fit_inverse_transform": True}, "precomputed"),
])
def test_bad_params(gen, params, match):
    with pytest.raises(ValueError, match=match):
        KernelPCA(**params).fit(gen)


@pytest.mark.parametrize("params", [{"n_components": 0}, {"eigen_solver": "lobpcg"}, {"tol": -1e-3},
                                    {"random_state": "seed"}, {"kernel": 3}])
def test_a_bad_parameter_is_scikit_learns_invalid_parameter_error(gen, params):
    """scikit-learn raises its InvalidParameterError, a ValueError and a TypeError; code catching either (or it)
    catches dkpca's too (a plain ValueError before)."""
    from sklearn.utils._param_validation import InvalidParameterError

    with pytest.raises(InvalidParameterError) as exc:
        KernelPCA(**params).fit(gen)
    assert isinstance(exc.value, TypeError) and isinstance(exc.value, ValueError)


def test_bad_input(tmp_path, gen):
    with pytest.raises(ValueError, match="square"):
        KernelPCA(kernel="precomputed").fit(gen)
    est = KernelPCA(2).fit(gen)
    with pytest.raises(ValueError, match="features"):
        est.transform(gen[:, :3])
    with pytest.raises(ValueError, match="features"):
        est.transform(da.from_array(gen[:, :3]))
    with pytest.raises(ValueError, match="NaN|infinity"):
        KernelPCA(2).fit(np.where(gen > 2, np.nan, gen))
    with pytest.raises(ValueError, match="fitted in memory"):
        est.transform(write_data(tmp_path / "x.zarr", gen))


def test_lanczos_available_or_clear_error(gen):
    est = KernelPCA(3, kernel="rbf", gamma=0.2, eigen_solver="lanczos", random_state=0)
    if _lanczos_available():
        ref = KernelPCA(3, kernel="rbf", gamma=0.2).fit(gen)
        np.testing.assert_allclose(est.fit(gen).eigenvalues_, ref.eigenvalues_, rtol=1e-8)
    else:
        with pytest.raises(ValueError, match="not available"):
            est.fit(gen)


def test_remove_zero_eig_and_pickle(gen):
    # rank-3 linear data: components 4, 5 have zero eigenvalues
    X = gen[:, :3] @ np.random.default_rng(0).standard_normal((3, 5))
    est = KernelPCA(5, kernel="linear").fit(X)
    assert est.eigenvalues_.shape == (5,) and np.all(est.eigenvalues_[3:] == 0)
    assert est.transform(X).shape == (len(X), 5)
    est2 = KernelPCA(5, kernel="linear", remove_zero_eig=True).fit(X)
    assert est2.eigenvalues_.shape == (3,)
    again = pickle.loads(pickle.dumps(est2))
    np.testing.assert_array_equal(again.transform(X[:5]), est2.transform(X[:5]))


# -- out of core --------------------------------------------------------------------


@pytest.mark.parametrize("source", ["dask", "zarr-path"])
def test_out_of_core_agrees_with_in_memory(tmp_path, gen, source):
    X = gen
    if source == "dask":
        Xin = da.from_array(X, chunks=(64, X.shape[1]))
    else:
        Xin = str(tmp_path / "x.zarr")
        zarr.create_array(Xin, data=X)
    # the same (direct) solver on both paths: agreement to rounding, not to an iterative tolerance
    kw = {"kernel": "rbf", "gamma": 0.2, "fit_inverse_transform": True, "alpha": 0.1, "eigen_solver": "dense"}
    mem = KernelPCA(4, **kw).fit(X)
    ooc = KernelPCA(4, dtype="float64", chunk_size=100, store=str(tmp_path / "s.dkpca.zarr"), **kw).fit(Xin)
    assert isinstance(ooc.model_, dkpca.KPCAModel) and os.path.isdir(ooc.model_.store)
    assert ooc.n_features_in_ == X.shape[1] and ooc.gamma_ == 0.2
    np.testing.assert_allclose(ooc.eigenvalues_, mem.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(ooc.eigenvectors_, mem.eigenvectors_, atol=1e-10)
    np.testing.assert_allclose(ooc.explained_variance_ratio_, mem.explained_variance_ratio_, rtol=1e-10)
    Zm = mem.transform(X[:30])
    np.testing.assert_allclose(ooc.transform(X[:30]), Zm, atol=1e-10)
    lazy = ooc.transform(da.from_array(X[:30], chunks=(10, X.shape[1])))
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), Zm, atol=1e-10)
    np.testing.assert_allclose(ooc.fit_transform(Xin), mem.fit_transform(X), atol=1e-10)
    for method in ("ridge", "kwok-tsang", "fixed-point"):
        np.testing.assert_allclose(ooc.inverse_transform(Zm, method=method),
                                   mem.inverse_transform(Zm, method=method), atol=1e-8)
    # default float32 Gram store: agreement to single precision
    ooc32 = KernelPCA(4, kernel="rbf", gamma=0.2, store=str(tmp_path / "s32.dkpca.zarr")).fit(Xin)
    np.testing.assert_allclose(ooc32.eigenvalues_, mem.eigenvalues_, rtol=1e-5)
    # a refit in memory drops the out-of-core model, and says that the store given is not written
    with pytest.warns(UserWarning, match=r"store=.*is not written: in-memory X is fitted in memory"):
        assert not hasattr(ooc32.fit(X), "model_")


def test_a_refit_of_another_kernel_into_a_store_needs_overwrite_as_its_message_says(tmp_path, gen):
    """The store's refusal of another kernel's fit names overwrite=True, which KernelPCA takes (as dkpca.fit):
    with it the refit rebuilds the store and equals the in-memory fit (float64 K, dense solver: to rounding)."""
    src, store = str(tmp_path / "x.zarr"), str(tmp_path / "s.dkpca.zarr")
    zarr.create_array(src, data=gen)
    kw = {"dtype": "float64", "eigen_solver": "dense", "store": store}
    KernelPCA(3, kernel="rbf", gamma=0.1, **kw).fit(src)
    with pytest.raises(ValueError, match=r"kernel differs.*Pass overwrite=True"):
        KernelPCA(3, kernel="rbf", gamma=1.0, **kw).fit(src)
    refit = KernelPCA(3, kernel="rbf", gamma=1.0, overwrite=True, **kw).fit(src)
    np.testing.assert_allclose(refit.eigenvalues_, KernelPCA(3, kernel="rbf", gamma=1.0).fit(gen).eigenvalues_,
                               rtol=1e-10)
    assert dkpca.load(store).kernel.gamma == 1.0


def test_out_of_core_randomized(tmp_path, gen):
    Xin = da.from_array(gen, chunks=(100, gen.shape[1]))
    ooc = KernelPCA(3, kernel="rbf", gamma=0.2, eigen_solver="randomized", random_state=0, dtype="float64",
                    tol=1e-10, store=str(tmp_path / "r.zarr")).fit(Xin)
    ref = SKKernelPCA(3, kernel="rbf", gamma=0.2).fit(gen)
    assert ooc.eigen_solver_ == "randomized"
    np.testing.assert_allclose(ooc.eigenvalues_, ref.eigenvalues_, rtol=1e-8)
    _assert_same_projection(ref.transform(gen[:20]), ooc.transform(gen[:20]), 1e-6)


#: irregular row chunks and split columns, as a user's dask array may have
DASK_CHUNKS = ((70, 80, 100), (2, 3))


def test_dask_in_dask_out_out_of_core(tmp_path, gen):
    """fit_transform and transform of dask arrays return dask arrays with their row chunks; same values as numpy."""
    # one direct solver on both paths: the same values to rounding
    mem = KernelPCA(3, kernel="rbf", gamma=0.2, eigen_solver="dense")
    ooc = KernelPCA(3, kernel="rbf", gamma=0.2, dtype="float64", store=str(tmp_path / "s.dkpca.zarr"),
                    eigen_solver="dense")
    Z = ooc.fit_transform(da.from_array(gen, chunks=DASK_CHUNKS))
    assert isinstance(Z, da.Array) and Z.chunks == (DASK_CHUNKS[0], (3,))
    np.testing.assert_allclose(Z.compute(), mem.fit_transform(gen), atol=1e-10)
    new = da.from_array(gen[:50] + 0.1, chunks=((7, 13, 30), (5,)))
    T = ooc.transform(new)
    assert isinstance(T, da.Array) and T.chunks == ((7, 13, 30), (3,))
    np.testing.assert_allclose(T.compute(), mem.transform(gen[:50] + 0.1), atol=1e-10)
    assert isinstance(ooc.transform(gen[:50] + 0.1), np.ndarray)  # numpy in, numpy out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dask_transform_of_in_memory_fit_is_lazy_and_keeps_chunks(gen, dtype):
    X = gen.astype(dtype)
    est = KernelPCA(3, kernel="rbf", gamma=0.2).fit(X)
    T = est.transform(da.from_array(X, chunks=DASK_CHUNKS))
    assert isinstance(T, da.Array) and T.chunks == (DASK_CHUNKS[0], (3,)) and T.dtype == dtype
    est.fit(X[:100] * 2)  # a refit does not change a lazy result made before it
    np.testing.assert_allclose(T.compute(), KernelPCA(3, kernel="rbf", gamma=0.2).fit(X).transform(X),
                               rtol=0, atol=1e-12 if dtype == np.float64 else 1e-5)


@pytest.mark.parametrize("params, match", [
    ({"n_components": None}, "n_components=None"),
    ({"n_components": 2, "eigen_solver": "arpack"}, "arpack"),
    ({"n_components": 2, "kernel": "precomputed"}, "in-memory only"),
])
def test_out_of_core_refuses_in_memory_only_options(tmp_path, gen, params, match):
    with pytest.raises(ValueError, match=match):
        KernelPCA(store=str(tmp_path / "s.zarr"), **params).fit(da.from_array(gen))


# -- scikit-learn's estimator checks -------------------------------------------------------


#: check_estimators_dtypes fits a precomputed "kernel" cast to int, i.e. a truncated linear kernel, which
#: is not PSD: scikit-learn's KernelPCA raises on it (its significant-negative-eigenvalue error) and so does
#: dkpca, which follows scikit-learn's spectrum policy exactly (test_dtype_check_fails_like_sklearn_on_precomputed).
PRECOMPUTED_EXPECTED_FAILURES = {"check_estimators_dtypes": "int-cast kernels are not PSD; scikit-learn raises too"}


@pytest.mark.parametrize("est", [
    KernelPCA(),
    KernelPCA(n_components=3, kernel="rbf"),
    KernelPCA(kernel="precomputed"),
    KernelPCA(n_components=2, eigen_solver="arpack"),
    KernelPCA(n_components=2, eigen_solver="randomized", random_state=0),
    KernelPCA(n_components=2, kernel="laplacian", fit_inverse_transform=True),
    KernelPCA(kernel=RBF(0.5) + Linear(), fit_inverse_transform=True),
    KernelPCA(n_components=2, kernel="rbf", dtype="float64"),  # float64 out whatever comes in: its tags say so
], ids=lambda e: repr(e).replace("\n", "").replace(" ", ""))
def test_check_estimator(est):
    expected = PRECOMPUTED_EXPECTED_FAILURES if est.kernel == "precomputed" else None
    check_estimator(est, expected_failed_checks=expected)


def test_dtype_check_fails_like_sklearn_on_precomputed():
    """The one check excused above fails for scikit-learn's KernelPCA with the same error."""
    with pytest.raises(ValueError, match="There are significant negative eigenvalues") as sk:
        check_estimators_dtypes("KernelPCA", SKKernelPCA(kernel="precomputed"))
    with pytest.raises(ValueError, match="There are significant negative eigenvalues") as ours:
        check_estimators_dtypes("KernelPCA", KernelPCA(kernel="precomputed"))
    assert str(ours.value).startswith(str(sk.value))


# SparseKernelPCA (dkpca/sparse.py) runs check_estimator in tests/test_sparse.py.


def test_auto_in_memory_chooses_by_cost_not_by_k_below_10():
    """k=10 of n=1000: ARPACK (scikit-learn's rule would take the 10x slower dense eigh); k >= n/10: dense."""
    X = np.random.default_rng(0).standard_normal((1000, 5))
    assert KernelPCA(10, kernel="rbf").fit(X).eigen_solver_ == "arpack"
    assert KernelPCA(100, kernel="rbf").fit(X).eigen_solver_ == "dense"


def test_in_memory_lanczos_with_a_wide_block_starts_from_nystroem_and_matches_the_reference(monkeypatch):
    """k = 95 (block 105 >= nystrom.START_MIN_BLOCK): the in-memory fit draws its start block from 210
    landmarks of X; eigenvalues equal the dense reference to 1e-8 (tol=0: residual 1e-10, errors ~r^2/gap)."""
    from dkpca.solvers import nystrom

    X = np.random.default_rng(0).standard_normal((400, 8))
    calls = []
    original = nystrom.start_block

    def spy(X_, kernel, ell, rng, n_landmarks):
        calls.append((ell, n_landmarks))
        return original(X_, kernel, ell, rng, n_landmarks)

    monkeypatch.setattr(nystrom, "start_block", spy)
    model = KernelPCA(95, kernel="rbf", gamma=0.1, eigen_solver="lanczos", random_state=0).fit(X)
    assert calls == [(105, 210)]
    lam, _ = reference_eigh(rbf_kernel(X, gamma=0.1), 95)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)
