"""``dkpca.plan`` names what ``dkpca.fit`` then runs: solver, Gram mode, K's precision and block edge.

Reference: the fit itself.  Each case plans, then fits the same request and
compares the plan with what the fit ran -- the solver module whose ``solve``
was called, the operator's dtype and block, and ``model.report`` -- exactly
(these are decisions, not numbers: no tolerance).  The eigensolves are
replaced by a stub that records its call and returns a valid spectrum at no
cost (every stage before the solve -- the decision, the data copy, the Gram
build or in-memory K, the operator -- is real), and so are the plan's timings
for its estimate (block seconds, passes, the dense eigh's seconds: numbers it
prints, which decide nothing for K under 1 GiB), so 18 cases take seconds.
The precision's sample, which decides K's dtype, is real in plan and fit.
"""

from __future__ import annotations

import importlib
import re
import warnings

import numpy as np
import pytest

import dkpca
from dkpca import solvers
from dkpca.cli import main
from dkpca.solvers import EigResult

from .conftest import make_data, write_data

plan_module = importlib.import_module("dkpca.planning.plan")  # the module (dkpca.planning.plan is the function)
SOLVER_MODULES = ("dense", "arpack", "randomized", "lanczos", "nystrom")


@pytest.fixture
def ran(monkeypatch):
    """Each solver's ``solve`` replaced by a recorder: the calls (solver, operator dtype, operator block) land here."""
    calls: list[tuple[str, str, int | None]] = []

    def stub(name):
        def solve(op, k, **_):
            calls.append((name, np.dtype(op.dtype).name, getattr(op, "block", None)))
            k = min(int(k), op.n)
            # equal eigenvalues summing to the trace: any fraction is reached with the k asked for
            values = np.full(k, max(float(op.trace), 1.0) / k)
            return EigResult(values, np.eye(op.n, k), passes=1, residuals=np.zeros(k), converged=True,
                             solver=name)
        return solve

    for name in SOLVER_MODULES:
        module = __import__(f"dkpca.solvers.{name}", fromlist=["solve"])
        monkeypatch.setattr(module, "solve", stub(name))
    assert solvers.get_solver("dense") is not None
    # the plan's estimate, timed on this machine in a real plan: fixed figures here
    monkeypatch.setattr(plan_module, "measure_blocks", lambda X, kernel, block, *a: {
        "edge": block, "kernel_block": 1e-3, "write_block": 1e-3, "read_block": 1e-3, "product_block": 1e-3})
    monkeypatch.setattr(plan_module, "estimate_passes", lambda *a, **kw: (5, "stub"))
    monkeypatch.setattr(plan_module, "dense_solve_seconds", lambda n, k: 1.0)
    return calls


def _fitted(model) -> tuple[str, str, str, int]:
    g = model.report["gram"]
    return model.report["solver"], g["mode"], g["dtype"], g["block"]


CASES = [(where, n, k) for where in ("memory", "zarr") for n in (300, 1000, 3000)
         for k in (5, 0.9, n // 4 + 1)]


@pytest.mark.parametrize("where,n,k", CASES, ids=[f"{w}-n{n}-k{k}" for w, n, k in CASES])
def test_plan_names_what_fit_runs(tmp_path, ran, where, n, k):
    X = make_data(n, seed=n, d=6)
    source = X if where == "memory" else write_data(tmp_path / "x.zarr", X)
    store = None if where == "memory" else str(tmp_path / "s.zarr")
    p = dkpca.plan(source, n_components=k, store=store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dkpca.fit(source, n_components=k, store=store, random_state=0) as model:
            fitted = _fitted(model)
    planned = (p.solver, p.gram, p.dtype, p.block)
    assert planned == fitted, f"plan {planned} but fit ran {fitted}"
    assert [c[:2] for c in ran] == [(p.solver, p.dtype)], ran  # the solver the fit called, on K in that dtype


def test_cli_plan_names_what_fit_runs(tmp_path, ran, capsys):
    data = write_data(tmp_path / "x.zarr", make_data(1000, seed=3, d=6))
    store = str(tmp_path / "s.zarr")
    assert main(["plan", data, "-k", "0.9", "--store", store]) == 0
    text = capsys.readouterr().out
    solver = re.search(r"solver:\s+(\w+)", text).group(1)
    chunk = re.search(r"chunk shape:\s+(\d+) x \d+ (\w+)", text)
    gram = "store" if "stored in" in text else "memory" if "held in memory" in text else "recompute"
    assert main(["fit", data, "-k", "0.9", "--store", store, "--no-progress"]) == 0
    with dkpca.load(store) as model:
        assert (solver, gram, chunk.group(2), int(chunk.group(1))) == _fitted(model)


def test_plan_log_and_report_say_the_nystroem_solver_forms_no_K(caplog):
    """Nystroem evaluates n x m kernel slices only: the plan, its table, the fit's plan line and both of the
    report's Gram names say none -- not the recomputed K the Gram decision keeps internally."""
    X = make_data(1000, seed=4, d=6)
    p = dkpca.plan(X, n_components=5, solver="nystrom")
    with caplog.at_level("INFO", logger="dkpca"), dkpca.fit(X, n_components=5, solver="nystrom",
                                                             random_state=0) as model:
        fitted, recorded = _fitted(model), model.report["plan"]["gram"]
    assert (p.solver, p.gram, p.dtype, p.block) == fitted and p.gram == recorded == "none"
    text = str(p)
    assert "Gram matrix:   not formed" in text and "chunk shape" not in text and "gram=none:" in text
    assert "K not formed" in caplog.text and "recomputed" not in caplog.text
