"""ARPACK chosen by ``solver="auto"`` that does not converge hands over to block Lanczos; asked for by name, its
error stands (as scikit-learn's does), and the CLI says it in one line.

The data: 338 points of small spread under a sigmoid kernel, whose centred K has 7 eigenvalues above rounding
and then a cluster near 1e-12.  ARPACK's tolerance is relative to each Ritz value, which those never meet:
``ArpackNoConvergence: ... 7/9 eigenvectors converged`` after 3,381 iterations (found by a differential
fuzzer: a traceback from ``dkpca fit``).  Reference: ``scipy.linalg.eigh`` of the dense centred kernel; block
Lanczos stops at residuals below tol lambda_1 (1e-6), which bounds each eigenvalue's error (symmetric K~).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse.linalg import ArpackNoConvergence
from sklearn.metrics.pairwise import sigmoid_kernel

import dkpca

from .conftest import cli_error, reference_eigh

KW = dict(kernel="sigmoid", gamma=0.3, coef0=0.54, gram="memory", random_state=0)


@pytest.fixture(scope="module")
def flat_tail():
    return np.random.default_rng(0).standard_normal((338, 2)) * 0.15


def test_auto_s_arpack_that_does_not_converge_hands_over_to_block_lanczos(flat_tail):
    model = dkpca.fit(flat_tail, 9, **KW)
    assert model.report["solver"] == "lanczos" and model.report["converged"]
    assert "ARPACK did not converge (ARPACK error -1: No convergence" in model.report["solver_reason"]
    lam, _ = reference_eigh(sigmoid_kernel(flat_tail, gamma=0.3, coef0=0.54), 9)
    kept = len(model.eigenvalues_)
    assert kept == 7  # the two near 1e-12 are numerically zero (README, Mathematics)
    np.testing.assert_allclose(model.eigenvalues_, lam[:kept], rtol=0, atol=1e-6 * lam[0])


def test_arpack_asked_for_by_name_keeps_its_error(flat_tail):
    with pytest.raises(ArpackNoConvergence, match="7/9 eigenvectors converged"):
        dkpca.fit(flat_tail, 9, solver="arpack", **KW)


def test_the_cli_says_arpack_s_failure_in_one_line_naming_the_fix(tmp_path, capsys, flat_tail):
    path = str(tmp_path / "x.npy")
    np.save(path, flat_tail)
    args = ["fit", path, "-k", "9", "--kernel", "sigmoid", "--gamma", "0.3", "--coef0", "0.54", "--gram", "memory",
            "--store", str(tmp_path / "s.dkpca.zarr"), "-q"]
    err = cli_error(capsys, [*args, "--solver", "arpack"])  # found mid-fit: the plan's lines come first without -q
    assert "7/9 eigenvectors converged" in err and "use --solver lanczos (or auto)" in err
    assert dkpca.cli.main([*args, "--overwrite"]) == 0  # auto


def test_the_estimator_s_auto_arpack_that_does_not_converge_hands_over_to_block_lanczos(flat_tail):
    """Before: scikit-learn's ``ArpackNoConvergence`` (its KernelPCA raises the same on this data); ``"auto"`` is
    dkpca's choice, and ``dkpca.fit`` already handed over.  All 9 eigenvalues kept (``remove_zero_eig=False``):
    the two near 1e-12 within the same 1e-6 lambda_1."""
    est = dkpca.KernelPCA(n_components=9, kernel="sigmoid", gamma=0.3, coef0=0.54, random_state=0).fit(flat_tail)
    assert est.eigen_solver_ == "lanczos"
    lam, _ = reference_eigh(sigmoid_kernel(flat_tail, gamma=0.3, coef0=0.54), 9)
    np.testing.assert_allclose(est.eigenvalues_, lam, rtol=0, atol=1e-6 * lam[0])


@pytest.mark.parametrize("kw", [{"eigen_solver": "arpack"}, {"max_iter": 3381}], ids=["by-name", "max_iter"])
def test_the_estimator_s_arpack_asked_for_or_limited_keeps_its_error(flat_tail, kw):
    est = dkpca.KernelPCA(n_components=9, kernel="sigmoid", gamma=0.3, coef0=0.54, random_state=0, **kw)
    with pytest.raises(ArpackNoConvergence, match="7/9 eigenvectors converged"):
        est.fit(flat_tail)
