"""dkpca.fit as one house: the spectrum policy, callbacks, log-level-independent work, paths.

References: scipy.linalg.eigh of the dense centred kernel (``reference_eigh``)
and scikit-learn's KernelPCA; tolerances are stated per test.
"""

from __future__ import annotations

import importlib
import logging
import os

import dask
import numpy as np
import pytest
from sklearn.decomposition import KernelPCA as SkKernelPCA
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics.pairwise import rbf_kernel, sigmoid_kernel

import dkpca
from dkpca import planning
from dkpca.operator import InMemoryKernelOperator
from dkpca.solvers import PassReport, get_solver

from .conftest import blas_threads, centered, reference_eigh, spy_blas_threads


@pytest.fixture
def duplicated_1d():
    """200 points in 1-D, 40 of them duplicated: rbf gamma=5 has many numerically zero eigenvalues."""
    x = np.random.default_rng(0).standard_normal((160, 1))
    return np.vstack([x, x[:40]])


def test_fit_drops_numerically_zero_components(tmp_path, duplicated_1d):
    X, k = duplicated_1d, 80
    lam_ref = np.linalg.eigvalsh(centered(rbf_kernel(X, gamma=5.0)))[::-1][:k]
    # scikit-learn's rule in double precision: 0 < lambda < 1e-12 lambda_1 is zero, and dropped
    keep = int(np.sum(lam_ref >= 1e-12 * lam_ref[0]))
    assert 0 < keep < k
    model = dkpca.fit(X, n_components=k, gamma=5.0, solver="dense", dtype="float64", store=tmp_path / "s.zarr")
    assert model.n_components == keep
    assert model.report["zero_components_dropped"] == k - keep
    np.testing.assert_allclose(model.eigenvalues_, lam_ref[:keep], rtol=1e-8, atol=1e-12 * lam_ref[0])
    # the same components as scikit-learn drops with remove_zero_eig=True
    sk = SkKernelPCA(k, kernel="rbf", gamma=5.0, eigen_solver="dense", remove_zero_eig=True).fit(X)
    assert sk.eigenvalues_.shape[0] == keep


def test_reconstruction_error_does_not_depend_on_the_solver(tmp_path, duplicated_1d):
    X = duplicated_1d
    errs = {}
    for solver in ("dense", "lanczos"):
        m = dkpca.fit(X, n_components=80, gamma=5.0, solver=solver, dtype="float64", tol=1e-10,
                      store=tmp_path / f"{solver}.zarr", random_state=0)
        errs[solver] = m.reconstruction_error(X[:20])
    # both keep the same components; what is left is rounding (errors are ~1e-12 here)
    np.testing.assert_allclose(errs["dense"], errs["lanczos"], atol=1e-9)


@pytest.fixture
def sigmoid_data():
    return np.random.default_rng(0).standard_normal((300, 5))


def test_fit_refuses_significant_negative_eigenvalues_with_sklearns_text(tmp_path, sigmoid_data):
    """More components than positive eigenvalues of an indefinite kernel: scikit-learn's error, not silence."""
    X = sigmoid_data
    lam, _ = reference_eigh(sigmoid_kernel(X, gamma=0.5, coef0=1.0), 300)
    k = int(np.sum(lam > 0)) + 5
    with pytest.raises(ValueError, match="There are significant negative eigenvalues"):
        SkKernelPCA(k, kernel="sigmoid", gamma=0.5, coef0=1.0, eigen_solver="dense").fit(X)
    with pytest.raises(ValueError, match="There are significant negative eigenvalues"):
        dkpca.fit(X, n_components=k, kernel="sigmoid", gamma=0.5, coef0=1.0, solver="dense", dtype="float64",
                  store=tmp_path / "s.zarr")


@pytest.mark.parametrize("solver", ["randomized", "lanczos", "dense"])
def test_indefinite_kernel_top_components_by_value(tmp_path, sigmoid_data, solver):
    """The issue's case: sigmoid, gamma=0.03, coef0=1, k=6 -- component 6 is 0.0129, not -0.118."""
    X, k = sigmoid_data, 6
    lam, _ = reference_eigh(sigmoid_kernel(X, gamma=0.03, coef0=1.0), k)
    model = dkpca.fit(X, n_components=k, kernel="sigmoid", gamma=0.03, coef0=1.0, solver=solver, dtype="float64",
                      tol=1e-10, max_passes=500, store=tmp_path / "s.zarr", random_state=0)
    # residual 1e-10 relative bounds eigenvalue errors far below this tolerance
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=1e-6, atol=1e-9 * lam[0])


