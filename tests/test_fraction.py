"""``n_components`` as a fraction of explained variance (scikit-learn's ``PCA(0.95)``).

Specification: for a fraction f in (0, 1) the model keeps the smallest k with
``sum_{i<=k} lambda_i / trace(K~) >= f``.  The reference is scipy.linalg.eigh
of the dense centred kernel in float64; each case's f lies at least 2e-4 (in
explained-variance ratio) away from the reference's cumulative sums, far more
than the solvers' eigenvalue errors at tol=1e-6 and K's float32 rounding
(~1e-6 relative), so the chosen k must equal the reference's exactly.
"""

from __future__ import annotations

import subprocess
import warnings

import numpy as np
import pytest
import scipy.linalg
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics.pairwise import pairwise_kernels, rbf_kernel

import dkpca
from dkpca.io import as_dask
from dkpca.kernels import make_kernel
from dkpca.operator import MatrixFreeKernelOperator
from dkpca.request import check_n_components
from dkpca.solvers import get_solver
from dkpca.solvers.fraction import WORKING_K, next_k, solve_fraction
from dkpca.solvers.spectrum import components_for_fraction
from dkpca.storage import FitStore, SolverCheckpoint

from .conftest import centered, dkpca_cmd, make_data, write_data

#: data, rbf gamma, fraction, and the reference k (> WORKING_K: the iterative solvers need a second round)
GROWS = dict(n=300, seed=0, d=5, gamma=0.2, fraction=0.9, k=23)
#: a case the first round already covers
FIRST_ROUND = dict(GROWS, fraction=0.8, k=15)
MARGIN = 2e-4


def reference_k(X: np.ndarray, gamma: float, fraction: float) -> int:
    """The smallest k with cumsum(lambda) / trace >= fraction, from eigh of the dense centred kernel."""
    Kc = centered(rbf_kernel(X, gamma=gamma))
    lam = scipy.linalg.eigh(Kc, eigvals_only=True)[::-1]
    cum = np.cumsum(lam) / np.trace(Kc)
    k = int(np.argmax(cum >= fraction)) + 1
    # the case is well posed: f is not within rounding of a cumulative sum
    assert cum[k - 1] - fraction > MARGIN and (k == 1 or fraction - cum[k - 2] > MARGIN)
    return k


def case_data(case: dict) -> np.ndarray:
    X = make_data(case["n"], seed=case["seed"], d=case["d"])
    assert reference_k(X, case["gamma"], case["fraction"]) == case["k"]
    return X


# -- validation -------------------------------------------------------------------
@pytest.mark.parametrize("value, message", [
    (True, "n_components=True is invalid"),
    (0, "n_components=0 is invalid"),
    (-3, "n_components=-3 is invalid"),
    (0.0, "n_components=0.0 is invalid"),
    (1.0, "strictly between 0 and 1; for a number of components pass the integer 1"),
    (5.0, "pass the integer 5"),
    (1.5, "strictly between 0 and 1; for a number of components pass an integer"),
    (float("nan"), "n_components=nan is invalid"),
    ("0.9", "n_components='0.9' is invalid"),
    (601, "out of range"),
])
def test_invalid_n_components_refused_with_the_fix(value, message):
    with pytest.raises(ValueError, match=message):
        check_n_components(value, 600)


def test_fractions_and_counts_accepted():
    assert check_n_components(0.95, 600) == 0.95 and isinstance(check_n_components(np.float32(0.5), 600), float)
    assert check_n_components(np.int64(3), 600) == 3 and isinstance(check_n_components(np.int64(3), 600), int)


def test_fit_refuses_fraction_with_nystrom_and_arpack():
    X = make_data(300)
    with pytest.raises(ValueError, match="solver='nystrom' approximates it"):
        dkpca.fit(X, n_components=0.9, solver="nystrom")
    with pytest.raises(ValueError, match="not supported by eigen_solver='arpack'"):
        dkpca.KernelPCA(n_components=0.9, kernel="rbf", eigen_solver="arpack").fit(X)


# -- the rule ---------------------------------------------------------------------
def test_components_for_fraction_is_the_first_cumulative_sum_reaching_it():
    lam = np.array([5.0, 3.0, 1.0, 1.0])  # trace 10: cumulative 0.5, 0.8, 0.9, 1.0
    assert components_for_fraction(lam, 10.0, 0.5) == 1  # reaching counts
    assert components_for_fraction(lam, 10.0, 0.81) == 3
    assert components_for_fraction(lam, 20.0, 0.6) is None  # these four explain only half of trace 20
    assert components_for_fraction(np.zeros(3), 0.0, 0.9) == 1  # K~ = 0: nothing to explain


