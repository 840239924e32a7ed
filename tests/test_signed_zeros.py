"""0.0 and -0.0 are one value: data that differs from the store's copy only there is the copy's data.

The store compares data by digests of its bytes (the fingerprint, the copy's chunk digests), and 0.0 and -0.0
differ in their sign bit: a column negated (``-X`` of zeros), ``np.round`` of small negatives or another
program's writer turns one into the other.  Every kernel gives them the same entries, so an update or a refit
of such data must not be refused as "changed" (it was: "row chunk 0 ... of the input differs from the store's
copy", "store ... was fitted on different data").  A value that really changed still is refused.

Reference: ``scipy.linalg.eigh`` of the dense centred kernel (``conftest.assert_rbf_eigenvalues``), as in
``tests/test_grow.py``: block Lanczos at tol 1e-6 on this well separated spectrum gives eigenvalues within
1e-8 lambda_1.  300 rows in tiles of 64 end inside a tile (rows 256-299), so the update rewrites that chunk of
the copy: row 5 lies in a chunk it never touches, row 270 in that boundary chunk.
"""

from __future__ import annotations

import numpy as np
import pytest

import dkpca
from dkpca.storage import FitStore, verify_store
from dkpca.storage import datachunks as datachunks_module

from .conftest import assert_rbf_eigenvalues, make_data

GAMMA, K = 0.2, 3
KW = dict(n_components=K, gamma=GAMMA, chunk_size=64, dtype="float64", solver="lanczos")
ZEROS = ((5, 1), (270, 3))  # in a chunk an update keeps, and in the chunk the old rows end in


def _data(sign: float) -> np.ndarray:
    """400 rows whose entries at ZEROS are 0.0 with the sign ``sign`` (``np.copysign``)."""
    X = make_data(400, seed=3)
    for r, c in ZEROS:
        X[r, c] = np.copysign(0.0, sign)
    return X


def _stored_signs(store: str) -> list[bool]:
    """The sign bits of the copy's entries at ZEROS."""
    X = FitStore.at(store).training_array()
    return [bool(np.signbit(X[r:r + 1][0, c])) for r, c in ZEROS]


@pytest.mark.parametrize("stored, given", [(-1.0, 1.0), (1.0, -1.0)], ids=["copy -0.0", "copy +0.0"])
def test_an_update_whose_old_rows_differ_only_in_the_sign_of_zeros_is_an_update(tmp_path, stored, given):
    store = str(tmp_path / "s.dkpca.zarr")
    old = dkpca.fit(_data(stored)[:300], store=store, **KW)
    model = dkpca.fit(_data(given), store=store, **KW)
    assert model.report["update"]["rows_added"] == 100
    assert_rbf_eigenvalues(model, _data(given), GAMMA, K)
    # the copy keeps its own bytes for its old rows, the boundary chunk's too, which the update wrote again
    assert _stored_signs(store) == [stored < 0] * 2
    # the model fitted before reads its own rows, each verified against the digests recorded for them
    np.testing.assert_allclose(old.transform(_data(given)[300:]),
                               dkpca.fit(_data(stored)[:300], **KW).transform(_data(given)[300:]), atol=1e-10)


@pytest.mark.parametrize("stored, given", [(-1.0, 1.0), (1.0, -1.0)], ids=["copy -0.0", "copy +0.0"])
def test_a_refit_of_data_that_differs_only_in_the_sign_of_zeros_reuses_k(tmp_path, stored, given):
    store = str(tmp_path / "s.dkpca.zarr")
    dkpca.fit(_data(stored), store=store, **KW)
    model = dkpca.fit(_data(given), store=store, **KW)
    assert model.report["gram"]["computed_blocks"] == 0 and "update" not in model.report
    assert_rbf_eigenvalues(model, _data(given), GAMMA, K)
    assert _stored_signs(store) == [stored < 0] * 2
    again = dkpca.fit(_data(stored), store=store, **KW)  # the copy's own bytes, as before
    assert again.report["gram"]["computed_blocks"] == 0


class Killed(BaseException):
    """A kill: nothing in dkpca catches it."""


def test_an_update_killed_after_it_wrote_the_boundary_chunk_resumes_keeping_the_copy_s_bytes(tmp_path, monkeypatch):
    """Killed once the chunk the old rows end in holds them (the copy's bytes) and new rows after them: the old
    model still reads its rows, verified, and the same command finishes the update."""
    store = str(tmp_path / "s.dkpca.zarr")
    old = dkpca.fit(_data(-1.0)[:300], store=store, **KW)
    Z = old.transform(_data(1.0)[:20])
    real = datachunks_module.copy_block

    def copy(block, target, edge, offset=0, block_info=None):
        if offset and block_info[0]["array-location"][0][0] > 0:  # the chunks after the boundary's
            raise Killed
        return real(block, target, edge, offset, block_info=block_info)

    with monkeypatch.context() as m:
        m.setattr(datachunks_module, "copy_block", copy)
        with pytest.raises(Killed):
            dkpca.fit(_data(1.0), store=store, **KW)
    assert FitStore.at(store).open()["data"]["X"].shape[0] == 400  # the boundary chunk was written
    np.testing.assert_allclose(dkpca.load(store).transform(_data(1.0)[:20]), Z, rtol=0, atol=1e-12)
    assert all(f.ok for f in verify_store(store))
    model = dkpca.fit(_data(1.0), store=store, **KW)
    assert model.report["update"]["rows_before"] == 300
    assert_rbf_eigenvalues(model, _data(1.0), GAMMA, K)
    assert _stored_signs(store) == [True, True]


def test_a_zero_that_became_the_smallest_number_is_still_a_changed_row(tmp_path):
    """Values are compared, not magnitudes: 5e-324 is not 0.0 (its kernel entries differ in the last bits)."""
    store = str(tmp_path / "s.dkpca.zarr")
    X = _data(-1.0)
    dkpca.fit(X[:300], store=store, **KW)
    changed = X.copy()
    changed[5, 1] = 5e-324
    with pytest.raises(ValueError, match=r"row chunk 0 \(rows 0 to 63\) of the input differs from the store's copy"):
        dkpca.fit(changed, store=store, **KW)
    with pytest.raises(ValueError, match="was fitted on different data"):
        dkpca.fit(changed[:300], store=store, **KW)
