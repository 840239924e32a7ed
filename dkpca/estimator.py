"""scikit-learn compatible :class:`KernelPCA`, in memory or out of core.

An adapter: both paths run the same core -- operator, solver, the spectrum
policy, centring -- and differ only in where K lives.

* **in memory** (numpy arrays, lists, pandas frames, scipy sparse matrices,
  ``kernel="precomputed"``): K is evaluated once through a dkpca
  :class:`~dkpca.kernels.Kernel` (callables and sparse input through the
  adapters in :mod:`dkpca.kernels.adapters`) and solved by
  :func:`dkpca.pipeline.solve_kernel_matrix` (ARPACK among the solvers).
  Results are scikit-learn's: same eigenvalues, same projections with the
  same deterministic signs, same number of components for
  ``n_components=None`` -- but where centring cancels most of K (data far
  smaller than the kernel's length scale) components at K's rounding level,
  which scikit-learn keeps down to 1e-12 of lambda_1, are dropped (README,
  Mathematics) -- same errors for kernels that are not PSD on the data.
* **out of core** (a path or URL of any format :func:`dkpca.fit` reads, a
  ``zarr.Array``, a dask array): the fit runs through :func:`dkpca.fit`
  (Gram store, passes over K) and the resulting
  :class:`~dkpca.model.KPCAModel` is kept as ``model_``.  Nothing n x n is
  held in memory.

Dask in, dask out: ``fit_transform`` and ``transform`` of a dask array return
dask arrays with its row chunks (``transform`` lazily, for either kind of fit);
numpy in, numpy out.

Pre-images (:meth:`KernelPCA.inverse_transform`) are in :mod:`dkpca.preimage`.
"""

from __future__ import annotations

import os
import pickle
import warnings
from dataclasses import replace
from functools import partial
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp
import zarr
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from .incremental import STORE_GIVEN, PartialFit, nearly_symmetric
from .inverse import InverseTransform
from .io import as_dask, open_input
from .linalg import center_precomputed
from .pipeline import fit_with
from .projection import kernel_diag, project
from .request import check_kernel_pca_params, check_out_of_core_params, refused_as_sklearn
from .sklearnparams import SklearnParams

__all__ = ["KernelPCA"]

EIGEN_SOLVERS = ("auto", "dense", "arpack", "randomized", "lanczos")


def _is_out_of_core(X: Any) -> bool:
    return isinstance(X, (str, os.PathLike, da.Array, zarr.Array))


