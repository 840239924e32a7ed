"""Issue 37, numerical edges: the precision of K chosen before it is wrong, numerically zero components, kernel checks.

References: ``scipy.linalg.eigh`` of the float64 centred kernel (conftest.reference_eigh).  Tolerance for
eigenvalues at the default dtype: 1e-5 relative (the issue's requirement; float32 entries alone were 25 % off).
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.metrics.pairwise import polynomial_kernel

import dkpca
from dkpca.kernels import NonFiniteKernelError, make_kernel
from dkpca.planning import PrecisionWarning

from .conftest import reference_eigh

RTOL = 1e-5


@pytest.fixture(scope="module")
def X():
    # 1,500 x 10 standard normal (numpy default_rng(0)): the x3k at half the rows (the same loss:
    # gamma=1e-8 leaves 2e-7 of trace(K) after centring), so that the dense reference stays fast
    return np.random.default_rng(0).standard_normal((1500, 10))


_REFS: dict = {}


def ref(X, k, **kw):
    key = (id(X), k, tuple(sorted(kw.items())))
    if key not in _REFS:
        kern = make_kernel(kw.pop("kernel", "rbf"), **kw).resolve(X.shape[1])
        _REFS[key] = reference_eigh(kern.block(X, None, np.float64), k)[0]
    return _REFS[key]


def rel_err(lam, ref_lam):
    assert len(lam) == len(ref_lam)
    return float(np.max(np.abs(np.asarray(lam) - ref_lam) / ref_lam))


CASES = {  # (data transform, kernel arguments): each one float32 got wrong by more than 1e-5
    "gamma=1e-8": (lambda X: X, dict(kernel="rbf", gamma=1e-8)),
    "gamma=1e-6": (lambda X: X, dict(kernel="rbf", gamma=1e-6)),
    "poly degree 400": (lambda X: X * 0.01, dict(kernel="poly", degree=400)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("where", ["memory", "store"])
def test_default_dtype_accurate_where_float32_cancels(X, tmp_path, case, where):
    transform, kw = CASES[case]
    Xc = transform(X)
    store = tmp_path / "s.zarr" if where == "store" else None
    model = dkpca.fit(Xc, 3, store=store, random_state=0, **kw)
    assert rel_err(model.eigenvalues_, ref(Xc, 3, **kw)) < RTOL
    decision = model.report["precision"]
    assert decision["dtype"] == "float64" and decision["requested"] == "auto"
    assert decision["predicted_error"] > 1e-6 and "float32" in decision["reason"]
    assert model.report["gram"]["dtype"] == "float64"


def test_float32_alone_is_wrong_on_these_cases(X):
    # the premise: with K in float32 (asked for) the small-gamma eigenvalues are far off, and a warning says so
    with pytest.warns(PrecisionWarning, match="float32"):
        model = dkpca.fit(X, 3, gamma=1e-8, dtype="float32", random_state=0)
    assert model.report["precision"]["dtype"] == "float32"
    assert model.report["precision"]["predicted_error"] > 1e-3


def test_default_keeps_float32_for_common_rbf(X, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        model = dkpca.fit(X, 3, store=tmp_path / "s.zarr", random_state=0)
    decision = model.report["precision"]
    assert decision["dtype"] == "float32" and decision["predicted_error"] < 1e-6
    assert rel_err(model.eigenvalues_, ref(X, 3, kernel="rbf")) < RTOL
    assert decision["sample"] == 256  # the check's cost is bounded by its sample (milliseconds), not by n


#: eigenvalues asked for to tol=1e-10: float64's accuracy, which float32 entries miss (8e-8 off on X at the default)
TIGHT = 1e-9


def test_a_tighter_tol_holds_K_in_float64_for_eigenvalues_that_accurate(X):
    model = dkpca.fit(X, 3, tol=1e-10, random_state=0)
    assert model.report["precision"]["dtype"] == "float64" and "above tol=1e-10" in model.report["precision"]["reason"]
    assert rel_err(model.eigenvalues_, ref(X, 3, kernel="rbf")) < TIGHT
    # the premise: at the default tol the same data keeps float32, whose eigenvalues miss that accuracy
    default = dkpca.fit(X, 3, random_state=0)
    assert default.report["precision"]["dtype"] == "float32"
    assert rel_err(default.eigenvalues_, ref(X, 3, kernel="rbf")) > TIGHT


def test_tol_zero_is_as_accurate_as_the_arithmetic_allows(X):
    # scikit-learn's meaning for ARPACK; held to the letter, tol=0 would run the whole pass budget and warn
    from dkpca.request import ARITHMETIC_TOL, DEFAULT_MAX_PASSES
    from dkpca.solvers import ConvergenceWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = dkpca.fit(X, 3, tol=0, solver="lanczos", gram="store", random_state=0)
    assert model.report["converged"] and model.report["tol"] == ARITHMETIC_TOL
    assert model.report["passes"] < DEFAULT_MAX_PASSES
    assert model.report["precision"]["dtype"] == "float64"
    assert rel_err(model.eigenvalues_, ref(X, 3, kernel="rbf")) < TIGHT


def test_a_refit_with_a_tighter_tol_keeps_the_stores_float32_K_and_warns(X, tmp_path):
    store = tmp_path / "s.zarr"
    dkpca.fit(X, 3, store=store, random_state=0)
    with pytest.warns(PrecisionWarning, match=r"above tol=1e-10, but the store holds K in float32.*overwrite=True"):
        model = dkpca.fit(X, 3, store=store, tol=1e-10, random_state=0)
    assert model.report["gram"]["computed_blocks"] == 0 and model.report["precision"]["dtype"] == "float32"
    assert model.report["converged"]


def test_explicit_float32_with_a_tighter_tol_warns(X):
    with pytest.warns(PrecisionWarning, match=r"above tol=1e-10"):
        model = dkpca.fit(X[:400], 3, dtype="float32", tol=1e-10, random_state=0)
    assert model.report["precision"]["dtype"] == "float32"


def test_explicit_float64_is_not_measured(X):
    model = dkpca.fit(X[:300], 3, dtype="float64")
    assert model.report["precision"] == {**model.report["precision"], "dtype": "float64", "requested": "float64",
                                         "predicted_error": None}


def test_estimator_out_of_core_default(X):
    kw = dict(kernel="rbf", gamma=1e-8)
    est = dkpca.KernelPCA(3, random_state=0, **kw).fit(da.from_array(X, chunks=500))
    assert rel_err(est.eigenvalues_, ref(X, 3, **kw)) < RTOL


def test_estimator_in_memory_float32_input(X):
    X32 = X.astype(np.float32)
    kw = dict(kernel="rbf", gamma=1e-6)
    est = dkpca.KernelPCA(3, random_state=0, **kw).fit(X32)
    assert rel_err(est.eigenvalues_, ref(X32.astype(np.float64), 3, **kw)) < RTOL
    assert est.transform(X32[:5]).dtype == np.float32  # scikit-learn's output dtype is kept


def test_estimator_explicit_float32_warns_with_the_loss(X):
    with pytest.warns(PrecisionWarning, match=r"relative error into the top 2"):
        est = dkpca.KernelPCA(2, kernel="rbf", gamma=1e-8, dtype="float32").fit(X[:400])
    assert est.precision_.dtype == "float32" and est.precision_.lossy


def test_plan_shows_the_precision(X):
    p = dkpca.plan(X, 3, gamma=1e-8)
    assert p.dtype == "float64" and p.precision["dtype"] == "float64"
    assert "precision:" in str(p) and "float64" in str(p)
    p32 = dkpca.plan(X, 3)
    assert p32.dtype == "float32" and "precision:" in str(p32)


def test_cli_dtype_auto_default(tmp_path, capsys):
    from dkpca.cli import main
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(0).standard_normal((400, 10)))
    assert main(["fit", str(path), "-k", "3", "--gamma", "1e-8"]) == 0
    assert "dtype=float64" in capsys.readouterr().out  # the summary names the precision; `info` says why
    assert main(["info", str(path) + ".dkpca.zarr"]) == 0
    assert "why dtype: float32 puts" in capsys.readouterr().out


# -- case 7: numerically zero components ----------------------------------------------------------------------
def test_identical_points_have_no_component():
    with pytest.warns(UserWarning, match="numerically zero"):
        model = dkpca.fit(np.ones((300, 5)))
    assert model.eigenvalues_.size == 0 and model.report["zero_components_dropped"] == 2
    assert model.transform(np.ones((4, 5))).shape == (4, 0)


def test_zero_rule_is_relative_to_the_kernel_not_the_noise():
    from dkpca.solvers import EigResult, postprocess
    # eigenvalues at float64 rounding of a K of size 300 (n c = 300): zero, although they are each other's size
    res = EigResult(np.array([6.7e-14, 3e-14]), np.eye(4)[:, :2], 1, np.zeros(2), True, "dense")
    with pytest.warns(UserWarning, match="numerically zero"):
        out = postprocess(res, remove_zero=True, precision=np.float64, scale=300.0)
    assert out.eigenvalues.size == 0 and out.info["zero_eigenvalues_removed"] == 2
    # scikit-learn's rule is unchanged where the top eigenvalue dominates the scale
    res = EigResult(np.array([1.0, 1e-6]), np.eye(4)[:, :2], 1, np.zeros(2), True, "dense")
    assert postprocess(res, remove_zero=True, precision=np.float64, scale=1.0).eigenvalues.size == 2


def test_data_far_from_the_origin_keeps_its_components():
    """A linear kernel on points 1e6 from the origin: centring cancels K's 2.4e13 entries down to eigenvalues ~200,
    which rounding resolves (K's entries carry ~u |K_ij| sqrt(d) each, a few thousandths in every eigenvalue;
    scikit-learn's are within 0.01). Before, the zero rule (1e-12 n c = 2,160) called them all zero."""
    X = np.random.default_rng(0).standard_normal((90, 24)) + 1e6
    Xc = X - X.mean(axis=0)
    lam = np.linalg.eigvalsh(Xc @ Xc.T)[::-1][:5]  # the centred linear kernel, exactly as a Gram of centred X
    model = dkpca.fit(X, 5, kernel="linear")
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=0, atol=0.1)
    est = dkpca.KernelPCA(5, kernel="linear", eigen_solver="dense").fit(X)
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=0, atol=0.1)