def test_next_k_doubles_and_covers_the_deficit():
    # 2 eigenvalues explain 6 of 100; the rest are each <= 1, so f=0.5 needs >= 44 more
    assert next_k(2, 1000, np.array([5.0, 1.0]), 100.0, 0.5) == 2 + 44
    assert next_k(20, 1000, np.array([50.0] + [1.0] * 19), 100.0, 0.7) == 40  # doubling dominates
    assert next_k(400, 500, np.full(400, 0.001), 100.0, 0.9) == 500  # never beyond n


# -- dkpca.fit (out of core) ------------------------------------------------------
@pytest.mark.parametrize("solver, case", [("dense", GROWS), ("randomized", GROWS), ("lanczos", GROWS),
                                          ("lanczos", FIRST_ROUND)],
                         ids=["dense", "randomized-grows", "lanczos-grows", "lanczos-first-round"])
def test_fit_keeps_the_reference_k(tmp_path, solver, case):
    X = case_data(case)
    model = dkpca.fit(X, n_components=case["fraction"], gamma=case["gamma"], solver=solver,
                      store=tmp_path / "s.zarr", random_state=0)
    assert model.n_components == case["k"]
    cum = np.cumsum(model.explained_variance_ratio_)
    assert cum[-1] >= case["fraction"] and (case["k"] == 1 or cum[-2] < case["fraction"])
    rounds = model.report["solver_info"]["fraction"]["rounds"]
    if solver != "dense":
        assert rounds[0]["k"] == WORKING_K and (len(rounds) > 1) == (case["k"] > WORKING_K)
    assert model.report["n_components_requested"] == case["fraction"]


def test_fit_of_a_zarr_path_with_recomputed_kernel(tmp_path):
    X = case_data(GROWS)
    data = write_data(tmp_path / "d.zarr", X)
    model = dkpca.fit(data, n_components=GROWS["fraction"], gamma=GROWS["gamma"], solver="lanczos",
                      gram="recompute", chunk_size=100, random_state=0)
    assert model.n_components == GROWS["k"] and dkpca.load(model.store).n_components == GROWS["k"]


def test_fraction_short_of_the_pass_budget_warns_and_keeps_all(tmp_path):
    X = case_data(GROWS)
    with pytest.warns(ConvergenceWarning, match=r"short of 90\.0000%.*Raise max_passes \(it was 3"):
        model = dkpca.fit(X, n_components=GROWS["fraction"], gamma=GROWS["gamma"], solver="randomized",
                          max_passes=3, store=tmp_path / "s.zarr", random_state=0)
    assert model.report["passes"] <= 3 and model.n_components == WORKING_K
    assert np.sum(model.explained_variance_ratio_) < GROWS["fraction"]


def test_killed_in_a_later_round_resumes_there(tmp_path):
    """A fit stopped in round 2 (as a killed job) resumes in round 2 and ends as an uninterrupted one."""
    X = case_data(GROWS)
    path = str(tmp_path / "s.zarr")
    FitStore.at(path).open_for_write()
    op = MatrixFreeKernelOperator(as_dask(X, block_rows=100), make_kernel("rbf", gamma=GROWS["gamma"]),
                                  dtype=np.float64)
    solve = get_solver("randomized")
    ref = solve_fraction(solve, op, GROWS["fraction"], k=WORKING_K, tol=1e-6, max_passes=200, rng=1)
    first = ref.info["fraction"]["rounds"][0]["passes"]

    class Killed(Exception):
        pass

    def kill_in_round_two(report):
        if report.pass_number == first + 2:
            raise Killed

    ck = SolverCheckpoint(path, {"fraction": GROWS["fraction"]}, interval=0)
    with pytest.raises(Killed):
        solve_fraction(solve, op, GROWS["fraction"], k=WORKING_K, tol=1e-6, max_passes=200, rng=1,
                       callback=kill_in_round_two, checkpoint=ck)
    numbers = []
    rest = solve_fraction(solve, op, GROWS["fraction"], k=WORKING_K, tol=1e-6, max_passes=200, rng=999,
                          callback=lambda r: numbers.append(r.pass_number), checkpoint=ck)
    second_k = ref.info["fraction"]["rounds"][1]["k"]
    assert rest.info["fraction"]["resumed_in_round_k"] == second_k
    assert rest.info["fraction"]["rounds"][0]["k"] == second_k  # round 1 was not redone
    assert numbers[0] == first + 3 and rest.passes == ref.passes  # pass numbers run on over the rounds
    np.testing.assert_allclose(rest.eigenvalues, ref.eigenvalues, rtol=1e-10)


