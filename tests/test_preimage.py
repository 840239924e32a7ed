"""Pre-images: ridge (= scikit-learn), Kwok-Tsang, fixed point (Mika).

References: scikit-learn's ``inverse_transform`` for the ridge map, direct
formulas (explicit feature maps of the linear kernel, brute-force neighbour
search, the dense subset-of-regressors solve), and denoising of points near a
known closed curve.
"""

import re

import numpy as np
import pytest
import scipy.linalg
from sklearn.decomposition import KernelPCA as SKKernelPCA
from sklearn.exceptions import NotFittedError
from sklearn.metrics.pairwise import rbf_kernel

import dkpca.preimage as pre
from dkpca import KernelPCA
from dkpca.kernels import RBF


def curve(n, rng):
    """Points on a closed curve (a 1-D manifold) in 8-D."""
    t = rng.uniform(0, 2 * np.pi, n)
    B = np.random.default_rng(42).standard_normal((4, 8))
    return np.column_stack([np.cos(t), np.sin(t), np.cos(2 * t), np.sin(2 * t)]) @ B


@pytest.fixture(scope="module")
def noisy_curve():
    rng = np.random.default_rng(0)
    Xc = curve(600, rng)
    Tc = curve(150, rng)
    return Xc + 0.15 * rng.standard_normal(Xc.shape), Tc, Tc + 0.15 * rng.standard_normal(Tc.shape)


@pytest.mark.parametrize("kernel, params", [("rbf", {"gamma": 0.05}), ("poly", {"degree": 2, "gamma": 0.1}),
                                            ("linear", {}), ("cosine", {})])
def test_ridge_equals_sklearn(noisy_curve, kernel, params):
    X, _, T = noisy_curve
    kw = dict(kernel=kernel, fit_inverse_transform=True, alpha=0.1, **params)
    ours = KernelPCA(8, **kw).fit(X)
    ref = SKKernelPCA(8, **kw).fit(X)
    Z = ref.transform(T)
    np.testing.assert_allclose(ours.dual_coef_, ref.dual_coef_, rtol=1e-7, atol=1e-9 * np.abs(ref.dual_coef_).max())
    want = ref.inverse_transform(Z)
    # default method with fit_inverse_transform=True is ridge, as in scikit-learn
    np.testing.assert_allclose(ours.inverse_transform(Z), want, atol=1e-8 * np.abs(want).max())
    np.testing.assert_allclose(ours.inverse_transform(Z, method="ridge"), want, atol=1e-8 * np.abs(want).max())
    np.testing.assert_array_equal(ours.inverse_landmarks_, np.arange(len(X)))


def test_each_method_denoises_a_known_curve(noisy_curve):
    """Every pre-image of the projected noisy test points is closer to the clean curve."""
    X, Tc, T = noisy_curve
    est = KernelPCA(8, kernel="rbf", gamma=0.05, fit_inverse_transform=True, alpha=0.1).fit(X)
    Z = est.transform(T)
    noisy_err = np.mean((T - Tc) ** 2)
    errs = {}
    for method in pre.METHODS:
        R = est.inverse_transform(Z, method=method)
        assert R.shape == T.shape and np.isfinite(R).all()
        errs[method] = np.mean((R - Tc) ** 2) / noisy_err
    # measured: ridge 0.35, kwok-tsang 0.29, fixed-point 0.24 of the noise
    assert all(v < 0.5 for v in errs.values()), errs
    # landmark ridge (subset of regressors on 200 of 600 points) denoises too
    lm = KernelPCA(8, kernel="rbf", gamma=0.05, fit_inverse_transform=True, alpha=0.1, n_landmarks=200,
                   random_state=0).fit(X)
    assert lm.dual_coef_.shape == (200, X.shape[1]) and lm.inverse_landmarks_.shape == (200,)
    assert np.mean((lm.inverse_transform(lm.transform(T)) - Tc) ** 2) / noisy_err < 0.5


