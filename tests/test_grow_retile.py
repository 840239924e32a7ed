"""An update whose stored tile is too small for the grown rows builds K anew at a fresh fit's tile.

A first fit of few rows has their count as its tile, and an update kept it: 100 rows grown to 8,000 made
3,240 blocks a pass where a fresh fit has 3, and the update took 25.4 s against the fresh fit's 1.75 s (2-core
machine, 2026-11-28; re-tiled, 2.0 s).  Now the update re-tiles K (:func:`dkpca.storage.growth.retile`); the
data copy keeps its chunks (the old model reads its rows there until the new one is switched in) and records
the tile its fingerprint was taken in, so a refit and the next update reuse the new K.  References: eigh of the centred
kernel (``reference_eigh``), eigenvalues to 1e-8 of the largest, |eigenvectors| to 1e-5.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca import gram as gram_module
from dkpca import growth as update_module
from dkpca.cli import main
from dkpca.linalg import default_block_size
from dkpca.storage import datachunks as datachunks_module
from dkpca.storage.growth import retile

from .conftest import make_data, reference_eigh

GAMMA, K = 0.2, 3
KW = dict(n_components=K, gamma=GAMMA, dtype="float64", solver="lanczos")


class Killed(BaseException):
    """A kill: nothing in dkpca catches it (as nothing runs after a SIGKILL)."""


def _check(model, X):
    lam, U = reference_eigh(rbf_kernel(X, gamma=GAMMA), K)
    assert model.n_samples == len(X)
    np.testing.assert_allclose(model.eigenvalues_, lam, rtol=0, atol=1e-8 * lam[0])
    np.testing.assert_allclose(np.abs(model.eigenvectors_), np.abs(U), rtol=0, atol=1e-5)


@pytest.fixture
def tiny_first(tmp_path):
    """``(X, store)``: X of 600 rows; the store holds a fit of its first 10, at the tile 10 they clipped."""
    X = make_data(600, seed=21)
    store = str(tmp_path / "s.dkpca.zarr")
    dkpca.fit(X[:10], store=store, chunk_size=100, **KW)
    return X, store


@pytest.mark.parametrize("tile, n, chunk_size, want", [
    (100, 8000, None, default_block_size(8000)),  # 80 row blocks, under half the default: re-tiled
    (64, 400, None, 64),  # 7 row blocks: too few to matter
    (2000, 20000, None, 2000),  # half the default (4,000): kept
    (1000, 44000, None, default_block_size(44000)),
    (10, 600, 100, 100),  # a chunk size the first fit's 10 rows clipped: given again, it is had
    (100, 600, 100, 100),
])
def test_retile_keeps_a_tile_unless_it_is_small_and_cuts_k_finely(tile, n, chunk_size, want):
    assert retile(tile, n, chunk_size) == want


def test_an_update_of_a_tile_too_small_builds_k_anew_at_a_fresh_fits(tmp_path):
    X = make_data(300, seed=22)
    store = str(tmp_path / "s.dkpca.zarr")
    dkpca.fit(X[:10], store=store, **KW)  # tile 10: 30 row blocks of 300 rows, where a fresh fit has 1
    model = dkpca.fit(X, store=store, **KW)
    _check(model, X)
    u = model.report["update"]
    assert u["tile"] == [10, 300] and (u["blocks_reused"], u["blocks_computed"]) == (0, 1)
    assert model.report["gram"]["block"] == 300


def test_after_a_retiled_update_a_refit_reuses_k_and_the_next_update_grows_it(tiny_first):
    X, store = tiny_first
    _check(dkpca.fit(X[:500], store=store, chunk_size=100, **KW), X[:500])
    again = dkpca.fit(X[:500], store=store, chunk_size=100, **KW)
    assert "update" not in again.report and again.report["gram"]["computed_blocks"] == 0
    again = dkpca.fit(X[:500], store=store, **KW)  # without chunk_size: the tile the fingerprint was taken in
    assert again.report["gram"]["computed_blocks"] == 0 and again.report["gram"]["block"] == 100
    model = dkpca.fit(X, store=store, **KW)  # 500 -> 600 at tile 100: the 15 old blocks kept
    _check(model, X)
    u = model.report["update"]
    assert u["tile"] is None and (u["blocks_reused"], u["blocks_computed"]) == (15, 6)


def test_the_plan_and_info_say_the_update_re_tiles(tiny_first, capsys):
    X, store = tiny_first
    p = dkpca.plan(X, store=store, chunk_size=100, measure=False, **KW)
    assert p.block == 100 and "the store's tile 10 is below the chunk_size given" in p.block_reason
    assert "K built anew in tiles of 100 (21 blocks; in the store's tiles of 10 it would be 1,830)" in p.update
    dkpca.fit(X, store=store, chunk_size=100, **KW)
    assert main(["info", store]) == 0
    assert "K re-tiled from 10 to 100" in capsys.readouterr().out


def _kill_copy(m):
    real = datachunks_module.copy_block

    def copy(block, target, edge, offset=0, block_info=None):
        if offset and block_info[0]["array-location"][0][0] > 0:
            raise Killed
        return real(block, target, edge, offset, block_info=block_info)
    m.setattr(datachunks_module, "copy_block", copy)


def _kill_retire(m):
    def retire(store, *_):
        raise Killed
    m.setattr(update_module, "retire_gram", retire)


def _kill_mid_removal(m):
    """The old K's metadata deleted, its chunk files and done markers left behind."""
    def retire(store, *_):
        os.remove(os.path.join(store.path, "gram", "zarr.json"))
        raise Killed
    m.setattr(update_module, "retire_gram", retire)


def _kill_blocks(m):
    real, done = gram_module._build_block, []

    def build(*a, **kw):
        if len(done) >= 5:
            raise Killed
        done.append(1)
        return real(*a, **kw)
    m.setattr(gram_module, "_build_block", build)


@pytest.mark.parametrize("kill", [_kill_copy, _kill_retire, _kill_mid_removal, _kill_blocks],
                         ids=["copying rows", "before K goes", "while K goes", "building K"])
def test_a_retiling_update_killed_at_each_stage_resumes(tiny_first, monkeypatch, kill):
    X, store = tiny_first
    with monkeypatch.context() as m:
        kill(m)
        with pytest.raises(Killed):
            dkpca.fit(X, store=store, chunk_size=100, **KW)
    old = dkpca.load(store)  # the old model stays the store's, and projects
    assert old.n_samples == 10 and np.all(np.isfinite(old.transform(X[10:20])))
    model = dkpca.fit(X, store=store, chunk_size=100, **KW)
    _check(model, X)
    assert model.report["gram"]["block"] == 100
