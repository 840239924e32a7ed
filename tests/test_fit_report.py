"""Issue 42: the typed fit report (``FitReport``), its schema, the facts a load decides by, one JSON sanitiser.

References: a fresh store written by this dkpca; an "old" store is that store with its attributes edited to
the previous format's shape (no ``report_schema``, no ``gram_mode``: the report dict alone), as every store
written before this change holds it.
"""

from __future__ import annotations

import json
import math
import shutil
from enum import Enum, StrEnum

import numpy as np
import pytest
import zarr

import dkpca
from dkpca.cli import main
from dkpca.grammode import GramMode
from dkpca.storage import DamagedModelError, FitStore

from .conftest import make_data

GAMMA = 0.3


@pytest.fixture(scope="module")
def fitted_store(tmp_path_factory):
    """One dense fit of 200 x 4 points with K stored (2 x 2 blocks), copied by each test."""
    path = tmp_path_factory.mktemp("report") / "s.dkpca.zarr"
    dkpca.fit(make_data(200, d=4), n_components=3, gamma=GAMMA, store=path, chunk_size=100, dtype="float64",
              solver="dense", gram="store")
    return path


@pytest.fixture
def store(fitted_store, tmp_path):
    path = tmp_path / "s.dkpca.zarr"
    shutil.copytree(fitted_store, path)
    return path


def model_attrs(store) -> zarr.Group:
    """The model group, open for editing its attributes."""
    return zarr.open_group(str(store), path=FitStore.at(store).model_group(), mode="r+")


def make_old(store) -> None:
    """The store as the previous format wrote it: the report dict alone, no schema, no typed Gram mode."""
    g = model_attrs(store)
    for key in ("report_schema", "gram_mode"):
        if key in g.attrs:
            del g.attrs[key]


# -- one JSON sanitiser ----------------------------------------------------------------------------------

class Colour(StrEnum):
    RED = "red"


class Size(Enum):
    BIG = 3


def test_one_sanitiser_serves_storage_cli_and_plan():
    import importlib

    from dkpca import jsonsafe, storage
    from dkpca.cli import commands

    planmod = importlib.import_module("dkpca.planning.plantable")  # the printable plan's module

    assert storage.json_safe is jsonsafe.json_safe
    assert planmod.json_safe is jsonsafe.json_safe
    assert commands.json_safe is jsonsafe.json_safe
    assert not hasattr(commands, "_json_safe")


def test_the_sanitiser_converts_numpy_tuples_enums_and_nested_dicts():
    # reference: the JSON type each input means (direct statement of the rule)
    from dkpca.jsonsafe import json_safe

    out = json_safe({1: (np.int64(2), np.float32(0.5)), "a": np.arange(3), "b": {"c": np.bool_(True)},
                     "e": Colour.RED, "f": Size.BIG, "g": [GramMode.STORE, None, "s"], "h": np.array(2.5)})
    assert out == {"1": [2, 0.5], "a": [0, 1, 2], "b": {"c": True}, "e": "red", "f": 3,
                   "g": ["store", None, "s"], "h": 2.5}
    assert type(out["1"][0]) is int and type(out["1"][1]) is float and type(out["b"]["c"]) is bool
    assert type(out["e"]) is str and type(out["g"][0]) is str  # a plain str, not the enum
    json.dumps(out, allow_nan=False)


def test_the_sanitiser_keeps_or_nulls_non_finite_numbers():
    # the store keeps NaN (zarr writes it; the report round-trips); strict JSON (dkpca info --json) has none
    from dkpca.jsonsafe import json_safe

    value = {"x": float("nan"), "y": [np.float64("inf"), -math.inf], "z": np.array([np.nan, 1.0])}
    kept = json_safe(value)
    assert math.isnan(kept["x"]) and kept["y"] == [math.inf, -math.inf] and math.isnan(kept["z"][0])
    assert json_safe(value, nonfinite_null=True) == {"x": None, "y": [None, None], "z": [None, 1.0]}


def test_the_sanitiser_refuses_what_json_cannot_hold():
    from dkpca.jsonsafe import json_safe

    with pytest.raises(TypeError, match="object"):
        json_safe({"a": object()})


