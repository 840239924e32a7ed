"""scikit-learn compatible :class:`KernelPCA`, in memory or out of core.

One estimator, two paths chosen by the type of ``X`` at ``fit``:

* **in memory** (numpy arrays, lists, pandas frames, scipy sparse matrices,
  ``kernel="precomputed"``): K is evaluated once with :mod:`dkpca.kernels`
  (scipy sparse input and callable kernels through scikit-learn's
  ``pairwise_kernels``, which is what a callable means there), wrapped in a
  :class:`~dkpca.operator.CenteredKernelOperator` so that centering is the
  operator's, and solved by a :mod:`dkpca.solvers` solver (or ARPACK on that
  operator).  Results are scikit-learn's: same eigenvalues, same projections
  with the same deterministic signs, same number of components for
  ``n_components=None``.
* **out of core** (a Zarr path or URL, a ``zarr.Array``, a dask array): the
  fit runs through :func:`dkpca.pipeline.fit` (Gram store, passes over K) and
  the resulting :class:`~dkpca.model.KPCAModel` is kept as ``model_``;
  ``transform`` of a dask array stays lazy.  Nothing n x n is held in memory.

Pre-images (:meth:`KernelPCA.inverse_transform`) are in :mod:`dkpca.preimage`.
"""

from __future__ import annotations

import numbers
import os
import warnings
from dataclasses import replace
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, eigsh
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.utils import check_array, check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from . import preimage as _pre
from .kernels import KERNEL_NAMES, Kernel, make_kernel
from .model import center_projection
from .operator import CenteredKernelOperator
from .solvers import ConvergenceWarning, EigResult, finalize, get_solver

__all__ = ["KernelPCA"]

EIGEN_SOLVERS = ("auto", "dense", "arpack", "randomized", "lanczos")

#: up to this many training points the ridge pre-image map is the exact n x n
#: solve (scikit-learn's); above, it is fitted on this many landmarks
RIDGE_EXACT_MAX_N = 4096

#: relative residual iterative solvers aim for when ``tol=0`` ("as accurate as
#: the arithmetic allows", scikit-learn's meaning for ARPACK).  A residual r
#: bounds eigenvalue errors by ~r^2/gap, so 1e-10 gives eigenvalues to working
#: precision; out of core K is float32 by default and 1e-6 is the useful limit.
_TOL_IN_MEMORY = 1e-10
_TOL_OUT_OF_CORE = 1e-6
#: passes allowed to an in-memory iterative solver when neither max_iter nor
#: iterated_power says otherwise (a pass is one GEMM with K in memory)
_MAX_PASSES_IN_MEMORY = 500

#: named kernels scikit-learn evaluates on sparse matrices without densifying
#: (its laplacian needs int32 sparse indices; dkpca densifies for that one)
_SPARSE_PAIRWISE = ("rbf", "poly", "linear", "sigmoid", "cosine")

#: entries of a (new points x training points) kernel block in ``transform``
_TRANSFORM_BLOCK_ENTRIES = 1 << 24


class _InMemoryKernelOperator(CenteredKernelOperator):
    """The centred operator over a kernel matrix held in memory.

    Only the source of K differs from the stored and matrix-free operators:
    the centering (``center``, ``dense``) and statistics are the base class's.
    """

    kind = "in-memory"

    def __init__(self, K: np.ndarray) -> None:
        super().__init__()
        self.K = K
        self.n = K.shape[0]
        self.block = self.n
        self.dtype = K.dtype
        self.row_means = K.sum(axis=1, dtype=np.float64) / self.n
        self.grand_mean = float(self.row_means.sum() / self.n)
        self.diag_sum = float(np.trace(K, dtype=np.float64))

    def raw_matmat(self, V: np.ndarray, single: bool = False) -> np.ndarray:
        # K is in memory: one GEMM, always in float64 (``single`` only pays off
        # when reading float32 blocks from disk).
        return self.K @ np.asarray(V, dtype=np.float64)

    def _read_block(self, I: int, J: int) -> np.ndarray:
        return self.K


def _is_out_of_core(X: Any) -> bool:
    import zarr

    return isinstance(X, (str, os.PathLike, da.Array, zarr.Array))


def _is_bool(v: Any) -> bool:
    return isinstance(v, (bool, np.bool_))


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not _is_bool(v)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not _is_bool(v) and np.isfinite(v)


