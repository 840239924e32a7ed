"""Core pipeline: Gram store, operator, dense/randomized solvers, model, reuse.

Reference throughout: the dense kernel from a naive evaluation and
scipy.linalg.eigh of H K H.
"""

import re

import numpy as np
import pytest
import zarr
from sklearn.decomposition import PCA, KernelPCA
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.gram import build_gram
from dkpca.io import as_dask, scan
from dkpca.kernels import RBF, make_kernel
from dkpca.linalg import cholesky_qr
from dkpca.operator import MatrixFreeKernelOperator, StoredKernelOperator
from dkpca.storage import FitStore, gram_bytes

from .conftest import centered, reference_eigh, spy_calls


def slow_decay(rng, n=500, d=40):
    """High-dimensional isotropic data with a wide rbf: slowly decaying spectrum."""
    return rng.standard_normal((n, d))


def _gram(tmp_path, X, kernel, dtype, block):
    Xd = as_dask(X, block_rows=block)
    return build_gram(FitStore.at(tmp_path / "s.zarr"), Xd, kernel, scan(Xd), dtype=dtype)


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-13), ("float32", 1e-5)])
def test_stored_gram_equals_dense_kernel(tmp_path, blobs, dtype, tol):
    k = RBF(0.1)
    info = _gram(tmp_path, blobs, k, dtype, block=128)
    Kd = rbf_kernel(blobs, gamma=0.1)
    Kz = info.K()
    assert Kz.dtype == np.dtype(dtype) and Kz.chunks == (128, 128)
    n, b = len(blobs), 128
    for I in range(0, n, b):
        for J in range(I, n, b):  # only upper blocks are stored
            np.testing.assert_allclose(Kz[I:I + b, J:J + b], Kd[I:I + b, J:J + b], atol=tol)
    # the lower triangle is never written (symmetric half storage)
    assert np.all(Kz[b:2 * b, 0:b] == 0)
    np.testing.assert_allclose(info.row_sums, Kd.sum(axis=1), rtol=10 * tol)
    assert info.diag_sum == pytest.approx(n, rel=tol)
    assert info.computed_blocks == 15 and info.reused_blocks == 0
    # blocks of 128 over n=600: 4 full rows/cols of blocks + an 88-wide edge
    sizes = [128, 128, 128, 128, 88]
    want_bytes = sum(sizes[i] * sizes[j] for i in range(5) for j in range(i, 5)) * np.dtype(dtype).itemsize
    assert gram_bytes(n, b, dtype) == want_bytes


@pytest.mark.parametrize("probe_dtype", ["float64", "float32"])
def test_a_compiled_build_stores_the_kernel_its_sums_and_the_probes_product(tmp_path, blobs, rng, probe_dtype,
                                                                          monkeypatch):
    """The compiled rbf's blocks are formed with their sums (and a float64 probe's product) in one call: the
    same K as the numpy rbf's build to float32 rounding (2.4e-7 relative), exact float64 sums of the stored
    values (1e-12), and the fused first product equal to K times the probe (float64 probe: the stored values'
    product to 1e-12; float32 probe: a single-precision product, 1e-5 of |K| |V|)."""
    from dkpca.linalg import products

    Xd = as_dask(blobs, block_rows=128)
    probe = rng.standard_normal((len(blobs), 3)).astype(probe_dtype)
    formed = spy_calls(monkeypatch, products, "exp_gemm_block", lambda: 1)
    info = build_gram(FitStore.at(tmp_path / "c.zarr"), Xd, RBF(0.1).compiled(), scan(Xd), probe=probe)
    assert len(formed) == 15  # every block formed in one call (5 row blocks of 128 over 600 rows)
    plain = build_gram(FitStore.at(tmp_path / "p.zarr"), Xd, RBF(0.1), scan(Xd))
    assert len(formed) == 15  # the numpy rbf forms its blocks strip by strip
    n, b = len(blobs), 128
    Kc, Kp = info.K()[:], plain.K()[:]
    np.testing.assert_allclose(Kc, Kp, rtol=2.4e-7, atol=0)
    full = np.zeros((n, n))
    for I in range(0, n, b):
        for J in range(I, n, b):
            full[I:I + b, J:J + b] = Kc[I:I + b, J:J + b]
            full[J:J + b, I:I + b] = Kc[I:I + b, J:J + b].T
    np.testing.assert_allclose(info.row_sums, full.sum(axis=1), rtol=1e-12)
    atol = 1e-12 if probe_dtype == "float64" else 1e-5 * np.abs(full).sum(axis=1).max() * np.abs(probe).max()
    np.testing.assert_allclose(info.probe_product, full @ probe.astype(np.float64), rtol=0, atol=atol)


