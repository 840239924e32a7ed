"""Issue 38: an update's first pass from the old fit's Ritz record reads only the blocks touching new rows.

A fit with block Lanczos or subspace iteration records its leading Ritz pairs
``U`` and their exact products ``K U`` beside its model (``dkpca.growth.save_ritz``).
An update then starts by a Rayleigh-Ritz step on ``[U, 0]`` and the new rows'
extension, whose product with K it knows without reading the old rows' blocks.

Reference: ``scipy.linalg.eigh`` of the dense centred kernel of the grown data
(``test_grow._check``: eigenvalues to 1e-8 lambda_1, |eigenvectors| to 1e-5,
the tolerances that the solver's tol = 1e-6 justifies there).  A record that
does not belong to the store's model, or is damaged, is never used: the update
then reads all of K in its first pass and gives the same answer.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import dkpca
from dkpca import gram as gram_module
from dkpca import operator as operator_module
from dkpca.cli import main
from dkpca.linalg import Centering
from dkpca.operator import StoredKernelOperator
from dkpca.storage import FitStore, GramStore, verify_store

from .test_grow import EDGE, _check, _fit, grown_store


@pytest.fixture
def grown(tmp_path):
    """X of 400 rows, the store holding a fit of its first 300 (partial last tile: 300 = 4 x 64 + 44)."""
    return grown_store(tmp_path)


def _blocks_read(monkeypatch) -> list[tuple[int, int]]:
    """Every block of the stored K a product reads, as (I, J), in this process."""
    seen: list[tuple[int, int]] = []
    real = StoredKernelOperator.block_func

    def spy(reader, I, J, *rest):
        seen.append((I, J))
        return real(reader, I, J, *rest)

    monkeypatch.setattr(StoredKernelOperator, "block_func", staticmethod(spy))
    return seen


def test_a_fit_records_its_ritz_pairs_with_the_products_of_its_k(grown):
    """The record names the store's model; ``K U`` equals the stored K times U (float64 K: to 1e-12 of ||K U||)."""
    _, store = grown
    fs = FitStore.at(store)
    arrays, attrs = fs.read_ritz()
    assert attrs["model"] == fs.model_group() and attrs["rows"] == 300 and attrs["dtype"] == "float64"
    U, KU = arrays["vectors"], arrays["products"]
    # a pass over the stored K, uncentred, against the record (the Krylov relation's, centred and uncentred)
    np.testing.assert_allclose(KU, StoredKernelOperator(GramStore(fs).open()).raw_matmat(U), rtol=0,
                               atol=1e-12 * np.abs(KU).max())
    np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), rtol=0, atol=1e-12)
    assert U.shape[1] == 23  # Lanczos' width k + 10 = 13, and 10 more (dkpca.growth.RITZ_EXTRA)


def test_an_update_s_first_pass_reads_only_the_blocks_touching_new_rows(grown, monkeypatch):
    X, store = grown
    read = _blocks_read(monkeypatch)
    model = _fit(X, store)
    _check(model, X)
    u = model.report["update"]
    assert u["first_pass_fused"] and model.report["fused_passes"] == 1 and "Rayleigh-Ritz" in u["warm_start"]
    # 400 rows in tiles of 64: 7 row blocks, 28 upper blocks; the new rows start in block 4 (256-319), so the
    # start's product reads the 5 + 6 + 7 = 18 blocks of columns 4-6, and each later pass all 28
    assert len(read) == 18 + 28 * (model.report["passes"] - 1)
    assert sorted(read[:18]) == sorted((i, j) for j in (4, 5, 6) for i in range(j + 1))
    fs = FitStore.at(store)
    assert fs.read_ritz()[1]["model"] == fs.model_group() and fs.read_ritz()[1]["rows"] == 400  # the new fit's


def test_an_update_s_build_multiplies_no_block_by_the_probe_s_zero_rows(grown, monkeypatch):
    """The build's product for the start (the probe ``[U Lambda^-1/2, 1]`` on the old rows, zero on the new) makes
    no GEMM with a zero side.  400 rows in tiles of 64, the new rows from 300 inside tile 4: of the 18 blocks
    computed (columns 4-6), the 5 of column 4 multiply both sides, the 10 pairing tiles 0-4 with tile 5 or 6
    make only ``K^T V_I`` (``VJ`` handed over as None), the 3 within tiles 5-6 make none; the answer is eigh's."""
    X, store = grown
    calls: list[tuple[bool, bool]] = []  # per block product of the build: (VI given as None, VJ given as None)
    real = gram_module.block_products
    monkeypatch.setattr(gram_module, "block_products",
                        lambda blk, VI, VJ, *rest: calls.append((VI is None, VJ is None)) or real(blk, VI, VJ, *rest))
    model = _fit(X, store)
    _check(model, X)
    assert model.report["update"]["first_pass_fused"]
    assert sorted(calls) == sorted([(False, False)] * 5 + [(False, True)] * 10)


def test_a_record_of_another_model_is_not_used(grown, monkeypatch):
    """The model rewritten after its record (as a fit killed between the two leaves it): the usual start."""
    X, store = grown
    dkpca.load(store).save()  # a new model group; the record still names the old one
    read = _blocks_read(monkeypatch)
    model = _fit(X, store)
    _check(model, X)
    assert not model.report["update"]["first_pass_fused"] and len(read) == 28 * model.report["passes"]


