"""The scikit-learn estimator :class:`SparseKernelPCA` (Tipping 2000) and :func:`fit_sparse`.

Principal axes (eqs. 15-17): eigenvectors ``U~``, eigenvalues ``Lambda~`` of
``S K_AA S`` (``S = W_A^(1/2)``); projection matrix ``P = S U~
Lambda~^(-1/2)`` (m x m), component scores ``z(x) = k_A(x)^T P``, eigenvalues
of C ``Lambda~ + sigma^2``.  Reconstruction error (eq. 18) ``k(x, x) -
k_A(x)^T K_AA^-1 k_A(x)``, which equals ``k(x, x) - sum_j z_j(x)^2`` over
all m components.  With ``center=True`` projecting a new point needs ``mean_j
k(x, x_j)`` over all training points: the components remain sparse but
evaluating them is no longer.
"""

from __future__ import annotations

import numbers
import os
import time
import warnings
from typing import Any

import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from ..io import as_dask
from ..kernels import Kernel, make_kernel
from ..planning.precision import sample_rows, warn_scale
from ..request import check_bool, check_choice, check_int, check_real, refused_as_sklearn
from ..solvers import EigResult, postprocess
from ..storage import DamagedModelError
from .blocks import center, kernel_block, mean_kernel
from .driver import DEFAULT_CANDIDATE_SET_SIZE, EMOptions, fit_weights
from .em import UPDATES, covariance
from .persist import ARRAYS, ATTRS, load_model, save_model

__all__ = ["SparseKernelPCA", "fit_sparse", "load_sparse", "resolve_kernel"]


def resolve_kernel(est: SparseKernelPCA, n_features: int) -> Kernel:
    """The kernel ``est``'s parameters give for data with ``n_features`` columns (validated, PSD)."""
    k = make_kernel(est.kernel, gamma=est.gamma, degree=est.degree, coef0=est.coef0,
                    kernel_params=est.kernel_params).resolve(n_features)
    k.validate()
    if not k.positive_definite:
        raise ValueError(
            f"kernel {k.to_dict()} is not positive semi-definite; sparse kernel PCA needs a PSD kernel "
            "(its covariance model sigma^2 I + Phi^T W Phi must be a covariance). Use rbf, laplacian, "
            "linear, cosine, or poly with coef0 >= 0."
        )
    return k


class SparseKernelPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Sparse kernel PCA (Tipping 2000): components built from a few training kernels.

    The feature vectors are modelled as ``phi ~ N(0, C)``, ``C = sigma^2 I +
    Phi^T W Phi`` (eq. 4) with ``sigma^2`` fixed and the weights fitted by
    maximum likelihood (:mod:`dkpca.sparse.em`); most go to zero, and the
    principal axes of C are spanned by the few "representing" kernels left.

    Parameters
    ----------
    n_components : int or None, default=None
        Components returned by :meth:`transform`; ``None`` keeps every
        component of the sparse model (one per representing kernel).  The
        number of representing kernels is set by ``noise_variance``, not by
        this parameter; above it, every component is kept, with a
        ``UserWarning`` (``n_components_`` says how many).
    kernel : str, Kernel or dict, default="rbf"
        As in :func:`dkpca.fit`; must be positive semi-definite.
    gamma, degree, coef0, kernel_params
        Kernel parameters as in :func:`dkpca.fit` (``gamma=None``: 1/n_features).
        The paper's ``exp(-|x - x'|^2 / r^2)`` is ``gamma = 1 / r^2``.
    noise_variance : float, default=0.1
        sigma^2, the per-coordinate feature-space variance left to isotropic
        noise.  Directions of the feature covariance ``Phi^T Phi / n`` with
        eigenvalue below sigma^2 are not represented (PPCA); for an rbf kernel
        the eigenvalues of ``K / n`` sum to 1.  Larger -> fewer kernels; see
        :func:`choose_noise_variance`.
    update : {"fast", "em"}, default="fast"
        Weight re-estimation: eq. 14 (fast) or eq. 13 (EM: the likelihood
        never decreases, but it converges far more slowly).
    max_iter : int, default=30000
        Weight updates per candidate set.  Each works on m x m matrices (m the
        candidates) and costs little next to screening candidates against the
        data: on 20,000 clustered points (``benchmarks/sparse_scale.py``) the
        fit needs about 5,000 of them (3,000 stopped it short, unconverged).
    tol : float, default=1e-7
        Stop when nothing was pruned and the log-likelihood can no longer rise
        by more than ``tol`` per training point: both its last change and the
        first-order gain still available, ``sum_i w_i |dL/dw_i|``, are below
        ``tol * n_samples``.
    prune_threshold : float, default=0.01
        A weight is set to zero when its maximum-likelihood value given the
        others is zero and it is below ``prune_threshold * max(w)`` (the paper
        gives no threshold; :mod:`dkpca.sparse.em`).
    candidate_set_size : int or None, default=None
        Candidates fitted together.  ``n <= candidate_set_size``: exact EM over
        all n kernels; otherwise the blocked scheme (:mod:`dkpca.sparse.driver`).
        ``None`` means 1000.  Memory per task is O(candidate_set_size^2).
    center : bool, default=False
        Centre in feature space (the paper does not; footnote 1).  Projecting
        then evaluates the kernel against all training points.
    random_state : int, RandomState instance or None, default=None
        Order in which candidates are split into candidate sets (blocked scheme only).
    block_size : int or None, default="deprecated"
        The former name of ``candidate_set_size``: still used, with a
        FutureWarning ("block" is a tile of K; this is a set of candidates).

    Attributes
    ----------
    representing_indices_ : ndarray of shape (m,)
        Training rows with non-zero weight, ascending.
    representing_points_ : ndarray of shape (m, n_features)
    weights_ : ndarray of shape (m,)
        Their weights ``w_i``.
    eigenvalues_ : ndarray of shape (n_components_,)
        Eigenvalues of C, ``Lambda~ + sigma^2``, descending.
    projection_ : ndarray of shape (m, n_components_)
        P (eq. 17): ``transform(X) = k_A(X) @ projection_``.
    n_components_ : int
    log_likelihood_ : ndarray of shape (n_iter_ + 1,)
        Eqs. 5-8 (up to the constant) before each update of the final EM
        run and at its result.
    n_iter_ : int
        Updates of the final EM run.
    converged_ : bool
    kernel_ : Kernel
        Resolved kernel.
    fit_report_ : dict
        Mode (exact/blocked), rounds, add-back rounds, passes over X, timings.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Only when X has string column names.
    """

    def __init__(
        self,
        n_components: int | None = None,
        *,
        kernel: str | Kernel | dict = "rbf",
        gamma: float | None = None,
        degree: int = 3,
        coef0: float = 1.0,
        kernel_params: dict | None = None,
        noise_variance: float = 0.1,
        update: str = "fast",
        max_iter: int = 30000,
        tol: float = 1e-7,
        prune_threshold: float = 0.01,
        candidate_set_size: int | None = None,
        center: bool = False,
        random_state: int | np.random.RandomState | None = None,
        block_size: int | None | str = "deprecated",
    ) -> None:
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.noise_variance = noise_variance
        self.update = update
        self.max_iter = max_iter
        self.tol = tol
        self.prune_threshold = prune_threshold
        self.candidate_set_size = candidate_set_size
        self.center = center
        self.random_state = random_state
        self.block_size = block_size

    # -- validation ------------------------------------------------------------
    def _check_params(self) -> None:
        """Every parameter, before the data (:mod:`dkpca.request`'s checks)."""
        check_int("n_components", self.n_components, 1, allow_none=True)
        check_real("noise_variance", self.noise_variance, what="a finite number > 0 (sigma^2 in feature space, e.g. "
                   "0.1 for an rbf kernel; see dkpca.sparse.choose_noise_variance)")
        if self.noise_variance <= 0:
            raise ValueError(f"noise_variance={self.noise_variance!r} is invalid; it must be a finite number > 0.")
        check_choice("update", self.update, UPDATES)
        check_int("max_iter", self.max_iter, 1)
        check_real("tol", self.tol, low=0.0, what="a number >= 0, e.g. 1e-7")
        p = check_real("prune_threshold", self.prune_threshold, what="a number in (0, 1), e.g. 0.01")
        if not 0 < p < 1:
            raise ValueError(f"prune_threshold={p!r} is invalid; it must be a number in (0, 1), e.g. 0.01.")
        check_int("candidate_set_size", self.candidate_set_size, 2, allow_none=True)
        if self._former_name_given():
            check_int("block_size", self.block_size, 2, allow_none=True)
            if self.candidate_set_size is not None:
                raise ValueError("block_size is the former name of candidate_set_size; pass candidate_set_size only.")
        check_bool("center", self.center)

    def _former_name_given(self) -> bool:
        """Whether ``block_size``, the former name of ``candidate_set_size``, was passed (not its placeholder)."""
        return not (isinstance(self.block_size, str) and self.block_size == "deprecated")

    def _candidate_set_size(self) -> int:
        """Candidates fitted together (``block_size``, its former name, with a FutureWarning)."""
        size = self.candidate_set_size
        if self._former_name_given():
            warnings.warn("block_size was renamed candidate_set_size and will be removed in a later release; pass "
                          "candidate_set_size instead.", FutureWarning, stacklevel=3)
            size = self.block_size
        return DEFAULT_CANDIDATE_SET_SIZE if size is None else int(size)

    # -- fitting ---------------------------------------------------------------
    def fit(self, X: Any, y: Any = None) -> SparseKernelPCA:
        """Fit the weights by (blocked) EM and build the sparse components.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        self
        """
        refused_as_sklearn(self._check_params)
        X = validate_data(self, read_whole(X), dtype=np.float64, ensure_min_samples=2)
        t_start = time.perf_counter()
        kernel = resolve_kernel(self, X.shape[1])
        warn_scale(sample_rows(X), kernel, stacklevel=3)  # a K numerically I or constant: as KernelPCA says it
        sigma2 = float(self.noise_variance)
        opts = EMOptions(self.update, int(self.max_iter), float(self.tol), float(self.prune_threshold))
        fit = fit_weights(X, kernel, sigma2, opts, self._candidate_set_size(), check_random_state(self.random_state),
                          bool(self.center))
        if not fit.em["converged"]:
            warnings.warn(
                f"sparse KPCA stopped at max_iter={self.max_iter} before the log-likelihood settled to "
                f"tol={self.tol} per sample; increase max_iter"
                + (" (or use update='fast', which converges much faster)." if self.update == "em" else
                   ", or loosen tol: the weights still trade off along a flat likelihood ridge."),
                ConvergenceWarning, stacklevel=2)
        if fit.active.size == 0:
            raise ValueError(
                f"noise_variance={sigma2} explains all the data: every weight went to zero. Choose a smaller "
                f"noise_variance: none survives above the largest eigenvalue of "
                f"{'K~/n (K centred)' if self.center else 'K/n'}, and kernels survive only well below it; "
                "dkpca.sparse.choose_noise_variance finds one for the number of kernels you want."
            )
        self.kernel_ = kernel
        self.representing_indices_ = fit.active.astype(np.int64)
        self.representing_points_ = X[fit.active].copy()
        self.weights_ = fit.weights
        self.log_likelihood_ = np.asarray(fit.em["log_likelihood"])
        self.n_iter_ = int(fit.em["n_iter"])
        self.converged_ = bool(fit.em["converged"])
        if self.center:
            self.X_fit_ = X.copy()
            self.row_means_ = fit.row_means[fit.active].copy()
            self.grand_mean_ = float(fit.grand_mean)
        self._build_components()
        self.fit_report_ = {**fit.report, "seconds": time.perf_counter() - t_start,
                            "n_representing": int(fit.active.size)}
        return self

    def _build_components(self) -> None:
        """Eigen-decompose ``S K_AA S`` -> eigenvalues, projection matrix (eqs. 15-17)."""
        s = np.sqrt(self.weights_)
        lam, U = scipy.linalg.eigh(s[:, None] * self._rep_kernel() * s[None, :])
        # ranked, signed; components with Lambda~ = 0 (duplicate representing points) carry no variance
        res = postprocess(EigResult(lam, U, 0, np.zeros(lam.size), True, "eigh"), remove_zero=True)
        lam, U = res.eigenvalues, res.eigenvectors
        k = lam.size if self.n_components is None else int(self.n_components)
        if k > lam.size:
            # scikit-learn's convention for fewer components than asked (PCA on rank-deficient data): keep them
            warnings.warn(
                f"n_components={k} exceeds the {lam.size} components of the fitted sparse model (one per "
                f"representing kernel, set by noise_variance={self.noise_variance}); keeping {lam.size}. Lower "
                "noise_variance to keep more kernels.", UserWarning, stacklevel=3)
            k = lam.size
        self._lam_all = lam
        self._proj_all = s[:, None] * U / np.sqrt(lam)[None, :]
        self.n_components_ = k
        self.eigenvalues_ = lam[:k] + float(self.noise_variance)
        self.projection_ = self._proj_all[:, :k]

    def _centering(self, rows: np.ndarray, cols: np.ndarray) -> tuple | None:
        return (rows, cols, self.grand_mean_) if self.center else None

    def _rep_kernel(self) -> np.ndarray:
        """``K_AA`` (centred when fitted so)."""
        R = self.representing_points_
        rm = self.row_means_ if self.center else None
        return kernel_block(self.kernel_, R, R, self._centering(rm, rm), same=True)

    @property
    def _n_features_out(self) -> int:
        return self.n_components_

    # -- out of sample -----------------------------------------------------------
    def _kernels(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(k_A(x), k(x, x))`` for new points, centred when fitted so."""
        check_is_fitted(self)
        X = validate_data(self, read_whole(X), dtype=np.float64, reset=False)
        R = self.representing_points_
        KA = self.kernel_.block(X, R, np.float64) if X.shape[0] else np.zeros((0, R.shape[0]))
        kxx = self.kernel_.diag(X, np.float64)
        if self.center:
            mean_k = mean_kernel(self.kernel_, X, self.X_fit_)
            KA = center(KA, self._centering(mean_k, self.row_means_))
            kxx = center(kxx, self._centering(mean_k, mean_k), diagonal=True)
        return KA, kxx

    def transform(self, X: Any) -> np.ndarray:
        """Component scores (eq. 17), evaluating only the m representing kernels.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        Z : ndarray of shape (n_samples, n_components_)
        """
        KA, _ = self._kernels(X)
        return KA @ self.projection_

    def reconstruction_error(self, X: Any, n_components: int | None = None) -> np.ndarray:
        """Squared feature-space reconstruction error.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        n_components : int, optional
            Components used.  ``None``: all components of the sparse model,
            i.e. eq. 18, ``k(x, x) - k_A(x)^T K_AA^-1 k_A(x)``.

        Returns
        -------
        err : ndarray of shape (n_samples,)
        """
        KA, kxx = self._kernels(X)
        P = self._proj_all
        if n_components is not None:
            if not isinstance(n_components, numbers.Integral) or not 1 <= n_components <= P.shape[1]:
                raise ValueError(
                    f"n_components={n_components!r} is invalid; it must be an integer between 1 and "
                    f"{P.shape[1]} (the components of the fitted model)."
                )
            P = P[:, :n_components]
        Z = KA @ P
        return kxx - np.einsum("ij,ij->i", Z, Z)

    def score_samples(self, X: Any) -> np.ndarray:
        """Log-density of ``phi(x)`` under ``N(0, C)`` up to the constant (novelty score).

        ``-1/2 [log|B| + sigma^-2 k(x, x) - sigma^-4 k_A(x)^T Sigma k_A(x)]``
        (eqs. 6-8 per sample); higher is more typical, and the sum over the
        training data is the final ``log_likelihood_``.

        Returns
        -------
        scores : ndarray of shape (n_samples,)
        """
        KA, kxx = self._kernels(X)
        sigma2 = float(self.noise_variance)
        Sigma, _, logdet = covariance(self._rep_kernel(), self.weights_, sigma2)
        quad = np.einsum("ij,ij->i", KA @ Sigma, KA)
        return -0.5 * (logdet + kxx / sigma2 - quad / sigma2**2)

    def score(self, X: Any, y: Any = None) -> float:
        """Mean of :meth:`score_samples`.

        It compares models of one ``noise_variance`` and kernel only: the constant it leaves out holds
        ``-D/2 log sigma^2`` with D the feature space's dimension (infinite for rbf), so it grows with
        ``noise_variance`` and a grid search on it picks the largest offered.  Choose ``noise_variance`` by
        the number of points to keep (:func:`dkpca.sparse.choose_noise_variance`).
        """
        return float(np.mean(self.score_samples(X)))

    # -- persistence -------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> str:
        """Write the fitted model to ``<path>/sparse_model`` (Zarr v3 + JSON attrs; :mod:`.persist`).

        An existing ``sparse_model`` group in that dkpca store is replaced.
        """
        check_is_fitted(self)
        names = [*ARRAYS, *ATTRS, "kernel_", "feature_names_in_"]
        return save_model(path, self.get_params(), {a: getattr(self, a) for a in names if hasattr(self, a)})

    @classmethod
    def load(cls, path: str | os.PathLike) -> SparseKernelPCA:
        """Read a model written by :meth:`save` (no pickle involved)."""
        params, fitted = load_model(path)
        if "block_size" in params:  # a store saved before the rename (or its "deprecated" placeholder)
            old = params.pop("block_size")
            params.setdefault("candidate_set_size", None if old == "deprecated" else old)
        unknown = sorted(set(params) - set(cls().get_params()))
        if unknown:  # an edited store, or one written by a later dkpca: a TypeError from cls(**params) names neither
            raise DamagedModelError(os.fspath(path), "sparse model field 'params'",
                                    f"names parameters {cls.__name__} does not have ({', '.join(unknown)})",
                                    kind="sparse_model")
        est = cls(**params)
        for name, value in fitted.items():
            setattr(est, name, value)
        est._build_components()
        return est

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        # fit rejects NaN/inf (validate_data): the kernel of a NaN row is undefined
        tags.input_tags.allow_nan = False
        return tags


def read_whole(X: Any) -> Any:
    """A path or URL in any format dkpca reads (Zarr, ``.npy``, HDF5, ...) read into memory, as ``KernelPCA`` and
    ``dkpca.fit`` take one: the sparse model holds its n x d data in memory (never n x n).  Anything else as
    given (``validate_data`` converts arrays and data frames)."""
    return as_dask(X, purpose="sparse kernel PCA").compute() if isinstance(X, (str, os.PathLike)) else X


def fit_sparse(X: Any, n_components: int | None = None, **params: Any) -> SparseKernelPCA:
    """Fit :class:`SparseKernelPCA` (functional form).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    n_components : int or None
    **params
        Any :class:`SparseKernelPCA` parameter.

    Returns
    -------
    SparseKernelPCA
        Fitted.
    """
    return SparseKernelPCA(n_components=n_components, **params).fit(X)


def load_sparse(path: str | os.PathLike) -> SparseKernelPCA:
    """Load a :class:`SparseKernelPCA` saved with :meth:`SparseKernelPCA.save`."""
    return SparseKernelPCA.load(path)