def test_convergence_warning_is_sklearns_class(tmp_path, blobs):
    with pytest.warns(ConvergenceWarning):
        dkpca.fit(blobs, n_components=3, solver="randomized", dtype="float64", tol=1e-14, max_passes=2,
                  store=tmp_path / "s.zarr", random_state=0)
    assert dkpca.solvers.ConvergenceWarning is ConvergenceWarning


def test_solver_reports_each_pass_through_its_callback(blobs):
    K = rbf_kernel(blobs, gamma=0.1)
    reports: list[PassReport] = []
    res = get_solver("randomized")(InMemoryKernelOperator(K), 4, tol=1e-10, max_passes=100,
                                   rng=np.random.default_rng(0), callback=reports.append)
    assert [r.pass_number for r in reports] == list(range(1, res.passes + 1))
    assert reports[-1].max_relative_residual == pytest.approx(res.history[-1])
    assert all(r.seconds >= 0 for r in reports)


def test_one_log_record_per_pass(tmp_path, blobs, caplog):
    with caplog.at_level(logging.INFO, logger="dkpca"):
        model = dkpca.fit(blobs, n_components=3, solver="randomized", dtype="float64", tol=1e-8,
                          store=tmp_path / "s.zarr", random_state=0)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pass ")]
    assert len(lines) == model.report["passes"]  # the pass fused into the Gram build is reported too


def test_log_level_does_not_change_the_work(tmp_path, blobs, monkeypatch, caplog):
    """With INFO logging on, fit measures nothing it would not measure with logging off."""
    plan_module = importlib.import_module("dkpca.planning.plan")  # dkpca.planning.plan is the function
    timed, estimated = [], []

    def no_timing(*args, **kwargs):
        timed.append(args)
        raise AssertionError("a small fit must not time blocks")

    def recording(X, kernel, k, ell, tol, max_passes, solver, *args, **kwargs):
        estimated.append(solver)
        return planning.estimate_passes(X, kernel, k, ell, tol, max_passes, solver, *args, **kwargs)

    for module in (planning.auto, plan_module, importlib.import_module("dkpca.planning.measure")):
        for name, fake in (("measure_blocks", no_timing), ("estimate_passes", recording)):
            if hasattr(module, name):  # every module that calls it by that name
                monkeypatch.setattr(module, name, fake)
    with caplog.at_level(logging.INFO, logger="dkpca"):
        dkpca.fit(blobs, n_components=2, store=tmp_path / "a.zarr", chunk_size=200)
    assert "plan: n=600, d=6, k=2" in caplog.text  # the plan is still logged, from the sizes
    assert timed == []
    # no subsample eigendecomposition either: only the dense solver's constant answer was asked for
    assert set(estimated) <= {"dense"}


def test_store_path_is_absolute_and_survives_chdir(tmp_path, blobs, monkeypatch):
    """A relative store path is resolved when it enters; the model works from any directory."""
    monkeypatch.chdir(tmp_path)
    model = dkpca.fit(blobs, n_components=2, store="rel.dkpca.zarr", dtype="float64", solver="dense")
    assert os.path.isabs(model.store) and model.store == str(tmp_path / "rel.dkpca.zarr")
    want = model.transform(blobs[:5])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    np.testing.assert_allclose(dkpca.load(model.store).transform(blobs[:5]), want, rtol=1e-12)


# -- K held in memory (gram="memory") --------------------------------------------------


