"""scikit-learn's ``KernelPCA`` parameters as dkpca's: the kernel, its evaluator, the solve limits, ``FitOptions``.

:class:`SklearnParams` is a mixin of :class:`dkpca.KernelPCA` (the estimator keeps its parameters, as
scikit-learn requires; this module reads them): the resolved :class:`~dkpca.kernels.Kernel` or the adapter
that evaluates callables and sparse input, the training kernel matrix, ``(tol, max_passes)`` from
``tol`` / ``max_iter`` / ``iterated_power``, the out-of-core fit's :class:`~dkpca.request.FitOptions`,
built here once, and the in-memory solve of a kernel matrix that ``fit`` and ``partial_fit`` share.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import ArpackNoConvergence

from .eigensolve import memory_kernel_matrix, solve_kernel_matrix
from .kernels import CallableKernel, Kernel, SparseInputKernel, make_kernel
from .linalg import Centering
from .planning import in_memory_solver, memory_precision
from .request import ARITHMETIC_TOL, FitOptions, check_n_components_spec
from .solvers import EigResult, Solver
from .solvers.spectrum import check_magnitude_ranking

__all__ = ["SklearnParams", "TOL_IN_MEMORY", "TOL_OUT_OF_CORE", "MAX_PASSES_IN_MEMORY"]

#: relative residual iterative solvers aim for when ``tol=0`` (``dkpca.fit``'s
#: meaning of it, scikit-learn's for ARPACK); out of core scikit-learn's default
#: ``tol=0`` keeps dkpca's default, 1e-6, and K in float32 where that holds it.
TOL_IN_MEMORY = ARITHMETIC_TOL
TOL_OUT_OF_CORE = 1e-6
#: passes allowed to an in-memory iterative solver when neither max_iter nor
#: iterated_power says otherwise (a pass is one GEMM with K in memory)
MAX_PASSES_IN_MEMORY = 500


class SklearnParams:
    """The estimator's parameters read as dkpca's (a mixin: the attributes are :class:`dkpca.KernelPCA`'s)."""

    kernel: Any
    kernel_: Kernel | None

    def _is_precomputed(self) -> bool:
        return isinstance(self.kernel, str) and self.kernel == "precomputed"

    def _is_callable_kernel(self) -> bool:
        return callable(self.kernel) and not isinstance(self.kernel, Kernel)

    def _make_kernel(self, n_features: int) -> Kernel | None:
        """The resolved dkpca kernel; None for callables and precomputed kernels."""
        if self._is_precomputed() or self._is_callable_kernel():
            return None
        degree = self.degree
        if isinstance(degree, numbers.Real) and float(degree).is_integer():
            degree = int(degree)  # scikit-learn accepts degree=3.0
        # the gamma as given (None: 1/n_features, filled by resolve), so that make_kernel can refuse it beside a
        # kernel object or kernel_params that set their own
        kern = make_kernel(self.kernel, gamma=self.gamma, degree=degree, coef0=self.coef0,
                           kernel_params=self.kernel_params)
        return kern.resolve(n_features)

    def _fitted_gamma(self, n_features: int) -> float:
        """``gamma_``: the fitted kernel's own where it has one, else the gamma given or 1/n_features."""
        own = getattr(self.kernel_, "gamma", None)
        return float(own) if own is not None else 1.0 / n_features if self.gamma is None else self.gamma

    def _evaluator(self) -> Kernel:
        """The kernel that evaluates blocks in memory: the resolved one, or an adapter."""
        if self.kernel_ is None:
            return CallableKernel(self.kernel, dict(self.kernel_params or {}), self.n_jobs)
        return SparseInputKernel(self.kernel_, self.n_jobs)

    def _training_kernel(self, X: Any) -> np.ndarray:
        """The training kernel matrix ``K(X, X)``, exactly symmetric.

        A named kernel on dense input is built block by block on this
        process's threads; callable kernels and sparse input go through
        their adapter (scikit-learn's ``pairwise_kernels``).
        """
        if self.kernel_ is not None and not sp.issparse(X):
            return memory_kernel_matrix(self.kernel_, X, self._compute_dtype)
        dtype = np.float64 if self.kernel_ is None else self._compute_dtype
        return self._evaluator().block(X, None, dtype)

    def _ridge_kernel(self, A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
        """The kernel between score vectors for the ridge pre-image map (scikit-learn's choice)."""
        return self._evaluator().block(A, B, np.float64)

    def _fit_options(self, n: int, d: int, overwrite: bool = False) -> FitOptions:
        """The out-of-core fit's :class:`~dkpca.request.FitOptions`, from scikit-learn's parameters (the one place)."""
        tol, passes, _ = self._iteration_limits(in_memory=False)
        spec = check_n_components_spec(self.n_components)
        return FitOptions(n_components=spec if isinstance(spec, float) else min(spec, n), kernel=self._make_kernel(d),
                          solver=self.eigen_solver, store=self.store, chunk_size=self.chunk_size,
                          dtype=self.dtype or "auto", tol=tol, max_passes=passes, random_state=self.random_state,
                          overwrite=overwrite)

    def _choose_precision(self, X: Any, k: int | float, solver: str) -> None:
        """``precision_`` and K's dtype for an in-memory fit of the rows X (``fit``; ``partial_fit`` where 'auto'
        held K in float32 and the rows grown since may need float64)."""
        self.precision_ = memory_precision(X, self.kernel_, self.dtype, k,
                                           single_products=Solver.parse(solver).spec.float32_products)
        self._compute_dtype = np.dtype(self.precision_.dtype) if self.precision_ is not None else X.dtype

    def _in_memory_choice(self, n: int, warm: bool = False) -> tuple[int | float, str]:
        """``(k, solver)`` of an in-memory fit of n rows (``fit`` and ``partial_fit`` alike).

        k: the components kept (a float: the fraction of variance); the solver: ``eigen_solver``, or for
        ``"auto"`` the one the measured cost picks (not scikit-learn's k < 10); ``warm``: a later
        ``partial_fit`` call, which starts from the extended eigenvectors.
        """
        spec = None if self.n_components is None else check_n_components_spec(self.n_components)
        k = n if spec is None else spec if isinstance(spec, float) else min(n, spec)
        if self.eigen_solver != "auto":
            return k, self.eigen_solver
        return k, in_memory_solver(n, k, isinstance(k, float), warm)[0]

    def _solve_in_memory(self, K: np.ndarray, X: Any, k: int | float, solver: str, start: np.ndarray | None = None,
                         given: Centering | None = None) -> EigResult:
        """Solve K in memory and set the fitted attributes but the ridge map's (``fit`` and ``partial_fit`` alike).

        ``X``: the rows K is of (``X_fit_``); ``start``: the solver's start (None: its own); ``given``: the
        centring of a non-symmetric precomputed K (None: the solver's).
        """
        precomputed = self._is_precomputed()
        limits = self._limits_bind(K.shape[0], k)
        # arpack: scikit-learn's tolerance, iteration limit and starting vector
        tol, passes, budget = ((self.tol if limits else 0.0, None, "max_iter") if solver == Solver.ARPACK else
                               self._iteration_limits(in_memory=True, limits=limits))
        try:
            res, centering = solve_kernel_matrix(K, k, solver, tol=tol, max_passes=passes,
                                                 maxiter=self.max_iter if limits else None, budget=budget,
                                                 random_state=self.random_state,
                                                 remove_zero=self.remove_zero_eig or self.n_components is None,
                                                 X=None if precomputed else X, kernel=self.kernel_,
                                                 kernel_name="precomputed" if precomputed else
                                                 f"callable {getattr(self.kernel, '__name__', self.kernel)!r}",
                                                 start=start)
        except ArpackNoConvergence:
            # "auto"'s ARPACK, no iteration limit given: its tolerance is relative to each eigenvalue, which
            # near-zero ones never meet; block Lanczos's is relative to the largest (dkpca.fit hands over alike,
            # planning.instead_of_arpack).  Asked for by name, or limited by max_iter, its error stands.
            if self.eigen_solver != "auto" or self.max_iter is not None:
                raise
            return self._solve_in_memory(K, X, k, Solver.LANCZOS, None, given)
        if solver == Solver.RANDOMIZED and precomputed:  # a given matrix: scikit-learn's error (see there)
            check_magnitude_ranking(res, K.dtype)
        # scikit-learn's fitted arrays are in the input's floating type; dtype="float64" asks for float64
        kept = np.dtype(np.float64) if str(self.dtype) == "float64" else self._out_dtype
        self.eigenvalues_, self.eigenvectors_ = (a.astype(kept, copy=False)
                                                 for a in (res.eigenvalues, res.eigenvectors))
        self.eigen_solver_ = solver
        self.explained_variance_ratio_ = (res.eigenvalues / centering.trace if centering.trace > 0
                                          else np.zeros_like(res.eigenvalues)).astype(kept, copy=False)
        self._centering = centering if given is None else given
        # K~_ii, for the feature-space distances of the Kwok-Tsang pre-image
        self._kdiag_centered = centering.centered_diag(np.diag(K))
        self.X_fit_ = X
        return res

    def _limits_bind(self, n: int, k: int | float) -> bool:
        """Whether ``tol`` and ``max_iter`` bind an in-memory solve of n rows, as in scikit-learn: they limit its
        ARPACK alone -- an explicit ``"arpack"``, and ``"auto"`` where its own auto runs ARPACK (n > 200, k < 10)
        -- and dkpca's ``"lanczos"``, which it lacks.  Elsewhere scikit-learn solves to machine precision and
        ignores them, and so does this: its ``"auto"`` with ``tol=1e-2`` and 70 components (dense there, Lanczos
        here) gave projections 0.4 off, ``"randomized"`` with ``max_iter=1`` eigenvalues 40x too small."""
        if self.eigen_solver == "auto":
            return n > 200 and not isinstance(k, float) and k < 10
        return Solver.parse(self.eigen_solver) in (Solver.ARPACK, Solver.LANCZOS)

    def _iteration_limits(self, in_memory: bool, limits: bool = True) -> tuple[float, int | None, str]:
        """``(tol, max_passes, the parameter that set it)`` of the iterative dkpca solvers from scikit-learn's
        (``limits``: whether ``tol`` and ``max_iter`` bind, :meth:`_limits_bind`; out of core they always do).

        An int ``iterated_power`` q is scikit-learn's randomized budget in products with K: its range finder's
        first, two per power iteration (``A^T Q`` and ``A Q``, both K here) and the projection ``Q^T A``: 2q + 2.
        """
        tol = float(self.tol) if self.tol > 0 and limits else (TOL_IN_MEMORY if in_memory else TOL_OUT_OF_CORE)
        if self.max_iter is not None and limits:
            return tol, int(self.max_iter), "max_iter"
        if self.eigen_solver == Solver.RANDOMIZED and self.iterated_power != "auto":
            return tol, 2 * int(self.iterated_power) + 2, "iterated_power"
        return tol, MAX_PASSES_IN_MEMORY if in_memory else None, "max_iter"

    def _reset(self) -> None:
        # A refit must not leave attributes of the previous fit behind (e.g.
        # model_ after switching to in-memory data).
        for name in list(vars(self)):
            if name.endswith("_") and not name.startswith("__"):
                delattr(self, name)