def test_a_damaged_record_is_harmless_verify_says_so_and_the_update_starts_without_it(grown, caplog):
    X, store = grown
    group = os.path.join(store, FitStore.at(store).model_group("ritz"), "products", "c")
    chunk = os.path.join(group, *sorted(os.listdir(group))[:1], "0")
    with open(chunk, "r+b") as f:  # one byte flipped: the chunk's CRC-32C no longer matches
        f.seek(8)
        b = f.read(1)
        f.seek(8)
        f.write(bytes([b[0] ^ 0xFF]))
    found = {f.part: f for f in verify_store(store)}
    assert found["ritz"].ok and "harmless" in found["ritz"].text and "products" in found["ritz"].text
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        model = _fit(X, store)
    _check(model, X)
    assert not model.report["update"]["first_pass_fused"]
    assert any("Ritz record cannot start the update" in r.getMessage() for r in caplog.records)


def test_a_record_whose_metadata_is_unreadable_is_harmless_too(grown, capsys, caplog):
    """Before: zarr's ``name in root`` parsed the record's cut ``zarr.json``: ``dkpca verify`` said only json's
    'Expecting value: ...' (exit 2) and the update raised json's ``JSONDecodeError``."""
    X, store = grown
    path = os.path.join(store, FitStore.at(store).model_group("ritz"), "zarr.json")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    assert main(["verify", store]) == 0
    out = capsys.readouterr().out
    assert "has metadata zarr cannot read" in out and "harmless: an update of this fit starts as a fresh" in out
    with caplog.at_level(logging.WARNING, logger="dkpca"):
        model = _fit(X, store)
    _check(model, X)
    assert any("Ritz record cannot start the update" in r.getMessage() for r in caplog.records)


def test_a_fit_whose_solver_records_nothing_withdraws_the_old_record(grown):
    X, store = grown
    _fit(X[:300], store, solver="dense")  # the same rows and K, another solver: a new model, no Ritz pairs
    fs = FitStore.at(store)
    assert fs.model_group("ritz") is None and not any(m.startswith("ritz") for m in os.listdir(store))
    model = _fit(X, store)
    _check(model, X)
    assert not model.report["update"]["first_pass_fused"]


def test_a_product_that_skips_zero_rows_reads_fewer_blocks_and_equals_the_whole_product(grown, monkeypatch):
    _, store = grown
    op = StoredKernelOperator(GramStore(FitStore.at(store)).open())
    V = np.zeros((300, 4))
    V[200:] = np.random.default_rng(0).standard_normal((100, 4))
    whole = op.raw_matmat(V)
    read = _blocks_read(monkeypatch)
    transposed: list[bool] = []  # per block read: whether its rows' piece of V was handed over as zero (None)
    real = operator_module.block_products
    monkeypatch.setattr(operator_module, "block_products",
                        lambda blk, VI, *rest: transposed.append(VI is None) or real(blk, VI, *rest))
    np.testing.assert_allclose(op.raw_matmat(V, zero_above=200), whole, rtol=1e-13, atol=0)
    # 300 rows in tiles of 64: 5 row blocks; rows 0-199 end inside block 3 (192-255): blocks with J >= 3 are read
    assert EDGE * 3 < 200 < EDGE * 4 and sorted(read) == sorted((i, j) for j in (3, 4) for i in range(j + 1))
    # of those 9, the 6 with I in blocks 0-2 (wholly zero rows) make no K^T V_I
    assert transposed.count(True) == 6 and len(transposed) == 9


def test_uncentring_a_product_undoes_its_centring():
    """``uncenter_product(center_product(K V)) = K V``, and ``center_product`` is ``H K H V`` (dense reference)."""
    rng = np.random.default_rng(1)
    A = rng.standard_normal((50, 50))
    K = A @ A.T
    V = rng.standard_normal((50, 3))
    c = Centering.of_matrix(K)
    H = np.eye(50) - 1.0 / 50
    Kt_V = c.center_product(K @ V, V)
    np.testing.assert_allclose(Kt_V, H @ K @ H @ V, rtol=0, atol=1e-10 * np.abs(K).max())
    np.testing.assert_allclose(c.uncenter_product(Kt_V, V), K @ V, rtol=0, atol=1e-10 * np.abs(K).max())


def test_verify_says_a_record_of_an_earlier_model_is_not_this_ones(grown):
    """A fit killed between switching to its model and writing its record leaves the earlier model's record:
    verify called it "the model's Ritz pairs"; an update ignores it (the model it names is not the current one)."""
    X, store = grown
    fs = FitStore.at(store)
    assert "the model's Ritz pairs and K times them" in {f.part: f.text for f in verify_store(fs)}["ritz"]
    arrays, attrs = fs.read_model()
    fs.write_model({name: (a, None) for name, a in arrays.items()}, attrs)  # the next model, no record of its own
    found = {f.part: f for f in verify_store(fs)}
    assert found["ritz"].ok and "a record of an earlier model, not of this one" in found["ritz"].text
