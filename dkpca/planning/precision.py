"""The precision K is held in (``dtype="auto"``): float32 where it keeps the eigenvalues, float64 where it would not.

Centring subtracts from K everything the points share.  When K is nearly
constant on the data (rbf with a tiny gamma, a high-degree polynomial on
small inputs, many duplicated points) only a sliver of ``trace(K)``
survives in ``trace(K~)``, and float32's rounding of K's entries -- about
``u ||K||`` in each eigenvalue (u = 2^-24) -- is no longer small against the
eigenvalues of K~: gamma = 1e-8 on 3,000 standard normal points in 10-D left
2e-7 of the trace and put 25 % into lambda_1, with no error anywhere.

:func:`choose_precision` decides before K is built, from a sample of the
data (:func:`sample_rows`: up to :data:`PRECISION_SAMPLE` rows spread over
at most :data:`SAMPLE_CHUNKS` row chunks): the sample's kernel matrix in
float64 and in float32, centred, gives its top eigenpairs and what float32
does to them -- the entries' rounding (Rayleigh quotients of the float32
K~ at the float64 eigenvectors, products in float64, as the stored and
matrix-free passes compute them) and, where the solver multiplies in single
precision (ARPACK on a float32 K in memory), that arithmetic too.  A relative
error is scale-free (K's norm and K~'s eigenvalues both grow with n), so the
sample's errors predict the fit's; the rounding that is independent from
entry to entry shrinks with n, so they over-predict it.  Measured on the
issue's cases and on USPS / standard normal data (k = 3, 20, 60): the sample
predicted 0.25x - 40x the fit's error.  float64 is chosen when the predicted
error exceeds :data:`TARGET_ERROR` / :data:`PRECISION_MARGIN`.

Cost: two kernel blocks of 256 x 256, one partial eigh and two products:
5-15 ms on the 2-core development machine, against a 0.3-0.7 s fit at
n = 2,000-3,000; reading the sample touches at most four row chunks.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.spatial.distance import pdist

from ..execution import active_client, compute, for_the_client, serial_blas
from ..kernels import RBF, Kernel, Laplacian, NonFiniteKernelError, largest_value
from ..linalg import Centering, top_eigh
from ..request.options import DTYPES  # the values ``dtype`` takes: ``auto`` decides by choose_precision
from ..solvers.spectrum import zero_threshold

__all__ = ["Precision", "PrecisionWarning", "KernelScaleWarning", "kernel_scale", "is_identity",
           "choose_precision", "memory_precision", "warn_scale", "measure_precision", "sample_rows",
           "requested_dtype", "DTYPES", "PRECISION_SAMPLE", "SAMPLE_CHUNKS", "TARGET_ERROR", "PRECISION_MARGIN"]


#: rows of the sample the decision is measured on (a 256 x 256 eigh: ~5 ms)
PRECISION_SAMPLE = 256
#: row chunks the sample is drawn from, spread over X (each read once: a few chunk reads, not a pass over X)
SAMPLE_CHUNKS = 4
#: the relative eigenvalue error dkpca promises at the default dtype
TARGET_ERROR = 1e-5
#: how far the predicted error stays below TARGET_ERROR: the sample under-predicted the fit's error by up
#: to 4x (gamma = 1e-8, ARPACK on a float32 K in memory: 0.28 predicted, 1.2 measured)
PRECISION_MARGIN = 10.0
#: the predicted error above which ``auto`` holds K in float64 at the default tol (a tighter tol lowers it)
LIMIT = TARGET_ERROR / PRECISION_MARGIN

_U32 = 2.0 ** -24


#: K is numerically the identity when no off-diagonal entry exceeds this share of the diagonal: the sample's
#: eigenvalues of K~ are then equal to within m times it (0.03 % at m = 256), and carry nothing of the data
IDENTITY_TOLERANCE = 1e-6
#: K's largest |entry| that ``auto`` holds in float64 where float32 overflows (3.4e38): a solver's products and
#: their squares (residual norms) stay within float64's 1.8e308 for n up to 1e14 rows; past it the kernel is
#: refused (a degree-400 polynomial: K up to 1e227, block Lanczos's eigh failed)
WIDEST_ENTRY = 1e140
#: K is numerically constant when its entries spread less than this share of the largest: K~ is rounding noise
CONSTANT_TOLERANCE = 1e-12


class PrecisionWarning(UserWarning):
    """K in float32 was asked for where the sample says float32 loses more than TARGET_ERROR of the eigenvalues."""


class KernelScaleWarning(UserWarning):
    """The kernel matrix is numerically the identity or a constant on the data: gamma is far from the data's scale.

    Measured on the precision sample (:func:`kernel_scale`); the message
    gives the scale measured and the gamma that would match it.
    """


def is_identity(K: np.ndarray) -> bool:
    """Whether the square ``K`` is numerically a positive diagonal (off-diagonal entries within IDENTITY_TOLERANCE)."""
    diag = np.diagonal(K)
    return bool(diag.min() > 0 and np.abs(K - np.diag(diag)).max() <= IDENTITY_TOLERANCE * diag.min())


def kernel_scale(S: np.ndarray, kernel: Kernel, K: np.ndarray) -> str | None:
    """The :class:`KernelScaleWarning` text when ``K`` (the kernel of sample ``S``, float64) says gamma misses the data.

    K numerically the identity (gamma far too large: unscaled 8-bit pixels
    under the default 1/n_features) or numerically constant on points that
    differ (gamma far too small) holds nothing of the data, with no error
    anywhere.  The scale is the one the kernel's gamma multiplies: the median
    squared distance of the sample's pairs (rbf), the median L1 distance
    (laplacian), the median |inner product| (poly, sigmoid).  None: K is
    neither, the kernel has no gamma (linear, cosine, a composite), or the
    points do not differ at that scale (identical points: no scale to match).
    """
    gamma, m = getattr(kernel, "gamma", None), K.shape[0]
    if gamma is None or m < 2 or not np.isfinite(K).all():  # entries that overflow: the build's error names them
        return None
    if is_identity(K):
        what = f"numerically the identity (no off-diagonal entry above {IDENTITY_TOLERANCE:g} of the diagonal)"
    elif np.ptp(K) <= CONSTANT_TOLERANCE * np.abs(K).max():
        what = "numerically constant"
    else:
        return None
    if isinstance(kernel, RBF):
        scale, values = "squared distance", pdist(S, "sqeuclidean")
    elif isinstance(kernel, Laplacian):
        scale, values = "L1 distance", pdist(S, "cityblock")
    else:
        scale, values = "|inner product|", np.abs((S @ S.T)[np.triu_indices(m, 1)])
    median = float(np.median(values))
    if not median > 0:
        return None
    return (f"the kernel matrix is {what} on a {m}-point sample of the data: {kernel.name} gamma={gamma:.3g} times "
            f"the median {scale} of its pairs, {median:.3g}, is {gamma * median:.3g}, so the eigenvalues are all "
            f"equal and the components carry nothing of the data. gamma of about 1/{median:.3g} = {1 / median:.3g} "
            "matches the data's scale; or scale the features (X / 255 for 8-bit pixels, or scikit-learn's "
            "StandardScaler).")


@dataclass(frozen=True)
class Precision:
    """The precision K is held in and why (``model.report["precision"]``, the plan's ``precision`` line).

    Attributes
    ----------
    dtype : str
        ``float32`` or ``float64``: what K is built, stored and multiplied in.
    requested : str
        ``auto``, ``float32`` or ``float64``.
    reason : str
        One sentence: what was measured and what decided.
    predicted_error : float or None
        Predicted relative error of the top eigenvalues with K in float32
        (the larger of ``entry_error`` and, for a single-precision solver,
        ``product_error``); None when nothing was measured.
    entry_error, product_error : float or None
        On the sample: float32 entries (products in float64); float32 entries and products.
    surviving : float or None
        ``trace(K~) / trace(K)`` of the sample: the share of K centring leaves.
    checked : int
        Top eigenvalues of the sample compared (``min(k, sample / 4)``; zero ones left out).
    sample : int
        Rows sampled.
    seconds : float
        Time the measurement took.
    limit : float
        The predicted error float32 may put into the eigenvalues: :data:`LIMIT`, or the
        fit's ``tol`` where smaller (a tighter tol asks for eigenvalues that accurate).
    """

    dtype: str
    requested: str
    reason: str
    predicted_error: float | None = None
    entry_error: float | None = None
    product_error: float | None = None
    surviving: float | None = None
    checked: int = 0
    sample: int = 0
    seconds: float = 0.0
    limit: float = LIMIT

    @property
    def lossy(self) -> bool:
        """float32 kept (asked for, or the store's K) although the predicted error is above the limit."""
        return self.dtype == "float32" and self.predicted_error is not None and self.predicted_error > self.limit

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def warning(self) -> str:
        """The :class:`PrecisionWarning` text of a lossy float32 K."""
        if self.requested == "auto":  # the store's K kept
            return (f"dtype='auto': {self.reason}. Eigenvalues may be off by that much; to rebuild K in float64 pass "
                    "dtype='float64' with overwrite=True (CLI: --dtype float64 --overwrite).")
        return (f"dtype='float32': {self.reason}. Eigenvalues may be off by that much; use dtype='auto' (the "
                "default) or 'float64'.")


def sample_rows(X: Any, m: int = PRECISION_SAMPLE) -> np.ndarray:
    """Up to ``m`` rows of X evenly spread over at most :data:`SAMPLE_CHUNKS` of its row chunks (a numpy array).

    A numpy X is sampled over all its rows; a dask X over the first, last and
    evenly spaced chunks between, so that a large file is read only there.
    """
    n = int(X.shape[0])
    if isinstance(X, np.ndarray) or not hasattr(X, "chunks"):
        pool = np.arange(n)
    else:
        bounds = np.concatenate([[0], np.cumsum(X.chunks[0])])
        picks = np.unique(np.linspace(0, len(bounds) - 2, min(len(bounds) - 1, SAMPLE_CHUNKS)).round().astype(int))
        pool = np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in picks])
    idx = pool[np.unique(np.linspace(0, pool.size - 1, min(m, pool.size)).round().astype(int))]
    rows = X[idx]
    if isinstance(rows, np.ndarray):
        return rows
    # a few chunks: read here without a thread pool's start-up (1.4 ms against 2-20 ms measured at n = 2,000),
    # or, for a large input, through the cluster whose workers can read it
    local = active_client() is None or for_the_client(X.nbytes)
    return np.asarray(rows.compute(scheduler="sync") if local else compute(rows)[0])