def _seed(random_state: Any) -> Any:
    """An int, Generator or None for numpy's ``default_rng`` from scikit-learn's ``random_state``."""
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    return random_state


def _check_spectrum(lam: np.ndarray, all_components: bool) -> np.ndarray:
    """scikit-learn's rules for a computed spectrum (``_check_psd_eigenvalues``).

    Applied in memory so that results -- including how many components
    ``n_components=None`` keeps -- match scikit-learn's: all-negative or
    significantly negative eigenvalues are an error (the kernel is not PSD on
    this data), tiny negative ones and positive ones below 1e-12 of the largest
    (round-off) become exactly 0.

    One deliberate difference: with ``all_components`` (``n_components=None``,
    "every component with a positive eigenvalue") significant negative
    eigenvalues of an indefinite kernel are dropped with a warning instead of
    failing the fit, since none of them was asked for.  scikit-learn raises.
    """
    lam = np.array(lam, dtype=np.float64)
    if lam.size == 0:
        return lam
    top = lam.max()
    if top < 0:
        raise ValueError(
            f"all computed eigenvalues of the centred kernel matrix are negative (largest {top:.3g}): the kernel "
            "is not positive semi-definite on this data. Use a PSD kernel (rbf, poly with coef0 >= 0, ...)."
        )
    low = lam.min()
    if low < -1e-5 * top and low < -1e-10:
        if all_components:
            warnings.warn(
                f"the centred kernel matrix has significant negative eigenvalues ({-low / top:.3g} of the largest): "
                "the kernel is not positive semi-definite on this data; their components are dropped.",
                RuntimeWarning, stacklevel=4)
            lam[lam < 0] = 0.0
            return lam
        raise ValueError(
            f"the centred kernel matrix has significant negative eigenvalues ({-low / top:.3g} of the largest) "
            "among the components asked for: the kernel is not positive semi-definite on this data. Ask for "
            "fewer components or use a PSD kernel."
        )
    lam[lam < 0] = 0.0
    lam[(lam > 0) & (lam < 1e-12 * top)] = 0.0
    return lam


