"""The fit report as a typed value (:class:`FitReport`) and the one check of a report read back.

Made once by :func:`dkpca.report.fit_report` from the fit's plan and result; the model stores it as JSON
(:meth:`FitReport.to_dict`, the ``model.report`` users read) next to its schema version
(:data:`REPORT_SCHEMA`, the model attribute ``report_schema``).  :func:`read_report` is the one check of a
report read back: a stored report is JSON that may have been edited like any other.  Nothing reads a report
back to decide behaviour: what a load decides by is a typed model attribute of its own (``gram_mode``).

Its nested objects are typed too (:class:`GramReport`, :class:`Timings`, :class:`SolverInfo`,
:class:`PlanRecord`): a :class:`Record` holds the keys it declares as fields, checked, and keeps any other
key as it was read, in its place, so a report read back is written again byte for byte (``report_schema``
stays 2: the stored form did not change).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar, Self, get_args, get_origin, get_type_hints

from .grammode import NO_GRAM, GramMode
from .jsonsafe import json_safe

__all__ = ["NO_GRAM", "REPORT_SCHEMA", "FitReport", "GramReport", "PlanRecord", "Record", "SolverInfo",
           "StartRecord", "Timings", "read_gram_mode", "read_report", "stored_gram_mode"]

#: the version of the report's fields and JSON types; reports written before it have none (see read_report)
REPORT_SCHEMA = 2

_NUMBER = ((int, float), "a number")
_INT = ((int,), "an integer")
_TEXT = ((str,), "a string")
_OBJECT = ((dict,), "a JSON object")
_LIST = ((list,), "a JSON list")
_BOOL = ((bool,), "true or false")
#: a field's declared Python type (``X | None``) -> the JSON types a report holds for it, in words
_JSON_KINDS: Mapping[Any, tuple[tuple[type, ...], str]] = MappingProxyType(
    {str: _TEXT, int: _INT, float: _NUMBER, bool: _BOOL, dict: _OBJECT, list: _LIST})
#: the fields reports without a schema (dkpca before schema 2) were checked for, and are still
LEGACY_FIELDS = ("gram", "timings", "solver_info", "max_relative_residual")


def _json_kinds(cls: type, names: Any) -> dict[str, Any]:
    """Each of ``names``' JSON kind from its annotation on ``cls``: (JSON types, words), or a nested
    :class:`Record` class (null, the ``| None``, is accepted for every field)."""
    hints, kinds = get_type_hints(cls), {}
    for name in names:
        types = [t for t in get_args(hints[name]) if t is not type(None)]
        if types == [int, float]:
            kinds[name] = _NUMBER
        elif len(types) == 1 and isinstance(types[0], type) and issubclass(types[0], Record):
            kinds[name] = types[0]
        else:
            (kind,) = types
            kinds[name] = _JSON_KINDS[get_origin(kind) or kind]
    return kinds


@dataclass(frozen=True, kw_only=True)
class Record:
    """A JSON object of the report as a typed value: its declared keys as fields, any other key kept as read.

    ``keys``: the object's keys in their stored order (a declared key absent from it is absent, not null);
    ``extra``: the values of the keys a subclass does not declare (a solver's own figures).  A subclass
    declares its keys once, as fields; ``TYPES`` (key -> (JSON types, words) or a nested :class:`Record`
    class) is derived from their annotations.
    """

    keys: tuple[str, ...] = field(default=(), repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    TYPES: ClassVar[Mapping[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.TYPES = MappingProxyType(_json_kinds(cls, cls.__dict__.get("__annotations__", {})))

    def __post_init__(self) -> None:
        if not self.keys:  # made in code: the declared fields given (not None), then the extra keys
            keys = [k for k in self.TYPES if getattr(self, k) is not None]
            object.__setattr__(self, "keys", (*keys, *self.extra))
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))

    def __getstate__(self) -> dict[str, Any]:
        # a fitted estimator is pickled with its model's report; a mapping proxy cannot be pickled
        return {**self.__dict__, "extra": dict(self.extra)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, MappingProxyType(value) if key == "extra" else value)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], where: str) -> Self:
        """``obj`` (a JSON object at ``where`` in the report) as this record, every declared key's type checked.

        Raises
        ------
        ValueError
            A declared key of the wrong JSON type, named with its path (``gram.mode``).
        """
        values = {key: _read(obj[key], f"{where}.{key}", kind) for key, kind in cls.TYPES.items() if key in obj}
        return cls(keys=tuple(obj), extra={k: v for k, v in obj.items() if k not in cls.TYPES}, **values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, its keys in their order (nested records as objects)."""
        out = {}
        for key in self.keys:
            v = getattr(self, key) if key in self.TYPES else self.extra[key]
            out[key] = v.to_dict() if isinstance(v, Record) else v
        return out


@dataclass(frozen=True, kw_only=True)
class GramReport(Record):
    """``report["gram"]``: where K lived and how it was built (``mode`` :data:`NO_GRAM`: no K built).

    ``block`` is the Gram tile edge (the stored name of ``FitPlan.tile``).
    """

    mode: str | None = None
    dtype: str | None = None
    block: int | None = None
    compiled_exp: bool | None = None
    blocks: int | None = None
    reused_blocks: int | None = None
    computed_blocks: int | None = None
    build_seconds: float | None = None
    entries_per_second: float | None = None

    @property
    def tile(self) -> int | None:
        """The Gram tile edge."""
        return self.block


@dataclass(frozen=True, kw_only=True)
class Timings(Record):
    """``report["timings"]``: seconds per stage (a stage that did not run is absent)."""

    validate: float | None = None
    copy_data: float | None = None
    gram: float | None = None
    solve: float | None = None
    total: float | None = None


@dataclass(frozen=True, kw_only=True)
class SolverInfo(Record):
    """``report["solver_info"]``: the solver's own figures; those not declared here stay in ``extra``.

    ``block_size`` is the stored name of the subspace width (:attr:`width`).
    """

    block_size: int | None = None
    basis_size: int | None = None
    max_basis: int | None = None
    restarts: int | None = None
    shift: float | None = None
    lowest_ritz: float | None = None
    resumed_at_pass: int | None = None
    n_landmarks: int | None = None
    rank: int | None = None
    trace_error: float | None = None
    relative_trace_error: float | None = None
    zero_eigenvalues_removed: int | None = None
    fraction: dict[str, Any] | None = None

    @property
    def width(self) -> int | None:
        """The subspace width the iterative solver ended with."""
        return self.block_size


@dataclass(frozen=True, kw_only=True)
class StartRecord(Record):
    """``report["plan"]["start"]``: the start block's width, Nystroem landmarks (null: random), BLAS threads."""

    width: int | None = None
    landmarks: int | None = None
    serial_blas: bool | None = None


@dataclass(frozen=True, kw_only=True)
class PlanRecord(Record):
    """``report["plan"]``: the fit's decisions (:meth:`dkpca.planning.FitPlan.to_dict`).

    Stored names: ``block`` is the Gram tile edge (:attr:`tile`), ``subspace`` the subspace width (:attr:`width`).
    """

    solver: str | None = None
    gram: str | None = None
    block: int | None = None
    subspace: int | None = None
    dtype: str | None = None
    start: StartRecord | None = None
    compiled_exp: bool | None = None
    reasons: dict[str, str] | None = None

    @property
    def tile(self) -> int | None:
        """The Gram tile edge."""
        return self.block

    @property
    def width(self) -> int | None:
        """The subspace width."""
        return self.subspace


@dataclass(frozen=True)
class FitReport:
    """What a fit solved, how and how fast; every field as JSON types (``None``: not measured).

    ``gram``, ``solver_info``, ``timings`` and ``plan`` are typed records (:class:`GramReport`,
    :class:`SolverInfo`, :class:`Timings`, :class:`PlanRecord`); ``auto`` and ``precision`` are JSON
    objects (the planner's figures, :meth:`Precision.to_dict <dkpca.planning.precision.Precision.to_dict>`).
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
    solver_info: SolverInfo | None
    gram: GramReport | None
    timings: Timings | None
    n_samples: int | None
    n_features: int | None
    n_components_requested: int | float | None
    zero_components_dropped: int | None
    precision: dict[str, Any] | None
    plan: PlanRecord | None
    #: a fit that updated the store's fit of fewer rows (dkpca.growth.update_report); absent otherwise
    update: dict[str, Any] | None = None

    @property
    def gram_mode(self) -> GramMode | None:
        """Where the fit's K lived; None where it built none (Nystroem)."""
        mode = None if self.gram is None else self.gram.mode
        return None if mode in (None, NO_GRAM) else GramMode(mode)

    def to_dict(self) -> dict[str, Any]:
        """The report as stored and as ``model.report`` (JSON types; NaN kept, as zarr writes it)."""
        return json_safe({f.name: _plain(getattr(self, f.name)) for f in fields(self)
                          if f.name != "update" or self.update is not None})

    @classmethod
    def from_dict(cls, report: dict[str, Any]) -> FitReport:
        """A schema-2 report (a fit's JSON-safe fields, or one read back), every field's type checked.

        Raises
        ------
        ValueError
            A field of the wrong JSON type (named), or a Gram mode that is none.
        """
        for key, kind in FIELD_TYPES.items():  # every field first, then the Gram mode, then the nested objects
            _check_value(report.get(key), key, *_shape(kind))
        mode = (report.get("gram") or {}).get("mode")
        if mode is not None and mode != NO_GRAM and (not isinstance(mode, str) or mode not in set(GramMode)):
            raise ValueError(f"has gram mode {mode!r}, not one of {[*(m.value for m in GramMode), NO_GRAM]}")
        return cls(**{key: _read(report.get(key), key, kind) for key, kind in FIELD_TYPES.items()})


#: each field's JSON kind, as a schema-2 report holds it (null: not measured, accepted for every field)
FIELD_TYPES: Mapping[str, Any] = MappingProxyType(_json_kinds(FitReport, [f.name for f in fields(FitReport)]))


def _plain(value: Any) -> Any:
    return value.to_dict() if isinstance(value, Record) else value


def _shape(kind: Any) -> tuple[tuple[type, ...], str]:
    """The JSON types of a kind, in words (a nested record's: an object)."""
    return _OBJECT if isinstance(kind, type) else kind


def _read(v: Any, name: str, kind: Any) -> Any:
    """``v`` at ``name`` checked against its kind; a nested record's object read as that record."""
    _check_value(v, name, *_shape(kind))
    return kind.from_dict(v, name) if isinstance(kind, type) and v is not None else v


def _check_value(v: Any, name: str, kinds: tuple[type, ...], what: str) -> None:
    if v is not None and ((isinstance(v, bool) and bool not in kinds) or not isinstance(v, kinds)):
        raise ValueError(f"has {name} {v!r}, not {what}")


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
                _check_value(report.get(key), key, *_shape(FIELD_TYPES[key]))
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
