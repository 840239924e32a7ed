"""Each kernel against its textbook formula, written out naively."""

import json
import re

import numpy as np
import pytest
from sklearn.metrics.pairwise import pairwise_kernels

import dkpca
from dkpca import kernels as K
from dkpca.kernels import RBF, Linear, make_kernel


def naive(name, X, Y, gamma=None, degree=3, coef0=1.0):
    d = X.shape[1]
    g = 1.0 / d if gamma is None else gamma
    out = np.empty((len(X), len(Y)))
    for i, x in enumerate(X):
        for j, y in enumerate(Y):
            if name == "rbf":
                out[i, j] = np.exp(-g * np.sum((x - y) ** 2))
            elif name == "laplacian":
                out[i, j] = np.exp(-g * np.sum(np.abs(x - y)))
            elif name == "poly":
                out[i, j] = (g * x @ y + coef0) ** degree
            elif name == "linear":
                out[i, j] = x @ y
            elif name == "sigmoid":
                out[i, j] = np.tanh(g * x @ y + coef0)
            elif name == "cosine":
                out[i, j] = x @ y / (np.linalg.norm(x) * np.linalg.norm(y))
    return out


NAMES = ["rbf", "laplacian", "poly", "linear", "sigmoid", "cosine"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("same", [True, False])
def test_block_matches_formula_float64(name, same, rng):
    X = rng.standard_normal((37, 5)) + 3.0  # offset: exercises cancellation in distances
    Y = X if same else rng.standard_normal((23, 5))
    k = K.make_kernel(name, gamma=None, degree=3, coef0=1.0).resolve(X.shape[1])
    got = k.block(X, None if same else Y, np.float64)
    want = naive(name, X, Y)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if same:
        assert np.array_equal(got, got.T), "diagonal blocks must be exactly symmetric"
        np.testing.assert_allclose(np.diag(got), k.diag(X), rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_block_float32_close_and_matches_sklearn(name, rng):
    X = rng.standard_normal((40, 8))
    k = K.make_kernel(name, gamma=0.2, degree=2, coef0=0.5).resolve(8)
    got = k.block(X, None, np.float32)
    assert got.dtype == np.float32
    params = {"linear": {}, "cosine": {}, "rbf": {"gamma": 0.2}, "laplacian": {"gamma": 0.2},
              "poly": {"gamma": 0.2, "degree": 2, "coef0": 0.5}, "sigmoid": {"gamma": 0.2, "coef0": 0.5}}[name]
    want = pairwise_kernels(X, metric={"poly": "polynomial"}.get(name, name), **params)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("degree", range(1, 10))
def test_integer_power_matches_numpy_power(degree, rng):
    """Repeated squaring rounds once per multiplication: within 2 log2(degree) + 1 units in the last place."""
    from dkpca.kernels.blocks import integer_power

    G = rng.uniform(-2, 2, (7, 9))
    want = np.power(G, degree)
    got = integer_power(G.copy(), degree, np.empty_like(G))
    ulps = 2 * np.log2(degree) + 1
    np.testing.assert_allclose(got, want, rtol=ulps * np.finfo(float).eps, atol=0)


@pytest.mark.parametrize("same", [True, False])
def test_poly_block_over_many_strips_matches_the_formula(same, rng):
    """2,000 columns: the block is evaluated in 31 strips (the diagonal block's narrowing), each powered in place."""
    X = rng.standard_normal((2000, 3))
    Y = X if same else rng.standard_normal((1500, 3))
    k = K.make_kernel("poly", gamma=0.5, degree=5, coef0=0.3)
    got = k.block(X, None if same else Y, np.float64)
    np.testing.assert_allclose(got, (0.5 * X @ Y.T + 0.3) ** 5, rtol=1e-12, atol=1e-12)


def test_rbf_block_never_exceeds_one(rng):
    """Near-duplicate points: the float32 exponent 2g x.y - g|x|^2 - g|y|^2 comes out up to ~7e-7 above zero by
    rounding (checked for these data), which the clamp removes, so k <= 1 and k(x, x) = 1."""
    X = rng.standard_normal((1000, 20)).astype(np.float32)
    X[500:] = X[:500] + np.float32(1e-6)
    G = K.make_kernel("rbf", gamma=0.05).block(X, None, np.float32)
    assert G.max() <= 1.0 and np.array_equal(np.diag(G), np.ones(1000, np.float32))
    H = K.make_kernel("rbf", gamma=0.05).block(X[:700], X[300:], np.float32)
    assert H.max() <= 1.0


def test_out_buffer_is_used(rng):
    X = rng.standard_normal((10, 3))
    buf = np.empty((10, 10), np.float32)
    res = K.RBF(0.5).block(X, None, np.float32, out=buf)
    assert res is buf or np.shares_memory(res, buf)


def test_gamma_default_is_one_over_features():
    assert K.make_kernel("rbf").resolve(20).gamma == pytest.approx(1 / 20)
    assert K.make_kernel("rbf", gamma=2.0).resolve(20).gamma == 2.0


def test_combinations_and_json_roundtrip(rng):
    X = rng.standard_normal((15, 4))
    k = 2.0 * K.RBF(0.3) + K.Polynomial(gamma=0.1, degree=2, coef0=1.0) * K.Linear()
    want = 2.0 * naive("rbf", X, X, gamma=0.3) + naive("poly", X, X, gamma=0.1, degree=2) * naive("linear", X, X)
    np.testing.assert_allclose(k.block(X), want, rtol=1e-12)
    np.testing.assert_allclose(k.diag(X), np.diag(want), rtol=1e-12)
    spec = json.loads(json.dumps(k.to_dict()))
    k2 = K.from_dict(spec)
    assert k2 == k
    np.testing.assert_array_equal(k2.block(X), k.block(X))
    assert not (K.Sigmoid(0.1) + K.RBF(1.0)).positive_definite


@pytest.mark.parametrize(
    "args, match",
    [
        (dict(kernel="rbf", gamma=-1.0), "gamma=-1.0"),
        (dict(kernel="rbf", gamma=float("nan")), "gamma"),
        (dict(kernel="poly", degree=0), "degree=0"),
        (dict(kernel="poly", degree=2.5), "degree"),
        (dict(kernel="sigmoid", coef0=float("inf")), "coef0"),
        (dict(kernel="gaussian"), "unknown kernel 'gaussian'"),
        (dict(kernel="rbf", kernel_params={"sigma": 1}), "unknown parameter"),
        (dict(kernel=3), "kernel=3"),
    ],
)
def test_bad_kernel_parameters(args, match):
    with pytest.raises(ValueError, match=match):
        K.make_kernel(**args)


def test_scaled_requires_positive_scale():
    with pytest.raises(ValueError, match="scale"):
        K.Scaled(-1.0, K.RBF(1.0)).validate()


@pytest.mark.parametrize("spec, match", [
    ({"name": "rbf", "gamma": 0.5, "sigma": 1.0}, r"unknown field\(s\) \['sigma'\]"),
    ({"name": "poly", "gamma": 0.5, "coef0": 1.0}, r"missing field\(s\) \['degree'\]"),
    ({"name": "rbf", "gamma": "0.5"}, "gamma='0.5' is invalid"),
    ({"name": "poly", "gamma": 0.5, "degree": 2.5, "coef0": 1.0}, "degree=2.5 is invalid"),
    ({"name": "sum", "kernels": [{"name": "linear"}], "extra": 1}, r"unknown field\(s\) \['extra'\]"),
    ({"name": "scaled", "scale": 2.0}, r"missing field\(s\) \['kernel'\]"),
    ({"name": "scaled", "scale": -1.0, "kernel": {"name": "linear"}}, "scale=-1.0 is invalid"),
    ({"name": "sum", "kernels": "rbf"}, "must be a list of kernel spec dicts"),
    ({"name": "nope"}, "unknown kernel 'nope'"),
])
def test_kernel_spec_rejects_bad_fields_by_name(spec, match):
    """A stored or hand-written spec is checked field by field: never a TypeError/KeyError, never a wrong kernel."""
    with pytest.raises(ValueError, match=match):
        K.from_dict(spec)


def test_kernel_spec_roundtrip_is_exact_for_every_named_kernel():
    for name in K.KERNEL_NAMES:
        k = K.make_kernel(name, gamma=0.25).resolve(3)
        assert K.from_dict(k.to_dict()) == k


# -- the compiled exp (kernels.fastexp) ------------------------------------------------------------------------
#: relative error bounds of the compiled exp against float64 numpy: measured 8.9e-8 and 3.2e-16 on 1.6e7
#: arguments (module docstring); numpy's own float32 exp is 2.0e-7 off.  Below the smallest normal number the
#: compiled exp gives 0, an absolute error under ``tiny``.
EXP_RTOL = {np.float32: 2.5e-7, np.float64: 1e-15}
EXP_RANGE = {np.float32: 95.0, np.float64: 720.0}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_exp_matches_numpy_exp_to_its_bound(dtype, rng):
    from dkpca.kernels.fastexp import exp_nonpositive

    x = np.concatenate([-rng.uniform(0, EXP_RANGE[dtype], 20_000), -np.logspace(-12, 0, 200), [0.0, -0.0, -np.inf],
                        rng.uniform(0, 3, 50)]).astype(dtype)  # positive arguments: exp(min(x, 0)) = 1
    got = exp_nonpositive(x.reshape(1, -1).copy()).ravel()
    want = np.exp(np.minimum(x.astype(np.float64), 0.0))
    assert np.isnan(exp_nonpositive(np.array([[0.0, np.nan, -1.0]], dtype))[0, 1])  # for the finiteness checks
    tiny = np.finfo(dtype).tiny
    normal = want >= tiny
    np.testing.assert_allclose(got[normal], want[normal], rtol=EXP_RTOL[dtype], atol=0)
    assert np.all(np.abs(got[~normal] - want[~normal]) <= tiny)
    assert got.dtype == dtype and got[-50:].tolist() == [1.0] * 50


def test_compiled_exp_works_in_place_on_a_strip_view_only(rng):
    """The upper-triangle strips of a diagonal block are views whose rows start at a column offset."""
    from dkpca.kernels.fastexp import exp_nonpositive

    G = -rng.uniform(0, 30, (64, 300)).astype(np.float32)
    before = G.copy()
    view = G[8:40, 17:]
    assert exp_nonpositive(view) is view
    np.testing.assert_allclose(G[8:40, 17:], np.exp(before[8:40, 17:].astype(np.float64)), rtol=2.5e-7)
    G[8:40, 17:] = before[8:40, 17:]
    assert np.array_equal(G, before)  # nothing outside the view was written


@pytest.mark.parametrize("bad", [lambda G: G[:, ::2], lambda G: G.astype(np.float16), lambda G: G[0]])
def test_compiled_exp_refuses_arrays_it_cannot_stride(bad):
    from dkpca.kernels.fastexp import exp_nonpositive

    with pytest.raises(ValueError, match="contiguous rows"):
        exp_nonpositive(bad(np.zeros((4, 6), np.float32)))


@pytest.mark.parametrize("name", ["rbf", "laplacian"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("same", [True, False])
def test_compiled_kernel_block_matches_the_numpy_block(name, dtype, same, rng):
    """Same exponent, another exp: entries (<= 1) within the exp's bound plus numpy's float32 exp error."""
    X = rng.standard_normal((300, 7)).astype(dtype)
    Y = None if same else rng.standard_normal((200, 7)).astype(dtype)
    k = K.make_kernel(name, gamma=0.1)
    c = k.compiled()
    assert type(c) is not type(k) and isinstance(c, type(k))
    got, want = c.block(X, Y, dtype), k.block(X, Y, dtype)
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=0, atol=EXP_RTOL[dtype] + (2.1e-7 if dtype == np.float32 else 0))
    if same:
        assert np.array_equal(got, got.T) and np.all(np.diag(got) == 1.0)


def test_compiled_kernels_keep_the_spec_and_compose():
    k = K.RBF(0.3) + 2.0 * K.Laplacian(0.1) * K.Polynomial(degree=2)
    c = k.compiled()
    assert c.to_dict() == k.to_dict() and K.from_dict(c.to_dict()) == k
    assert type(c.kernels[0]).__name__ == "CompiledRBF"
    product = c.kernels[1]  # 2 * laplacian * poly = Product(Scaled(2, laplacian), poly)
    assert type(product.kernels[0].kernel).__name__ == "CompiledLaplacian"
    assert product.kernels[1] is k.kernels[1].kernels[1]  # no exp: itself
    assert c.compiled() == c


def test_kernels_stay_on_numpy_where_numba_is_missing(monkeypatch):
    from dkpca.kernels import library

    monkeypatch.setattr(library, "compiled_exp_available", lambda: False)
    k = K.RBF(0.3)
    assert k.compiled() is k and K.Laplacian(0.2).compiled() == K.Laplacian(0.2)


# -- the compiled product loops (kernels.fastexp, linalg.kernel_block_products) --------------------------------
#: a float32 block times float64 columns, against the float64 block's product: float32 entries (rounding
#: 6e-8 relative) and the compiled exp (8.9e-8) leave each product within ~1.5e-7 of the largest (measured
#: 0.7-2.3e-7 over these shapes); the numpy path's own error is the same size.
PRODUCT_RTOL = 5e-7


def _products_reference(X: np.ndarray, Y: np.ndarray, VI: np.ndarray, VJ: np.ndarray, gamma: float):
    Kxy = K.RBF(gamma).block(X, Y, np.float64)
    return Kxy @ VJ, Kxy.T @ VI


@pytest.mark.parametrize(("nx", "ny", "d", "width"), [(700, 500, 7, 3), (130, 64, 50, 1), (300, 300, 12, 70)])
def test_compiled_rbf_products_match_the_float64_block(nx, ny, d, width, rng):
    """The fused loop (strips of exp(A B^T) times both column blocks, never forming K) is K's product."""
    from dkpca.linalg import kernel_block_products

    X, Y = rng.standard_normal((nx, d)), rng.standard_normal((ny, d))
    VI, VJ = rng.standard_normal((nx, width)), rng.standard_normal((ny, width))
    kernel = K.RBF(0.5 / d).compiled()
    assert kernel.exp_operands(X, Y, np.float32) is not None
    got = kernel_block_products(kernel, X, Y, VI, VJ, "float32", False, True)
    for g, w in zip(got, _products_reference(X, Y, VI, VJ, 0.5 / d), strict=True):
        assert g.dtype == np.float64 and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=PRODUCT_RTOL * np.abs(w).max())


def test_compiled_widened_products_equal_the_numpy_loop(rng):
    """Stored float32 blocks: the compiled loop widens and multiplies as numpy's loop does (fl32(K) in float64)."""
    from dkpca.linalg import block_products

    blk = K.RBF(0.1).block(rng.standard_normal((333, 5)), rng.standard_normal((257, 5)), np.float32)
    VI, VJ = rng.standard_normal((333, 11)), rng.standard_normal((257, 11))
    exact = blk.astype(np.float64)
    for pair in (True, False):
        got, want = block_products(blk, VI, VJ, pair, compiled=True), block_products(blk, VI, VJ, pair)
        np.testing.assert_allclose(got[0], exact @ VJ, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
        if pair:
            np.testing.assert_allclose(got[1], exact.T @ VI, rtol=1e-12, atol=1e-12)
        else:
            assert got[1] is None and want[1] is None


def test_compiled_products_carry_a_nan_to_the_finiteness_check(rng):
    """A NaN in the data makes NaN products (the operator's check names the kernel), not a quiet number."""
    from dkpca.linalg import kernel_block_products

    X, Y = rng.standard_normal((80, 4)), rng.standard_normal((90, 4))
    Y[7, 2] = np.nan
    yI, yJ = kernel_block_products(K.RBF(0.2).compiled(), X, Y, np.ones((80, 2)), np.ones((90, 2)), "float32",
                                   False, True)
    assert np.isnan(yI).all() and np.isnan(yJ[7]).all() and np.isfinite(np.delete(yJ, 7, axis=0)).all()


@pytest.mark.parametrize(("same", "dtype", "rtol"), [(False, "float32", 2.4e-7), (True, "float32", 2.4e-7),
                                                    (False, "float64", 1e-13), (True, "float64", 1e-13)])
def test_a_formed_block_is_the_compiled_block_with_exact_sums_and_products(same, dtype, rtol, rng):
    """A Gram build's block from one compiled call: the compiled kernel's block (to its precision's rounding: 2
    ulp in float32; in float64 the GEMM's rounding of exponents of order 10, times 1e-14), exactly symmetric with
    a unit diagonal on the diagonal, and its products those of the stored values in float64."""
    from dkpca.linalg import formed_block_products

    X, Y = rng.standard_normal((333, 9)), rng.standard_normal((257, 9))
    XJ = X if same else Y
    kernel = K.RBF(0.1).compiled()
    VI, VJ = rng.standard_normal((333, 4)), rng.standard_normal((len(XJ), 4))
    out = np.empty((333, len(XJ)), dtype)
    blk, yI, yJ = formed_block_products(kernel, X, XJ, dtype, same, out, VI, VJ)
    want = kernel.block(X, None if same else XJ, dtype)
    assert blk is out
    np.testing.assert_allclose(blk, want, rtol=rtol, atol=0)
    exact = blk.astype(np.float64)
    np.testing.assert_allclose(yI, exact @ VJ, rtol=1e-12, atol=1e-12)
    if same:
        assert yJ is None and np.array_equal(blk, blk.T) and np.all(np.diagonal(blk) == 1)
    else:
        np.testing.assert_allclose(yJ, exact.T @ VI, rtol=1e-12, atol=1e-12)


def test_a_formed_block_carries_a_nan_to_its_sums(rng):
    """NaN data give NaN sums, which the build's finiteness check refuses, not a quiet number."""
    from dkpca.linalg import formed_block_products

    X, Y = rng.standard_normal((80, 4)), rng.standard_normal((90, 4))
    Y[7, 2] = np.nan
    _, yI, yJ = formed_block_products(K.RBF(0.2).compiled(), X, Y, "float32", False,
                                      np.empty((80, 90), np.float32), np.ones((80, 1)), np.ones((90, 1)))
    assert np.isnan(yI).all() and np.isnan(yJ[7]).all() and np.isfinite(np.delete(yJ, 7, axis=0)).all()


@pytest.mark.parametrize("kernel", [K.RBF(0.1), K.Laplacian(0.1).compiled(), K.Polynomial(degree=2),
                                    K.RBF(0.1).compiled() + K.Linear()])
def test_other_kernels_form_no_block_in_one_call(kernel, rng):
    """Without exp operands the build forms the block as before (None), and so with single-precision columns."""
    from dkpca.linalg import formed_block_products

    X = rng.standard_normal((10, 3))
    out, V = np.empty((10, 10), np.float32), np.ones((10, 1))
    assert formed_block_products(kernel, X, X, "float32", True, out, V, V) is None
    assert formed_block_products(K.RBF(0.1).compiled(), X, X, "float32", True, out, V.astype(np.float32),
                                 V.astype(np.float32)) is None


@pytest.mark.parametrize("kernel", [K.RBF(0.1), K.Laplacian(0.1).compiled(), K.Polynomial(degree=2),
                                    K.RBF(0.1).compiled() + K.Linear()])
def test_only_the_compiled_rbf_gives_exp_operands(kernel, rng):
    """The fused loop needs K = exp(A B^T) with the compiled exp: the numpy rbf (another exp), the laplacian
    (no GEMM form) and composites form their blocks."""
    X = rng.standard_normal((10, 3))
    assert kernel.exp_operands(X, X[:4], np.float32) is None


def test_a_process_that_compiled_uses_the_compiled_code_for_large_fits(monkeypatch, nothing_compiled):
    """No compilation left to pay: from WARM_MIN_N points the compiled loops, below it numpy's exp as before."""
    from dkpca.kernels import fastexp
    from dkpca.planning.compiledexp import WARM_MIN_N, use_compiled_exp

    cold = use_compiled_exp(WARM_MIN_N, "lanczos", "recompute", 4, threads=16)
    monkeypatch.setattr(fastexp, "_READY", {"float32"})
    warm = use_compiled_exp(WARM_MIN_N, "lanczos", "recompute", 4, threads=16)
    assert cold[0] is False and warm == (True, warm[1]) and "compiled already" in warm[1]
    assert use_compiled_exp(WARM_MIN_N - 1, "lanczos", "recompute", 4, threads=16)[0] is False


def _compile_loops() -> bool:
    """Run the compiled loops once (in a worker): what an earlier compiled fit leaves there."""
    from dkpca.linalg import kernel_block_products

    X = np.random.default_rng(0).standard_normal((64, 3))
    kernel_block_products(K.RBF(0.1).compiled(), X[:32], X[32:], np.ones((32, 1)), np.ones((32, 1)), "float32",
                          False, True)
    return True


def test_a_cluster_whose_workers_compiled_uses_the_compiled_code(nothing_compiled, worker_process):
    """The same rule beside a cluster, asked of every worker: none compiled, the count decides; all, no cost."""
    from dkpca.planning.compiledexp import WARM_MIN_N, compiled_already, use_compiled_exp

    assert compiled_already() is False
    assert use_compiled_exp(WARM_MIN_N, "lanczos", "recompute", 4, threads=16)[0] is False
    assert list(worker_process.run(_compile_loops).values()) == [True]
    assert compiled_already() is True
    assert use_compiled_exp(WARM_MIN_N, "lanczos", "recompute", 4, threads=16)[0] is True


def test_read_only_blocks_and_columns_meet_the_one_compiled_signature(rng):
    """A worker's V blocks arrive read-only and K's chunks are read so: the same machine code takes them (one
    signature each, compiled once), with the products of writable copies."""
    from dkpca.kernels import fastexp
    from dkpca.linalg import block_products, formed_block_products, kernel_block_products

    def read_only(a):
        a = a.copy()
        a.flags.writeable = False
        return a

    X = rng.standard_normal((200, 6))
    V = rng.standard_normal((200, 4))
    blk = K.RBF(0.2).block(X[:120], X[120:], np.float32)
    kernel = K.RBF(0.2).compiled()
    for got, want in ((block_products(read_only(blk), read_only(V[:120]), read_only(V[120:]), True, True),
                       block_products(blk, V[:120], V[120:], True, True)),
                      (kernel_block_products(kernel, X[:120], X[120:], read_only(V[:120]), read_only(V[120:]),
                                             "float32", False, True),
                       kernel_block_products(kernel, X[:120], X[120:], V[:120], V[120:], "float32", False, True))):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    formed = [formed_block_products(kernel, X[:120], X[120:], "float32", False, np.empty((120, 80), np.float32),
                                    V_, W_) for V_, W_ in ((read_only(V[:120]), read_only(V[120:])),
                                                           (V[:120], V[120:]))]
    for g, w in zip(*formed, strict=True):
        np.testing.assert_array_equal(g, w)
    assert [len(f.signatures) for f in fastexp._build_products("float32")[:2]] == [1, 1]
    assert len(fastexp._build_block_loop("float32").signatures) == 1


@pytest.mark.parametrize("kernel, params, words", [
    (RBF(0.5), {"gamma": 3.0}, "gamma=3.0 applies to a kernel named by a string"),
    (RBF(0.5).to_dict(), {"gamma": 3.0}, "gamma=3.0 applies to a kernel named by a string"),
    (RBF() + Linear(), {"kernel_params": {"gamma": 2.0}}, "kernel_params={'gamma': 2.0} applies to a kernel named"),
    ("rbf", {"gamma": 3.0, "kernel_params": {"gamma": 0.5}}, "both set gamma"),
], ids=["kernel object", "spec dict", "kernel_params beside a kernel object", "gamma twice"])
def test_a_parameter_the_kernel_would_ignore_or_that_is_given_twice_is_refused(kernel, params, words):
    """Silently ignored, gamma=3.0 would fit another kernel than the one asked for."""
    with pytest.raises(ValueError, match=re.escape(words)):
        make_kernel(kernel, **params)
    with pytest.raises(ValueError, match=re.escape(words)):
        dkpca.fit(np.random.default_rng(0).standard_normal((50, 3)), 2, kernel=kernel, **params)


@pytest.mark.parametrize("params, gamma", [({"kernel": RBF(0.5)}, 0.5), ({"kernel_params": {"gamma": 0.5}}, 0.5),
                                           ({"gamma": 0.3}, 0.3), ({}, 0.25)])
def test_kernel_pca_s_gamma_is_the_one_its_kernel_uses(params, gamma):
    est = dkpca.KernelPCA(2, **{"kernel": "rbf", **params}).fit(np.random.default_rng(0).standard_normal((60, 4)))
    assert est.gamma_ == est.kernel_.gamma == gamma