class KernelPCA(PartialFit, SklearnParams, InverseTransform, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                BaseEstimator):
    """Kernel principal component analysis, a drop-in for scikit-learn's, in memory or out of core.

    Parameters, defaults and fitted attributes are those of
    :class:`sklearn.decomposition.KernelPCA`; in memory the results are the
    same (eigenvalues, and projections with the same deterministic signs).
    Pass a Zarr path or a dask array to ``fit`` to run out of core through
    :func:`dkpca.fit`.

    Parameters
    ----------
    n_components : int or float, default=None
        Number of components.  ``None``: all components with a non-zero
        eigenvalue (in memory only).  Values above ``n_samples`` are clipped to
        it, as in scikit-learn.  A float in (0, 1) is a fraction of explained
        variance, as in scikit-learn's ``PCA(n_components=0.95)``: the smallest
        number of components whose ``explained_variance_ratio_`` (against the
        exact ``trace(K~)``) sums to at least it; ``"auto"`` then solves the
        whole spectrum in memory, ``"randomized"``/``"lanczos"`` grow k round
        by round (see :func:`dkpca.fit`); not with ``"arpack"``.
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
        In memory, ``"auto"`` chooses by measured cost
        (:func:`dkpca.planning.in_memory_solver`): dense when n <= 200, for
        a fraction of explained variance, ``n_components=None`` or
        ``n_components >= n / 10``; block Lanczos from 64 components (on
        USPS, 256 components: 7.5 s against ARPACK's 17.5 s); else ARPACK (scikit-learn's rule, dense
        whenever ``n_components >= 10``, took 12 s at n=5000 where ARPACK
        takes 1 s); an ``"auto"`` ARPACK that does not converge (``max_iter``
        not given) hands over to block Lanczos, as :func:`dkpca.fit`'s does
        (scikit-learn raises ``ArpackNoConvergence``).  ``"arpack"`` runs
        ``scipy.sparse.linalg.eigsh`` on the centred operator (never forming
        K~; one K-vector product per ARPACK step).  ``"randomized"`` is
        dkpca's subspace iteration, stopped by residual, and
        ``"lanczos"`` dkpca's block Krylov solver.  Out of core,
        ``"auto"`` is the pipeline's choice; ``"arpack"`` is refused there (one
        pass over K per step), use ``"randomized"`` or ``"lanczos"``.
    tol : float, default=0
        ARPACK's tolerance (0: machine precision).  In memory it binds where
        scikit-learn's does -- ``"arpack"``, and ``"auto"`` for n > 200 and
        n_components < 10, where scikit-learn's auto runs ARPACK -- and
        ``"lanczos"``, as the relative residual ``||K~u - theta u|| / theta_1``
        to reach; elsewhere in memory, as in scikit-learn, it is ignored and
        the solve goes to 1e-10.  Out of core it is that residual for every
        solver (0: 1e-6).
    max_iter : int, default=None
        ARPACK iterations, or passes over K for the iterative dkpca solvers
        (default 500 in memory, 60 out of core); in memory it binds where
        ``tol`` does.
    iterated_power : int >= 0 or "auto", default="auto"
        For ``"randomized"`` in memory (and out of core without ``max_iter``): an int q caps the passes at
        2q + 2, scikit-learn's products with K at that setting (its range finder's
        first, two per power iteration, the projection's); fewer if converged;
        ``"auto"`` iterates to the default residual.
    remove_zero_eig : bool, default=False
        Drop components with zero eigenvalue (always done for ``n_components=None``,
        and out of core, where ``dkpca.fit`` never keeps them).
    random_state : int, RandomState, Generator or None, default=None
        Starting vectors of ARPACK and the iterative solvers; landmarks.
    copy_X : bool, default=True
        Store a copy of the training data in ``X_fit_`` (in memory).
    n_jobs : int, default=None
        Passed to ``pairwise_kernels`` for callable kernels and sparse input.
        dkpca's own kernels use BLAS threads in memory and dask out of core.
    store : str, default=None
        Out of core: store root of the Gram matrix and model, always kept
        (default: beside a path input; for a dask array a temporary directory
        that lives as long as the fitted model: removed with the estimator, by
        a refit, or at interpreter exit; one a killed process left is removed
        by the next temporary fit).  A store holds one fit: the clones a grid
        search or cross-validation makes would share it (each fold's data
        refused, or replaced with ``overwrite``, or refused while another
        clone writes it), so leave ``store`` unset there.  An estimator fitted
        out of core pickles with a store given here (the pickle refers to it
        by its absolute path) or beside a path input; with a temporary store
        pickling raises ``pickle.PicklingError``.
    overwrite : bool, default=False
        Out of core: a store that holds another fit (another kernel, dtype,
        chunk size or data) is rebuilt from scratch instead of refused, as
        ``dkpca.fit(overwrite=True)``.  ``partial_fit``: its first call only
        (later calls update the store's fit).
    chunk_size : int, default=None
        Out of core: Gram block edge (default about 4096).
    dtype : {"auto", "float32", "float64"}, default=None
        Precision of K.  ``None``: in memory, X's precision, as scikit-learn
        (float32 input: a float32 K, ARPACK in single precision; half the
        memory and product time) unless float32 would lose the eigenvalues;
        out of core ``"auto"`` (the Gram store; products accumulate in
        float64).  ``"auto"``: float32 unless a sample of X says float32 puts
        more than 1e-6 relative error into the top eigenvalues (centring
        cancelling most of K: a tiny gamma, a high degree), then float64
        (:mod:`dkpca.planning.precision`; ``precision_`` says which and why).
    n_landmarks : int, default=None
        Landmark points of the ridge pre-image map; ``None``: all points up to
        ``RIDGE_EXACT_MAX_N``, that many above.

    Attributes
    ----------
    eigenvalues_ : ndarray of shape (n_components,)
        Eigenvalues of the centred kernel matrix, descending (not divided by n).
        In memory, this and the other fitted arrays are in X's floating type
        (float32 input: float32, as scikit-learn's), float64 with
        ``dtype="float64"``; out of core float64.
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
        Kernel coefficient used: the kernel's own where it has one (set by ``gamma``, ``kernel_params`` or a
        kernel object), else ``gamma`` or ``1 / n_features`` when ``gamma=None``, as scikit-learn's.
    kernel_ : Kernel or None
        The resolved dkpca kernel (``None`` for callables and ``"precomputed"``).
    eigen_solver_ : str
        Solver that ran.
    precision_ : Precision, dict or None
        How K's precision was decided (in memory a
        :class:`~dkpca.planning.Precision`, out of core its dict in
        ``model_.report``); None where X's precision was kept unmeasured
        (float64 input, callables, precomputed kernels, sparse input).
    model_ : KPCAModel
        Out-of-core fits only: the fitted model; with ``store=`` also persisted
        there (``dkpca.load(model_.store)``), otherwise in memory beside its
        temporary store's data (``model_.save()`` writes it there).
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
        overwrite: bool = False,
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
        self.overwrite = overwrite
        self.chunk_size = chunk_size
        self.dtype = dtype
        self.n_landmarks = n_landmarks

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
        refused_as_sklearn(check_kernel_pca_params, self.get_params(deep=False), EIGEN_SOLVERS)
        self._reset()
        if _is_out_of_core(X):
            self._fit_out_of_core(X)
        else:
            if self.store is not None:  # partial_fit goes through a store it is given; fit of numpy X does not
                warnings.warn(f"store={os.fspath(self.store)!r} is not written: in-memory X is fitted in memory "
                              "(store= is for dask arrays, Zarr and file paths, and partial_fit); pass "
                              "dask.array.from_array(X) to fit it out of core into the store.", UserWarning,
                              stacklevel=2)
            self._fit_in_memory(X)
        self.n_samples_seen_ = int(self.eigenvectors_.shape[0])  # IncrementalPCA's: the rows fitted
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
        self._out_dtype = X.dtype
        self.kernel_ = self._make_kernel(d)
        self.gamma_ = self._fitted_gamma(d)
        k, solver = self._in_memory_choice(n)
        # K in X's precision unless asked otherwise: scikit-learn's arithmetic
        # (its pairwise kernels and eigensolvers keep float32), at half the
        # memory and product time of a float64 K -- but float32 input gets a
        # float64 K where a sample says float32 would lose the eigenvalues
        # (dtype="auto", dkpca.planning.precision).
        self._choose_precision(X, k, solver)
        K = (np.array(X.toarray() if sp.issparse(X) else X, dtype=self._compute_dtype, copy=True)
             if self._is_precomputed() else self._training_kernel(X))
        # a non-symmetric precomputed K is centred as KernelCenterer centres it (row and column means apart)
        given = center_precomputed(K) if self._is_precomputed() else None
        if given is not None and not nearly_symmetric(K):  # solvers part ways on it: ARPACK's, eigh's triangle
            gap = float(np.max(np.abs(K - K.T)))
            raise ValueError(
                f"kernel='precomputed': the kernel matrix is not symmetric, even centred (largest |K - K.T| {gap:.3g} "
                f"against entries up to {float(np.max(np.abs(K))):.3g}), so its eigenvectors depend on the solver "
                "(scikit-learn's dense solver reads one triangle only); symmetrise it: (K + K.T) / 2.")
        self._solve_in_memory(K, X, k, solver, given=given)
        del K
        if self.fit_inverse_transform:
            self._fit_ridge(X)

    def _fit_out_of_core(self, X: Any, update: bool = False, store: str | None = None) -> None:
        """``update``: a later ``partial_fit`` call, which updates the store's fit (never overwrites it), in
        ``store`` (the fitted store's absolute path; None: the ``store`` parameter)."""
        refused_as_sklearn(check_out_of_core_params, self.get_params(deep=False))
        opened = open_input(X)  # a dask array's unknown chunk lengths counted here, once: the fit takes this copy
        shape = opened.shape
        if len(shape) != 2:
            raise ValueError(f"X must be 2-D (n_samples, n_features); got shape {tuple(shape)}.")
        n, d = (int(s) for s in shape)
        options = self._fit_options(n, d, overwrite=self.overwrite and not update)
        model = fit_with(opened if isinstance(X, da.Array) else X, options if store is None else
                         replace(options, store=store))
        self.model_ = model
        self.__dict__[STORE_GIVEN] = None if self.store is None else os.fspath(self.store)
        facts = model.fit_report  # typed: the fit's own report, never a dict read back
        self.precision_ = facts.precision
        self.kernel_ = model.kernel
        self.gamma_ = self._fitted_gamma(d)
        self._compute_dtype = np.dtype(np.float64)
        self._out_dtype = np.dtype(np.float64)
        self.eigenvalues_ = model.eigenvalues_
        self.eigenvectors_ = model.eigenvectors_
        self.explained_variance_ratio_ = model.explained_variance_ratio_
        self.eigen_solver_ = facts.solver
        self.n_features_in_ = d
        if model.feature_names is not None:  # a data frame's, a CSV's or Parquet file's: transform checks them
            self.feature_names_in_ = np.asarray(model.feature_names, dtype=object)
        self.X_fit_ = model.X_fit
        self._centering = model.centering
        diag = self.X_fit_.map_blocks(partial(kernel_diag, kernel=model.kernel), dtype=np.float64, drop_axis=1,
                                      meta=np.empty((0,))).compute()
        self._kdiag_centered = model.centering.centered_diag(diag)
        if self.fit_inverse_transform:
            self._fit_ridge(self.X_fit_)

    def fit_transform(self, X: Any, y: Any = None, **params: Any) -> Any:
        """Fit the model from data in X and transform X.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), dask array or path
        y : Ignored

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components), or a dask array for a dask array X
            ``eigenvectors_ * sqrt(eigenvalues_)`` (exactly the projections of the training points);
            for dask input a dask array with X's row chunks.
        """
        self.fit(X, **params)
        Z = (self.eigenvectors_ * np.sqrt(self.eigenvalues_)).astype(self._out_dtype, copy=False)
        if isinstance(X, da.Array):
            return da.from_array(Z, chunks=(X.chunks[0], Z.shape[1]))
        return Z

    def partial_fit(self, X: Any, y: Any = None) -> KernelPCA:
        """Grow the fit by a batch of rows, as ``IncrementalPCA.partial_fit``: the result equals ``fit`` on them all.

        The first call fits X (as :meth:`fit`); each later call adds X's rows
        and solves the kernel matrix of every row seen so far to ``fit``'s
        tolerance, so eigenvalues, eigenvectors (up to rounding, with
        ``fit``'s signs) and :meth:`transform` are those of ``fit`` on the
        concatenation.  In memory the kernel matrix of the rows seen is kept
        between calls: a batch of m rows after n evaluates only ``K(X_new,
        X_old)`` and ``K(X_new, X_new)`` (n m + m^2 entries), and the
        iterative solvers start from the previous eigenvectors extended to the
        new rows (Nystroem: ``k~(x)^T U / lambda``) plus random oversampling
        columns (:mod:`dkpca.incremental`).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), dask array or Zarr path
            New rows, with the first batch's features (checked as ``transform``
            checks them; converted to the first batch's dtype).  With
            ``kernel="precomputed"``: the batch's rows of the grown kernel
            matrix, ``K(X_batch, [X_seen, X_batch])`` of shape (n_samples,
            n_seen + n_samples), whose last n_samples columns must be
            symmetric up to rounding (the first call: the square ``K(X_batch,
            X_batch)``), or the whole grown kernel matrix (square).
        y : Ignored

        Returns
        -------
        self : KernelPCA
            ``n_samples_seen_`` counts the rows fitted so far.

        Notes
        -----
        Memory grows with the square of the rows seen: K of n rows is n^2
        entries in the fit's precision (8 n^2 bytes in float64, 4 n^2 in
        float32: 3.2 GB at n = 20,000 in float64).  K is kept in a buffer with
        room for 50 % more rows (its unused part is never touched, so never
        resident): a batch that fits is written into it; one that outgrows it
        copies K into a new buffer, and the old K and the grown one are then
        both held.  ``X_fit_`` (the rows seen) is kept too.  After ``fit`` or
        unpickling, the next call rebuilds K of the fitted rows once.  K's precision is ``fit``'s on the rows
        seen (``precision_``): with ``dtype="auto"`` (float32 input's default) K held in float32 is rebuilt in
        float64, once, after a batch for which a sample of all rows says float32 loses the eigenvalues.
        With ``store=`` (or dask, Zarr or file batches, which need it) each
        call is :func:`dkpca.fit` on the store's data copy followed by the
        batch, out of core: the store is updated, nothing n x n is held in
        memory; a new estimator's first call on a store that holds a fit
        continues that fit -- a batch that is already its last rows adds
        nothing (:class:`dkpca.RepeatedBatchWarning`), one that is its first
        rows is refused.  A batch refused leaves the estimator as it was.
        """
        refused_as_sklearn(check_kernel_pca_params, self.get_params(deep=False), EIGEN_SOLVERS)
        return self._grow(X, out_of_core=_is_out_of_core(X))

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
            For a dask array X, a lazy dask array with X's row chunks.
        """
        check_is_fitted(self)
        if hasattr(self, "model_"):
            if _is_out_of_core(X):
                return self.model_.transform(X)
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
            return self.model_.transform(X).astype(self._scores_dtype(X.dtype), copy=False)
        if _is_out_of_core(X) and not isinstance(X, da.Array):
            raise ValueError(
                "this KernelPCA was fitted in memory; transform an array (numpy or dask; e.g. zarr.open(path)[:]), "
                "or fit on a dask array or a file path to work out of core."
            )
        if isinstance(X, da.Array):  # lazily, blockwise, with X's row chunks
            dtype = self._scores_dtype(X.dtype)
            X = as_dask(X, min_samples=1, purpose="transform", keep_row_chunks=True)
            if X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but KernelPCA is expecting {self.n_features_in_} "
                                 "features as input.")
        else:
            X = validate_data(self, X, accept_sparse="csr", reset=False, dtype=[np.float64, np.float32])
            dtype = self._scores_dtype(X.dtype)
        weights = self._centering.projection_weights(self.eigenvalues_, self.eigenvectors_)
        out = project(X, self.X_fit_, weights, self._centering,
                      evaluator=None if self._is_precomputed() else self._evaluator(),
                      kernel_dtype=np.float64 if self.kernel_ is None else self._compute_dtype)
        return out.astype(dtype, copy=False)

    def _scores_dtype(self, dtype: np.dtype) -> np.dtype:
        """scikit-learn's type of the scores: the new data's and the fit's common float type (float32 only when
        both are; data of another type counts as float64)."""
        return np.result_type(dtype if dtype in (np.float32, np.float64) else np.float64, self.eigenvectors_.dtype)

    # -- scikit-learn plumbing -------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        # An out-of-core fit without store= lives in a temporary store removed with the estimator; a pickle
        # would carry a path to nothing (and the training data it needs can be as large as the input).
        model = getattr(self, "model_", None)
        if model is not None and model.temporary is not None:
            raise pickle.PicklingError(
                "this KernelPCA was fitted out of core into a temporary store, which is removed with the estimator, "
                "so a pickle could not use it; fit with KernelPCA(..., store='path.dkpca.zarr') to keep the store "
                "(the pickle then refers to it), or fit a numpy array in memory.")
        return super().__getstate__()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        # dtype="float64" asks for float64 scores of any input (scikit-learn's check holds the tag to it)
        tags.transformer_tags.preserves_dtype = ["float64"] if str(self.dtype) == "float64" else ["float64", "float32"]
        tags.input_tags.pairwise = self._is_precomputed()
        return tags

    @property
    def _n_features_out(self) -> int:
        """Number of transformed output features."""
        return self.eigenvalues_.shape[0]
