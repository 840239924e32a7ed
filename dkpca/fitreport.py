"""The fit report as a typed value (:class:`FitReport`) and the one check of a report read back.

Made once by :func:`dkpca.report.fit_report` from the fit's plan and result; the model stores it as JSON
(:meth:`FitReport.to_dict`, the ``model.report`` users read) next to its schema version
(:data:`REPORT_SCHEMA`, the model attribute ``report_schema``).  :func:`read_report` is the one check of a
report read back: a stored report is JSON that may have been edited like any other.  Nothing reads a report
back to decide behaviour: what a load decides by is a typed model attribute of its own (``gram_mode``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from .grammode import GramMode
from .jsonsafe import json_safe

__all__ = ["NO_GRAM", "REPORT_SCHEMA", "FitReport", "read_gram_mode", "read_report", "stored_gram_mode"]

#: the version of the report's fields and JSON types; reports written before it have none (see read_report)
REPORT_SCHEMA = 2

#: ``gram["mode"]`` where the fit built no K (Nystroem: n x m kernel slices only)
NO_GRAM = "none"

_NUMBER = ((int, float), "a number")
_INT = ((int,), "an integer")
_TEXT = ((str,), "a string")
_OBJECT = ((dict,), "a JSON object")
_LIST = ((list,), "a JSON list")
#: each field's JSON type, as a schema-2 report holds it (null: not measured, accepted for every field)
FIELD_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "solver": _TEXT, "solver_reason": _TEXT, "passes": _INT, "passes_over_K": _INT, "fused_passes": _INT,
    "auto": _OBJECT, "converged": ((bool,), "true or false"), "tol": _NUMBER, "residuals": _LIST,
    "max_relative_residual": _NUMBER, "history": _LIST, "pass_seconds": _LIST, "solver_info": _OBJECT,
    "gram": _OBJECT, "timings": _OBJECT, "n_samples": _INT, "n_features": _INT,
    "n_components_requested": _NUMBER, "zero_components_dropped": _INT, "precision": _OBJECT, "plan": _OBJECT}
#: the fields reports without a schema (dkpca before schema 2) were checked for, and are still
LEGACY_FIELDS = ("gram", "timings", "solver_info", "max_relative_residual")


@dataclass(frozen=True)
class FitReport:
    """What a fit solved, how and how fast; every field as JSON types (``None``: not measured).

    ``auto``, ``gram``, ``solver_info``, ``timings``, ``precision`` and ``plan`` are JSON objects whose keys
    vary with the solver and Gram mode (``plan``: :meth:`FitPlan.to_dict`, every decision and its reason).
    """

    solver: str | None
    solver_reason: str | None
    passes: int | None
    passes_over_K: int | None
    fused_passes: int | None
    auto: dict[str, Any] | None
    converged: bool | None
    tol: float | None
    residuals: list[float] | None
    max_relative_residual: float | None
    history: list[float] | None
    pass_seconds: list[float] | None
    solver_info: dict[str, Any] | None
    gram: dict[str, Any] | None
    timings: dict[str, float] | None
    n_samples: int | None
    n_features: int | None
    n_components_requested: int | float | None
    zero_components_dropped: int | None
    precision: dict[str, Any] | None
    plan: dict[str, Any] | None

    @property
    def gram_mode(self) -> GramMode | None:
        """Where the fit's K lived; None where it built none (Nystroem)."""
        mode = (self.gram or {}).get("mode")
        return None if mode in (None, NO_GRAM) else GramMode(mode)

    def to_dict(self) -> dict[str, Any]:
        """The report as stored and as ``model.report`` (JSON types; NaN kept, as zarr writes it)."""
        return json_safe({f.name: getattr(self, f.name) for f in fields(self)})

    @classmethod
    def from_dict(cls, report: dict[str, Any]) -> FitReport:
        """A schema-2 report read back, every field's type checked.

        Raises
        ------
        ValueError
            A field of the wrong JSON type (named), or a Gram mode that is none.
        """
        for key, (kinds, what) in FIELD_TYPES.items():
            _check(report, key, kinds, what)
        mode = (report.get("gram") or {}).get("mode")
        if mode is not None and mode != NO_GRAM and (not isinstance(mode, str) or mode not in set(GramMode)):
            raise ValueError(f"has gram mode {mode!r}, not one of {[*(m.value for m in GramMode), NO_GRAM]}")
        return cls(**{key: report.get(key) for key in FIELD_TYPES})


def _check(report: dict[str, Any], key: str, kinds: tuple[type, ...], what: str) -> None:
    v = report.get(key)
    if v is not None and ((isinstance(v, bool) and bool not in kinds) or not isinstance(v, kinds)):
        raise ValueError(f"has {key} {v!r}, not {what}")


def read_report(report: Any, schema: Any, bad: Callable[[str, str], Exception]) -> FitReport | None:
    """Check a stored report (the model attributes ``report`` and ``report_schema``): the one such check.

    A report with ``schema`` :data:`REPORT_SCHEMA` is read as a :class:`FitReport`; one without (``schema``
    None: written before schemas) is checked as it always was (:data:`LEGACY_FIELDS`) and gives None: its
    other fields were never promised.  ``bad(field, why)`` makes the error raised (the caller's store and
    field naming).
    """
    if schema is not None and (isinstance(schema, bool) or schema != REPORT_SCHEMA):
        raise bad("report_schema", f"is {schema!r}, a report schema this dkpca does not read (it reads "
                                   f"{REPORT_SCHEMA} and reports without one): a newer dkpca wrote it; upgrade "
                                   "dkpca")
    if not isinstance(report, dict):
        raise bad("report", f"is {report!r}, not a JSON object")
    try:
        if schema is not None:
            typed = FitReport.from_dict(report)
        else:
            typed = None
            for key in LEGACY_FIELDS:
                _check(report, key, *FIELD_TYPES[key])
        timings = report.get("timings") or {}
        if not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in timings.values()):
            raise ValueError(f"has timings {timings!r}, not numbers of seconds")
    except ValueError as exc:
        raise bad("report", str(exc)) from None
    return typed


def stored_gram_mode(attrs: dict[str, Any]) -> Any:
    """A model's stored ``gram_mode`` (unchecked: :func:`read_gram_mode` checks it).

    A store written before the attribute: its report's Gram mode, the one fallback to a report field
    (None: no K, or none named).
    """
    if "gram_mode" in attrs:
        return attrs["gram_mode"]
    report = attrs.get("report")
    gram = report.get("gram") if isinstance(report, dict) else None
    mode = gram.get("mode") if isinstance(gram, dict) else None
    return mode if isinstance(mode, str) and mode in set(GramMode) else None


def read_gram_mode(attrs: dict[str, Any], bad: Callable[[str, str], Exception]) -> GramMode | None:
    """The Gram mode a model records (:func:`stored_gram_mode`), checked: a :class:`GramMode` or None."""
    mode = stored_gram_mode(attrs)
    if mode is not None and (not isinstance(mode, str) or mode not in set(GramMode)):
        raise bad("gram_mode", f"is {mode!r}, not one of {[m.value for m in GramMode]} or null (no K built)")
    return None if mode is None else GramMode(mode)
