"""A transform output has one writer at a time: the output's writer lock (the store's lease, ``dkpca.storage.lock``).

Before it, a second ``dkpca transform ... --overwrite`` replaced an output another transform was writing, and the
first one's chunk writes landed in the second's output, which the second then marked complete: another input's
projections in it, found only by ``dkpca verify``.  Reference for the values: the model's own in-memory
projection of the same rows (tested against ``scipy.linalg.eigh`` of the centred kernel elsewhere), atol 1e-12.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import dask.array as da
import numpy as np
import pytest
import zarr

import dkpca
from dkpca.cli import main
from dkpca.storage.lock import LOCK_NAME, LeaseLostError
from dkpca.storage.outputs import KEY, open_output

from .conftest import cli_error

#: the origin of an output written by some other transform (another model, another input)
OTHER = {"store": "elsewhere.dkpca.zarr", "model": "another model's digest",
         "input": {"path": "other.npy", "fingerprint": {"shape": [300, 4], "checksum": "0"}}}


def _files(path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)


def _lock_of(path, pid: int, token: str) -> None:
    """A lock on ``path`` as another holder on this host writes it, with a fresh heartbeat."""
    doc = {"host": socket.gethostname(), "pid": pid, "token": token, "heartbeat": time.time(), "lease": 300.0}
    with open(os.path.join(path, LOCK_NAME + ".w"), "w") as f:
        json.dump(doc, f)
    os.replace(os.path.join(path, LOCK_NAME + ".w"), os.path.join(path, LOCK_NAME))


def test_a_second_transform_is_refused_while_one_writes_the_output(tmp_path, capsys, fitted):
    X, data, store = fitted
    out = str(tmp_path / "z.zarr")
    with open_output(out, out, OTHER, (300, 3), (100, 3), False) as first:
        before = {f: open(os.path.join(out, f), "rb").read() for f in _files(out)}
        err = cli_error(capsys, ["transform", store, data, out, "--overwrite", "-q"])
        assert f"output {out!r} is in use by another transform (process {os.getpid()} on" in err, err
        assert {f: open(os.path.join(out, f), "rb").read() for f in _files(out)} == before  # nothing replaced
        first.write(da.full((300, 3), 7.0, chunks=(100, 3)))
    assert _files(out) == ["c/0/0", "c/1/0", "c/2/0", "zarr.json"]  # the lock went with the transform
    assert main(["verify", out]) == 0 and (zarr.open_array(out)[:] == 7.0).all()


def test_a_write_after_the_output_was_taken_over_writes_nothing(tmp_path):
    out = str(tmp_path / "z.zarr")
    with open_output(out, out, OTHER, (300, 3), (100, 3), False) as first:
        _lock_of(out, 1, "theirs")  # its lease ran out and another transform took the output over
        with pytest.raises(LeaseLostError):
            first.write(da.ones((300, 3), chunks=(100, 3)))
    assert _files(out) == [LOCK_NAME, "zarr.json"]  # no chunk of the first; the other's lock left to it


def test_a_killed_transforms_lock_is_taken_over_by_the_same_command(tmp_path, capsys, fitted):
    """The state a ``kill -9`` leaves: an incomplete output with its writer's lock.  The same command takes the
    lock over (its pid is gone on this host), writes the missing chunk and marks the output complete."""
    X, data, store = fitted
    out = str(tmp_path / "z.zarr")
    assert main(["transform", store, data, out, "-q"]) == 0
    arr = zarr.open_array(out, mode="r+")
    arr.update_attributes({KEY: {**arr.attrs[KEY], "complete": False}})
    chunk = sorted(f for f in _files(out) if f.startswith("c/"))[-1]
    os.remove(os.path.join(out, chunk))
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    _lock_of(out, gone, "killed")
    capsys.readouterr()
    assert main(["transform", store, data, out]) == 0
    said = capsys.readouterr()
    assert "wrote 300 x 3 projections" in said.out
    assert f"dkpca: warning: took over the lock {out}/{LOCK_NAME}: process {gone} on this host is gone" in said.err
    assert LOCK_NAME not in _files(out) and main(["verify", out]) == 0
    np.testing.assert_allclose(zarr.open_array(out)[:], dkpca.load(store).transform(X), rtol=0, atol=1e-12)


def test_an_output_holding_only_a_killed_transforms_lock_is_written(tmp_path, capsys, fitted):
    """Killed after it locked a new output and before it created the array: a directory holding the lock alone."""
    X, data, store = fitted
    out = tmp_path / "z.zarr"
    out.mkdir()
    _lock_of(out, 1 << 22, "killed")  # no such pid (above Linux's default pid_max)
    assert main(["transform", store, data, str(out), "-q"]) == 0
    assert LOCK_NAME not in _files(out) and main(["verify", str(out)]) == 0


def test_a_second_transform_that_sees_the_first_create_the_output_names_it_in_use(tmp_path, capsys, fitted,
                                                                                 monkeypatch):
    """The same transform submitted twice: the second looked while the first was creating the output -- no
    metadata yet when it opened, ``zarr.json`` there when it listed -- and called it "not a dkpca transform
    output (it is a directory of other files)" (found running two at once: 1 in 10).  The metadata is read again."""
    from dkpca.storage import outputstate

    X, data, store = fitted
    out = str(tmp_path / "z.zarr")
    opened = zarr.open
    seen = []

    def open_before_its_metadata(path, mode, **kwargs):
        seen.append(path)
        if len(seen) == 1:  # the first look, before the other transform's zarr.json was there
            raise FileNotFoundError(path)
        return opened(path, mode=mode, **kwargs)

    with open_output(out, out, OTHER, (300, 3), (100, 3), False):
        monkeypatch.setattr(outputstate.zarr, "open", open_before_its_metadata)
        err = cli_error(capsys, ["transform", store, data, out, "-q"])
    assert f"output {out!r} is in use by another transform (process {os.getpid()} on" in err, err
    assert len(seen) >= 2
