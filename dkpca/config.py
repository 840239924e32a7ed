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

import os
from typing import Any

import dask.config
import yaml

__all__ = ["DEFAULTS_FILE", "SCHEMA_FILE", "defaults", "schema", "setting"]

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


dask.config.update_defaults(defaults())