@pytest.mark.parametrize("dtype, rtol", [
    # float32 (the default): K rounded to float32 (relative 6e-8 an entry) and ARPACK in single precision,
    # as scikit-learn's on a float32 K; eigenvalues to the 1e-6 (measured: 1.2e-7 here)
    ("float32", 1e-6),
    # float64: ARPACK to machine precision, eigenvalues to rounding
    ("float64", 1e-10),
])
def test_in_memory_input_holds_K_in_memory_and_matches_the_reference(dtype, rtol):
    """numpy input without store=: K evaluated once into memory in the fit's dtype, ARPACK, no Gram store."""
    X = np.random.default_rng(3).standard_normal((400, 6))
    lam_ref, _ = reference_eigh(rbf_kernel(X, gamma=0.2), 5)
    with dkpca.fit(X, 5, gamma=0.2, random_state=0, dtype=dtype) as m:
        assert (m.report["solver"], m.report["gram"]["mode"]) == ("arpack", "memory"), m.report["solver_reason"]
        assert m.report["gram"]["dtype"] == dtype
        np.testing.assert_allclose(m.eigenvalues_, lam_ref, rtol=rtol)
        assert not os.path.exists(os.path.join(m.store, "gram"))
        # transform = K~ u / sqrt(lambda) differs from sqrt(lambda) u by residual / sqrt(lambda) <= tol lambda_1 / ..
        bound = 1e-6 * lam_ref[0] / np.sqrt(lam_ref[-1])
        np.testing.assert_allclose(m.transform(X[:7]), m.embedding_[:7], atol=bound)


def test_a_pass_budget_on_K_in_memory_is_kept_by_block_lanczos_not_given_to_arpack():
    """max_passes given: auto picks block Lanczos where it would take ARPACK (whose products a pass budget does not
    bound: 22 here at n = 3,000 against a budget of 3), and the fit stops within it; no budget: ARPACK."""
    X = np.random.default_rng(3).standard_normal((3000, 5))
    with pytest.warns(ConvergenceWarning, match="stopped after 3 passes"):
        budget = dkpca.fit(X, 3, max_passes=3, random_state=0)
    assert (budget.report["solver"], budget.report["gram"]["mode"]) == ("lanczos", "memory")
    assert budget.report["passes"] <= 3 and "max_passes is given" in budget.report["plan"]["reasons"]["solver"]
    assert dkpca.fit(X, 3, random_state=0).report["solver"] == "arpack"


def test_max_passes_with_arpack_asked_for_is_refused_before_work():
    with pytest.raises(ValueError, match=r"max_passes=3 does not bound solver='arpack'.*solver='lanczos'"):
        dkpca.fit(np.zeros((50, 2)) + np.arange(50)[:, None], 3, solver="arpack", max_passes=3)


@pytest.mark.parametrize("solver", ["dense", "lanczos", "arpack"])
def test_gram_memory_is_exact_for_every_solver(tmp_path, solver):
    """K in memory in float64: every solver to rounding."""
    X = np.random.default_rng(4).standard_normal((300, 4))
    lam_ref, _ = reference_eigh(rbf_kernel(X, gamma=0.3), 4)
    m = dkpca.fit(X, 4, gamma=0.3, solver=solver, gram="memory", store=tmp_path / "s.zarr", tol=1e-10,
                  random_state=0, dtype="float64")
    assert m.report["gram"]["mode"] == "memory"
    np.testing.assert_allclose(m.eigenvalues_, lam_ref, rtol=1e-9)
    np.testing.assert_allclose(dkpca.load(tmp_path / "s.zarr").eigenvalues_, m.eigenvalues_)


def test_a_given_store_keeps_K_stored():
    """store= asks for a store that outlives the model: K is stored (a refit reuses it)."""
    c = planning.choose(2000, 5, "auto", "auto", memory_bytes=16 * 10**9, free_bytes=10**13, temporary=False)
    assert c.gram == "store"


def test_gram_memory_that_does_not_fit_is_refused_before_work():
    with pytest.raises(ValueError, match="needs K in memory.*gram='store'"):
        planning.choose(50_000, 5, "auto", "memory", memory_bytes=8 * 10**9)
    with pytest.raises(ValueError, match="solver=arpack needs K in memory"):
        planning.choose(50_000, 5, "arpack", "auto", memory_bytes=8 * 10**9)


@pytest.mark.parametrize("k, serial", [(3, True), (60, False)])
def test_solver_algebra_runs_on_one_blas_thread_only_for_narrow_blocks(tmp_path, monkeypatch, k, serial):
    """Lanczos's block is k + 10: 13 columns run their algebra on one BLAS thread, 70 (> 64) on all of them."""
    pipeline = importlib.import_module("dkpca.pipeline")
    entered = []
    real = pipeline.serial_blas

    def recording():
        entered.append(True)
        return real()

    monkeypatch.setattr(pipeline, "serial_blas", recording)
    X = np.random.default_rng(5).standard_normal((300, 4))
    dkpca.fit(X, k, gamma=0.3, solver="lanczos", gram="store", store=tmp_path / "s.zarr", random_state=0)
    assert bool(entered) is serial


