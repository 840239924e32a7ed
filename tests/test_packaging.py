"""Packaging: the licence, PEP 561's py.typed, and build artefacts kept out of git.

What a wheel holds is checked by running setuptools' own ``build_py`` and
``egg_info`` on a copy of the package sources (the steps ``pip wheel`` runs
first, offline and in seconds); building a real wheel needs the ``wheel``
command of a newer setuptools than a fresh venv brings.
"""

import importlib.resources
import os
import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT

#: what setuptools, pip and the tests write into the checkout
ARTEFACTS = ("dkpca.egg-info", "build", "dist", "dask-logs", "dkpca/__pycache__", ".pytest_cache")


def git(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("git") is None or not os.path.exists(os.path.join(ROOT, ".git")):  # a file in a worktree
        pytest.skip("not a git checkout")
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=60)


def test_license_is_bsd_3_clause_as_pyproject_says():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["project"]["license"] == {"text": "BSD-3-Clause"}
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("BSD 3-Clause License") and "dkpca developers" in text
    assert "Neither the name of the copyright holder" in text  # the third clause


def test_py_typed_is_in_the_package():
    assert importlib.resources.files("dkpca").joinpath("py.typed").is_file()


def test_build_ships_py_typed_and_license(tmp_path):
    """setuptools copies py.typed into the built package and records LICENSE in the metadata; no tests ship."""
    src = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "dkpca"), src / "dkpca", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    (tmp_path / "egg").mkdir()
    proc = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
                           "--build-lib", str(tmp_path / "lib"), "egg_info", "--egg-base", str(tmp_path / "egg")],
                          cwd=src, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "lib" / "dkpca" / "py.typed").is_file()
    assert (tmp_path / "lib" / "dkpca" / "cli" / "__init__.py").is_file() and not (tmp_path / "lib" / "tests").exists()
    info = (tmp_path / "egg" / "dkpca.egg-info" / "PKG-INFO").read_text()
    assert "License-File: LICENSE" in info.splitlines()


def test_build_artefacts_are_not_tracked():
    tracked = git("ls-files").stdout.splitlines()
    assert tracked, "git ls-files lists the repository"
    assert [p for p in tracked if p.split("/")[0] in ARTEFACTS or "__pycache__" in p.split("/")] == []


@pytest.mark.parametrize("path", ARTEFACTS)
def test_build_artefacts_are_ignored(path):
    # a file inside: git matches a directory pattern ("build/") only to a path it knows is a directory
    assert git("check-ignore", "--no-index", "-q", f"{path}/file").returncode == 0, f"{path}/ is not in .gitignore"