# -- the typed report ------------------------------------------------------------------------------------

def test_a_fit_assembles_a_typed_report_and_saves_its_schema_and_gram_mode(store):
    from dkpca.fitreport import REPORT_SCHEMA, FitReport

    model = dkpca.load(store)
    assert isinstance(model.fit_report, FitReport) and model.gram_mode is GramMode.STORE
    assert model.report == model.fit_report.to_dict()
    assert model.report["gram"]["mode"] == "store" and model.report["solver"] == "dense"
    attrs = model_attrs(store).attrs
    assert attrs["report_schema"] == REPORT_SCHEMA == 2 and attrs["gram_mode"] == "store"
    assert "schema" not in model.report  # the dict view users read is as before


def test_info_json_of_a_fresh_store_is_unchanged(store, capsys):
    # reference: the keys (and report keys) dkpca info --json printed before this change
    assert main(["info", "--json", str(store)]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert list(facts) == ["dkpca_version", "store", "n_samples", "n_features", "n_components", "kernel",
                           "eigenvalues", "explained_variance_ratio", "cumulative_explained_variance_ratio",
                           "trace", "report"]
    assert list(facts["report"]) == [
        "solver", "solver_reason", "passes", "passes_over_K", "fused_passes", "auto", "converged", "tol",
        "residuals", "max_relative_residual", "history", "pass_seconds", "solver_info", "gram", "timings",
        "n_samples", "n_features", "n_components_requested", "zero_components_dropped", "precision", "plan"]


@pytest.mark.parametrize("key, value", [("passes", "x"), ("converged", "no"), ("residuals", "x"),
                                        ("precision", 3), ("solver", 7), ("gram", {"mode": 5})])
def test_a_schema_2_report_with_a_field_of_the_wrong_type_is_refused(store, key, value):
    g = model_attrs(store)
    g.attrs["report"] = {**g.attrs["report"], key: value}
    with pytest.raises(DamagedModelError, match=f"report.*{key}"):
        dkpca.load(store)


def test_a_report_schema_this_dkpca_does_not_know_is_refused(store):
    model_attrs(store).attrs["report_schema"] = 99
    with pytest.raises(DamagedModelError, match="report_schema.*99.*newer dkpca"):
        dkpca.load(store)


def test_a_gram_mode_that_is_no_mode_is_refused(store):
    model_attrs(store).attrs["gram_mode"] = "tape"
    with pytest.raises(DamagedModelError, match="gram_mode.*tape"):
        dkpca.load(store)


# -- what a load decides by --------------------------------------------------------------------------------

def test_the_kernel_check_follows_the_typed_gram_mode_not_the_report(store):
    # an edited report claiming K was never stored must not switch off the check of the kernel K was built with
    g = model_attrs(store)
    report = g.attrs["report"]
    g.attrs["report"] = {**report, "gram": {**report["gram"], "mode": "recompute"}}
    g.attrs["kernel"] = {"name": "rbf", "gamma": 0.9}
    with pytest.raises(DamagedModelError, match="Gram matrix was built with"):
        dkpca.load(store)


def test_an_old_store_loads_and_info_reads_it(store, capsys):
    make_old(store)
    model = dkpca.load(store)
    assert model.fit_report is None and model.gram_mode is GramMode.STORE  # from the old report's gram mode
    assert model.report["solver"] == "dense"
    assert main(["info", "--json", str(store)]) == 0
    assert json.loads(capsys.readouterr().out)["report"]["gram"]["mode"] == "store"
    assert main(["info", str(store)]) == 0
    assert "solver: dense" in capsys.readouterr().out


def test_an_old_store_still_checks_its_kernel_by_the_report(store):
    make_old(store)
    model_attrs(store).attrs["kernel"] = {"name": "rbf", "gamma": 0.9}
    with pytest.raises(DamagedModelError, match="Gram matrix was built with"):
        dkpca.load(store)


def old_report_with(store, **fields):
    """The store made old (its previous format), its report's ``fields`` replaced; the model group."""
    make_old(store)
    g = model_attrs(store)
    g.attrs["report"] = {**g.attrs["report"], **fields}
    return g


def test_an_old_report_is_checked_as_before(store):
    # the previous format's checks: gram, timings, solver_info objects, the residual a number; nothing else
    g = old_report_with(store, passes="x")
    assert dkpca.load(store).report["passes"] == "x"
    g.attrs["report"] = {**g.attrs["report"], "timings": "x"}
    with pytest.raises(DamagedModelError, match="report.*timings"):
        dkpca.load(store)


def test_a_model_resaved_from_an_old_store_stays_old(store):
    # its report was never checked as schema 2: saving it again must not claim it is
    old_report_with(store, passes="x")
    dkpca.load(store).save()
    attrs = model_attrs(store).attrs
    assert "report_schema" not in attrs and attrs["gram_mode"] == "store"
    assert dkpca.load(store).report["passes"] == "x"


def test_a_fit_that_built_no_k_records_no_gram_mode_and_loads(tmp_path):
    # Nystroem evaluates n x m slices only: its report says gram mode "none", the model None, no kernel check
    path = tmp_path / "n.dkpca.zarr"
    model = dkpca.fit(make_data(300, d=4), n_components=3, gamma=GAMMA, store=path, chunk_size=100,
                      solver="nystrom", random_state=0)
    assert model.gram_mode is None and model.report["gram"]["mode"] == "none"
    loaded = dkpca.load(path)
    assert loaded.gram_mode is None and model_attrs(path).attrs["gram_mode"] is None
    np.testing.assert_array_equal(loaded.eigenvalues_, model.eigenvalues_)


# -- the report's nested objects, typed ---------------------------------------------------------------------

def _stored_report(store) -> str:
    """The model's stored report and schema as the JSON text zarr writes (a save makes a new model group)."""
    attrs = model_attrs(store).attrs
    return json.dumps({"report": attrs["report"], "report_schema": attrs["report_schema"]}, indent=2)


def test_the_nested_report_objects_are_typed_and_round_trip(store):
    # reference: the report dict stored by the fit (its JSON text, keys in their order)
    from dkpca.fitreport import FitReport, GramReport, PlanRecord, SolverInfo, Timings

    stored = model_attrs(store).attrs["report"]
    report = dkpca.load(store).fit_report
    assert isinstance(report.gram, GramReport) and report.gram.mode == "store" and report.gram.tile == 100
    assert isinstance(report.timings, Timings) and report.timings.total >= report.timings.solve > 0
    assert isinstance(report.solver_info, SolverInfo)
    assert isinstance(report.plan, PlanRecord) and report.plan.solver == "dense" and report.plan.tile == 100
    assert report.plan.width == 3 and report.plan.start is None
    assert json.dumps(report.to_dict()) == json.dumps(stored)  # same keys, order and values
    assert FitReport.from_dict(report.to_dict()) == report


def test_keys_the_report_does_not_declare_are_kept_in_place_and_a_resave_writes_the_same_report(store):
    g = model_attrs(store)
    report = g.attrs["report"]
    g.attrs["report"] = {**report, "gram": {"future": [1, 2], **report["gram"]}, "timings": {**report["timings"],
                                                                                               "later": 0.5}}
    before = _stored_report(store)
    model = dkpca.load(store)
    assert model.fit_report.gram.extra == {"future": [1, 2]} and model.fit_report.timings.extra == {"later": 0.5}
    model.save()
    assert _stored_report(store) == before


@pytest.mark.parametrize("key, value, name", [("gram", {"mode": "store", "block": "x"}, "gram.block"),
                                              ("timings", {"solve": "x"}, "timings.solve"),
                                              ("plan", {"start": 3}, "plan.start"),
                                              ("plan", {"start": {"width": 1.5}}, "plan.start.width")])
def test_a_nested_field_of_the_wrong_type_is_refused_by_its_path(store, key, value, name):
    g = model_attrs(store)
    g.attrs["report"] = {**g.attrs["report"], key: value}
    with pytest.raises(DamagedModelError, match=f"report.*{name}"):
        dkpca.load(store)
