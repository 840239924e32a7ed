"""A parameter refused as scikit-learn's estimators refuse one: ``InvalidParameterError``.

scikit-learn raises its ``InvalidParameterError`` (a ``ValueError`` and a
``TypeError``) for a bad parameter, so code written for either catches it;
both of dkpca's estimators raise what :mod:`dkpca.request`'s checks refuse as
one (kept out of :mod:`.checks`, which ``dkpca --help`` reads without
importing scikit-learn).
"""

from __future__ import annotations

from typing import Any

from sklearn.utils._param_validation import InvalidParameterError

__all__ = ["refused_as_sklearn"]


def refused_as_sklearn(check: Any, *args: Any) -> None:
    """``check(*args)``; a ``ValueError`` it raises is raised again as an ``InvalidParameterError``."""
    try:
        check(*args)
    except ValueError as exc:
        raise InvalidParameterError(str(exc)) from None
