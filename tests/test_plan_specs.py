"""Issue 42: every registered solver declares its capabilities (``SolverSpec``), and the declarations are true.

Each test checks one declared capability of every solver against what the
solver does; the reference for the numbers is ``scipy.linalg.eigh`` of the
dense centred kernel (``conftest.reference_eigh``).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from scipy.sparse.linalg import ArpackNoConvergence

import dkpca
from dkpca.eigensolve import solve
from dkpca.kernels import make_kernel
from dkpca.operator import InMemoryKernelOperator
from dkpca.request import FitOptions
from dkpca.solvers import SOLVER_SPECS, Solver, SolverSpec, get_solver
from dkpca.storage import FitStore, SolverCheckpoint

from .conftest import PrecisionSpy, make_data, reference_eigh, write_data

N, K_COMP = 200, 3


@pytest.fixture(scope="module")
def problem():
    X = make_data(N, seed=3)
    kernel = make_kernel("rbf", gamma=0.2)
    K = kernel.block(X, None, np.float64)
    return X, kernel, K, InMemoryKernelOperator(K)


def _run(name: Solver, problem, **kw):
    X, kernel, _, op = problem
    extra = {"X": X, "kernel": kernel} if name is Solver.NYSTROM else {}
    return get_solver(name)(op, K_COMP, rng=0, **extra, **kw)


def test_every_solver_is_registered_with_a_spec_that_the_plan_exposes():
    """One spec per Solver, and the plan of a fit carries the spec of the solver it names."""
    assert set(SOLVER_SPECS) == set(Solver)
    assert all(isinstance(s, SolverSpec) and s.name is name and name.spec is s for name, s in SOLVER_SPECS.items())
    X = make_data(300)
    for name in Solver:
        p = dkpca.plan(X, n_components=3, solver=name.value, measure=False)
        assert p.decision.solver is name and p.decision.spec is SOLVER_SPECS[name]


@pytest.mark.parametrize("name", list(Solver))
def test_a_solver_takes_a_start_block_exactly_when_it_declares_so(problem, name):
    """Declared: it accepts ``start=`` and starts there (the exact eigenvectors: converged after one pass);
    not declared: ``start=`` is refused (TypeError)."""
    _, _, K, _ = problem
    spec = name.spec
    assert ("start" in inspect.signature(get_solver(name)).parameters) == spec.takes_start
    if not spec.takes_start:
        with pytest.raises(TypeError):
            _run(name, problem, start=np.eye(N)[:, :K_COMP + 10])
        return
    lam, U = reference_eigh(K, N - 1)
    width = dkpca.solvers.subspace_width(name, N, K_COMP)
    start = U[:, :width]  # orthonormal, spanning the wanted eigenvectors exactly
    res = _run(name, problem, start=start, tol=1e-8, max_passes=30)
    assert res.converged and res.passes == 1
    np.testing.assert_allclose(np.sort(res.eigenvalues)[::-1], lam[:K_COMP], rtol=1e-8)


@pytest.mark.parametrize("name", list(Solver))
def test_a_solver_checkpoints_exactly_when_it_declares_so(problem, name, tmp_path):
    """Declared: a state is saved after a pass (and loads); not declared: ``checkpoint=`` is refused."""
    spec = name.spec
    assert ("checkpoint" in inspect.signature(get_solver(name)).parameters) == spec.checkpoints
    path = str(tmp_path / "s.zarr")
    FitStore.at(path).open_for_write()
    ck = SolverCheckpoint(path, {"k": K_COMP}, interval=0)
    if not spec.checkpoints:
        with pytest.raises(TypeError):
            _run(name, problem, checkpoint=ck)
        return
    res = _run(name, problem, checkpoint=ck, tol=1e-14, max_passes=2)
    assert ck.load() is not None and ck.load().passes == res.passes == 2


@pytest.mark.parametrize("name", list(Solver))
def test_a_solver_returns_ritz_pairs_with_exact_products_exactly_when_it_declares_so(problem, name):
    """Declared: ``ritz=p`` gives ``(theta, U, K~ U)`` with U orthonormal and ``K~ U`` equal to the dense product
    to 1e-12 theta_1 (rounding: the products are the Krylov relation's, made in float64, not a second pass);
    not declared: ``ritz=`` is refused (TypeError)."""
    _, _, K, op = problem
    assert ("ritz" in inspect.signature(get_solver(name)).parameters) == name.spec.ritz
    if not name.spec.ritz:
        with pytest.raises(TypeError):
            _run(name, problem, ritz=5)
        return
    res = _run(name, problem, ritz=2 * K_COMP, tol=1e-10, max_passes=60)
    theta, U, KtU = res.info["ritz"]
    assert U.shape == KtU.shape == (N, 2 * K_COMP) and theta.shape == (2 * K_COMP,)
    np.testing.assert_allclose(U.T @ U, np.eye(2 * K_COMP), rtol=0, atol=1e-12)
    Kt = op.centering.center_matrix(K.copy())
    np.testing.assert_allclose(KtU, Kt @ U, rtol=0, atol=1e-12 * theta[0])
    np.testing.assert_allclose(theta, np.diag(U.T @ Kt @ U), rtol=0, atol=1e-12 * theta[0])


@pytest.mark.parametrize("name", list(Solver))
def test_an_iterative_solver_may_stop_short_and_the_others_never_do(name):
    """Declared iterative: one pass (one ARPACK iteration) to an unreachable tol on a flat spectrum (rbf,
    gamma=5: K near I) stops short -- ``converged=False``, or ARPACK's ArpackNoConvergence as in
    scikit-learn; a direct solver is always converged."""
    X = make_data(N, seed=3)
    kernel = make_kernel("rbf", gamma=5.0)
    flat = (X, kernel, None, InMemoryKernelOperator(kernel.block(X, None, np.float64)))
    kw = {"maxiter": 1} if name is Solver.ARPACK else {}
    try:
        converged = _run(name, flat, tol=1e-15, max_passes=1, **kw).converged
    except ArpackNoConvergence:
        converged = False
    assert converged is (not name.spec.iterative)


@pytest.mark.parametrize("name", list(Solver))
def test_a_solver_keeps_a_pass_budget_exactly_when_it_declares_so(name):
    """Declared: at most ``max_passes`` products with K (2 here, on a flat spectrum that needs many) and the fit's
    options take the budget; not declared (ARPACK): more products than the budget, and the options refuse it."""
    X = make_data(N, seed=3)
    kernel = make_kernel("rbf", gamma=5.0)
    flat = (X, kernel, None, InMemoryKernelOperator(kernel.block(X, None, np.float64)))
    passes = _run(name, flat, tol=1e-15, max_passes=2).passes
    assert (passes <= 2) is name.spec.pass_budget, passes
    if name.spec.pass_budget:
        assert FitOptions(solver=name.value, max_passes=2).max_passes == 2
    else:
        with pytest.raises(ValueError, match="max_passes=2 does not bound"):
            FitOptions(solver=name.value, max_passes=2)


@pytest.mark.parametrize("name", [s for s in Solver if s.spec.takes_start])
def test_a_solver_multiplies_late_passes_in_float32_exactly_when_it_declares_so(problem, name, monkeypatch):
    """Declared: given a float32 rbf K (whose operator bounds a float32 product's error), some passes after a
    float64 one are single, never the first, and ``relaxed=False`` makes none; not declared: ``relaxed=``
    is refused (TypeError).  Every Ritz step is made (``cheap_ritz``: a timing), so the residuals that decide
    are known."""
    X, kernel, K, _ = problem
    op = PrecisionSpy(InMemoryKernelOperator(K.astype(np.float32), kernel))
    assert ("relaxed" in inspect.signature(get_solver(name)).parameters) == name.spec.float32_late_passes
    if not name.spec.float32_late_passes:
        with pytest.raises(TypeError):
            get_solver(name)(op, K_COMP, rng=0, relaxed=True)
        return
    monkeypatch.setattr(dkpca.solvers.lanczos, "cheap_ritz", lambda *a: True)
    res = get_solver(name)(op, K_COMP, rng=0, tol=1e-12, max_passes=60)
    assert res.converged and not op.asked[0] and any(op.asked) and res.info["single_passes"] == sum(op.asked)
    op.asked.clear()
    get_solver(name)(op, K_COMP, rng=0, tol=1e-12, max_passes=60, relaxed=False)
    assert op.asked and not any(op.asked)


@pytest.mark.parametrize("name", list(Solver))
def test_an_exact_solver_reaches_eigh_and_an_approximate_one_does_not(problem, name):
    """Exact: eigenvalues of K~ to 1e-6 relative (scipy eigh of the dense centred kernel); approximate
    (Nystroem on 10 landmarks): further off than that."""
    _, _, K, _ = problem
    kw = {"n_landmarks": 10} if name is Solver.NYSTROM else {"tol": 1e-10, "max_passes": 200}
    res = _run(name, problem, **kw)
    lam, _ = reference_eigh(K, K_COMP)
    err = np.max(np.abs(np.sort(res.eigenvalues)[::-1] - lam) / lam[0])
    assert (err <= 1e-6) == name.spec.exact


@pytest.mark.parametrize("name", list(Solver))
def test_a_fraction_of_variance_is_reached_exactly_by_the_solvers_that_declare_it(problem, name):
    """Declared: ``n_components=0.9`` is accepted and the components kept explain >= 90 % of trace(K~)
    (the trace from the dense centred kernel); not declared: refused before any work (ValueError)."""
    X, kernel, K, op = problem
    if not name.spec.fraction:
        with pytest.raises(ValueError, match="fraction"):
            dkpca.plan(X, n_components=0.9, solver=name.value, measure=False)
        return
    opts = {"tol": 0.0, "max_passes": 1} if not name.spec.iterative else {"tol": 1e-6, "max_passes": 200}
    res = solve(name, op, 20 if name.spec.iterative else N, 0.9, rng=0, **opts)
    lam_all, _ = reference_eigh(K, N - 1)
    assert res.eigenvalues.sum() >= 0.9 * lam_all.sum() * (1 - 1e-9)


@pytest.mark.parametrize("name", list(Solver))
def test_in_memory_only_solvers_are_refused_on_out_of_core_plans(tmp_path, name):
    """Declared in-memory only: a plan with K out of core (recomputed) is refused naming the fix; the others
    are planned there."""
    src = write_data(str(tmp_path / "x.zarr"), make_data(300))
    if name.spec.in_memory_only:
        with pytest.raises(ValueError, match="memory"):
            dkpca.plan(src, n_components=3, solver=name.value, gram="recompute", measure=False)
        with pytest.raises(ValueError, match="memory"):
            FitOptions(solver=name.value, gram="store")
        return
    p = dkpca.plan(src, n_components=3, solver=name.value, gram="recompute", measure=False)
    assert p.decision.solver is name and not p.decision.spec.in_memory_only


def test_model_and_estimator_project_through_the_one_loop_and_match_eigh(tmp_path, monkeypatch):
    """``dkpca.fit``'s model and the in-memory ``KernelPCA`` both project new rows through
    ``projection.project_blocks``, and both equal the direct formula ``K~(Y, X) U / sqrt(lambda)`` (out-of-sample
    centring of ``K(Y, X)``; U, lambda from scipy eigh of the dense centred kernel) to 1e-8 relative."""
    import dkpca.model
    import dkpca.projection
    from dkpca.projection import project_blocks

    X, Y = make_data(300, seed=1), make_data(70, seed=2)
    kernel = make_kernel("rbf", gamma=0.2)
    K, Ky = kernel.block(X, None, np.float64), kernel.block(Y, X, np.float64)
    lam, U = reference_eigh(K, K_COMP)
    r, c = K.mean(axis=1), K.mean()
    want = (Ky - r[None, :] - Ky.mean(axis=1)[:, None] + c) @ (U / np.sqrt(lam))
    calls = []

    def spy(*args, **kw):
        calls.append(args[0].shape[0])
        return project_blocks(*args, **kw)

    monkeypatch.setattr(dkpca.projection, "project_blocks", spy)
    model = dkpca.fit(X, n_components=K_COMP, kernel="rbf", gamma=0.2, dtype="float64", solver="dense",
                      store=str(tmp_path / "m.zarr"))
    est = dkpca.KernelPCA(n_components=K_COMP, kernel="rbf", gamma=0.2, eigen_solver="dense").fit(X)
    for got in (model.transform(Y), est.transform(Y)):
        signs = np.sign(np.sum(got * want, axis=0))  # eigenvectors are defined up to sign
        np.testing.assert_allclose(got * signs, want, rtol=1e-8, atol=1e-8 * np.abs(want).max())
    assert sum(calls) == 2 * len(Y)  # each transform's rows went through the one loop


# -- "block" names: the subspace width and the candidate set are not blocks ------------------------------------

def test_lanczos_takes_its_width_as_width_and_block_still_works_with_a_future_warning(problem):
    """``width=`` is the panel (subspace) width; the former ``block=`` gives the same result and a FutureWarning
    (reference: the ``width=`` run, bit for bit)."""
    import warnings

    from dkpca.solvers import lanczos

    _, _, _, op = problem
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name warns of nothing
        new = lanczos.solve(op, K_COMP, tol=1e-8, rng=0, width=12)
    with pytest.warns(FutureWarning, match="block= was renamed width="):
        old = lanczos.solve(op, K_COMP, tol=1e-8, rng=0, block=12)
    assert new.info["block_size"] == 12
    np.testing.assert_array_equal(old.eigenvalues, new.eigenvalues)
    with pytest.raises(ValueError, match="width=2 is invalid"):
        lanczos.solve(op, K_COMP, width=2)


def test_sparse_candidate_set_size_replaces_block_size_which_warns(tmp_path):
    """``candidate_set_size`` is the candidates fitted together; ``block_size`` (its former name) gives the same
    fit with a FutureWarning; a store saved with the old name loads with the new one (no warning)."""
    import warnings

    import zarr

    from dkpca.sparse import SparseKernelPCA

    X = make_data(150, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        new = SparseKernelPCA(gamma=0.2, noise_variance=0.1, candidate_set_size=60, random_state=0).fit(X)
    assert new.fit_report_["mode"] == "blocked"
    with pytest.warns(FutureWarning, match="block_size was renamed candidate_set_size"):
        old = SparseKernelPCA(gamma=0.2, noise_variance=0.1, block_size=60, random_state=0).fit(X)
    np.testing.assert_array_equal(old.weights_, new.weights_)
    with pytest.raises(ValueError, match="candidate_set_size only"):
        SparseKernelPCA(candidate_set_size=60, block_size=60).fit(X)
    path = new.save(str(tmp_path / "s.dkpca.zarr"))
    g = zarr.open_group(path, path=zarr.open_group(path, mode="r").attrs["sparse_model"], mode="r+")
    params = dict(g.attrs["params"])
    params["block_size"] = params.pop("candidate_set_size")  # as dkpca before the rename saved it
    g.attrs["params"] = params
    # which sealed no parameters either (their digest came later: an edited one is refused, test_integrity)
    g.attrs["attrs_digest"] = {k: v for k, v in g.attrs["attrs_digest"].items() if k != "params"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        loaded = SparseKernelPCA.load(str(tmp_path / "s.dkpca.zarr"))
    assert loaded.candidate_set_size == 60
    np.testing.assert_allclose(loaded.transform(X), new.transform(X), rtol=1e-12)


def test_the_estimator_fits_out_of_core_with_one_fit_options_built_from_its_parameters(tmp_path, monkeypatch):
    """``KernelPCA``'s out-of-core fit builds one ``FitOptions`` (scikit-learn's max_iter as max_passes, its tol,
    ...) and runs ``pipeline.fit_with`` on it; the eigenvalues equal ``dkpca.fit``'s with the same keywords
    (reference: that fit, exactly)."""
    import dkpca.estimator

    src = write_data(str(tmp_path / "x.zarr"), make_data(300, seed=5))
    seen = []

    def spy(source, options, **kw):
        seen.append(options)
        return dkpca.pipeline.fit_with(source, options, **kw)

    monkeypatch.setattr(dkpca.estimator, "fit_with", spy)
    est = dkpca.KernelPCA(n_components=2, kernel="rbf", gamma=0.3, eigen_solver="lanczos", tol=1e-7, max_iter=40,
                          store=str(tmp_path / "e.dkpca.zarr"), chunk_size=100, dtype="float64", random_state=0)
    est.fit(src)
    (opts,) = seen
    assert isinstance(opts, FitOptions)
    assert (opts.n_components, opts.solver, opts.tol, opts.max_passes, opts.chunk_size, opts.dtype,
            opts.random_state) == (2, "lanczos", 1e-7, 40, 100, np.dtype("float64"), 0)
    assert opts.kernel.to_dict() == make_kernel("rbf", gamma=0.3).to_dict()
    ref = dkpca.fit(src, n_components=2, kernel="rbf", gamma=0.3, solver="lanczos", tol=1e-7, max_passes=40,
                    store=str(tmp_path / "f.dkpca.zarr"), chunk_size=100, dtype="float64", random_state=0)
    np.testing.assert_array_equal(est.eigenvalues_, ref.eigenvalues_)


def test_the_default_pass_budget_is_one_constant():
    """Every ``max_passes`` default in dkpca is ``solvers.DEFAULT_MAX_PASSES`` (an ast scan finds no number
    written as one), and fit's options resolve ``None`` to it."""
    import ast
    import pathlib

    from dkpca.solvers import DEFAULT_MAX_PASSES, lanczos, randomized

    literal = []
    for path in pathlib.Path(dkpca.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.arguments):
                named = [*node.posonlyargs, *node.args][-len(node.defaults):] if node.defaults else []
                pairs = [*zip(named, node.defaults, strict=True), *zip(node.kwonlyargs, node.kw_defaults, strict=True)]
                literal += [(path.name, a.arg) for a, d in pairs if a.arg == "max_passes"
                            and isinstance(d, ast.Constant) and isinstance(d.value, int)]
    assert literal == []
    assert inspect.signature(randomized.solve).parameters["max_passes"].default == DEFAULT_MAX_PASSES
    assert inspect.signature(lanczos.solve).parameters["max_passes"].default == DEFAULT_MAX_PASSES
    assert FitOptions().passes == DEFAULT_MAX_PASSES == dkpca.request.DEFAULT_MAX_PASSES
