"""Temporary stores (in-memory input without ``store=``) of processes that were killed are swept by the next one.

Before: a process killed while it held one (SIGKILL, an out-of-memory kill, joblib ending a grid search's worker)
left its ``dkpca-*`` directory, a copy of the training data, in the temporary directory for ever.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile

import dask.array as da
import numpy as np
import psutil
import pytest

import dkpca
from dkpca.request.tempstore import OWNER, PREFIX, sweep


@pytest.fixture
def tmpdir_here(tmp_path, monkeypatch):
    """This process's and its children's temporary directory: ``tmp_path``."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def _left(parent, name: str, **owner) -> str:
    path = os.path.join(str(parent), PREFIX + name)
    os.makedirs(os.path.join(path, "store.dkpca.zarr"))
    if owner:
        with open(os.path.join(path, OWNER), "w") as f:
            json.dump(owner, f)
    return path


def test_a_killed_processs_temporary_store_is_removed_by_the_next_one(tmpdir_here):
    code = ("import os, dask.array as da, numpy as np, dkpca; "
            "m = dkpca.KernelPCA(2).fit(da.from_array(np.random.default_rng(0).normal(size=(300, 4)), chunks=150)); "
            "print(m.model_.temporary.directory, flush=True); os.kill(os.getpid(), 9)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    left = proc.stdout.strip()
    assert proc.returncode == -9 and os.path.isdir(os.path.join(left, "store.dkpca.zarr"))  # what a kill leaves
    est = dkpca.KernelPCA(2).fit(da.from_array(np.random.default_rng(1).normal(size=(300, 4)), chunks=150))
    assert not os.path.exists(left) and os.path.isdir(est.model_.temporary.directory)


def test_only_the_stores_of_owners_gone_from_this_host_are_swept(tmpdir_here):
    me = psutil.Process()
    host = socket.gethostname()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = _left(tmpdir_here, "dead", host=host, pid=int(gone.stdout), started=1.0)
    reused = _left(tmpdir_here, "reused", host=host, pid=me.pid, started=me.create_time() - 100)  # pid now another's
    alive = _left(tmpdir_here, "alive", host=host, pid=me.pid, started=me.create_time())
    elsewhere = _left(tmpdir_here, "elsewhere", host=host + "-other-node", pid=int(gone.stdout), started=1.0)
    unrecorded = _left(tmpdir_here, "unrecorded")  # not ours (or being made): never touched
    assert sweep() == 2
    assert not os.path.exists(dead) and not os.path.exists(reused)
    assert all(os.path.isdir(p) for p in (alive, elsewhere, unrecorded))
