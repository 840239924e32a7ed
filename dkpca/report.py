"""``model.report``: what a fit solved, how (its :class:`~dkpca.planning.FitPlan`), how well and how fast.

Assembled here as a :class:`~dkpca.fitreport.FitReport` (the typed value and its stored form live in
:mod:`dkpca.fitreport`, below the model that loads it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .fitreport import FitReport
from .jsonsafe import json_safe
from .operator import CenteredKernelOperator
from .planning import FitPlan
from .solvers import EigResult

__all__ = ["fit_report"]


def fit_report(res: EigResult, op: CenteredKernelOperator, plan: FitPlan, *, tol: float, gram: dict[str, Any],
               timings: dict[str, float], pass_seconds: list, d: int, requested: int | float,
               update: dict[str, Any] | None = None) -> FitReport:
    """The report of a fit that ran ``plan``.

    ``solver_reason`` starts with the precision's sentence: the model's summary (and the CLI) say why K
    is in its dtype.  ``plan``: every decision and its reason (:meth:`FitPlan.to_dict`).
    """
    k = len(res.eigenvalues)
    scale = max(abs(res.eigenvalues[0]), np.finfo(float).tiny) if k else 1.0
    return FitReport.from_dict(json_safe({  # the nested objects typed (GramReport, SolverInfo, ...)
        "solver": plan.solver.value, "solver_reason": f"dtype={plan.precision.dtype}: {plan.precision.reason}; "
                                                      f"{plan.reason}",
        "passes": res.passes,
        "passes_over_K": (op.passes if not plan.spec.forms_kernel  # an approximation's passes are over X
                          else res.passes - op.fused_passes + op.setup_passes),
        "fused_passes": op.fused_passes, "auto": plan.details,
        "converged": bool(res.converged), "tol": tol,
        "residuals": res.residuals.tolist(),
        "max_relative_residual": float(np.max(res.residuals) / scale) if k else 0.0,
        "history": res.history, "pass_seconds": pass_seconds,
        "solver_info": res.info, "gram": gram, "timings": timings,
        "n_samples": plan.n, "n_features": d, "n_components_requested": requested,
        "zero_components_dropped": int(res.info.get("zero_eigenvalues_removed", 0)),
        "precision": plan.precision.to_dict(),
        "plan": plan.to_dict(),
        "update": update,
    }))
