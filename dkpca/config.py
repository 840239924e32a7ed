"""dkpca's Dask settings: the defaults of ``dkpca.yaml``, registered with Dask on import.

dkpca is configured as Dask is (the convention of distributed and
dask-jobqueue): its settings live under ``dkpca.`` in Dask's configuration,
their defaults in ``dkpca/dkpca.yaml`` beside this module, described by the
JSON schema ``dkpca/dkpca-schema.yaml``.  Importing this module gives the
defaults to :func:`dask.config.update_defaults` -- below whatever the user's
files (``~/.config/dask/*.yaml``), ``DASK_DKPCA__*`` environment variables or
``dask.config.set`` say, and without writing any file -- so
``dask.config.get("dkpca.lease")`` and ``dask config get dkpca`` answer with
the default, and each module that reads a setting reads it without a
fallback of its own: one place for each default, the YAML file.

The modules that read a setting import this one (``import dkpca`` does not:
``dkpca --help`` loads no Dask).
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import dask.config
import yaml
from dask.utils import parse_timedelta

__all__ = ["DEFAULTS_FILE", "SCHEMA_FILE", "defaults", "schema", "setting", "switch_setting", "seconds_setting",
           "to_seconds", "check_settings", "sections", "unknown_settings"]

DEFAULTS_FILE = os.path.join(os.path.dirname(__file__), "dkpca.yaml")
SCHEMA_FILE = os.path.join(os.path.dirname(__file__), "dkpca-schema.yaml")


def _read(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def defaults() -> dict[str, Any]:
    """dkpca's default settings as ``dkpca.yaml`` holds them (a fresh copy: ``{"dkpca": {...}}``)."""
    return _read(DEFAULTS_FILE)


def schema() -> dict[str, Any]:
    """The JSON schema of dkpca's settings (``dkpca-schema.yaml``)."""
    return _read(SCHEMA_FILE)


def setting(key: str) -> Any:
    """The value in force of dkpca's Dask setting ``key`` (``"dkpca.lease"``): the user's, else ``dkpca.yaml``'s.

    Reading through this function, rather than ``dask.config.get`` directly,
    is what imports this module, and so registers the defaults, first.
    """
    return dask.config.get(key)


def _where(key: str) -> str:
    """A setting as a user sets it: its key and its environment variable."""
    return f"dask config {key!r} (environment: DASK_{key.upper().replace('.', '__').replace('-', '_')})"


def switch_setting(key: str) -> bool | None:
    """A tri-state switch: True, False, or None for ``auto``.

    Accepts booleans and the strings ``true`` / ``false`` / ``auto`` (any
    case), as a YAML file or a ``DASK_DKPCA__...`` environment variable gives
    them; anything else is refused, naming the key, rather than read as ``auto``.
    """
    value = setting(key)
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in ("true", "false", "auto"):
        return None if word == "auto" else word == "true"
    raise ValueError(f"{_where(key)} is {value!r}; it must be true, false or auto.")


def to_seconds(value: Any, where: str, *, zero: bool = False, units: bool = False) -> float:
    """``value`` in seconds: a number (``units``: or a duration in one of dask's units, ``"30s"``, ``"10m"``),
    above zero (``zero``: or zero).  ``ValueError`` naming ``where`` otherwise."""
    try:
        seconds = math.nan if isinstance(value, bool) else float(
            parse_timedelta(value) if units and isinstance(value, str) else value)
    except (TypeError, ValueError, KeyError, OverflowError):  # dask's parser: KeyError for an unknown unit
        seconds = math.nan
    if not (math.isfinite(seconds) and (seconds > 0 or (zero and seconds == 0))):
        what = ("a duration such as '600s', '10m' or '1h' (one unit, above zero; a bare number is seconds)" if units
                else f"a number of seconds {'>= 0' if zero else 'above 0'}")
        raise ValueError(f"{where} must be {what}; got {value!r}.")
    return seconds


def seconds_setting(key: str, *, zero: bool = False, units: bool = False) -> float:
    """A setting in seconds (:func:`to_seconds`), refused naming its key and environment variable."""
    return to_seconds(setting(key), _where(key), zero=zero, units=units)


def sections(config: dict | None = None) -> list[tuple[str, Any, dict]]:
    """``(name, value, dkpca's keys there)`` of the sections ``dkpca`` and ``dkpca.cluster`` of ``config`` (default:
    the configuration in force); a value None where unset -- ``dkpca.cluster``'s too where ``dkpca`` is no mapping."""
    known = defaults()["dkpca"]
    top = dask.config.get("dkpca", None, config=config)
    cluster = top.get("cluster") if isinstance(top, dict) else None
    return [("dkpca", top, known), ("dkpca.cluster", cluster, known["cluster"])]


def unknown_settings(config: dict | None = None) -> list[str]:
    """The keys under ``dkpca`` and ``dkpca.cluster`` of ``config`` (default: the configuration in force) that
    are no dkpca setting -- a typo (``leese``, ``cluster.timout``), which would otherwise be ignored."""
    return [f"{prefix}.{key}" for prefix, given, names in sections(config) if isinstance(given, dict)
            for key in sorted(map(str, given)) if key.replace("_", "-") not in names]


#: the unknown keys warned of in this process (:func:`check_settings`)
_WARNED: set[str] = set()


def check_settings() -> None:
    """Read each of dkpca's settings once through its reader: a bad value (a YAML file's, a ``DASK_DKPCA__``
    variable's) is refused naming it before any work, not when the fit first reads it -- part-way through, or
    in a watchdog thread whose failure would leave it quietly off.  A key that is no setting (a typo) is
    warned of by name (a user's Dask configuration may serve other versions of dkpca: not refused)."""
    for key in set(unknown_settings()) - _WARNED:  # once a process, however many times a fit checks them
        _WARNED.add(key)
        warnings.warn(f"{_where(key)} is not a dkpca setting and has no effect (dkpca's: `dask config get "
                      "dkpca`); correct its spelling or remove it.", UserWarning)
    seconds_setting("dkpca.lease")
    seconds_setting("dkpca.checkpoint-interval", zero=True)
    for key in ("dkpca.direct-io", "dkpca.compiled-exp"):
        switch_setting(key)
    for key in ("dkpca.cluster.timeout", "dkpca.cluster.stall-timeout"):
        seconds_setting(key, units=True)


dask.config.update_defaults(defaults())