def test_the_smallest_component_of_raw_measurements_is_kept():
    """Raw breast-cancer measurements (569 x 30, means up to 880), linear kernel: all 30 components, the smallest
    (4.0e-4, 2e-12 of n c) as PCA's; before: 29 kept (n_components=None), the 30th zeroed with n_components=30."""
    from sklearn.datasets import load_breast_cancer

    X = load_breast_cancer().data
    exact = np.linalg.svd(X - X.mean(axis=0), compute_uv=False) ** 2
    assert dkpca.KernelPCA().fit(X).eigenvalues_.size == 30
    smallest = dkpca.KernelPCA(30).fit(X).eigenvalues_[-1]
    np.testing.assert_allclose(smallest, exact[-1], rtol=1e-3)  # rounding: ~u n c sqrt(n) = 3e-6, 1 % of it


@pytest.fixture(scope="module")
def far_and_flat():
    """2,000 3-D points at 1e6 with scales 1, 0.7, 0.3, and K~'s top eigenvalues (the Gram of the centred points):
    [2033.7, 939.1, 179.1]; n c = 6e15, u sqrt(n) n c = 30; every solver computes them to ~0.004."""
    X = np.random.default_rng(0).normal(size=(2000, 3)) * [1.0, 0.7, 0.3] + 1e6
    return X, np.linalg.svd(X - X.mean(axis=0), compute_uv=False) ** 2