def test_fixed_point_improves_mika_objective(noisy_curve):
    """The iteration increases sum_i gamma_i k(x, x_i) (= lowers ||phi(x) - P phi||^2) and ends at a fixed point."""
    X, _, T = noisy_curve
    g = 0.05
    est = KernelPCA(8, kernel="rbf", gamma=g).fit(X)
    Z = est.transform(T)
    x0 = est.inverse_transform(Z, method="kwok-tsang")
    x = est.inverse_transform(Z, method="fixed-point", tol=1e-10, max_iter=500)
    # gamma_i from the definition: P phi = phi_bar + sum_k z_k v_k, v_k = sum_i (u_ik / sqrt(l_k)) phi~(x_i)
    W = est.eigenvectors_ / np.sqrt(est.eigenvalues_)
    w = Z @ W.T
    gam = w - w.sum(axis=1, keepdims=True) / len(X) + 1.0 / len(X)

    def objective(P):
        return np.sum(gam * rbf_kernel(P, X, gamma=g), axis=1)

    assert np.all(objective(x) >= objective(x0) - 1e-12)
    assert np.mean(objective(x) > objective(x0) + 1e-6) > 0.9
    # fixed point: one more Mika step does not move it
    Kx = gam * rbf_kernel(x, X, gamma=g)
    step = (Kx @ X) / Kx.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(step, x, atol=1e-6 * np.abs(x).max())