# -- KernelPCA --------------------------------------------------------------------
@pytest.mark.parametrize("eigen_solver", ["auto", "randomized", "lanczos"])
def test_kernel_pca_in_memory_keeps_the_reference_k(eigen_solver):
    X = case_data(GROWS)
    kp = dkpca.KernelPCA(n_components=GROWS["fraction"], kernel="rbf", gamma=GROWS["gamma"],
                         eigen_solver=eigen_solver, random_state=0)
    Z = kp.fit_transform(X)
    assert Z.shape == (GROWS["n"], GROWS["k"]) and kp.eigenvalues_.shape == (GROWS["k"],)
    lam = scipy.linalg.eigh(centered(rbf_kernel(X, gamma=GROWS["gamma"])), eigvals_only=True)[::-1]
    np.testing.assert_allclose(kp.eigenvalues_, lam[:GROWS["k"]], rtol=1e-8)


def test_kernel_pca_out_of_core_keeps_the_reference_k(tmp_path):
    X = case_data(GROWS)
    data = write_data(tmp_path / "d.zarr", X)
    kp = dkpca.KernelPCA(n_components=GROWS["fraction"], kernel="rbf", gamma=GROWS["gamma"],
                         eigen_solver="lanczos", store=str(tmp_path / "s.zarr"), random_state=0).fit(data)
    assert kp.eigenvalues_.shape == (GROWS["k"],) and kp.model_.n_components == GROWS["k"]


# -- command line -------------------------------------------------------------------
def test_cli_fit_with_a_fraction(tmp_path):
    X = case_data(GROWS)
    data = write_data(tmp_path / "d.zarr", X)
    out = subprocess.run(dkpca_cmd("fit", data, "-k", str(GROWS["fraction"]), "--gamma", str(GROWS["gamma"]),
                                   "--solver", "lanczos", "--no-progress", "-q"),
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    assert dkpca.load(tmp_path / "d.dkpca.zarr").n_components == GROWS["k"]


@pytest.mark.parametrize("value, message", [("1.0", "pass the integer 1"), ("abc", "'abc' is neither an integer")])
def test_cli_refuses_a_bad_k_in_one_line(tmp_path, value, message):
    data = write_data(tmp_path / "d.zarr", make_data(50))
    out = subprocess.run(dkpca_cmd("fit", data, "-k", value, "--no-progress"), capture_output=True, text=True,
                         timeout=120)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("dkpca: error: "), out.stderr
    assert message in lines[0]


def test_plan_with_a_fraction_says_k_grows(tmp_path):
    plan = dkpca.plan(write_data(tmp_path / "d.zarr", make_data(300)), n_components=0.9, measure=False)
    assert plan.fraction == 0.9
    assert "n_components=0.9: the first round; k grows" in str(plan).splitlines()[0]


def test_no_warning_when_reached():
    X = case_data(FIRST_ROUND)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        kp = dkpca.KernelPCA(n_components=FIRST_ROUND["fraction"], kernel="rbf", gamma=FIRST_ROUND["gamma"],
                             eigen_solver="randomized", random_state=0).fit(X)
    assert kp.eigenvalues_.size == FIRST_ROUND["k"]


@pytest.mark.parametrize("solver", ["dense", "lanczos", "randomized", "auto"])
def test_a_fraction_of_an_indefinite_kernel_is_refused_by_every_solver(solver):
    """sigmoid (gamma 0.3, coef0 2) on 300 Gaussian points: K~'s positive eigenvalues sum to ~1.6 times its trace,
    so ratios against the trace would add up past 1; every path refuses, as the dense one sees the negatives."""
    X = np.random.default_rng(0).standard_normal((300, 5))
    with pytest.raises(ValueError, match="needs a positive semi-definite kernel"):
        dkpca.fit(X, 0.9, kernel="sigmoid", gamma=0.3, coef0=2.0, solver=solver, dtype="float64", random_state=0)


@pytest.mark.parametrize("solver", ["dense", "lanczos"])
def test_a_fraction_of_a_low_rank_kernel_held_in_float32_is_kept(solver):
    """Cosine on 3-D points: K~ has rank 3 and 471 eigenvalues that are float32 rounding (~1e-6 each).  Before:
    refused as indefinite -- they summed past the exact trace (425.284 against 425.283).  The reference k is
    eigh's: float32's error in these ratios (~1e-7) is far from the cumulative sums' distance to 0.9."""
    X = make_data(474, seed=0, d=3)
    kp = dkpca.KernelPCA(n_components=0.9, kernel="cosine", dtype="float32", eigen_solver=solver).fit(X)
    lam = scipy.linalg.eigh(centered(pairwise_kernels(X, metric="cosine")), eigvals_only=True)[::-1]
    k = components_for_fraction(lam, lam.sum(), 0.9)
    assert kp.eigenvalues_.shape == (k,)
    np.testing.assert_allclose(kp.eigenvalues_, lam[:k], rtol=1e-5)