@pytest.mark.parametrize("solver", ["dense", "lanczos", "randomized"])
def test_a_component_far_above_the_rounding_of_n_c_is_kept(far_and_flat, solver):
    """Before: the third (179, 5.7 % of the variance) fell under the zero rule's 8 u sqrt(n) n c = 236, though the
    noise of components that are rounding is at most ~2.3 u sqrt(n) n c = 67 (identical points, measured)."""
    X, exact = far_and_flat
    model = dkpca.fit(X, 3, kernel="linear", solver=solver, dtype="float64", random_state=0)
    np.testing.assert_allclose(model.eigenvalues_, exact, rtol=0, atol=0.05)


def test_randomized_iteration_does_not_stop_at_its_first_pass_s_small_residuals(far_and_flat):
    """The same points at 2e6 (n c 4 times larger; the same K~): before, the first pass's residuals (~100, of Ritz
    values ~10 near K~'s zeros) were under the rounding stop (4 u sqrt(n) n c = 470): 'converged' after one pass,
    both components zero and a warning that K~ vanishes.  Rounding leaves ~0.03 in them here."""
    X, exact = far_and_flat
    est = dkpca.KernelPCA(2, kernel="linear", eigen_solver="randomized", random_state=0).fit(X + 1e6)
    np.testing.assert_allclose(est.eigenvalues_, exact[:2], rtol=0, atol=0.2)