def test_linear_all_components_recovers_X():
    """Linear kernel, all components: phi(x) = x, so pre-images are exact where they should be."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((80, 5)) @ rng.standard_normal((5, 5)) + 4.0  # non-centred
    T = rng.standard_normal((10, 5)) @ rng.standard_normal((5, 5)) + 4.0
    est = KernelPCA(5, kernel="linear").fit(X)
    # Kwok-Tsang: feature distances are input distances; with >= d+1 neighbours in
    # general position the closed form recovers x exactly (mean included).
    for pts in (X[:10], T):
        np.testing.assert_allclose(est.inverse_transform(est.transform(pts), method="kwok-tsang"), pts,
                                   atol=1e-8)
    # Ridge on centred data with a tiny penalty: the map z -> x is linear and exact.
    # (scikit-learn's ridge map has no intercept: it cannot restore the mean.)
    Xc = X - X.mean(axis=0)
    ridge = KernelPCA(5, kernel="linear", fit_inverse_transform=True, alpha=1e-10).fit(Xc)
    np.testing.assert_allclose(ridge.inverse_transform(ridge.transform(Xc[:10])), Xc[:10], atol=1e-6)


@pytest.mark.parametrize("kernel, jitter", [("rbf", 0.0), ("linear", 0.0), ("rbf", 1e-9)])
def test_kwok_tsang_among_repeated_training_rows_returns_the_repeated_point(kernel, jitter):
    """Training rows repeated (or nearly: 1e-9 apart) put every neighbour of a training point's scores at one place:
    the pre-image is that place (reference: the point itself, to 1e-8), not the 1e13 that dividing rounding noise
    by a singular value of ~1e-17 gave, and the fixed point started there stays among the data."""
    rng = np.random.default_rng(0)
    copies = np.repeat(rng.standard_normal((5, 3)), 20, axis=0) + jitter * rng.standard_normal((100, 3))
    grid = np.random.default_rng(1).integers(0, 3, size=(500, 2)) * 0.3  # 9 points, ~55 copies of each
    for X, gamma in ((copies, 0.3), (grid, 1.0)):
        est = KernelPCA(4, kernel=kernel, gamma=gamma).fit(X)
        P = est.inverse_transform(est.transform(X[:100:20]), method="kwok-tsang")
        np.testing.assert_allclose(P, X[:100:20], atol=1e-8)
        if kernel == "rbf":
            F = est.inverse_transform(est.transform(X[:100:20]), method="fixed-point")
            assert np.abs(F).max() <= np.abs(X).max() * (1 + 1e-12)  # a weighted mean of rows, to rounding


def test_feature_distances_and_blockwise_neighbours(monkeypatch):
    """Distances against explicit features (linear kernel), neighbours against brute force."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 4))
    T = rng.standard_normal((7, 4))
    est = KernelPCA(4, kernel="linear").fit(X)
    E = est.eigenvectors_ * np.sqrt(est.eigenvalues_)
    Z = est.transform(T)
    D = pre.feature_sq_distances(Z, E, est._kdiag_centered)
    # all components of a linear kernel: P phi(t) = t, distances are Euclidean
    brute = ((T[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(D, brute, atol=1e-9)
    idx, d2 = pre.nearest_training_points(Z, E, est._kdiag_centered, 9, block=37)  # many blocks, ragged last
    np.testing.assert_array_equal(idx, np.argsort(brute, axis=1, kind="stable")[:, :9])
    np.testing.assert_allclose(d2, np.sort(brute, axis=1)[:, :9], atol=1e-9)


def test_landmark_ridge_formula():
    """Blockwise subset-of-regressors equals the dense normal equations."""
    rng = np.random.default_rng(2)
    Z = rng.standard_normal((120, 3))
    X = rng.standard_normal((120, 4))
    k = RBF(0.3)
    # block=25: several row blocks of the n points, the last one ragged
    lm, dual = pre.fit_ridge(Z, X, lambda a, b=None: k.block(a, b), alpha=0.5, n_landmarks=30, random_state=1,
                             block=25)
    assert lm.shape == (30,) and np.all(np.diff(lm) > 0)
    Knm = rbf_kernel(Z, Z[lm], gamma=0.3)
    A = Knm.T @ Knm + 0.5 * rbf_kernel(Z[lm], gamma=0.3)
    want = scipy.linalg.solve(A, Knm.T @ X)
    np.testing.assert_allclose(dual, want, rtol=1e-6, atol=1e-8 * np.abs(want).max())


def test_errors(noisy_curve):
    X, _, T = noisy_curve
    est = KernelPCA(4, kernel="poly", degree=2).fit(X)
    Z = est.transform(T[:5])
    with pytest.raises(NotFittedError, match="fit_inverse_transform"):
        est.inverse_transform(Z)
    with pytest.raises(NotFittedError, match="fit_inverse_transform"):
        est.inverse_transform(Z, method="ridge")
    with pytest.raises(ValueError, match="rbf or linear"):
        est.inverse_transform(Z, method="kwok-tsang")
    with pytest.raises(ValueError, match="rbf kernel"):
        KernelPCA(4, kernel="linear").fit(X).inverse_transform(Z, method="fixed-point")
    with pytest.raises(ValueError, match="method='fixed-point' needs the rbf kernel"):  # not its kwok-tsang start's
        est.inverse_transform(Z, method="fixed-point")
    pre = KernelPCA(4, kernel="precomputed").fit(X @ X.T)
    for method in (None, "ridge", "kwok-tsang", "fixed-point"):  # not a fix that fails in turn: no input space
        with pytest.raises(ValueError, match="fitted on a precomputed kernel matrix has not seen"):
            pre.inverse_transform(Z, method=method)
    with pytest.raises(ValueError, match="method="):
        est.inverse_transform(Z, method="newton")
    with pytest.raises(ValueError, match="components"):
        est.inverse_transform(Z[:, :2], method="kwok-tsang")
    rbf = KernelPCA(4, kernel="rbf", gamma=0.05).fit(X)
    with pytest.raises(ValueError, match="n_neighbors"):
        rbf.inverse_transform(Z, method="kwok-tsang", n_neighbors=1)
    with pytest.raises(ValueError, match="max_iter"):
        rbf.inverse_transform(Z, method="fixed-point", max_iter=0)


def test_a_singular_ridge_system_s_refusal_names_an_alpha_that_solves_it():
    """Before: 'e.g. 1e-3' whatever alpha was given (here 1e4 against a poly kernel on scores of order 1e8)."""
    X = np.random.default_rng(0).standard_normal((60, 4)) + 1e3
    params = dict(n_components=3, kernel="poly", degree=3, fit_inverse_transform=True)
    with pytest.raises(np.linalg.LinAlgError, match=r"alpha=10000.0: pass a larger alpha \(e.g. ") as caught:
        KernelPCA(**params, alpha=1e4).fit(X)
    larger = float(re.search(r"e\.g\. ([0-9.e+]+)\)", str(caught.value)).group(1))
    assert larger > 1e4
    assert np.isfinite(KernelPCA(**params, alpha=larger).fit(X).dual_coef_).all()


def test_a_singular_ridge_system_is_refused_as_scikit_learn_refuses_it():
    """alpha=0: K of 400 scores in 4 dimensions is singular to rounding.  scikit-learn raises LinAlgError; dkpca
    returned least-squares pre-images up to 32 in magnitude for data within 3.8 (probe), and now raises too."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((400, 5))
    params = dict(n_components=4, kernel="rbf", gamma=0.3, fit_inverse_transform=True, alpha=0.0)
    with pytest.raises(np.linalg.LinAlgError):
        SKKernelPCA(**params).fit(X)
    with pytest.raises(np.linalg.LinAlgError, match="singular with alpha=0.0: pass a larger alpha"):
        KernelPCA(**params).fit(X)
    est = KernelPCA(**{**params, "alpha": 1e-3}).fit(X)  # the fix the message names
    ref = SKKernelPCA(**{**params, "alpha": 1e-3}).fit(X)
    np.testing.assert_allclose(est.inverse_transform(est.transform(X[:20])),
                               ref.inverse_transform(ref.transform(X[:20])), atol=1e-8)