@pytest.mark.parametrize("width", [3, 40])  # 64-row strips (skinny), 256-row strips (wide)
def test_block_products_of_a_float32_block_match_float64_products(rng, width):
    """``(K V_J, K^T V_I)`` of a float32 block, widened strip by strip, equal float64 GEMMs of the widened block
    within 1e-13 of ``|K| |V|`` (only the order of float64 additions differs: a few hundred terms, each sum's
    error ~ 300 eps |K| |V| = 7e-14 at worst), on edges that no strip size divides."""
    from dkpca.linalg import block_products, product_strip_rows

    assert product_strip_rows(width) == (64 if width <= 32 else 256)
    blk = rng.random((301, 263)).astype(np.float32)
    VI, VJ = rng.standard_normal((301, width)), rng.standard_normal((263, width))
    yI, yJ = block_products(blk, VI, VJ, True)
    K = blk.astype(np.float64)
    assert np.all(np.abs(yI - K @ VJ) <= 1e-13 * (np.abs(K) @ np.abs(VJ)))
    assert np.all(np.abs(yJ - K.T @ VI) <= 1e-13 * (np.abs(K).T @ np.abs(VI)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_block_products_with_v_zero_on_rows_j_make_only_the_transposed_product(rng, dtype):
    """``VJ`` None (V zero on rows J): ``K V_J`` is zero and ``K^T V_I`` that of the whole call, to 1e-13 of
    ``|K| |V|`` (block_products' bound); on the diagonal (no pair) no second product."""
    from dkpca.linalg import block_products

    blk = rng.random((301, 263)).astype(dtype)
    VI = rng.standard_normal((301, 5))
    yI, yJ = block_products(blk, VI, None, True)
    K = blk.astype(np.float64)
    assert yI.shape == (301, 5) and not yI.any()
    assert np.all(np.abs(yJ - K.T @ VI) <= 1e-13 * (np.abs(K).T @ np.abs(VI)))
    assert block_products(blk, VI, None, False)[1] is None


def test_matrix_product_of_a_float32_matrix_by_row_blocks_on_threads(rng):
    """``matrix_product`` (an in-memory K times V by row blocks through a thread pool's map) equals the float64
    product of the widened K to 1e-13 of ``|K| |V|`` (block_products' bound), in row order, on 601 rows that
    its 256-row blocks do not divide.  A float32 V asks for single-precision products: within float32's
    rounding (1e-4 of the largest entry, for sums of 601 products), returned in float64."""
    from concurrent.futures import ThreadPoolExecutor

    from dkpca.linalg import matrix_product

    K = rng.random((601, 601)).astype(np.float32)
    V = rng.standard_normal((601, 7))
    with ThreadPoolExecutor(2) as pool:
        got = matrix_product(K, V, map=pool.map)
    ref = K.astype(np.float64) @ V
    assert got.dtype == np.float64 and np.all(np.abs(got - ref) <= 1e-13 * (np.abs(K).astype(np.float64) @ np.abs(V)))
    single = matrix_product(K, V.astype(np.float32))
    assert single.dtype == np.float64
    np.testing.assert_allclose(single, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("mode", ["stored", "matrix-free"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_operator_matches_HKH(tmp_path, blobs, rng, mode, dtype):
    k = RBF(0.1)
    if mode == "stored":
        op = StoredKernelOperator(_gram(tmp_path, blobs, k, dtype, block=100))
    else:
        op = MatrixFreeKernelOperator(as_dask(blobs, block_rows=100), k, dtype=dtype)
    # The operator must be exactly the symmetric matrix of the evaluated blocks
    # (block values themselves are checked against formulas elsewhere).
    n = len(blobs)
    Kd = np.empty((n, n))
    for i in range(0, n, 100):
        for j in range(i, n, 100):
            blk = k.block(blobs[i:i + 100], None if i == j else blobs[j:j + 100], dtype)
            Kd[i:i + 100, j:j + 100] = blk
            Kd[j:j + 100, i:i + 100] = blk.T
    V = rng.standard_normal((len(blobs), 7))
    want = centered(Kd) @ V
    got = op.matmat(V)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10 * np.abs(want).max())
    assert op.trace == pytest.approx(np.trace(centered(Kd)), rel=1e-10)
    np.testing.assert_allclose(op.dense(), centered(Kd), atol=1e-12)


def _check_against_reference(model, K, k, dtype):
    lam_ref, U_ref = reference_eigh(K, k)
    if dtype == "float64":
        np.testing.assert_allclose(model.eigenvalues_, lam_ref, rtol=1e-8)
    else:
        np.testing.assert_allclose(model.eigenvalues_, lam_ref, rtol=0, atol=1e-5 * lam_ref[0])
    # eigenvectors: compare up to sign, on well-separated eigenvalues
    gaps = np.abs(np.diff(np.r_[lam_ref, 0.0]))
    for i in range(k):
        if gaps[i] > 1e-3 * lam_ref[0] and (i == 0 or abs(lam_ref[i - 1] - lam_ref[i]) > 1e-3 * lam_ref[0]):
            err = min(np.linalg.norm(model.eigenvectors_[:, i] - s * U_ref[:, i]) for s in (1, -1))
            assert err < (1e-6 if dtype == "float64" else 1e-3), (i, err)


@pytest.mark.parametrize("solver", ["dense", "randomized"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("spectrum", ["separated", "slow"])
def test_eigenvalues_against_eigh(tmp_path, blobs, rng, solver, dtype, spectrum):
    X = blobs if spectrum == "separated" else slow_decay(rng)
    gamma = 0.1 if spectrum == "separated" else 0.5 / X.shape[1]
    k = 6
    model = dkpca.fit(X, n_components=k, kernel="rbf", gamma=gamma, solver=solver, dtype=dtype,
                      store=tmp_path / "s.zarr", chunk_size=128, tol=1e-10, max_passes=300, random_state=0)
    K = rbf_kernel(X, gamma=gamma)
    _check_against_reference(model, K, k, dtype)
    assert model.report["converged"]
    if solver == "randomized":
        assert 2 <= model.report["passes"] <= 300
        assert model.report["max_relative_residual"] <= 1e-10


def test_deterministic_for_seed_and_signs(tmp_path, blobs):
    a = dkpca.fit(blobs, n_components=4, solver="randomized", store=tmp_path / "a.zarr", random_state=3,
                  dtype="float64", tol=1e-9)
    b = dkpca.fit(blobs, n_components=4, solver="randomized", store=tmp_path / "b.zarr", random_state=3,
                  dtype="float64", tol=1e-9)
    np.testing.assert_array_equal(a.eigenvectors_, b.eigenvectors_)
    c = dkpca.fit(blobs, n_components=4, solver="dense", store=tmp_path / "c.zarr", dtype="float64")
    # signs are a deterministic function of the vectors, so solvers agree too
    np.testing.assert_allclose(a.eigenvectors_, c.eigenvectors_, atol=1e-6)


def test_new_point_projection_matches_seed_formula(tmp_path, blobs, rng):
    gamma, k = 0.1, 5
    model = dkpca.fit(blobs, n_components=k, gamma=gamma, store=tmp_path / "s.zarr", dtype="float64",
                      solver="dense")
    Xn = rng.standard_normal((30, blobs.shape[1])) * 2
    K = rbf_kernel(blobs, gamma=gamma)
    r, c = K.mean(axis=1), K.mean()
    kx = rbf_kernel(Xn, blobs, gamma=gamma)
    kt = kx - r[None, :] - kx.mean(axis=1, keepdims=True) + c
    want = kt @ model.eigenvectors_ / np.sqrt(model.eigenvalues_)
    np.testing.assert_allclose(model.transform(Xn), want, atol=1e-10)
    # training points project onto U sqrt(lambda)
    np.testing.assert_allclose(model.transform(blobs), model.embedding_, atol=1e-9)
    # dask in -> lazy dask out
    import dask.array as da

    Z = model.transform(da.from_array(Xn, chunks=(7, -1)))
    assert isinstance(Z, da.Array)
    np.testing.assert_allclose(Z.compute(), want, atol=1e-10)
    # reconstruction error: ||phi~(x)||^2 - sum z^2
    norm2 = 1.0 - 2 * kx.mean(axis=1) + c
    np.testing.assert_allclose(model.reconstruction_error(Xn), norm2 - (want**2).sum(1), atol=1e-10)


@pytest.mark.parametrize("q", [3, 4, -1, 0.9, True, "2"])
def test_a_reconstruction_error_of_components_the_model_has_not_is_refused(tmp_path, rng, q):
    """Before: q past k subtracted the squares of the scores' two extra columns (mean k(x), k(x,x)): errors below
    the k-component one, negative at q = k + 2; -1 and 0.9 were sliced and truncated."""
    model = dkpca.fit(rng.standard_normal((40, 3)), n_components=2, gamma=0.3, store=tmp_path / "s.zarr")
    with pytest.raises(ValueError, match=re.escape(f"n_components={q!r} is invalid; it must be an integer between "
                                                   "0 and 2")):
        model.reconstruction_error(rng.standard_normal((4, 3)), n_components=q)


def test_a_reconstruction_error_of_no_component_is_the_feature_norm(tmp_path, rng):
    """q = 0: ||phi~(x)||^2 = k(x,x) - 2 mean k(x) + c, directly (rbf: k(x,x) = 1); each q removes z_q^2."""
    X, Xn = rng.standard_normal((40, 3)), rng.standard_normal((4, 3))
    model = dkpca.fit(X, n_components=2, gamma=0.3, store=tmp_path / "s.zarr", dtype="float64")
    kx, K = rbf_kernel(Xn, X, gamma=0.3), rbf_kernel(X, gamma=0.3)
    norm2 = 1.0 - 2 * kx.mean(axis=1) + K.mean()
    np.testing.assert_allclose(model.reconstruction_error(Xn, n_components=0), norm2, atol=1e-12)
    z = model.transform(Xn)
    np.testing.assert_allclose(model.reconstruction_error(Xn, n_components=np.int64(1)), norm2 - z[:, 0] ** 2,
                               atol=1e-12)


def test_linear_kernel_equals_pca(tmp_path, rng):
    X = rng.standard_normal((400, 8)) @ rng.standard_normal((8, 8))
    model = dkpca.fit(X, n_components=3, kernel="linear", store=tmp_path / "s.zarr", dtype="float64",
                      solver="randomized", tol=1e-10, random_state=0)
    pca = PCA(3).fit(X)
    np.testing.assert_allclose(model.eigenvalues_, pca.explained_variance_ * (len(X) - 1), rtol=1e-8)
    Z, Zp = model.transform(X), pca.transform(X)
    np.testing.assert_allclose(np.abs(Z), np.abs(Zp), atol=1e-8)


@pytest.mark.parametrize("kernel", ["rbf", "laplacian", "poly", "cosine", "sigmoid", "linear"])
def test_agrees_with_sklearn(tmp_path, rng, kernel):
    X = rng.standard_normal((300, 5))
    from sklearn.metrics.pairwise import laplacian_kernel

    Xn = rng.standard_normal((20, 5))
    if kernel == "laplacian":  # sklearn's KernelPCA takes laplacian only precomputed
        sk = KernelPCA(n_components=4, kernel="precomputed", eigen_solver="dense").fit(laplacian_kernel(X))
        sk_new, sk_train = sk.transform(laplacian_kernel(Xn, X)), sk.transform(laplacian_kernel(X))
    else:
        sk = KernelPCA(n_components=4, kernel=kernel, eigen_solver="dense").fit(X)
        sk_new, sk_train = sk.transform(Xn), sk.transform(X)
    model = dkpca.fit(X, n_components=4, kernel=kernel, store=tmp_path / "s.zarr", dtype="float64",
                      solver="dense", chunk_size=64)
    np.testing.assert_allclose(model.eigenvalues_, sk.eigenvalues_, rtol=1e-8)
    np.testing.assert_allclose(np.abs(model.transform(Xn)), np.abs(sk_new), atol=1e-7)
    np.testing.assert_allclose(np.abs(model.embedding_), np.abs(sk_train), atol=1e-7)


def test_explained_variance_ratio_uses_exact_trace(tmp_path, blobs):
    model = dkpca.fit(blobs, n_components=3, gamma=0.1, store=tmp_path / "s.zarr", dtype="float64")
    Kc = centered(rbf_kernel(blobs, gamma=0.1))
    np.testing.assert_allclose(model.explained_variance_ratio_,
                               model.eigenvalues_ / np.trace(Kc), rtol=1e-10)


def test_save_load_roundtrip_no_pickle(tmp_path, blobs):
    model = dkpca.fit(blobs, n_components=3, store=tmp_path / "s.zarr")
    loaded = dkpca.load(tmp_path / "s.zarr")
    np.testing.assert_array_equal(loaded.eigenvalues_, model.eigenvalues_)
    np.testing.assert_array_equal(loaded.transform(blobs[:5]), model.transform(blobs[:5]))
    assert loaded.kernel == model.kernel
    for path in (tmp_path / "s.zarr").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            # a pickle (protocol 2-5) opens with PROTO n and ends with STOP; raw chunks may open with 0x80
            assert not (data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")
                        and data.endswith(b".")), f"{path} looks pickled"


def test_store_reuse_and_fingerprint_error(tmp_path, blobs):
    store = tmp_path / "s.zarr"
    kw = dict(store=store, chunk_size=200, solver="randomized", dtype="float64", tol=1e-10, random_state=1,
              gram="store")
    m1 = dkpca.fit(blobs, n_components=3, **kw)
    assert m1.report["gram"]["computed_blocks"] == 6
    # a fresh build fuses the solver's first product into the build ...
    assert m1.report["fused_passes"] == 1 and m1.report["passes_over_K"] == m1.report["passes"] - 1
    m2 = dkpca.fit(blobs, n_components=3, **kw)
    assert m2.report["gram"]["computed_blocks"] == 0 and m2.report["gram"]["reused_blocks"] == 6
    # ... a reused store cannot; both give the same answer
    assert m2.report["fused_passes"] == 0 and m2.report["passes_over_K"] == m2.report["passes"]
    np.testing.assert_allclose(m1.eigenvalues_, m2.eigenvalues_, rtol=1e-12)
    other = blobs.copy()
    other[5, 2] += 1.0
    with pytest.raises(ValueError, match="overwrite=True"):
        dkpca.fit(other, n_components=3, store=store, chunk_size=200)
    with pytest.raises(ValueError, match="overwrite=True"):
        dkpca.fit(blobs, n_components=3, store=store, chunk_size=200, gamma=0.5)
    m3 = dkpca.fit(other, n_components=3, store=store, chunk_size=200, overwrite=True)
    assert m3.report["gram"]["computed_blocks"] == 6


def test_resume_trusts_only_done_markers(tmp_path, blobs):
    """Blocks whose marker is missing are recomputed, even if a chunk exists."""
    store = str(tmp_path / "s.zarr")
    dkpca.fit(blobs, n_components=3, store=store, chunk_size=200, dtype="float64", gamma=0.1)
    g = zarr.open_group(store, path="gram", mode="r+")
    g["done"][0, 1] = 0
    g["done"][2, 2] = 0
    g["K"][0:200, 200:400] = 7.0  # a corrupt (half-written) block without a marker
    g.attrs["complete"] = False
    m = dkpca.fit(blobs, n_components=3, store=store, chunk_size=200, dtype="float64", gamma=0.1)
    assert m.report["gram"]["computed_blocks"] == 2 and m.report["gram"]["reused_blocks"] == 4
    lam_ref, _ = reference_eigh(rbf_kernel(blobs, gamma=0.1), 3)
    np.testing.assert_allclose(m.eigenvalues_, lam_ref, rtol=1e-8)


def test_default_store_is_sibling_of_input(tmp_path, blobs):
    path = tmp_path / "data.zarr"
    zarr.create_array(str(path), data=blobs.astype(np.float32), chunks=(100, 6))
    model = dkpca.fit(str(path), n_components=2)
    assert model.store == str(tmp_path / "data.dkpca.zarr")
    assert dkpca.load(model.store).n_samples == len(blobs)


# -- bad input ---------------------------------------------------------------


@pytest.mark.parametrize(
    "X, kwargs, exc, match",
    [
        (np.ones(10), {}, ValueError, "2-D"),
        (np.ones((1, 3)), {}, ValueError, "at least 2"),
        (np.array([["a", "b"], ["c", "d"]]), {}, ValueError, "dtype"),
        (np.ones((5, 2)) + 0j, {}, ValueError, "real numeric"),
        (np.ones((10, 2)), {"n_components": 11}, ValueError, "n_components=11"),
        (np.ones((10, 2)), {"n_components": 0}, ValueError, "n_components=0"),
        (np.ones((10, 2)), {"gamma": -2.0}, ValueError, "gamma=-2.0"),
        (np.ones((10, 2)), {"kernel": "poly", "degree": 0}, ValueError, "degree=0"),
        (np.ones((10, 2)), {"solver": "magic"}, ValueError, "solver='magic'"),
        (np.ones((10, 2)), {"dtype": "int8"}, ValueError, "dtype='int8'"),
        (np.ones((10, 2)), {"tol": -1}, ValueError, "tol=-1"),
        (np.ones((10, 2)), {"chunk_size": 0}, ValueError, "chunk_size=0"),
        ("/nonexistent/data.zarr", {}, FileNotFoundError, "does not exist"),
    ],
)
def test_bad_input_errors(tmp_path, X, kwargs, exc, match):
    kwargs = {"n_components": 2, **kwargs}
    with pytest.raises(exc, match=match):
        dkpca.fit(X, store=tmp_path / "s.zarr", **kwargs)
    assert not (tmp_path / "s.zarr" / "gram").exists(), "nothing expensive may start before validation"


def test_nan_error_names_row_without_loading_all(tmp_path, rng):
    X = rng.standard_normal((1000, 3))
    X[731, 1] = np.nan
    path = tmp_path / "x.zarr"
    zarr.create_array(str(path), data=X, chunks=(100, 3))
    with pytest.raises(ValueError, match="row 731"):
        dkpca.fit(str(path), n_components=2, store=tmp_path / "s.zarr", chunk_size=128)


def test_zarr_group_input_needs_named_array(tmp_path, blobs):
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    g.create_array("a", data=blobs)
    g.create_array("b", data=blobs)
    with pytest.raises(ValueError, match="name the data array 'X'"):
        dkpca.fit(str(tmp_path / "g.zarr"), store=tmp_path / "s.zarr")


def test_load_refuses_foreign_store(tmp_path):
    zarr.open_group(str(tmp_path / "foreign.zarr"), mode="w").create_array("x", data=np.ones(3))
    with pytest.raises(ValueError, match="not a dkpca store"):
        dkpca.load(tmp_path / "foreign.zarr")
    with pytest.raises(FileNotFoundError):
        dkpca.load(tmp_path / "missing.zarr")


def test_make_kernel_used_for_sum_kernels(tmp_path, blobs):
    k = make_kernel(RBF(0.1) + 0.5 * make_kernel("linear"))
    model = dkpca.fit(blobs, n_components=3, kernel=k, store=tmp_path / "s.zarr", dtype="float64")
    K = rbf_kernel(blobs, gamma=0.1) + 0.5 * blobs @ blobs.T
    lam_ref, _ = reference_eigh(K, 3)
    np.testing.assert_allclose(model.eigenvalues_, lam_ref, rtol=1e-8)


def test_fsspec_url_input(tmp_path, blobs):
    path = tmp_path / "data.zarr"
    zarr.create_array(str(path), data=blobs, chunks=(100, 6))
    url = path.as_uri()  # file:// URL, read through fsspec
    remote = zarr.create_array("memory://dkpca-test/url-input.zarr", data=blobs, chunks=(100, 6), overwrite=True)
    with pytest.raises(ValueError, match="is a URL; pass store="):  # nothing is written beside a remote input
        dkpca.fit(f"memory://{remote.store.path}", n_components=2)
    model = dkpca.fit(url, n_components=3, store=tmp_path / "s.zarr", dtype="float64", gamma=0.1)
    lam_ref, _ = reference_eigh(rbf_kernel(blobs, gamma=0.1), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam_ref, rtol=1e-8)


def test_a_file_url_store_is_the_local_store_it_names(tmp_path, blobs):
    """Before: ``--store file:///.../s.zarr`` ended in "[Errno 2] No such file or directory:
    '.../s.zarr/data/zarr.json'" and left a stub; a sparse model's save likewise.  fsspec's file:// URL names the
    local path: the store is it."""
    from dkpca.sparse import SparseKernelPCA

    store = tmp_path / "s.zarr"
    model = dkpca.fit(blobs, n_components=3, store=store.as_uri(), dtype="float64", gamma=0.1)
    assert model.store == str(store)
    lam_ref, _ = reference_eigh(rbf_kernel(blobs, gamma=0.1), 3)
    np.testing.assert_allclose(dkpca.load(store.as_uri()).eigenvalues_, lam_ref, rtol=1e-8)
    sparse = SparseKernelPCA(gamma=0.1, max_iter=50).fit(blobs[:60])
    sparse.save(store.as_uri())
    np.testing.assert_array_equal(SparseKernelPCA.load(store).transform(blobs[:5]), sparse.transform(blobs[:5]))


def test_a_file_url_input_gets_its_store_beside_the_file(tmp_path, blobs):
    """Before: "input 'file:///.../x.npy' is a URL; pass store=..." -- a local file, whose store goes beside it."""
    np.save(tmp_path / "x.npy", blobs)
    model = dkpca.fit((tmp_path / "x.npy").as_uri(), n_components=3, dtype="float64", gamma=0.1)
    assert model.store == str(tmp_path / "x.npy.dkpca.zarr")
    lam_ref, _ = reference_eigh(rbf_kernel(blobs, gamma=0.1), 3)
    np.testing.assert_allclose(model.eigenvalues_, lam_ref, rtol=1e-8)


def test_cholesky_qr_restores_orthonormality_and_keeps_the_span():
    # reference: the projector onto the span, from numpy's Householder QR
    rng = np.random.default_rng(0)
    Q0, _ = np.linalg.qr(rng.standard_normal((500, 30)))
    Q = Q0 + 1e-3 * rng.standard_normal(Q0.shape)  # orthonormal but for 1e-3
    Qh, _ = np.linalg.qr(Q)
    got = cholesky_qr(Q)
    assert np.abs(got.T @ got - np.eye(30)).max() < 1e-14
    assert np.abs(got @ got.T - Qh @ Qh.T).max() < 1e-13
    with pytest.raises(np.linalg.LinAlgError):
        cholesky_qr(np.hstack([Q0[:, :3], Q0[:, :1]]))  # dependent columns