@pytest.mark.parametrize("k, serial", [(3, True), (100, False)])
def test_a_nystroem_start_blocks_algebra_runs_on_one_blas_thread_only_for_narrow_blocks(tmp_path, monkeypatch, k,
                                                                                         serial):
    """The Nystroem start block (forced here at n = 300) is computed with the BLAS threads of the solver's algebra
    after it: one for Lanczos's 13 columns, as configured for 110 (> 64)."""
    from dkpca.solvers import nystrom

    configured = blas_threads()
    monkeypatch.setattr(nystrom, "start_landmarks", lambda n, ell: 2 * ell)
    seen = spy_blas_threads(monkeypatch, nystrom, "start_block")
    X = np.random.default_rng(5).standard_normal((300, 4))
    dkpca.fit(X, k, gamma=0.3, solver="lanczos", gram="store", store=tmp_path / "s.zarr", random_state=0)
    assert seen == [{1} if serial else configured]


@pytest.mark.parametrize("limit, serial", [(4096, True), (100, False)])
@pytest.mark.parametrize("path", ["fit", "estimator"])
def test_an_arpack_solve_runs_on_one_blas_thread_only_for_small_n(tmp_path, monkeypatch, path, limit, serial):
    """ARPACK on K in memory (n = 300) runs on one BLAS thread up to arpack.SERIAL_MAX_N (the default 4,096), on
    the configured threads above it (the limit lowered to 100 here); in dkpca.fit and in the estimator alike."""
    from dkpca.solvers import arpack

    configured = blas_threads()
    monkeypatch.setattr(arpack, "SERIAL_MAX_N", limit)
    seen = spy_blas_threads(monkeypatch, arpack, "eigsh")
    X = np.random.default_rng(6).standard_normal((300, 4))
    if path == "fit":
        dkpca.fit(X, 4, gamma=0.3, solver="arpack", store=tmp_path / "s.zarr", random_state=0)
    else:
        dkpca.KernelPCA(4, kernel="rbf", gamma=0.3, eigen_solver="arpack", random_state=0).fit(X)
    assert seen == [{1} if serial else configured]
    assert blas_threads() == configured  # restored after the solve


def test_overlapping_serial_blas_sections_give_the_process_its_blas_threads_back():
    """Two threads' serial sections overlapping (fits in two threads; a grid search's threading backend): BLAS is
    on one thread while either is inside, and on the threads it had before once both are out, whichever leaves
    last (before: the last out restored the one thread it had found, for the rest of the process)."""
    import threading

    import threadpoolctl

    from dkpca.execution import serial_blas

    before = blas_threads()
    if max(before) < 2:
        pytest.skip("BLAS runs on one thread here: nothing to give back")
    # no thread holds threadpoolctl's control of OpenBLAS (>= 3.7: the first thread to set it, until released)
    threadpoolctl.OpenBLASController.clear_controlling_thread(force=True)
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with serial_blas():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second():
        first_in.wait(10)
        with serial_blas():
            second_in.set()
            first_out.wait(10)
            seen["second alone"] = blas_threads()

    threads = [threading.Thread(target=f) for f in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen["second alone"] == {1}
    assert blas_threads() == before


@pytest.mark.parametrize("gram", ["store", "recompute"])
def test_a_fit_with_the_compiled_exp_matches_the_reference(tmp_path, blobs, gram):
    """Planning compiles the exp from a size (here forced by Dask config dkpca.compiled-exp): the blocks it builds
    or recomputes go through kernels.fastexp; eigenvalues agree with eigh of the dense centred float64 K to 1e-5
    relative (float32 K: the ~1e-7 entry errors of either exp, amplified by the 1/lambda of the smallest of 4
    components)."""
    with dask.config.set({"dkpca.compiled-exp": True}):
        m = dkpca.fit(blobs, n_components=4, gamma=0.2, solver="lanczos", gram=gram, store=tmp_path / "s.zarr",
                      chunk_size=200)
    assert m.report["gram"]["compiled_exp"] is True, m.report["gram"]
    lam_ref, _ = reference_eigh(rbf_kernel(blobs, gamma=0.2), 4)
    np.testing.assert_allclose(m.eigenvalues_, lam_ref, rtol=1e-5)
