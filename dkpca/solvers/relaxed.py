"""Block Lanczos's late passes in single precision: which ones, and the bound they add to the residuals.

A product with K~ that is off by ``E`` is baked into the projected matrix T,
but its effect on the final Ritz pairs is weighted by their components along
that pass's panel (and the next one), which are about as small as the
residual was when the pass began (Simoncini, "Variable accuracy of
matrix-vector products in projection methods for eigencomputation", SIAM J.
Numer. Anal. 43, 2005) -- provided T's coupling to the panel before comes
from that panel's own product, which :func:`dkpca.solvers.lanczos.solve`
sees to for such a pass.  So once the residual is small a pass may multiply
a float32 K in float32 (a third less time a pass, measured at n = 24,000:
0.36 s against 0.55-0.65 s), where the operator bounds that product's error
(``operator.single_error``) and the bound, so weighted, stays under a tenth
of ``tol`` -- and the bounds of all single passes together under half of it
(:data:`RELAX_BUDGET`).  Every residual reported afterwards includes the bound
(:meth:`Relaxation.slack`): convergence is never claimed on the float32
products' word.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Relaxation", "relaxes", "added_bound", "RELAX_SHARE", "RELAX_BUDGET"]

#: a pass multiplies in single precision when the bound it adds to the residuals is predicted at most this share
#: of tol (:func:`relaxes`)
RELAX_SHARE = 0.1
#: ... and the bound of all single passes so far with it at most this share: the residuals include the bound, so
#: single passes each under RELAX_SHARE but added up past tol left the residual above it for good (measured: a
#: k = 30 fit at n = 800 stalled at 1.67e-6 > tol = 1e-6 after 15 single passes and filled the whole space, where
#: float64 passes converged in 7)
RELAX_BUDGET = 0.5


def added_bound(history: list[float], eps: float) -> float:
    """The bound a single pass is predicted to add to the residuals, relative (``eps``: its error bound relative
    to lambda_1); infinite before a first residual.

    It adds ``eps (3 ||y_j|| + ||y_next||)`` (:meth:`Relaxation.slack`); a Ritz pair's weight on a pass's panel
    is about the residual the pass started from (measured at n = 24,000: 4.8e-3 and 6.6e-5 on panels started at
    residuals 4.5e-3 and 6.1e-5), so the latest residual predicts both.  One left out (a pass without its Ritz
    step) counts as the last computed before it.  The prediction only chooses: the weights the residuals then
    include are the Ritz pairs' own.
    """
    known = [r for r in history if np.isfinite(r)]
    return 4.0 * eps * known[-1] if known else np.inf


def relaxes(history: list[float], eps: float, tol: float, spent: float = 0.0) -> bool:
    """Whether the next pass may multiply in single precision: its :func:`added_bound` at most
    :data:`RELAX_SHARE` of tol, and with ``spent`` (the bound the single passes so far put on the residuals,
    relative) at most :data:`RELAX_BUDGET` of it."""
    add = added_bound(history, eps)
    return add <= RELAX_SHARE * tol and spent + add <= RELAX_BUDGET * tol


class Relaxation:
    """One block Lanczos run's single-precision panels and the bound they put on its residuals.

    ``operator.single_error`` (None: every product in float64) bounds a float32 product with a unit
    vector; a panel of ``width`` orthonormal columns: ``sqrt(width)`` times that.  ``carried``: per basis
    column, the bound Ritz vectors kept through a thick restart or a checkpoint bring from single panels
    folded into them (``size`` columns; ``saved``, a checkpoint's).
    """

    def __init__(self, operator: Any, width: int, size: int, enabled: bool = True,
                 saved: np.ndarray | None = None) -> None:
        unit = getattr(operator, "single_error", None) if enabled else None
        self.error = None if unit is None else float(unit) * np.sqrt(width)
        self.panels: list[tuple[int, int]] = []
        self.carried = np.zeros(size)
        if saved is not None:
            self.carried[:saved.shape[0]] = saved
        self.count = 0
        #: the bound on the wanted pairs' relative residuals at the last Ritz step, and what single passes since
        #: are predicted to add (:meth:`observe`, :meth:`single`)
        self.level, self.pending = 0.0, 0.0

    @property
    def active(self) -> bool:
        """Whether any residual now needs the bound."""
        return bool(self.panels) or bool(self.carried.any())

    def single(self, history: list[float], scale: float | None, tol: float) -> bool:
        """Whether the next pass multiplies in float32 (:func:`relaxes`, relative to ``scale`` = |theta_1|)."""
        if self.error is None or scale is None or not relaxes(history, self.error / scale, tol,
                                                               self.level + self.pending):
            return False
        self.pending += added_bound(history, self.error / scale)
        return True

    def withdraw(self) -> None:
        """No bound from here on, and no more single passes: the solver starts again from its Ritz vectors, every
        product float64 (the bound measured past :data:`RELAX_BUDGET` of tol would keep the residuals above it)."""
        self.error, self.level, self.pending = None, 0.0, 0.0
        self.panels.clear()
        self.carried[:] = 0.0

    def observe(self, S: np.ndarray, scale: float) -> None:
        """The wanted pairs' coefficients ``S`` at a Ritz step: the bound they carry now replaces the prediction."""
        self.level = float(self.slack(S).max() / scale) if self.active and S.shape[1] else 0.0
        self.pending = 0.0

    def record(self, start: int, stop: int) -> None:
        """Basis columns ``start:stop`` are a panel whose product was single."""
        self.panels.append((start, stop))
        self.count += 1

    def slack(self, S: np.ndarray) -> np.ndarray:
        """The bound on what the single products hide from the residual of each Ritz vector ``basis @ S[:, i]``.

        A product with error ``E`` of panel j enters the residual as ``E y_j``, T's diagonal block as
        ``Q_j^T E y_j``, the coupling the next pass takes from it (if that pass is single too) as
        ``Q_{j+1}^T E`` times ``y_j`` and ``y_{j+1}``, and the reported residual of a last pass as ``E y_j``
        (y: the pair's coefficients on the panels): ``error (3 ||y_j|| + ||y_{j+1}||)``, plus what kept
        vectors carry, weighted by the pair's coefficients on them.
        """
        out = np.abs(S).T @ self.carried[:S.shape[0]]
        for a, b in self.panels:
            out += self.error * (3.0 * np.linalg.norm(S[a:b], axis=0) + np.linalg.norm(S[b:b + (b - a)], axis=0))
        return out

    def fold(self, S_keep: np.ndarray) -> None:
        """A thick restart keeps the Ritz vectors ``basis @ S_keep`` as the new basis: they carry the bound."""
        if self.active:
            keep = S_keep.shape[1]
            self.carried[:keep] = self.slack(S_keep)
            self.carried[keep:] = 0.0
            self.panels.clear()