def test_a_negative_eigenvalue_at_the_rounding_of_n_c_is_no_refusal(far_and_flat):
    """A fraction (the dense solver, every eigenvalue) on 1,000 of the points: before, a rounding negative of -0.18
    (1.8e-4 of lambda_1, under the 8 u sqrt(n) n c that zeroes positives) refused the linear kernel as not PSD."""
    X, _ = far_and_flat
    X = X[:1000]
    exact = np.linalg.svd(X - X.mean(axis=0), compute_uv=False) ** 2
    k = int(np.searchsorted(np.cumsum(exact) / exact.sum(), 0.9)) + 1
    model = dkpca.fit(X, 0.9, kernel="linear", solver="dense")
    np.testing.assert_allclose(model.eigenvalues_, exact[:k], rtol=0, atol=0.05)


def test_estimator_keeps_zero_components_unless_asked():
    # scikit-learn: with n_components given and remove_zero_eig=False the zero eigenvalues stay (as 0)
    est = dkpca.KernelPCA(2, kernel="rbf").fit(np.ones((50, 3)))
    assert np.all(est.eigenvalues_ == 0)
    with pytest.warns(UserWarning, match="numerically zero"):
        est = dkpca.KernelPCA(2, kernel="rbf", remove_zero_eig=True).fit(np.ones((50, 3)))
    assert est.eigenvalues_.size == 0


# -- unclear cases: non-finite kernels, callables, kernel_params -------------------------------------------------
@pytest.mark.parametrize("where", ["memory", "store"])
def test_non_finite_kernel_is_named_in_memory_as_stored(X, tmp_path, where):
    # the issue: in memory ARPACK error -9999, stored the clear NonFiniteKernelError; now the same error on both
    store = tmp_path / "s.zarr" if where == "store" else None
    with pytest.raises(NonFiniteKernelError, match="non-finite .* 'poly'"):
        dkpca.fit(X[:300], 3, kernel="poly", degree=400, store=store)
    with pytest.raises(NonFiniteKernelError, match="non-finite .* 'poly'"):  # beyond float64's range too
        dkpca.fit(X[:300], 3, kernel="poly", degree=4000, dtype="float64", store=store, overwrite=True)


def test_auto_holds_in_float64_a_kernel_that_overflows_float32_only(tmp_path):
    """A cubic on points at 1e7: K up to 1.07e42, past float32's 3.4e38, far within float64.  Before: dtype='auto'
    refused the kernel as 'not usable on this data' (dtype='float64' fitted).  Reference: eigh of the centred
    float64 kernel (float64 K: 1e-12 of lambda_1); float32 asked for is still refused."""
    X = 1e7 + 1e5 * np.random.default_rng(0).normal(size=(60, 3))
    lam, _ = reference_eigh(polynomial_kernel(X, degree=3, gamma=1 / 3, coef0=1), 3)
    model = dkpca.fit(X, 3, kernel="poly", degree=3, store=tmp_path / "s.zarr")
    assert model.report["gram"]["dtype"] == "float64"
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=0, atol=1e-12 * lam[0])
    assert "overflow float32" in dkpca.KernelPCA(3, kernel="poly", degree=3, dtype="auto").fit(X).precision_.reason
    with pytest.raises(NonFiniteKernelError, match="in float32"):
        dkpca.fit(X, 3, kernel="poly", degree=3, dtype="float32", store=tmp_path / "t.zarr")


def test_identical_rows_whose_eigenvalues_round_below_zero_have_no_component():
    """A linear kernel on 10 identical rows: K~ is exactly 0, the dense solver's eigenvalues all round to
    -1.6e-30.  Before: refused, 'All eigenvalues are negative ... not PSD' (scikit-learn's rule, which knows no
    scale); now numerically zero, as rounding a hair above 0 is."""
    X = np.full((10, 3), 3.7)
    with pytest.warns(UserWarning, match="numerically zero"):
        assert dkpca.fit(X, 5, kernel="linear", solver="dense", dtype="float64").eigenvalues_.size == 0
    np.testing.assert_array_equal(dkpca.KernelPCA(5, kernel="linear", eigen_solver="dense").fit(X).eigenvalues_, 0)


def test_callable_kernel_nan_is_named(X):
    with pytest.raises(NonFiniteKernelError, match="callable"):
        dkpca.KernelPCA(2, kernel=lambda x, y: np.nan).fit(X[:40])


def test_callable_kernel_vector_is_named(X):
    with pytest.raises(TypeError, match="callable kernel .* must return a number"):
        dkpca.KernelPCA(2, kernel=lambda x, y: x * y).fit(X[:40])


