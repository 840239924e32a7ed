"""``FitOptions``: every parameter of ``dkpca.fit`` / ``dkpca.plan`` and the CLI, its default and check written once.

Reference: ``inspect.signature(dkpca.fit)`` / ``dkpca.plan`` for the defaults, the messages
``dkpca.fit`` raises for the same bad values, the CLI parser's actions; every comparison is exact.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from dask.array import PerformanceWarning

import dkpca
from dkpca.cli.parser import FIT_OPTIONS
from dkpca.request import DEFAULT_MAX_PASSES, DEFAULTS, FitOptions, make_request

from .conftest import cli_subparsers

ROOT = Path(dkpca.__file__).parent


def test_fit_options_is_frozen_and_holds_the_apis_defaults():
    """A frozen dataclass whose field defaults are ``dkpca.fit``'s and ``DEFAULTS``' (one source)."""
    opts = FitOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.tol = 1.0  # type: ignore[misc]
    names = [f.name for f in dataclasses.fields(FitOptions)]
    signature = inspect.signature(dkpca.fit).parameters
    assert set(names) == set(signature) - {"source"}
    for f in dataclasses.fields(FitOptions):
        assert f.default == signature[f.name].default == DEFAULTS[f.name], f.name
    plan_signature = inspect.signature(dkpca.plan).parameters
    for name in set(plan_signature) & set(names):
        assert plan_signature[name].default == DEFAULTS[name], name


@pytest.mark.parametrize("kwargs, pattern", [
    (dict(tol=2.0), r"tol=2.0 is invalid"),
    (dict(max_passes=0), r"max_passes=0 is invalid"),
    (dict(chunk_size=-1), r"chunk_size=-1 is invalid"),
    (dict(solver="qr"), r"solver='qr' is invalid"),
    (dict(gram="disk"), r"gram='disk' is invalid"),
    (dict(solver="arpack", gram="store"), r"solver='arpack' needs K in memory"),
    (dict(dtype="int8"), r"dtype='int8' is invalid"),
    (dict(random_state=-1), r"random_state=-1 is invalid"),
    (dict(overwrite=1), r"overwrite=1 is invalid"),
    (dict(store=3), r"store=3 is invalid"),
])
def test_fit_options_validates_with_the_fits_messages(kwargs, pattern):
    """Building FitOptions raises the ValueError ``dkpca.fit`` raises for the same value, same message."""
    with pytest.raises(ValueError, match=pattern) as built:
        FitOptions(**kwargs)
    with pytest.raises(ValueError, match=pattern) as fitted:
        dkpca.fit(np.zeros((20, 2)), **kwargs)
    assert str(built.value) == str(fitted.value)


def test_replace_revalidates():
    """``dataclasses.replace`` (the way to override one option) checks the new value too."""
    opts = FitOptions(tol=1e-3)
    assert dataclasses.replace(opts, tol=1e-4).tol == 1e-4
    with pytest.raises(ValueError, match="tol=-1 is invalid"):
        dataclasses.replace(opts, tol=-1)


def test_make_request_takes_the_options_whole():
    """``make_request(source, options)``: the request carries the options' validated values."""
    opts = FitOptions(n_components=3, tol=1e-4, max_passes=7, chunk_size=16, solver="lanczos", gram="recompute")
    req = make_request(np.random.default_rng(0).normal(size=(40, 3)), opts, create_store=False)
    assert (req.n_components, req.tol, req.max_passes, req.tile, req.solver, req.gram) == \
           (3, 1e-4, 7, 16, "lanczos", "recompute")
    assert make_request(np.zeros((40, 3)) + np.arange(3), FitOptions(), create_store=False).max_passes == \
        DEFAULT_MAX_PASSES


def test_a_chunk_size_that_cuts_K_into_too_many_tiles_warns_before_work():
    """n = 2,000 at chunk_size=20: 5,050 tiles (> MANY_TILES), each a task and a file -- dask's PerformanceWarning
    with the count and the fix, from the request (which reads nothing); 70 (435 tiles) and the default: none."""
    X = np.zeros((2000, 3)) + np.arange(3)
    with pytest.warns(PerformanceWarning, match=r"chunk_size=20 cuts K into 5,050 tiles.*leave chunk_size unset"):
        make_request(X, FitOptions(chunk_size=20), create_store=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        make_request(X, FitOptions(chunk_size=70), create_store=False)
        make_request(X, FitOptions(), create_store=False)


def test_make_request_records_whether_max_passes_was_given():
    """A given budget is known as given (``auto`` then picks no solver that cannot keep it), the default not."""
    X = np.zeros((40, 3)) + np.arange(3)
    assert make_request(X, FitOptions(max_passes=DEFAULT_MAX_PASSES), create_store=False).max_passes_given
    assert not make_request(X, FitOptions(), create_store=False).max_passes_given


def test_cli_options_are_generated_from_the_fields():
    """Each CLI fit/plan option is a FitOptions field, its help the field's own metadata (nothing re-declared)."""
    fields = {f.name: f for f in dataclasses.fields(FitOptions)}
    assert {o.name for o in FIT_OPTIONS} <= set(fields)
    for option in FIT_OPTIONS:
        assert option.help == fields[option.name].metadata["help"], option.name
        assert option.flags == fields[option.name].metadata["flags"], option.name
    for command in ("fit", "plan"):
        actions = {a.dest: a for a in cli_subparsers()[command]._actions}
        for option in FIT_OPTIONS:
            assert actions[option.name].default == fields[option.name].default


def test_the_default_max_passes_is_written_once():
    """No literal 60 as a max_passes default in the modules that thread it (request, planning, pipeline)."""
    files = [*(ROOT / "request").glob("*.py"), *(ROOT / "planning").glob("*.py"), ROOT / "pipeline.py"]
    found = [(p.name, line) for p in files for line in p.read_text().splitlines()
             if re.search(r"(max_passes[^=\n]*=\s*60\b|max_passes or 60|\bmp = .*60\b)", line)]
    assert found == []
