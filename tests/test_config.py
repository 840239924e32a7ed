"""dkpca's Dask settings are Dask defaults: ``dkpca/dkpca.yaml``, registered on import, checked by its schema.

References: the YAML file itself (what ``dask config get dkpca`` and ``dask.config.get`` must answer), the
JSON schema ``dkpca/dkpca-schema.yaml`` (jsonschema's validator), and the source tree (every
``dkpca.*`` key the code reads must have its default there).  Exact comparisons throughout.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import dask
import pytest
import yaml

from dkpca import config
from dkpca.storage.lock import lease_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _dask_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dask", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_dask_config_get_dkpca_shows_the_section():
    """``dask config get dkpca`` (the dask command, in a fresh process) prints dkpca.yaml's defaults."""
    with open(config.DEFAULTS_FILE) as f:
        expected = yaml.safe_load(f)["dkpca"]
    done = _dask_cli("config", "get", "dkpca")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout) == expected


def test_the_defaults_are_registered_with_dask():
    assert dask.config.get("dkpca") == config.defaults()["dkpca"]
    assert dask.config.get("dkpca.cluster.stall-timeout") == "30s"


def test_a_users_value_overrides_the_default(tmp_path):
    """A user's Dask file, environment variable or ``dask.config.set`` wins over dkpca.yaml."""
    (tmp_path / "mine.yaml").write_text("dkpca:\n  lease: 7\n  cluster:\n    timeout: 1h\n")
    done = _dask_cli("config", "get", "dkpca", env={"DASK_CONFIG": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    shown = yaml.safe_load(done.stdout)
    assert (shown["lease"], shown["cluster"]["timeout"]) == (7, "1h")
    assert shown["cluster"]["stall-timeout"] == "30s"  # the keys the user left alone keep their defaults
    probe = "from dkpca.execution.scheduler import config_switch; print(config_switch('dkpca.direct-io'))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DASK_DKPCA__DIRECT_IO": "false"})
    assert done.stdout.strip() == "False", done.stderr
    with dask.config.set({"dkpca.lease": 12.5}):
        assert lease_seconds() == 12.5
    assert lease_seconds() == 300.0


def test_the_defaults_follow_the_schema():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in dkpca's [test] extra")
    schema = config.schema()
    jsonschema.validate(config.defaults(), schema)
    # the schema is not vacuous: a wrong type or an unknown key is refused
    for bad in ({"dkpca": {"lease": -1}}, {"dkpca": {"direct-io": "sometimes"}},
                {"dkpca": {"cluster": {"workers": 0}}}, {"dkpca": {"leese": 300}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_every_setting_the_code_reads_has_its_default_in_the_yaml_and_no_other():
    """One place for each default: the keys the code names (``"dkpca.lease"``, ``spec.dkpca("timeout")``) are in
    dkpca.yaml, and no ``dask.config.get("dkpca...", fallback)`` is left in the package."""
    read, fallbacks = set(), []
    for path in glob.glob(os.path.join(ROOT, "dkpca", "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        read |= set(re.findall(r"\"(dkpca\.[\w.-]+\w)\"", source)) - {"dkpca.yaml"}  # the file's name
        read |= {f"dkpca.cluster.{k}" for k in re.findall(r"\.dkpca\(\"([\w-]+)\"", source)}
        # (a read of one file's own mapping, ``config=cfg``, is not a fallback: the defaults are not in it)
        fallbacks += [call for call in re.findall(r"dask\.config\.get\(\s*\"dkpca\.[^)]*,[^)]*\)", source)
                      if "config=" not in call]
    read = {name for name in read if importlib.util.find_spec(name) is None}  # a module's name is no setting
    defined = set(_flat(config.defaults()))
    assert {"dkpca.lease", "dkpca.checkpoint-interval", "dkpca.direct-io", "dkpca.compiled-exp",
            "dkpca.cluster.timeout", "dkpca.cluster.stall-timeout", "dkpca.cluster.workers"} <= read
    assert sorted(read - defined) == []
    assert fallbacks == []


def test_the_yaml_files_ship_in_the_built_package(tmp_path):
    """setuptools copies dkpca.yaml and its schema into the build (package-data), where dkpca.config reads them."""
    src = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "dkpca"), src / "dkpca", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    proc = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
                           "--build-lib", str(tmp_path / "lib"), "egg_info", "--egg-base", str(tmp_path)],
                          cwd=src, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in ("dkpca.yaml", "dkpca-schema.yaml"):
        assert (tmp_path / "lib" / "dkpca" / name).read_bytes() == (src / "dkpca" / name).read_bytes()