@pytest.mark.parametrize("params", [[1, 2], "gamma", 3])
def test_kernel_params_not_a_dict(X, params):
    with pytest.raises(ValueError, match=r"rbf kernel: kernel_params=.* must be None or a dict"):
        dkpca.fit(X[:50], 2, kernel_params=params)



def test_auto_refit_reuses_a_stored_float64_gram_matrix(tmp_path):
    """A store fitted with dtype="float64", refit with the default: its K is reused, not refused for its dtype."""
    Xs = np.random.default_rng(3).standard_normal((400, 5))
    store = tmp_path / "s.zarr"
    first = dkpca.fit(Xs, n_components=3, store=store, dtype="float64", chunk_size=100, gram="store")
    again = dkpca.fit(Xs, n_components=3, store=store, chunk_size=100, gram="store")  # before: "dtype differs"
    assert again.report["precision"]["dtype"] == "float64"
    assert again.report["gram"]["computed_blocks"] == 0  # every block reused
    np.testing.assert_allclose(again.eigenvalues_, first.eigenvalues_, rtol=1e-12)
    # and a plan of the same refit says the same
    assert dkpca.plan(Xs, n_components=3, store=store, chunk_size=100, gram="store").precision["dtype"] == "float64"


def test_unscaled_pixels_whose_kernel_is_nearly_the_identity_plan_and_fit_with_dtype_auto(tmp_path):
    """0-254 integers with gamma = 1/d: every off-diagonal rbf entry is below 1e-100, K ~ I, where LAPACK's partial
    eigh (the precision sample's) and ARPACK (the plan's spectrum) returned nothing.  Dense solve (the iterative
    ones cannot separate 300 eigenvalues within 1e-5 of each other): eigh's answer to 1e-8 relative."""
    from sklearn.metrics.pairwise import rbf_kernel

    from dkpca.cli import main

    X = np.random.default_rng(11).integers(0, 255, (300, 4)).astype(np.uint8)
    np.save(tmp_path / "pix.npy", X)
    assert main(["plan", str(tmp_path / "pix.npy"), "-k", "2", "--store", str(tmp_path / "s.dkpca.zarr")]) == 0
    model = dkpca.fit(X, 2, store=tmp_path / "s.dkpca.zarr", solver="dense")
    lam, _ = reference_eigh(rbf_kernel(X.astype(np.float64), gamma=1 / 4), 2)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)


def test_a_build_that_overflows_names_its_rows_largest_value(tmp_path):
    """Which is to blame, the parameters or the data (a damaged file reads as huge numbers), shows in the
    refusal: here the rows' values are ordinary (|x| < 10) and the degree overflows."""
    from .conftest import make_data

    with pytest.raises(NonFiniteKernelError, match=r"kernel block \(0, 0\) has non-finite values .*\(its rows' "
                                                     r"largest \|value\|: \d\.\d+\)"):
        dkpca.fit(make_data(300, d=4), n_components=2, kernel="poly", degree=400, dtype="float64",
                  store=tmp_path / "s.dkpca.zarr", gram="store")


@pytest.mark.parametrize("stored", [False, True])
def test_rows_whose_kernel_overflows_are_refused_by_transform_not_projected_as_nan(tmp_path, stored):
    """A training row of 1e200: the fit's K is exact (k(x, x) = 1, 0 to every other row: eigh's eigenvalues of
    that K to 1e-8), but an rbf block of new rows against it is inf - inf in the squared distance.  Before:
    transform returned NaN scores for that row without a word (scikit-learn's KernelPCA does too)."""
    from sklearn.metrics.pairwise import rbf_kernel

    from .conftest import make_data

    X = make_data(300, d=4)
    X[-1] = 1e200
    K = np.zeros((300, 300))
    K[:299, :299], K[299, 299] = rbf_kernel(X[:299], gamma=0.25), 1.0
    lam, _ = reference_eigh(K, 2)
    store = {"store": tmp_path / "s.dkpca.zarr", "gram": "store"} if stored else {}
    model = dkpca.fit(X, n_components=2, gamma=0.25, dtype="float64", **store)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-8)
    assert np.isfinite(model.transform(X[:5])).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's overflow in the kernel block, refused below
        with pytest.raises(NonFiniteKernelError, match=r"\(their largest \|value\|: 1e\+200\)"):
            model.transform(X[-3:])
