""":class:`dkpca.KernelPCA`'s pre-images: ``inverse_transform`` and the ridge map learned at fit.

:class:`InverseTransform` is a mixin of the estimator (its fitted attributes are the estimator's); the
methods themselves are in :mod:`dkpca.preimage`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.exceptions import NotFittedError
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted

from . import preimage
from .request import as_generator, check_choice

__all__ = ["InverseTransform", "RIDGE_EXACT_MAX_N"]

#: up to this many training points the ridge pre-image map is the exact n x n
#: solve (scikit-learn's); above, it is fitted on this many landmarks
RIDGE_EXACT_MAX_N = 4096


class InverseTransform:
    """Pre-images of component scores (a mixin: the attributes are :class:`dkpca.KernelPCA`'s)."""

    def _fit_ridge(self, X: Any) -> None:
        Z = self.eigenvectors_ * np.sqrt(self.eigenvalues_)
        n = Z.shape[0]
        m = self.n_landmarks if self.n_landmarks is not None else (None if n <= RIDGE_EXACT_MAX_N
                                                                     else RIDGE_EXACT_MAX_N)
        landmarks, dual = preimage.fit_ridge(Z, X, self._ridge_kernel, float(self.alpha), n_landmarks=m,
                                             random_state=as_generator(self.random_state))
        self.X_transformed_fit_ = Z
        self.inverse_landmarks_ = landmarks
        self.dual_coef_ = dual.astype(Z.dtype, copy=False)  # in the fitted arrays' type, as scikit-learn's

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
        if self._is_precomputed():  # no input space: every method maps to one (the rows fitted, their kernel)
            raise ValueError("inverse_transform needs the input space, which a model fitted on a precomputed kernel "
                             "matrix has not seen; fit on the data with its kernel (kernel='rbf', ...) instead.")
        if method is None:
            if not self.fit_inverse_transform:
                raise NotFittedError(
                    "The fit_inverse_transform parameter was not set to True when instantiating and hence the "
                    "inverse transform is not available. Refit with fit_inverse_transform=True, or pass "
                    "method='kwok-tsang' or 'fixed-point', which need no extra fitting."
                )
            method = "ridge"
        check_choice("method", method, preimage.METHODS)
        if method == "ridge" and not hasattr(self, "dual_coef_"):
            raise NotFittedError(
                "method='ridge' uses the pre-image map learned at fit; refit with fit_inverse_transform=True.")
        ridge = (self.X_transformed_fit_[self.inverse_landmarks_], self.dual_coef_) if method == "ridge" else None
        Z = check_array(X, dtype=[np.float64, np.float32])
        # scikit-learn's type: float32 scores of a float32 fit give float32 points, float64 scores float64
        kept = np.result_type(Z.dtype, self.eigenvalues_.dtype)
        return preimage.inverse(
            method, Z.astype(np.float64, copy=False), X_fit=self.X_fit_,
            kernel=self.kernel_ if self.kernel_ is not None else self.kernel, ridge_kernel=self._ridge_kernel,
            eigenvalues=self.eigenvalues_, eigenvectors=self.eigenvectors_, centering=self._centering,
            kdiag_centered=self._kdiag_centered, ridge=ridge, n_neighbors=n_neighbors, tol=tol, max_iter=max_iter,
        ).astype(kept, copy=False)
