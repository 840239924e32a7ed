"""When block Lanczos makes a pass's Ritz step: where it can decide something, or costs little.

T's eigenproblem grows with the basis (0.73 s of a 0.4 s product at USPS's
8th pass), and a pass whose residual cannot reach tol only reports it; a
pass's Ritz pairs are left out when the residual is predicted far from tol
(:func:`worth_ritz`) unless they cost little next to the pass's product
(:func:`cheap_ritz`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["worth_ritz", "cheap_ritz", "MAX_SKIPPED_RITZ", "RITZ_SHARE", "RITZ_MARGIN"]

#: passes in a row whose Ritz pairs may be left out (:func:`worth_ritz`)
MAX_SKIPPED_RITZ = 2

#: a pass's Ritz pairs are computed, whatever :func:`worth_ritz` predicts, when they are expected to cost at
#: most this share of the pass's product (:func:`cheap_ritz`)
RITZ_SHARE = 0.05


def cheap_ritz(last: tuple[float, int] | None, size: int, product_seconds: float) -> bool:
    """Whether this pass's Ritz pairs cost little next to its product: leaving them out saves nothing.

    ``last``: the latest Ritz step's seconds and T's order then; T's eigenproblem grows as the cube of its
    order (``size`` now).  Leaving a pass's pairs out risks the pass after it when the prediction is wrong:
    measured after a grown fit's warm start (n = 9,600, rbf, k = 10, tol 1e-6), residuals 1.5e-2 and 1.4e-3
    predicted 1.2e-5 at pass 4, which was then left out; it was 5.9e-7, and the fit made a fifth pass for a
    Ritz step of under a millisecond.
    """
    if last is None:
        return False
    seconds, order = last
    return seconds * (size / max(order, 1)) ** 3 <= RITZ_SHARE * product_seconds

#: a pass's Ritz pairs are computed when its residual is predicted below this many times tol
RITZ_MARGIN = 10.0


def worth_ritz(history: list[float], tol: float) -> bool:
    """Whether this pass's residual could come near ``tol``, judged by the last two residuals computed.

    Their geometric rate, carried forward to this pass, must come within
    :data:`RITZ_MARGIN` of ``tol``; a Krylov method's rate only improves as
    it goes (superlinear convergence), so the prediction errs on the late side.
    Measured on USPS (k = 256, tol 1e-10): residuals 1.3e-5 and 8.9e-7 at
    passes 4 and 5 predict 6e-8 and 4e-9 at 6 and 7 (computed: 4.4e-8 and
    1.6e-9).  Late by more than the margin, a skipped pass may have met tol
    (:func:`cheap_ritz`, where skipping is worth that risk).  Never more than
    :data:`MAX_SKIPPED_RITZ` in a row, never when the residual stalls.
    """
    known = [(i, r) for i, r in enumerate(history) if np.isfinite(r) and r > 0]
    if tol <= 0 or len(known) < 2 or len(history) - 1 - known[-1][0] >= MAX_SKIPPED_RITZ:
        return True
    (a, ra), (b, rb) = known[-2:]
    rate = (rb / ra) ** (1.0 / (b - a))
    return rate >= 1 or rb * rate ** (len(history) - b) <= RITZ_MARGIN * tol