def _projection_weights(lam: np.ndarray, U: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``W = U / sqrt(lambda)`` (zero columns for zero eigenvalues), ``r^T W`` and ``1^T W``."""
    inv = np.zeros_like(lam)
    nz = lam > 0
    inv[nz] = 1.0 / np.sqrt(lam[nz])
    W = U * inv
    return W, r @ W, W.sum(axis=0)


class KernelPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Kernel principal component analysis, a drop-in for scikit-learn's, in memory or out of core.

    Parameters, defaults and fitted attributes are those of
    :class:`sklearn.decomposition.KernelPCA`; in memory the results are the
    same (eigenvalues, and projections with the same deterministic signs).
    Pass a Zarr path or a dask array to ``fit`` to run out of core through
    :func:`dkpca.fit`.

    Parameters
    ----------
    n_components : int, default=None
        Number of components.  ``None``: all components with a non-zero
        eigenvalue (in memory only).  Values above ``n_samples`` are clipped to
        it, as in scikit-learn.
    kernel : str, callable, dkpca Kernel or dict, default="linear"
        ``"linear"``, ``"poly"``, ``"rbf"``, ``"sigmoid"``, ``"cosine"``,
        ``"precomputed"``, also ``"laplacian"``; a dkpca :class:`~dkpca.kernels.Kernel`
        (e.g. ``RBF(0.1) + Linear()``) or its spec dict; or a callable
        ``k(x, y) -> float`` as in scikit-learn.  ``"precomputed"`` and callables
        are in-memory only: K is evaluated (or given) as one n x n array.
    gamma : float, default=None
        rbf, laplacian, poly and sigmoid coefficient; ``None`` means ``1 / n_features``.
    degree : int, default=3
        Degree of the poly kernel (integral values only).
    coef0 : float, default=1
        Independent term of the poly and sigmoid kernels.
    kernel_params : dict, default=None
        Keyword arguments of a callable kernel; for named kernels, overrides of
        their parameters (scikit-learn ignores it there).  Never mutated.
    alpha : float, default=1.0
        Ridge penalty of the learned pre-image map (``fit_inverse_transform``).
    fit_inverse_transform : bool, default=False
        Learn the ridge pre-image map at fit (Bakir et al. 2004), as
        scikit-learn; ``inverse_transform`` then defaults to ``method="ridge"``.
        Above ``RIDGE_EXACT_MAX_N`` training points (or ``n_landmarks``) the map
        is fitted on a random subset of landmark points.
    eigen_solver : {"auto", "dense", "arpack", "randomized", "lanczos"}, default="auto"
        In memory, ``"auto"`` follows scikit-learn (ARPACK when n > 200 and
        ``n_components < 10``, else dense).  ``"arpack"`` runs
        ``scipy.sparse.linalg.eigsh`` on the centred operator (never forming
        K~; one K-vector product per ARPACK step).  ``"randomized"`` is
        dkpca's subspace iteration, stopped by residual (``tol``), and
        ``"lanczos"`` dkpca's block Krylov solver where installed.  Out of core,
        ``"auto"`` is the pipeline's choice; ``"arpack"`` is refused there (one
        pass over K per step), use ``"randomized"`` or ``"lanczos"``.
    tol : float, default=0
        ARPACK's tolerance (0: machine precision).  For the iterative dkpca
        solvers, the relative residual ``||K~u - theta u|| / theta_1`` to reach;
        0 means 1e-10 in memory and 1e-6 out of core.
    max_iter : int, default=None
        ARPACK iterations, or passes over K for the iterative dkpca solvers
        (default 500 in memory, 60 out of core).
    iterated_power : int >= 0 or "auto", default="auto"
        For ``"randomized"`` without ``max_iter``: an int caps the passes at
        ``iterated_power + 1`` (scikit-learn's fixed budget; fewer if
        converged); ``"auto"`` iterates to ``tol``.
    remove_zero_eig : bool, default=False
        Drop components with zero eigenvalue (always done for ``n_components=None``).
    random_state : int, RandomState, Generator or None, default=None
        Starting vectors of ARPACK and the iterative solvers; landmarks.
    copy_X : bool, default=True
        Store a copy of the training data in ``X_fit_`` (in memory).
    n_jobs : int, default=None
        Passed to ``pairwise_kernels`` for callable kernels and sparse input.
        dkpca's own kernels use BLAS threads in memory and dask out of core.
    store : str, default=None
        Out of core: store root of the Gram matrix and model (default: beside a
        path input, a temporary directory for a dask array).
    chunk_size : int, default=None
        Out of core: Gram block edge (default about 4096).
    dtype : {"float32", "float64"}, default=None
        Precision of K.  ``None``: float64 in memory (scikit-learn's results),
        float32 out of core (the Gram store; products accumulate in float64).
    n_landmarks : int, default=None
        Landmark points of the ridge pre-image map; ``None``: all points up to
        ``RIDGE_EXACT_MAX_N``, that many above.

    Attributes
    ----------
    eigenvalues_ : ndarray of shape (n_components,)
        Eigenvalues of the centred kernel matrix, descending (not divided by n).
    eigenvectors_ : ndarray of shape (n_samples, n_components)
        Unit eigenvectors (largest-magnitude entry positive).
    explained_variance_ratio_ : ndarray of shape (n_components,)
        ``eigenvalues_ / trace(K~)``; sums to 1 over all components.
    dual_coef_ : ndarray of shape (n_landmarks, n_features)
        Ridge pre-image coefficients (``fit_inverse_transform=True``).
    X_transformed_fit_ : ndarray of shape (n_samples, n_components)
        Training scores (``fit_inverse_transform=True``).
    inverse_landmarks_ : ndarray of shape (n_landmarks,)
        Training rows the ridge map is expanded on (``fit_inverse_transform=True``).
    X_fit_ : ndarray, sparse matrix or dask array of shape (n_samples, n_features)
        Training data (out of core: the lazy copy in the store).
    gamma_ : float
        Kernel coefficient used (``1 / n_features`` when ``gamma=None``).
    kernel_ : Kernel or None
        The resolved dkpca kernel (``None`` for callables and ``"precomputed"``).
    eigen_solver_ : str
        Solver that ran.
    model_ : KPCAModel
        Out-of-core fits only: the persisted model (``dkpca.load(model_.store)``).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X has string feature names.

    Notes
    -----
    Memory in memory is that of scikit-learn (K and one centred copy, n^2
    floats each); ``X_fit_`` is kept for ``transform`` like scikit-learn does.
    Requires scikit-learn >= 1.6 (``validate_data``, ``__sklearn_tags__``).
    """

    def __init__(
        self,
        n_components: int | None = None,
        *,
        kernel: Any = "linear",
        gamma: float | None = None,
        degree: int = 3,
        coef0: float = 1,
        kernel_params: dict | None = None,
        alpha: float = 1.0,
        fit_inverse_transform: bool = False,
        eigen_solver: str = "auto",
        tol: float = 0,
        max_iter: int | None = None,
        iterated_power: int | str = "auto",
        remove_zero_eig: bool = False,
        random_state: Any = None,
        copy_X: bool = True,
        n_jobs: int | None = None,
        store: str | os.PathLike | None = None,
        chunk_size: int | None = None,
        dtype: str | None = None,
        n_landmarks: int | None = None,
    ) -> None:
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.alpha = alpha
        self.fit_inverse_transform = fit_inverse_transform
        self.eigen_solver = eigen_solver
        self.tol = tol
        self.max_iter = max_iter
        self.iterated_power = iterated_power
        self.remove_zero_eig = remove_zero_eig
        self.random_state = random_state
        self.copy_X = copy_X
        self.n_jobs = n_jobs
        self.store = store
        self.chunk_size = chunk_size
        self.dtype = dtype
        self.n_landmarks = n_landmarks

    # -- validation -----------------------------------------------------------------
    def _is_precomputed(self) -> bool:
        return isinstance(self.kernel, str) and self.kernel == "precomputed"

    def _is_callable_kernel(self) -> bool:
        return callable(self.kernel) and not isinstance(self.kernel, Kernel)

    def _check_params(self) -> None:
        """Check every parameter before touching the data; messages say what to pass."""

        def bad(name: str, want: str) -> ValueError:
            return ValueError(f"{name}={getattr(self, name)!r} is invalid; it must be {want}.")

        if self.n_components is not None and not (_is_int(self.n_components) and self.n_components >= 1):
            raise bad("n_components", "None or an integer >= 1")
        k = self.kernel
        if isinstance(k, str):
            if k not in (*KERNEL_NAMES, "precomputed"):
                raise bad("kernel", f"one of {', '.join((*KERNEL_NAMES, 'precomputed'))}, a dkpca Kernel or a "
                          "callable")
        elif not (isinstance(k, (Kernel, dict)) or callable(k)):
            raise bad("kernel", "a kernel name, a dkpca Kernel, a spec dict or a callable")
        if self.gamma is not None and not (_is_real(self.gamma) and self.gamma >= 0):
            raise bad("gamma", "None or a number >= 0")
        if not (_is_real(self.degree) and self.degree >= 0):
            raise bad("degree", "a number >= 0")
        if not _is_real(self.coef0):
            raise bad("coef0", "a finite number")
        if self.kernel_params is not None and not isinstance(self.kernel_params, dict):
            raise bad("kernel_params", "None or a dict")
        if not (_is_real(self.alpha) and self.alpha >= 0):
            raise bad("alpha", "a number >= 0")
        for name in ("fit_inverse_transform", "remove_zero_eig", "copy_X"):
            if not _is_bool(getattr(self, name)):
                raise bad(name, "True or False")
        if self.eigen_solver not in EIGEN_SOLVERS:
            raise bad("eigen_solver", f"one of {', '.join(EIGEN_SOLVERS)}")
        if not (_is_real(self.tol) and self.tol >= 0):
            raise bad("tol", "a number >= 0 (0: solver default)")
        if self.max_iter is not None and not (_is_int(self.max_iter) and self.max_iter >= 1):
            raise bad("max_iter", "None or an integer >= 1")
        if not (self.iterated_power == "auto" or (_is_int(self.iterated_power) and self.iterated_power >= 0)):
            raise bad("iterated_power", "'auto' or an integer >= 0")
        rs = self.random_state
        if not (rs is None or _is_int(rs) or isinstance(rs, (np.random.RandomState, np.random.Generator))):
            raise bad("random_state", "None, an int, a numpy RandomState or a numpy Generator")
        if self.n_jobs is not None and not _is_int(self.n_jobs):
            raise bad("n_jobs", "None or an integer")
        if self.store is not None and not isinstance(self.store, (str, os.PathLike)):
            raise bad("store", "None or a path / URL")
        if self.chunk_size is not None and not (_is_int(self.chunk_size) and self.chunk_size >= 1):
            raise bad("chunk_size", "None or an integer >= 1 (e.g. 4096)")
        if self.dtype is not None:
            try:
                dt = np.dtype(self.dtype)
            except TypeError:
                dt = None
            if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
                raise bad("dtype", "None, 'float32' or 'float64'")
        if self.n_landmarks is not None and not (_is_int(self.n_landmarks) and self.n_landmarks >= 1):
            raise bad("n_landmarks", "None or an integer >= 1")

    def _make_kernel(self, n_features: int) -> Kernel | None:
        """The resolved dkpca kernel; None for callables and precomputed kernels."""
        if self._is_precomputed() or self._is_callable_kernel():
            return None
        degree = self.degree
        if isinstance(degree, numbers.Real) and float(degree).is_integer():
            degree = int(degree)  # scikit-learn accepts degree=3.0
        kern = make_kernel(self.kernel, gamma=self.gamma_, degree=degree, coef0=self.coef0,
                           kernel_params=self.kernel_params)
        return kern.resolve(n_features)

    def _iteration_limits(self, in_memory: bool) -> tuple[float, int | None]:
        """``(tol, max_passes)`` of the iterative dkpca solvers from scikit-learn's parameters."""
        tol = float(self.tol) if self.tol > 0 else (_TOL_IN_MEMORY if in_memory else _TOL_OUT_OF_CORE)
        if self.max_iter is not None:
            passes = int(self.max_iter)
        elif self.eigen_solver == "randomized" and self.iterated_power != "auto":
            passes = int(self.iterated_power) + 1
        else:
            passes = _MAX_PASSES_IN_MEMORY if in_memory else None
        return tol, passes

    def _iterative_solver(self, name: str):
        try:
            return get_solver(name)
        except ValueError as exc:
            raise ValueError(
                f"eigen_solver={name!r} is not available in this dkpca installation ({exc}). "
                "Use eigen_solver='randomized' or 'arpack' (in memory) instead."
            ) from None

    def _reset(self) -> None:
        # A refit must not leave attributes of the previous fit behind (e.g.
        # model_ after switching to in-memory data).
        for name in list(vars(self)):
            if name.endswith("_") and not name.startswith("__"):
                delattr(self, name)

    # -- kernel evaluation (in memory) ----------------------------------------------------
    def _pairwise(self, A: Any, B: Any = None) -> np.ndarray:
        """Kernel block ``k(A_i, B_j)`` as float64 (``B=None``: ``B = A``, exactly symmetric)."""
        kern = self.kernel_
        if kern is None:
            # A callable is scikit-learn's per-pair metric; evaluate it exactly as scikit-learn does.
            K = pairwise_kernels(A, B, metric=self.kernel, filter_params=True, n_jobs=self.n_jobs,
                                 **(self.kernel_params or {}))
            return np.asarray(K, dtype=np.float64)
        if sp.issparse(A) or (B is not None and sp.issparse(B)):
            spec = kern.to_dict()
            name = spec.pop("name")
            if name in _SPARSE_PAIRWISE:
                # dkpca's block kernels are dense; scikit-learn's pairwise kernels
                # multiply sparse matrices without densifying them.
                K = pairwise_kernels(A, B, metric=name, filter_params=True, n_jobs=self.n_jobs, **spec)
                return np.asarray(K, dtype=self._compute_dtype)
            A = A.toarray() if sp.issparse(A) else A
            B = B.toarray() if B is not None and sp.issparse(B) else B
        return kern.block(A, B, self._compute_dtype)

    def _ridge_kernel(self, A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
        """The kernel between score vectors for the ridge pre-image map (scikit-learn's choice)."""
        if self.kernel_ is None:
            return self._pairwise(A, B)
        return self.kernel_.block(A, B, np.float64)

    # -- fit --------------------------------------------------------------------------
    def fit(self, X: Any, y: Any = None) -> KernelPCA:
        """Fit the model from data in X.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), dask array or Zarr path
            Training data (``kernel="precomputed"``: the n x n kernel matrix).
            A dask array, ``zarr.Array`` or Zarr path/URL is fitted out of core.
        y : Ignored

        Returns
        -------
        self : KernelPCA
        """
        self._check_params()
        self._reset()
        if _is_out_of_core(X):
            self._fit_out_of_core(X)
        else:
            self._fit_in_memory(X)
        return self

    def _fit_in_memory(self, X: Any) -> None:
        if self.fit_inverse_transform and self._is_precomputed():
            raise ValueError("Cannot fit_inverse_transform with a precomputed kernel.")
        X = validate_data(self, X, accept_sparse="csr", dtype=[np.float64, np.float32], copy=self.copy_X,
                          ensure_min_samples=2)
        n, d = X.shape
        if self._is_precomputed() and n != d:
            raise ValueError(
                f"kernel='precomputed' expects the square training kernel matrix, got shape {X.shape}; pass "
                "K(X_train, X_train) to fit and K(X_new, X_train) to transform."
            )
        self._compute_dtype = np.dtype(self.dtype) if self.dtype is not None else np.dtype(np.float64)
        self._out_dtype = X.dtype
        self.gamma_ = 1.0 / d if self.gamma is None else self.gamma
        self.kernel_ = self._make_kernel(d)
        if self._is_precomputed():
            K = X.toarray() if sp.issparse(X) else X
            K = np.array(K, dtype=self._compute_dtype, copy=True)
        else:
            K = self._pairwise(X)
        op = _InMemoryKernelOperator(K)
        k = n if self.n_components is None else min(n, self.n_components)
        solver = self.eigen_solver
        if solver == "auto":
            # scikit-learn's rule, so that "auto" runs the same algorithm
            solver = "arpack" if n > 200 and k < 10 else "dense"
        if solver == "dense":
            res = get_solver("dense")(op, k)
        elif solver == "arpack":
            res = self._arpack(op, k)
        else:
            tol, passes = self._iteration_limits(in_memory=True)
            res = self._iterative_solver(solver)(op, k, tol=tol, max_passes=passes,
                                                 rng=np.random.default_rng(_seed(self.random_state)))
            if not res.converged:
                warnings.warn(
                    f"eigen_solver={solver!r} stopped after {res.passes} passes above tol={tol:g}; raise max_iter, "
                    "or use eigen_solver='dense' or 'arpack'.", ConvergenceWarning, stacklevel=3)
        # sort + deterministic signs (dkpca's finalize); the PSD rules are scikit-learn's
        res = finalize(res, positive_definite=False)
        lam = _check_spectrum(res.eigenvalues, self.n_components is None)
        U = res.eigenvectors
        if self.remove_zero_eig or self.n_components is None:
            keep = lam > 0
            lam, U = lam[keep], U[:, keep]
        self.eigenvalues_ = lam
        self.eigenvectors_ = U
        self.eigen_solver_ = solver
        trace = op.trace
        self.explained_variance_ratio_ = lam / trace if trace > 0 else np.zeros_like(lam)
        self._row_means = op.row_means
        self._grand_mean = op.grand_mean
        # K~_ii, for the feature-space distances of the Kwok-Tsang pre-image
        self._kdiag_centered = np.diag(K).astype(np.float64) - 2.0 * op.row_means + op.grand_mean
        del op, K
        self.X_fit_ = X
        if self.fit_inverse_transform:
            self._fit_ridge(X)

    def _arpack(self, op: _InMemoryKernelOperator, k: int) -> EigResult:
        n = op.n
        if k >= n:
            raise ValueError(
                f"eigen_solver='arpack' computes at most n_samples - 1 = {n - 1} components, {k} were asked for; "
                "use eigen_solver='dense' (or 'auto') for all of them."
            )
        # scikit-learn's starting vector, so that a seeded run gives its result
        v0 = check_random_state(self.random_state).uniform(-1, 1, n)
        A = LinearOperator((n, n), matvec=lambda v: op.matmat(v.reshape(-1, 1)).ravel(), matmat=op.matmat,
                           dtype=np.float64)
        lam, U = eigsh(A, k, which="LA", tol=self.tol, maxiter=self.max_iter, v0=v0)
        residuals = np.linalg.norm(op.matmat(U) - U * lam, axis=0)
        return EigResult(lam, U, passes=op.passes, residuals=residuals, converged=True, solver="arpack")

    def _fit_out_of_core(self, X: Any) -> None:
        from .io import open_input
        from .pipeline import fit as pipeline_fit

        if self.n_components is None:
            raise ValueError(
                "n_components=None asks for all n components, which is only supported for in-memory data; set "
                "n_components (e.g. 10) to fit a dask array or Zarr store out of core."
            )
        if self._is_precomputed() or self._is_callable_kernel():
            raise ValueError(
                f"kernel={self.kernel!r} is in-memory only (it needs the whole kernel matrix at once); pass a numpy "
                "array, or use a named kernel or a dkpca Kernel to fit out of core."
            )
        if self.eigen_solver == "arpack":
            raise ValueError(
                "eigen_solver='arpack' is in-memory only: out of core each ARPACK step would be a full pass over K. "
                "Use eigen_solver='randomized' or 'lanczos' (or 'auto')."
            )
        if self.eigen_solver == "lanczos":
            self._iterative_solver("lanczos")
        shape = open_input(X).shape
        if len(shape) != 2:
            raise ValueError(f"X must be 2-D (n_samples, n_features); got shape {tuple(shape)}.")
        n, d = (int(s) for s in shape)
        self.gamma_ = 1.0 / d if self.gamma is None else self.gamma
        kern = self._make_kernel(d)
        tol, passes = self._iteration_limits(in_memory=False)
        model = pipeline_fit(
            X, n_components=min(self.n_components, n), kernel=kern, solver=self.eigen_solver, store=self.store,
            chunk_size=self.chunk_size, dtype=self.dtype or "float32", tol=tol, max_passes=passes,
            random_state=_seed(self.random_state),
        )
        if self.remove_zero_eig:
            keep = model.eigenvalues_ > 0
            model = replace(model, eigenvalues_=model.eigenvalues_[keep], eigenvectors_=model.eigenvectors_[:, keep])
        self.model_ = model
        self.kernel_ = model.kernel
        self._compute_dtype = np.dtype(np.float64)
        self._out_dtype = np.dtype(np.float64)
        self.eigenvalues_ = model.eigenvalues_
        self.eigenvectors_ = model.eigenvectors_
        self.explained_variance_ratio_ = model.explained_variance_ratio_
        self.eigen_solver_ = model.report.get("solver", self.eigen_solver)
        self.n_features_in_ = d
        self.X_fit_ = model.X_fit
        self._row_means = model.row_means_
        self._grand_mean = model.grand_mean_
        spec = model.kernel.to_dict()
        diag = self.X_fit_.map_blocks(_kernel_diag, spec, dtype=np.float64, drop_axis=1,
                                      meta=np.empty((0,))).compute()
        self._kdiag_centered = diag - 2.0 * self._row_means + self._grand_mean
        if self.fit_inverse_transform:
            self._fit_ridge(self.X_fit_)

    def _fit_ridge(self, X: Any) -> None:
        Z = self.eigenvectors_ * np.sqrt(self.eigenvalues_)
        n = Z.shape[0]
        m = self.n_landmarks if self.n_landmarks is not None else (None if n <= RIDGE_EXACT_MAX_N
                                                                     else RIDGE_EXACT_MAX_N)
        landmarks, dual = _pre.fit_ridge(Z, X, self._ridge_kernel, float(self.alpha), n_landmarks=m,
                                         random_state=_seed(self.random_state))
        self.X_transformed_fit_ = Z
        self.inverse_landmarks_ = landmarks
        self.dual_coef_ = dual

    def fit_transform(self, X: Any, y: Any = None, **params: Any) -> np.ndarray:
        """Fit the model from data in X and transform X.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), dask array or Zarr path
        y : Ignored

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components)
            ``eigenvectors_ * sqrt(eigenvalues_)`` (exactly the projections of the training points).
        """
        self.fit(X, **params)
        return (self.eigenvectors_ * np.sqrt(self.eigenvalues_)).astype(self._out_dtype, copy=False)

    # -- transform ----------------------------------------------------------------------
    def transform(self, X: Any) -> Any:
        """Project X on the principal components.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), dask array or Zarr path
            (``kernel="precomputed"``: ``K(X, X_fit)`` of shape (n_samples, n_fit)).

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components)
            A lazy dask array for dask input to an out-of-core model.
        """
        check_is_fitted(self)
        if hasattr(self, "model_"):
            if _is_out_of_core(X):
                return self.model_.transform(X)
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
            return self.model_.transform(X).astype(X.dtype, copy=False)
        if _is_out_of_core(X):
            raise ValueError(
                "this KernelPCA was fitted in memory; transform a numpy array (e.g. np.asarray(X) or X.compute()), "
                "or fit on a dask array / Zarr store to work out of core."
            )
        X = validate_data(self, X, accept_sparse="csr", reset=False, dtype=[np.float64, np.float32])
        W, rW, sW = _projection_weights(self.eigenvalues_, self.eigenvectors_, self._row_means)
        n = W.shape[0]
        out = np.empty((X.shape[0], W.shape[1]), dtype=np.float64)
        step = max(1, _TRANSFORM_BLOCK_ENTRIES // n)
        for s in range(0, X.shape[0], step):
            Xb = X[s:s + step]
            if self._is_precomputed():
                Kx = np.asarray(Xb.toarray() if sp.issparse(Xb) else Xb, dtype=np.float64)
            else:
                Kx = self._pairwise(Xb, self.X_fit_)
            out[s:s + step] = center_projection(Kx @ W, Kx.mean(axis=1), rW, sW, self._grand_mean)
        return out.astype(X.dtype if X.dtype in (np.float32, np.float64) else np.float64, copy=False)

    # -- pre-images ---------------------------------------------------------------------
    def inverse_transform(self, X: Any, method: str | None = None, *, n_neighbors: int = 10, tol: float = 1e-6,
                          max_iter: int = 100) -> np.ndarray:
        """Map component scores back to input space (approximate pre-images).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_components)
            Scores, e.g. from :meth:`transform`.
        method : {"ridge", "kwok-tsang", "fixed-point"}, default=None
            ``None``: ``"ridge"`` if ``fit_inverse_transform=True`` (scikit-learn's
            behaviour), else ``NotFittedError`` as in scikit-learn.  ``"ridge"``:
            the kernel ridge map learned at fit (Bakir et al. 2004), any kernel.
            ``"kwok-tsang"``: closed form from feature-space distances to the
            ``n_neighbors`` nearest training points (Kwok & Tsang 2003), rbf or
            linear kernel.  ``"fixed-point"``: Mika et al. (1999) iteration, rbf
            kernel, started from Kwok-Tsang.  See :mod:`dkpca.preimage`.
        n_neighbors : int, default=10
            Neighbours used by ``"kwok-tsang"`` (and the fixed point's start).
        tol : float, default=1e-6
            ``"fixed-point"``: stop a point when its relative step is below tol.
        max_iter : int, default=100
            ``"fixed-point"``: passes over the training data at most.

        Returns
        -------
        X_original : ndarray of shape (n_samples, n_features)

        Raises
        ------
        NotFittedError
            Not fitted, or ``method="ridge"`` without ``fit_inverse_transform=True``.
        ValueError
            Unknown method, or a kernel the method does not apply to.
        """
        check_is_fitted(self)
        if method is None:
            if not self.fit_inverse_transform:
                raise NotFittedError(
                    "The fit_inverse_transform parameter was not set to True when instantiating and hence the "
                    "inverse transform is not available. Refit with fit_inverse_transform=True, or pass "
                    "method='kwok-tsang' or 'fixed-point', which need no extra fitting."
                )
            method = "ridge"
        if method not in _pre.METHODS:
            raise ValueError(f"method={method!r} is unknown; choose one of {', '.join(_pre.METHODS)}.")
        Z = check_array(X, dtype=np.float64)
        k = self.eigenvalues_.shape[0]
        if Z.shape[1] != k:
            raise ValueError(f"X has {Z.shape[1]} columns but the model has {k} components; pass scores from "
                             "transform.")
        if method == "ridge":
            if not hasattr(self, "dual_coef_"):
                raise NotFittedError(
                    "method='ridge' uses the pre-image map learned at fit; refit with fit_inverse_transform=True."
                )
            return _pre.ridge_preimage(Z, self.X_transformed_fit_[self.inverse_landmarks_], self.dual_coef_,
                                       self._ridge_kernel)
        kernel = self.kernel_ if self.kernel_ is not None else self.kernel
        E = self.eigenvectors_ * np.sqrt(self.eigenvalues_)
        x0 = _pre.kwok_tsang_preimage(Z, self.X_fit_, E, self._kdiag_centered, kernel, n_neighbors=n_neighbors)
        if method == "kwok-tsang":
            return x0
        W, _, _ = _projection_weights(self.eigenvalues_, self.eigenvectors_, self._row_means)
        x, _ = _pre.fixed_point_preimage(Z, self.X_fit_, W, kernel, x0, tol=tol, max_iter=max_iter)
        return x

    # -- scikit-learn plumbing -------------------------------------------------------------
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.pairwise = self._is_precomputed()
        return tags

    @property
    def _n_features_out(self) -> int:
        """Number of transformed output features."""
        return self.eigenvalues_.shape[0]


def _kernel_diag(Xb: np.ndarray, spec: dict) -> np.ndarray:
    from .kernels import from_dict

    return from_dict(spec).diag(Xb, np.float64)