def measure_precision(S: np.ndarray, kernel: Kernel, k: int) -> dict[str, Any]:
    """What float32 does to the top eigenvalues of the sample's centred kernel matrix.

    Returns ``entry_error`` and ``product_error`` (max relative errors of the
    top ``checked`` eigenvalues: float32 entries with float64 products, and
    with float32 products), ``surviving`` (``trace(K~) / trace(K)``),
    ``checked``, ``finite`` (``"both"``, ``"float64"``: float32 overflows,
    ``"neither"``, ``"constant"``: K~ of the sample is numerically zero, or
    ``"identity"``: K is) and ``scale`` (:func:`kernel_scale`'s message or None).
    """
    m = S.shape[0]
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is a finding here, reported below
        K64 = kernel.block(S, None, np.float64)
        K32 = kernel.block(S, None, np.float32)
    out: dict[str, Any] = {"entry_error": None, "product_error": None, "surviving": None, "checked": 0,
                           "finite": "both", "scale": None}
    if not np.isfinite(K64).all():
        out["finite"] = "neither"
        return out
    if not np.isfinite(K32).all():
        out["finite"], out["largest"] = "float64", float(np.abs(K64).max())
        return out
    out["scale"] = kernel_scale(S, kernel, K64)
    cen = Centering.of_matrix(K64)
    out["surviving"] = cen.trace / cen.diag_sum if cen.diag_sum > 0 else None
    if is_identity(K64):
        # K~ = D - rank-one corrections: its eigenvalues nearly all equal, which a partial eigh cannot rank
        # (LAPACK failed on a 256-point identity); float32 holds the diagonal and entries below 1e-6 of it
        out.update(finite="identity", entry_error=0.0, product_error=0.0)
        return out
    kk = max(1, min(k, m // 4, m - 1))
    mu, V = top_eigh(cen.center_matrix(K64), kk)
    mu, V = mu[::-1], V[:, ::-1]
    resolved = mu > max(zero_threshold(mu[0], np.float64, cen.cancelled, cen.n), 0.0)
    if not resolved.any():  # K~ of the sample is rounding noise: float32's rounding would be all there is
        out["finite"] = "constant"
        return out
    mu, V = mu[resolved], np.ascontiguousarray(V[:, resolved])
    c32 = Centering.of_matrix(K32)
    errors = []
    for KV in (K32.astype(np.float64) @ V, (K32 @ V.astype(np.float32)).astype(np.float64)):
        # Rayleigh quotients of the float32 K~ at the float64 eigenvectors: first order in the rounding
        rq = np.einsum("ij,ij->j", V, c32.center_product(KV, V))
        errors.append(float(np.max(np.abs(rq - mu) / mu)))
    out["entry_error"], out["product_error"] = errors
    out["checked"] = int(mu.size)
    return out


def choose_precision(requested: str, X: Any = None, kernel: Kernel | None = None, k: int = 1,
                     single_products: bool = False, sample: np.ndarray | None = None,
                     stored: str | None = None, tol: float | None = None) -> Precision:
    """Resolve ``dtype`` (``auto``, ``float32`` or ``float64``) into the precision K is held in, with the reason.

    ``float64`` is kept without measuring.  ``auto`` and ``float32`` measure
    the sample (``sample``, else :func:`sample_rows` of X; nothing without X
    and a kernel: ``auto`` then keeps float32 and says it was not measured).
    ``auto`` gives float64 when the predicted error exceeds
    ``TARGET_ERROR / PRECISION_MARGIN`` (not for entries that overflow
    float32: the build refuses those, :class:`~dkpca.kernels.NonFiniteKernelError`);
    ``single_products``: the solver multiplies a float32 K in float32 (ARPACK
    in memory), so that arithmetic's error counts too.  A ``float32``
    request is kept; :attr:`Precision.lossy` says when it loses more.
    ``stored``: the precision of the K the store already holds (None: none,
    or a rebuild with ``overwrite``); ``auto`` keeps a float64 one -- never
    less accurate, and a refit of a store fitted with ``dtype="float64"``
    must not be refused for a dtype the user never asked to change.
    ``tol``: the fit's residual tolerance; one below the limit becomes the
    limit (eigenvalues asked for to 1e-10 are not held in float32, which puts
    ~1e-8 into them), except that ``auto`` keeps a stored float32 K, warned
    of (:attr:`Precision.lossy`): a refit with a tighter tol reuses K.
    """
    if requested == "float64" or (requested == "auto" and stored == "float64"):
        if kernel is not None and (X is not None or sample is not None):  # no precision to measure: the scale only
            warn_scale(sample if sample is not None else sample_rows(X), kernel, stacklevel=3)
        if requested == "float64":
            return Precision("float64", requested, "dtype='float64' requested (not measured)")
        return Precision("float64", requested, "the store holds K in float64 from an earlier fit: kept (never less "
                                               "accurate than float32; not measured)")
    if (X is None and sample is None) or kernel is None:
        later = "; a fit decides from a sample of X" if requested == "auto" else ""
        return Precision("float32", requested, f"dtype={requested!r}: float32, not measured (no data sampled{later})")
    t = time.perf_counter()
    S = sample if sample is not None else sample_rows(X)
    with serial_blas():  # a 256-point problem: one thread, no BLAS pool spinning on the cores
        got = measure_precision(S, kernel, k)
    seconds = time.perf_counter() - t
    if got["scale"] is not None:
        warnings.warn(got["scale"], KernelScaleWarning, stacklevel=2)
    tighter = bool(tol) and tol < 0.999 * LIMIT  # not the default tol, 1e-6, rounded
    limit = tol if tighter else LIMIT
    named = f"tol={limit:g}" if tighter else f"{limit:g}"
    what = f"on a {S.shape[0]}-point sample ({seconds * 1e3:.0f} ms)"
    common = dict(requested=requested, entry_error=got["entry_error"], product_error=got["product_error"],
                  surviving=got["surviving"], checked=got["checked"], sample=int(S.shape[0]), seconds=seconds,
                  limit=limit)
    if got["finite"] == "float64" and requested == "auto" and got["largest"] <= WIDEST_ENTRY:
        return Precision("float64", predicted_error=np.inf, reason=f"K's entries overflow float32 {what} (up to "
                         f"{got['largest']:.3g}; float32 holds 3.4e38): float64", **common)
    if got["finite"] in ("neither", "float64"):
        if not np.isfinite(S).all():  # the data itself: the scan refuses it, naming its bad row
            return Precision("float32", reason=f"the sample is not finite {what}: the fit refuses X", **common)
        # refused now, before the data is copied, in the build's words: float32 asked for, or entries past
        # WIDEST_ENTRY, which overflow the products of a float64 K as well
        single = " in float32" if got["finite"] == "float64" else ""
        raise NonFiniteKernelError.of("the kernel", kernel.to_dict(), f"{single} on a {S.shape[0]}-point sample of "
                                      f"the data{largest_value('its', S)}")
    if got["finite"] == "constant":
        # identical points, or a kernel constant on them: K~ is rounding noise, float32's up to ~1e-4 of n c
        # (ARPACK's single-precision products, 300 identical points), above the zero rule's bound; float64's
        # noise (1e-13) is far below it, so the components come out zero, as they are
        return Precision("float64" if requested == "auto" else "float32", predicted_error=np.inf,
                         reason=f"the centred kernel matrix is numerically zero {what} (identical points, or a "
                                "kernel constant on them): float32's rounding would be all that is left"
                                + (": float64" if requested == "auto" else ""), **common)
    if got["finite"] == "identity":
        return Precision("float32", predicted_error=0.0, reason=f"the kernel matrix is numerically the identity {what} "
                         "(gamma far above the data's scale): float32 holds it", **common)
    predicted = max(got["entry_error"], got["product_error"] if single_products else 0.0)
    kept = "of trace(K) survives centring" if got["surviving"] is None else \
        f"{got['surviving']:.2g} of trace(K) survives centring"
    loss = (f"float32 puts ~{predicted:.1e} relative error into the top {got['checked']} eigenvalue(s) "
            f"({'entries and single-precision products' if single_products else 'entries'}; measured {what}: "
            f"{kept})")
    if predicted <= limit:
        return Precision("float32", predicted_error=predicted, reason=f"{loss}, within {named}: float32", **common)
    if requested == "auto" and stored == "float32" and predicted <= LIMIT:
        return Precision("float32", predicted_error=predicted, reason=f"{loss}, above {named}, but the store holds "
                         "K in float32 from an earlier fit: kept (reused, not rebuilt)", **common)
    if requested == "auto":
        return Precision("float64", predicted_error=predicted, reason=f"{loss}, above {named}: float64", **common)
    return Precision("float32", predicted_error=predicted, reason=f"{loss}, above {named}", **common)


def warn_scale(S: np.ndarray, kernel: Kernel, stacklevel: int) -> None:
    """:class:`KernelScaleWarning` when the kernel of sample ``S`` alone (~1 ms) is numerically I or constant.

    For the paths that measure no precision (float64 asked for or kept), where nothing else looks at K.
    """
    scale = kernel_scale(S, kernel, kernel.block(S, None, np.float64))
    if scale is not None:
        warnings.warn(scale, KernelScaleWarning, stacklevel=stacklevel)


def requested_dtype(dtype: Any) -> str:
    """``dtype`` as :func:`choose_precision` takes it: ``"auto"`` or a dtype's name (``"float32"``, ``"float64"``)."""
    return dtype if isinstance(dtype, str) and dtype == "auto" else np.dtype(dtype).name


def memory_precision(X: Any, kernel: Kernel | None, dtype: Any, k: int, single_products: bool) -> Precision | None:
    """K's precision for the estimator's in-memory fit; None: X's own, unmeasured (float64 X, ``dtype=None``).

    ``dtype=None`` (scikit-learn's X precision) decides float32 input as
    ``"auto"``; precomputed kernels, callables (``kernel`` None) and sparse
    input are not sampled.  A float32 asked for that the sample says loses
    the eigenvalues warns (:class:`PrecisionWarning`); a kernel matrix that
    is numerically the identity or constant on the sample warns
    (:class:`KernelScaleWarning`), for float64 too (X's own or asked for):
    :func:`choose_precision` then checks the sample's kernel alone (~1 ms).
    """
    own = dtype is None and X.dtype != np.float32  # X's float64 kept: choose_precision checks the scale only
    requested = "float64" if own else "auto" if dtype is None else requested_dtype(dtype)
    sampled = kernel is not None and not sp.issparse(X)
    precision = choose_precision(requested, kernel=kernel if sampled else None, k=int(k),
                                 single_products=single_products, sample=sample_rows(X) if sampled else None)
    if own:
        return None
    if precision.lossy:
        warnings.warn(precision.warning(), PrecisionWarning, stacklevel=4)
    return precision
