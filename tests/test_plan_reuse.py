"""`dkpca plan` on a store that already holds K, or part of it: the build it costs is what the fit computes.

Before, an update, a refit of the same data (which reuses K whole) and a rerun after a build killed part way
were all costed as a full build, and the Gram store's bytes were said as if all of them were to be written
(10,000 -> 12,000 rows at tile 2,000: "build 479 ms" and 320 MiB, where the fit computes 29 % of the entries).
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import dkpca
from dkpca.io import as_dask
from dkpca.kernels import RBF
from dkpca.planning import EntryRates, make_plan
from dkpca.planning.estimate import BUILD_SECONDS
from dkpca.storage.growth import stored_entries, update_blocks

from .conftest import make_data

GAMMA, K, EDGE = 0.2, 3, 64
KW = dict(n_components=K, gamma=GAMMA, chunk_size=EDGE, dtype="float64", solver="lanczos", measure=False)


@pytest.fixture
def fitted(tmp_path):
    """300 rows fitted into a store at tile 64 (5 row blocks, 15 upper blocks), and 400 rows whose first are they."""
    X = make_data(400, seed=11)
    store = str(tmp_path / "s.dkpca.zarr")
    dkpca.fit(X[:300], K, gamma=GAMMA, chunk_size=EDGE, dtype="float64", solver="lanczos", store=store)
    return X, store


def test_the_plan_of_an_update_reuses_the_old_blocks_share_of_k(fitted):
    X, store = fitted
    p = dkpca.plan(X, store=store, **KW)
    _, _, entries = update_blocks(300, 400, EDGE)
    assert p.reused == pytest.approx(1 - entries / stored_entries(400, EDGE))  # 4 whole old row blocks kept
    assert 0 < p.reused < 1 and not p.reuse  # the update line says it
    assert "of it new; free on that filesystem" in str(p)


def test_the_plan_of_a_refit_reuses_a_complete_k_whole(fitted):
    X, store = fitted
    p = dkpca.plan(X[:300], store=store, **KW)
    assert p.reused == 1.0
    assert "the store holds this K whole" in p.reuse and "none of it new" in str(p)
    # its data is not read: the reuse is the fit's to confirm, and said so (a plan claimed it outright before)
    assert "if this input is the data it was built from (the fit compares their checksums" in p.reuse
    assert dkpca.fit(X[:300], store=store, **{k: v for k, v in KW.items() if k != "measure"}).report[
        "gram"]["computed_blocks"] == 0  # what the plan said


def test_the_plan_of_a_rerun_after_a_killed_build_costs_the_missing_blocks(fitted):
    X, store = fitted
    g = zarr.open_group(store, path="gram", mode="r+")
    g["done"][0, 1] = 0  # an off-diagonal block of 64 x 64 and the last diagonal block (300 - 256 = 44 rows)
    g["done"][4, 4] = 0
    g.attrs["complete"] = False
    p = dkpca.plan(X[:300], store=store, **KW)
    total = stored_entries(300, EDGE)
    assert p.reused == pytest.approx((total - 64 * 64 - 44 * 44) / total)
    assert f"holds {p.reused:.0%} of this K's entries (a build that stopped part way)" in p.reuse
    model = dkpca.fit(X[:300], store=store, **{k: v for k, v in KW.items() if k != "measure"})
    assert model.report["gram"]["computed_blocks"] == 2


@pytest.mark.parametrize("change", [dict(gamma=0.3), dict(dtype="float32"), dict(gram="recompute")])
def test_the_plan_reuses_nothing_of_a_k_the_fit_would_not_reuse(fitted, change):
    X, store = fitted
    p = dkpca.plan(X[:300], store=store, **{**KW, **change})
    assert p.reused == 0.0 and not p.reuse


def test_the_build_estimate_is_the_share_of_k_not_reused():
    """The build's time scales with the entries computed (its set-up, BUILD_SECONDS, does not); a K reused whole
    fuses no first product into a build, so every pass reads it."""
    X = as_dask(make_data(400, seed=1), 100)
    rates = EntryRates(kernel=2e-8, write=1e-8, read=1e-9, product=4e-9, source="measured", edge=100)
    at = {share: make_plan(X, RBF(gamma=GAMMA), K, 100, np.float64, "lanczos", "", "store", "unused", measure=False,
                           max_passes=5, rates=rates, reused=share) for share in (0.0, 0.75, 1.0)}
    full = at[0.0].build_seconds - BUILD_SECONDS
    assert at[0.75].build_seconds - BUILD_SECONDS == pytest.approx(0.25 * full)
    assert at[1.0].build_seconds == pytest.approx(BUILD_SECONDS)
    assert at[1.0].total_seconds - at[1.0].build_seconds == pytest.approx(
        at[0.0].total_seconds - at[0.0].build_seconds + at[0.0].pass_seconds)
