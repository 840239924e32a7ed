"""Issue 37, the CLI's edges: transform outputs (never deleting what dkpca did not write; resumable) and the
one-line errors of odd arguments, broken pipes and corrupt lock files."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import zarr
from sklearn.metrics.pairwise import rbf_kernel

import dkpca
from dkpca.cli import main
from dkpca.storage import CorruptChunkError
from dkpca.storage.lock import LOCK_NAME, StoreLockedError, exclusive

from .conftest import cli_error, make_data, reference_eigh, s3_keys, write_data

GAMMA = 0.2  # the ``fitted`` fixture's kernel: rbf, gamma 0.2, k = 3, float64, on 300 x 4 points
#: a transform input of 5 row chunks (dkpca.linalg.default_block_size: 4,000 rows): an output of 5 chunks
ROWS, CHUNKS = 20000, 5


def listing(path) -> dict[str, bytes]:
    """Every file under ``path`` (relative name -> bytes): "nothing deleted or changed" compares two of these."""
    out = {}
    for dirpath, _, files in os.walk(str(path)):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, str(path))] = fh.read()
    return out


def reference_projection(X: np.ndarray, Xt: np.ndarray, Z_train: np.ndarray, k: int = 3) -> np.ndarray:
    """Projections of ``Xt`` from ``scipy.linalg.eigh`` of the dense centred kernel of ``X``: K~(x, X) U / sqrt(lam).

    Eigenvector signs are arbitrary: each column takes the sign that matches ``Z_train`` (dkpca's embedding).
    """
    K = rbf_kernel(X, gamma=GAMMA)
    lam, U = reference_eigh(K, k)
    Kx = rbf_kernel(Xt, X, gamma=GAMMA)
    Kc = Kx - Kx.mean(axis=1, keepdims=True) - K.mean(axis=0)[None, :] + K.mean()
    Z = Kc @ U / np.sqrt(lam)
    ref_train = (K - K.mean(axis=1, keepdims=True) - K.mean(axis=0)[None, :] + K.mean()) @ U / np.sqrt(lam)
    signs = np.sign(np.sum(ref_train * Z_train, axis=0))
    return Z * signs


# -- case 3: --overwrite replaces only dkpca's own transform output -------------------------------
def _user_group(path) -> None:
    g = zarr.open_group(str(path), mode="w")
    g.create_array("precious", data=np.arange(10.0))
    g.attrs["owner"] = "me"


def _user_array_with_file(path) -> None:
    zarr.create_array(str(path), data=np.arange(5.0))
    with open(os.path.join(str(path), "notes.txt"), "w") as f:
        f.write("mine")


@pytest.mark.parametrize("kind", ["dkpca store", "user group", "user array with a file"])
def test_overwrite_refuses_what_dkpca_did_not_write(tmp_path, capsys, fitted, kind):
    """Before: all of OUTPUT was deleted and replaced by the projections. Now: one line naming the path and the
    fix, and every file is still there, byte for byte (listing before and after)."""
    X, data, store = fitted
    out = tmp_path / "out.zarr"
    if kind == "dkpca store":
        assert main(["fit", data, "-k", "2", "--store", str(out), "-q", "--no-progress"]) == 0
    elif kind == "user group":
        _user_group(out)
    else:
        _user_array_with_file(out)
    before = listing(out)
    assert before
    err = cli_error(capsys, ["transform", store, data, str(out), "--overwrite", "-q"])
    assert str(out) in err and "not a dkpca transform output" in err and "remove it yourself" in err, err
    assert listing(out) == before


def test_overwrite_refuses_own_output_holding_a_users_file(tmp_path, capsys, fitted):
    """A dkpca transform output into which the user put a file: --overwrite (another input) removes nothing."""
    X, data, store = fitted
    out = tmp_path / "z.zarr"
    assert main(["transform", store, data, str(out), "-q"]) == 0
    with open(out / "notes.txt", "w") as f:
        f.write("mine")
    other = write_data(tmp_path / "t.zarr", make_data(50, seed=3, d=4))
    before = listing(out)
    err = cli_error(capsys, ["transform", store, other, str(out), "--overwrite", "-q"])
    assert "notes.txt" in err and "remove" in err, err
    assert listing(out) == before


def test_overwrite_replaces_own_output(tmp_path, fitted):
    """--overwrite replaces an earlier dkpca transform output of other data; the result is the reference
    projection (eigh of the dense centred kernel, atol 1e-8)."""
    X, data, store = fitted
    out = tmp_path / "z.zarr"
    assert main(["transform", store, data, str(out), "-q"]) == 0
    Xt = make_data(50, seed=3, d=4)
    other = write_data(tmp_path / "t.zarr", Xt)
    assert main(["transform", store, other, str(out), "--overwrite", "-q"]) == 0
    Z = zarr.open_array(str(out), mode="r")[:]
    ref = reference_projection(X, Xt, dkpca.load(store).embedding_)
    np.testing.assert_allclose(Z, ref, atol=1e-8)
    assert sorted(listing(out)) == ["c/0/0", "zarr.json"]


def test_an_input_named_as_a_file_url_is_the_same_directory_as_its_path(tmp_path, capsys, fitted):
    """Before: ``file:///.../z.zarr`` and ``z.zarr`` compared as different places, and --overwrite deleted the
    input's chunks (an earlier output fed back in), then blamed NaN in row 0.  Now the same refusal as for two
    paths, and every file is still there."""
    X, data, store = fitted
    out = tmp_path / "z.zarr"
    assert main(["transform", store, data, str(out), "-q"]) == 0
    before = listing(out)
    err = cli_error(capsys, ["transform", store, f"file://{out}", str(out), "--overwrite", "-q"])
    assert "is the input" in err and "destroy data" in err, err
    assert listing(out) == before


def test_a_file_url_output_is_written_and_one_inside_the_store_refused(tmp_path, capsys, fitted):
    X, data, store = fitted
    out = tmp_path / "u.zarr"
    assert main(["transform", store, data, f"file://{out}", "-q"]) == 0
    np.testing.assert_allclose(zarr.open_array(str(out), mode="r")[:], dkpca.load(store).transform(X), atol=1e-12)
    os.mkdir(os.path.join(store, "inside"))
    err = cli_error(capsys, ["transform", store, data, f"file://{store}/inside", "-q"])
    assert "lies inside the store" in err, err
    assert os.listdir(os.path.join(store, "inside")) == []


def test_s3_output_interrupted_resumed_and_replaced(s3_bucket, capsys, monkeypatch, fitted):
    """The same rules for an output on an object store: an interrupted output resumes, --overwrite with other input
    replaces it key by key, and a key of the user's under it is never removed (keys listed before and after)."""
    import s3fs

    X, data, store = fitted
    Xt = make_data(6000, seed=5, d=4)  # two output chunks of 3,000 rows
    inp, out = f"{s3_bucket}/T.zarr", f"{s3_bucket}/Z.zarr"
    zarr.create_array(inp, data=Xt, chunks=(3000, 4))
    with monkeypatch.context() as m:
        _interrupt_after(m, 1)
        assert main(["transform", store, inp, out, "-q"]) == 130
    assert main(["transform", store, inp, out, "-q"]) == 0
    assert "resumed: 1 of 2" in capsys.readouterr().out
    Z = zarr.open_array(out, mode="r")[:]
    np.testing.assert_allclose(Z, reference_projection(X, Xt, dkpca.load(store).embedding_), atol=1e-8)

    assert main(["transform", store, data, out, "--overwrite", "-q"]) == 0  # other input: replaced
    assert s3_keys(out) == ["c/0/0", "zarr.json"]
    s3fs.S3FileSystem(skip_instance_cache=True).pipe_file(f"{out.split('://', 1)[1]}/notes.txt", b"mine")
    err = cli_error(capsys, ["transform", store, inp, out, "--overwrite", "-q"])
    assert "notes.txt" in err
    assert s3_keys(out) == ["c/0/0", "notes.txt", "zarr.json"]


def test_existing_output_of_other_input_needs_overwrite(tmp_path, capsys, fitted):
    X, data, store = fitted
    out = tmp_path / "z.zarr"
    assert main(["transform", store, data, str(out), "-q"]) == 0
    other = write_data(tmp_path / "t.zarr", make_data(50, seed=3, d=4))
    before = listing(out)
    err = cli_error(capsys, ["transform", store, other, str(out), "-q"])
    assert "--overwrite" in err and "another path" in err, err
    assert listing(out) == before


def test_a_transform_whose_output_another_replaced_meanwhile_does_not_mark_it_complete(tmp_path, capsys, fitted):
    """A transform writing an output that another --overwrite replaced meanwhile said 'wrote ... projections to
    OUTPUT' (exit 0) over the other's projections; now it refuses, naming what the output holds.  The chunks it
    wrote there are not the other's recorded ones: verify names them and the other's command rewrites them."""
    import dask.array as da

    from dkpca.storage.outputs import prepare_output

    X, data, store = fitted
    out = str(tmp_path / "z.zarr")
    origin = {"store": store, "model": "the first transform's model",
              "input": {"path": "first.npy", "fingerprint": {"shape": [300, 3], "checksum": "0"}}}
    first = prepare_output(out, out, origin, (300, 3), (100, 3), False)
    assert main(["transform", store, data, out, "--overwrite", "-q"]) == 0  # another, meanwhile
    with pytest.raises(FileExistsError, match="was replaced while this transform wrote it: it holds the projections "
                                              "of another model"):
        first.write(da.zeros((300, 3), chunks=(100, 3)))
    # written unlocked (prepare_output without open_output's lock), its chunks landed in the other's output:
    # found by verify, rewritten by the other's command again
    assert main(["verify", out]) == 1
    assert main(["transform", store, data, out, "-q"]) == 0 and main(["verify", out]) == 0
    np.testing.assert_allclose(zarr.open_array(out)[:], dkpca.load(store).transform(X), rtol=0, atol=1e-12)


# -- case 6: an interrupted transform is marked incomplete and the same command resumes it -------------------
def _interrupt_after(monkeypatch, chunks: int) -> None:
    """Make the transform's chunk writes raise KeyboardInterrupt (Ctrl-C) after ``chunks`` of them."""
    real = zarr.Array.__setitem__
    count, lock = [0], threading.Lock()

    def setitem(self, key, value):
        with lock:
            count[0] += 1
            n = count[0]
        if n > chunks:
            raise KeyboardInterrupt
        return real(self, key, value)

    monkeypatch.setattr(zarr.Array, "__setitem__", setitem)


def _chunk_mtimes(out) -> dict[str, int]:
    base = os.path.join(str(out), "c")
    return {os.path.relpath(os.path.join(d, f), base): os.stat(os.path.join(d, f)).st_mtime_ns
            for d, _, files in os.walk(base) for f in files}


def test_interrupted_transform_is_marked_and_resumed(tmp_path, capsys, monkeypatch, fitted):
    """Before: the output looked complete (unwritten rows zeros), the message said "rerun the same command to
    resume", and the rerun refused ("output already exists"). Now: the output says it is incomplete (its
    unwritten rows read NaN, never plausible zeros), verify/info/readers say so, and the same command writes
    only the missing chunks. Reference: eigh of the dense centred kernel, atol 1e-8."""
    X, data, store = fitted
    Xt = make_data(ROWS, seed=5, d=4)
    inp = write_data(tmp_path / "t.zarr", Xt)
    out = tmp_path / "z.zarr"
    with monkeypatch.context() as m:
        _interrupt_after(m, 3)
        assert main(["transform", store, inp, str(out), "-q"]) == 130
    err = capsys.readouterr().err
    assert "rerun the same command" in err and str(out) in err and "already exists" not in err, err
    written = _chunk_mtimes(out)
    assert 0 < len(written) < CHUNKS
    Z = zarr.open_array(str(out), mode="r")[:]
    assert np.isnan(Z).any() and not (Z == 0).all(axis=1).any()  # unwritten rows are NaN, not zeros

    # verify: exit 1, says incomplete; info says so; a reader (fit) refuses it in one line
    assert main(["verify", str(out)]) == 1
    assert "incomplete" in capsys.readouterr().out
    assert main(["info", str(out)]) == 0
    assert "incomplete" in capsys.readouterr().out
    err = cli_error(capsys, ["fit", str(out), "--store", str(tmp_path / "s2.zarr"), "-q", "--no-progress"])
    assert "incomplete" in err
    with pytest.raises(ValueError, match="incomplete"):  # passed as an array object, as by its path (read NaN before)
        dkpca.fit(zarr.open_array(str(out), mode="r"), 2, store=str(tmp_path / "s3.zarr"))

    # the same command resumes: the chunks written are kept (same mtime), the rest written; complete
    time.sleep(0.01)
    assert main(["transform", store, inp, str(out), "-q"]) == 0
    assert "resumed" in capsys.readouterr().out
    after = _chunk_mtimes(out)
    assert len(after) == CHUNKS and all(after[c] == t for c, t in written.items())
    Z = zarr.open_array(str(out), mode="r")[:]
    np.testing.assert_allclose(Z, reference_projection(X, Xt, dkpca.load(store).embedding_), atol=1e-8)
    assert main(["verify", str(out)]) == 0
    capsys.readouterr()

    # a complete output, same command again: nothing to do, nothing rewritten
    assert main(["transform", store, inp, str(out), "-q"]) == 0
    assert "already complete" in capsys.readouterr().out
    assert _chunk_mtimes(out) == after


def test_an_output_chunk_copied_over_another_is_found_and_rewritten(tmp_path, capsys, fitted):
    """Each chunk is intact by its CRC, but chunk 1 holds chunk 0's rows.  Before: verify said intact, a rerun had
    nothing to do, a fit read it as data.  Now each chunk's digest, recorded with ``complete``, names it; a rerun
    rewrites only it, equal to an untouched output."""
    X, data, store = fitted
    inp = write_data(tmp_path / "t.zarr", make_data(ROWS, seed=5, d=4))
    out, ref = tmp_path / "z.zarr", tmp_path / "ref.zarr"
    assert main(["transform", store, inp, str(out), "-q"]) == 0
    assert main(["transform", store, inp, str(ref), "-q"]) == 0
    (out / "c" / "1" / "0").write_bytes((out / "c" / "0" / "0").read_bytes())
    capsys.readouterr()
    assert main(["verify", str(out)]) == 1
    assert "not the ones written there (first: (1, 0))" in capsys.readouterr().out
    with pytest.raises(CorruptChunkError, match=r"chunk \(1, 0\).*another chunk's data"):
        dkpca.fit(str(out), n_components=2, store=tmp_path / "o.dkpca.zarr")
    assert main(["transform", store, inp, str(out), "-q"]) == 0
    assert "resumed: 4 of 5 chunks" in capsys.readouterr().out
    np.testing.assert_array_equal(zarr.open_array(str(out), mode="r")[:], zarr.open_array(str(ref), mode="r")[:])
    assert main(["verify", str(out)]) == 0


def test_resume_refused_when_input_or_model_changed(tmp_path, capsys, monkeypatch, fitted):
    """An incomplete output is resumed only from the same input (fingerprint) and the same model."""
    X, data, store = fitted
    inp = write_data(tmp_path / "t.zarr", make_data(ROWS, seed=5, d=4))
    out = tmp_path / "z.zarr"
    with monkeypatch.context() as m:
        _interrupt_after(m, 2)
        assert main(["transform", store, inp, str(out), "-q"]) == 130
    capsys.readouterr()
    before = listing(out)
    write_data(tmp_path / "t.zarr", make_data(ROWS, seed=6, d=4))  # same shape, other values
    err = cli_error(capsys, ["transform", store, inp, str(out), "-q"])
    assert "input" in err and "--overwrite" in err, err
    assert listing(out) == before
    write_data(tmp_path / "t.zarr", make_data(ROWS, seed=5, d=4))  # the input back; the model refitted
    assert main(["fit", data, "-k", "3", "--gamma", "0.3", "--store", store, "--dtype", "float64", "-q",
                 "--no-progress", "--overwrite"]) == 0
    err = cli_error(capsys, ["transform", store, inp, str(out), "-q"])
    assert "model" in err and "--overwrite" in err, err
    assert listing(out) == before


def test_sigint_message_matches_what_happens(tmp_path, fitted):
    """A real Ctrl-C (SIGINT) of ``dkpca transform`` in a subprocess: exit 130, the message says rerun, and the
    rerun finishes the output (synchronised on the output's metadata file, written just before its 10 chunks,
    never on printed text)."""
    X, data, store = fitted
    inp = write_data(tmp_path / "t.zarr", make_data(2 * ROWS, seed=5, d=4))
    out = tmp_path / "z.zarr"
    cmd = [sys.executable, "-m", "dkpca", "transform", store, inp, str(out), "-q"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(out / "zarr.json") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the transform finished before the interrupt arrived")
    assert proc.returncode == 130 and "rerun the same command" in err, err
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert zarr.open_array(str(out), mode="r").attrs["dkpca_transform"]["complete"] is True


# -- unclear CLI cases: one line, exit 2, nothing before it -----------------------------------------
def usage_error(capsys, argv) -> str:
    """Run the CLI in-process: exit status 2 (returned, or the parser's SystemExit), nothing on stdout, one
    ``dkpca: error:`` line on stderr; that line."""
    capsys.readouterr()  # what fixtures printed
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    captured = capsys.readouterr()
    assert status == 2 and captured.out == "", captured
    assert captured.err.startswith("dkpca: error: ") and captured.err.count("\n") == 1, captured.err
    return captured.err


def test_cluster_timeout_not_a_duration(capsys, fitted):
    """Before: a KeyError traceback from dask's parse_timedelta."""
    X, data, store = fitted
    err = usage_error(capsys, ["fit", data, "--store", store, "--cluster", "local", "--cluster-timeout", "abc"])
    assert "--cluster-timeout" in err and "'abc'" in err and "600s" in err, err


@pytest.mark.parametrize("value", ["0", "-5s", "inf"])
def test_cluster_timeout_not_positive(capsys, fitted, value):
    X, data, store = fitted
    err = usage_error(capsys, ["transform", store, data, "o.zarr", "--cluster", "local",
                               f"--cluster-timeout={value}"])
    assert "--cluster-timeout" in err and "above zero" in err, err


def test_scheduler_not_an_address(capsys, fitted):
    """Before: "cluster file 'notanaddress' does not exist"."""
    X, data, store = fitted
    err = usage_error(capsys, ["fit", data, "--store", store, "--scheduler", "notanaddress"])
    assert "neither a scheduler address nor a cluster file" in err and "tls://host:port" in err, err


def test_scheduler_given_a_file(tmp_path, capsys, fitted):
    """A file given to --scheduler (a scheduler's JSON, a cluster file) names the option that takes it."""
    X, data, store = fitted
    f = tmp_path / "scheduler.json"
    f.write_text(json.dumps({"address": "tls://127.0.0.1:1"}))
    err = usage_error(capsys, ["fit", data, "--store", store, "--scheduler", str(f)])
    assert "--scheduler-file" in err and "--cluster" in err, err


@pytest.mark.parametrize("args, name", [(["--n-samples", "-5"], "--n-samples"), (["--workers", "0"], "--workers"),
                                         (["--n-components", "0"], "--n-components")])
def test_demo_numbers_checked_by_the_parser(tmp_path, capsys, args, name):
    """Before: "negative dimensions are not allowed"; ``--workers 0`` ran the demo anyway."""
    err = usage_error(capsys, ["demo", "--dir", str(tmp_path), "--n-samples", "300", *args])
    assert name in err and "positive integer" in err, err
    assert not os.listdir(tmp_path)  # refused before anything was written


@pytest.mark.parametrize("command", ["info", "verify"])
def test_broken_pipe_exits_quietly(fitted, command):
    """``dkpca info STORE | true``: before, a BrokenPipeError traceback. Now nothing on stderr and the status of a
    process ended by SIGPIPE (128 + 13), as Python's documentation advises (output to devnull, then exit)."""
    X, data, store = fitted
    proc = subprocess.Popen([sys.executable, "-m", "dkpca", command, store], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is written
    _, err = proc.communicate(timeout=120)
    assert err == b"" and proc.returncode == 128 + signal.SIGPIPE, err


# -- a lock whose heartbeat is in the future or not a number ---------------------------------------------
def _write_lock(store, heartbeat, host="node042", lease=300.0) -> None:
    os.makedirs(store, exist_ok=True)
    doc = {"host": host, "pid": 12345, "token": "theirs", "heartbeat": heartbeat, "lease": lease}
    with open(os.path.join(store, LOCK_NAME), "w") as f:
        json.dump(doc, f)


@pytest.mark.parametrize("heartbeat", [9e18, "soon", None])
def test_corrupt_heartbeat_is_taken_over(tmp_path, caplog, heartbeat):
    """Before: ``"heartbeat": 9e18`` was refused for ever ("heartbeat -8999999998204322816 s ago"). A heartbeat
    no live holder can have written is a corrupt lock: taken over, with a warning naming why."""
    store = str(tmp_path / "s.zarr")
    _write_lock(store, heartbeat)
    with caplog.at_level("WARNING", logger="dkpca"), exclusive(store):
        with open(os.path.join(store, LOCK_NAME)) as f:
            assert json.load(f)["token"] != "theirs"
    assert "took over the lock" in caplog.text


def test_heartbeat_slightly_ahead_is_still_a_live_lock(tmp_path):
    """Clock skew within a lease is not corruption: a holder elsewhere whose clock runs 5 s ahead keeps its lock,
    and the message never says a negative age."""
    store = str(tmp_path / "s.zarr")
    _write_lock(store, time.time() + 5, host="not-" + socket.gethostname())
    with pytest.raises(StoreLockedError) as info, exclusive(store):
        pass
    assert "heartbeat 0 s ago" in str(info.value) and "-" not in str(info.value).split("heartbeat")[1][:4]


@pytest.mark.parametrize("flags, words", [(["--gamma", "0.7"], "kernel differs"),
                                          (["--dtype", "float32"], "dtype differs")], ids=["kernel", "dtype"])
def test_a_refit_onto_k_of_another_kernel_is_refused_as_its_only_line(capsys, fitted, flags, words):
    """The same data into a store whose K is of another kernel (or precision): refused before the fit says
    anything -- not after the plan's line and the data copy's, as the build used to -- and the store's model
    is still the old one."""
    _, data, store = fitted
    capsys.readouterr()
    err = cli_error(capsys, ["fit", data, "-k", "3", "--store", store, "--gamma", "0.2", *flags])
    assert words in err and "overwrite" in err
    assert dkpca.load(store).kernel.to_dict() == {"name": "rbf", "gamma": 0.2}


# -- inputs and settings that failed with a traceback --------------------------------------------------
def _data_npy(tmp_path) -> str:
    np.save(tmp_path / "x.npy", make_data(60, d=3))
    return str(tmp_path / "x.npy")


@pytest.mark.parametrize("content, words", [(b"{}", "is not one a Dask scheduler wrote"),
                                            (b"not json", "is not one a Dask scheduler wrote"),
                                            (b'{"address": 5}', "is not one a Dask scheduler wrote")])
def test_a_scheduler_file_without_an_address_is_one_line(tmp_path, capsys, content, words):
    (tmp_path / "sched.json").write_bytes(content)
    err = cli_error(capsys, ["fit", _data_npy(tmp_path), "-k", "2", "-q", "--scheduler-file",
                             str(tmp_path / "sched.json")])
    assert words in err


def test_a_scheduler_file_that_is_a_directory_is_said_at_once(tmp_path, capsys):
    """Before: waited 30 s for a file to appear, then said it did not exist."""
    (tmp_path / "sched").mkdir()
    start = time.monotonic()
    err = cli_error(capsys, ["fit", _data_npy(tmp_path), "-k", "2", "-q", "--scheduler-file", str(tmp_path / "sched")])
    assert "is a directory; pass the file 'dask scheduler --scheduler-file FILE' writes" in err
    assert time.monotonic() - start < 10


def test_an_unreadable_scheduler_file_says_why(tmp_path, capsys, monkeypatch):
    """A file this user may not read (chmod 000; simulated, as root reads it anyway): the reason, not "is not one
    a Dask scheduler wrote"."""
    from dkpca.cluster import reach

    (tmp_path / "sched.json").write_text('{"address": "tls://127.0.0.1:8786"}')

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(reach, "open", denied, raising=False)
    err = cli_error(capsys, ["fit", _data_npy(tmp_path), "-k", "2", "-q", "--scheduler-file",
                             str(tmp_path / "sched.json")])
    assert "cannot read scheduler file" in err and "(Permission denied)" in err


@pytest.mark.parametrize("content, where", [("dkpca: 5\n", "dkpca"), ("dkpca:\n  cluster: 5\n", "dkpca.cluster")])
def test_a_cluster_file_whose_section_is_not_a_mapping_is_one_line(tmp_path, capsys, content, where):
    """Before: a traceback ending "TypeError: 'int' object is not subscriptable", exit 1."""
    (tmp_path / "c.yaml").write_text(content)
    err = cli_error(capsys, ["plan", _data_npy(tmp_path), "-k", "2", "--no-measure", "--cluster",
                             str(tmp_path / "c.yaml")])
    assert f"c.yaml: {where} must be a mapping" in err


def test_a_cluster_file_that_is_a_directory_is_named_so(tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    err = cli_error(capsys, ["fit", _data_npy(tmp_path), "-k", "2", "-q", "--cluster", str(tmp_path / "adir")])
    assert "is a directory; give the cluster file (YAML) itself" in err


def test_an_empty_npy_file_is_one_line(tmp_path, capsys):
    (tmp_path / "e.npy").write_bytes(b"")
    for command in ("fit", "plan"):
        assert "is empty, not a .npy array" in cli_error(capsys, [command, str(tmp_path / "e.npy"), "-k", "2"])


def test_a_binary_cluster_file_is_one_line_naming_it(tmp_path, capsys):
    data = _data_npy(tmp_path)
    err = cli_error(capsys, ["fit", data, "-k", "2", "-q", "--cluster", data])
    assert f"{data}: not valid YAML" in err


@pytest.mark.parametrize("value, says", [("distributed", "asks for a cluster, but no client of one is running"),
                                         ("bogus", "names no Dask scheduler: use one of multiprocessing")])
def test_a_scheduler_setting_no_computation_can_run_on_is_one_line_before_any_work(tmp_path, capsys, monkeypatch,
                                                                                   value, says):
    """Before: 'distributed' was refused after the data were copied into a new store (left behind), 'bogus' as
    dask's 'Expected one of [...]' without the setting's name.  Now both name DASK_SCHEDULER before any work."""
    import dask

    monkeypatch.setenv("DASK_SCHEDULER", value)
    dask.config.refresh()
    store = tmp_path / "s.zarr"
    try:
        err = cli_error(capsys, ["fit", _data_npy(tmp_path), "-k", "2", "-q", "--store", str(store)])
    finally:
        monkeypatch.delenv("DASK_SCHEDULER")
        dask.config.refresh()
    assert f"the Dask setting scheduler={value!r} (DASK_SCHEDULER) {says}" in err, err
    assert not store.exists()
    with dask.config.set(scheduler=value), pytest.raises(ValueError, match=says):
        dkpca.fit(np.random.default_rng(0).normal(size=(50, 3)), 2)  # the Python API alike


def test_a_csv_of_only_a_header_says_it_has_no_rows(tmp_path, capsys):
    (tmp_path / "h.csv").write_text("a,b,c\n")
    assert "holds no rows of data" in cli_error(capsys, ["fit", str(tmp_path / "h.csv"), "-k", "2", "-q"])


def test_the_same_data_in_another_chunk_size_is_refused_naming_the_chunk_size(tmp_path, capsys):
    """Not "fitted on different data": the data is the same, and the message names the chunk size to pass."""
    data, store = _data_npy(tmp_path), str(tmp_path / "s.zarr")
    assert main(["fit", data, "-k", "2", "-q", "--store", store, "--chunk-size", "30"]) == 0
    capsys.readouterr()
    err = cli_error(capsys, ["fit", data, "-k", "2", "-q", "--store", store, "--chunk-size", "20"])
    assert "in chunks of 30 rows, and this fit asks for 20" in err and "--chunk-size 30" in err


def test_data_whose_kernel_overflows_is_refused_before_any_work_in_one_line(tmp_path, capsys):
    """Finite values of 1e200: their rbf distances overflow.  The sample that chooses K's precision sees it, so no
    warning and no data copy come before the one line (the build's refusal came after the copy, under warnings)."""
    np.save(tmp_path / "big.npy", make_data(300, d=4) * 1e200)
    store = tmp_path / "s.zarr"
    err = cli_error(capsys, ["fit", str(tmp_path / "big.npy"), "-k", "2", "--store", str(store), "--no-progress"])
    assert "non-finite values (overflow or NaN) on a 256-point sample" in err
    assert "(its largest |value|: " in err and "e+20" in err, err  # data read wrong (a damaged file) shows here
    assert not (store / "data").exists()


def test_a_parquet_file_with_damaged_pandas_metadata_is_named(tmp_path, capsys):
    """Before: 'dkpca: error: 'utf-8' codec can't decode byte 0xb0 in position 724' -- no file, no format (a bit
    flipped in the footer's JSON; found by an input-damage fuzzer)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"a": make_data(50, d=1)[:, 0]}).replace_schema_metadata({b"pandas": b'{"index_columns": [\xb0]}'})
    pq.write_table(table, tmp_path / "x.parquet")
    err = cli_error(capsys, ["fit", str(tmp_path / "x.parquet"), "-k", "2", "--no-progress"])
    assert f"input '{tmp_path / 'x.parquet'}' is not a readable Parquet file (" in err, err


def test_a_parquet_row_group_that_cannot_be_read_is_named(tmp_path, capsys):
    """Before: pyarrow's OSError ('Couldn't deserialize thrift ... Deserializing page header failed') escaped the
    CLI as a traceback.  Junk over the second row group's first page header; the footer is intact."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": make_data(300, d=1)[:, 0]}), path, row_group_size=100)
    at = pq.ParquetFile(path).metadata.row_group(1).column(0).data_page_offset
    raw = bytearray(path.read_bytes())
    raw[at:at + 16] = b"\xff" * 16
    path.write_bytes(bytes(raw))
    err = cli_error(capsys, ["fit", str(path), "-k", "2", "--no-progress"])
    assert f"Parquet file '{path}': row group 1 is not readable (" in err, err


def test_a_damaged_netcdf_file_is_one_line_without_the_readers_teardown_traceback(tmp_path):
    """Before: after the one line, h5netcdf's half-opened ``File`` printed 'Exception ignored in: <function
    File.close ...> ... AttributeError: 'File' object has no attribute '_writable'' from its finaliser.  In a
    subprocess: pytest turns such finaliser errors into warnings, so in process they would not show."""
    xr = pytest.importorskip("xarray")
    path = tmp_path / "x.nc"
    xr.Dataset({"v": (("r", "c"), make_data(50, d=3))}).to_netcdf(path, engine="h5netcdf")
    raw = bytearray(path.read_bytes())
    raw[100] ^= 0x10  # in the root group's object header
    path.write_bytes(bytes(raw))
    proc = subprocess.run([sys.executable, "-m", "dkpca", "fit", f"{path}:v", "-k", "2", "--no-progress"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"dkpca: error: input '{path}:v' cannot be read by xarray ("), proc.stderr


def test_a_parquet_row_group_of_other_rows_than_its_footer_says_is_refused(tmp_path):
    """Dask was promised the footer's row count for the group's chunk: another count would shift every later row
    (before: dask's 'Array chunk size or shape is unknown', or a misaligned matrix)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dkpca.io.parquet import ParquetRows

    pq.write_table(pa.table({"a": np.arange(50.0)}), tmp_path / "x.parquet")
    rows = ParquetRows(groups=((str(tmp_path / "x.parquet"), 0, 51),), columns=("a",), dtype=np.dtype("float64"))
    with pytest.raises(ValueError, match="row group 0 holds 50 rows where its footer says 51; the file is damaged"):
        rows.read_group(0)


def test_a_non_finite_row_to_transform_says_before_transform(tmp_path, capsys, fitted):
    X, data, store = fitted
    Xt = make_data(20, seed=3, d=4)
    Xt[3, 1] = np.nan
    np.save(tmp_path / "t.npy", Xt)
    err = cli_error(capsys, ["transform", store, str(tmp_path / "t.npy"), str(tmp_path / "z.zarr")])
    assert "first in row 3" in err and "before transform" in err, err


def test_a_store_given_as_input_names_its_data_array(capsys, fitted):
    X, data, store = fitted
    err = cli_error(capsys, ["fit", store, "--store", store + "2"])
    assert "is a dkpca store, not data" in err and f"'{store}/data/X'" in err, err
    assert main(["fit", f"{store}/data/X", "-k", "3", "--gamma", str(GAMMA), "--dtype", "float64", "-q",
                 "--store", store + "2"]) == 0  # the array it names is the data
    np.testing.assert_allclose(dkpca.load(store + "2").eigenvalues_, dkpca.load(store).eigenvalues_, rtol=1e-10)


def test_a_damaged_zarr_input_chunk_is_named(tmp_path, capsys, fitted):
    """Before: the codec's error alone ("Stored and computed checksum do not match", zstd's "Data corruption"),
    naming neither the input nor the chunk."""
    X, data, store = fitted
    inp = tmp_path / "t.zarr"
    zarr.create_array(str(inp), data=make_data(40, seed=3, d=4), chunks=(20, 4))
    chunk = inp / "c" / "1" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[5] ^= 0x10
    chunk.write_bytes(bytes(raw))
    err = cli_error(capsys, ["transform", store, str(inp), str(tmp_path / "z.zarr")])
    assert "chunk (1, 0)" in err and str(inp) in err and "unreadable" in err, err
    assert f"chunk (1, 0) of array '{inp}' is unreadable" in err, err  # not "of array '' in ...": it is the store


def test_an_output_holding_only_zarr_s_temporary_of_a_killed_creation_is_written(tmp_path, fitted):
    """A kill while zarr created the output's ``zarr.json`` leaves only ``zarr.<hex>.partial``: before, the same
    command and --overwrite refused it as "a directory of other files"."""
    X, data, store = fitted
    out = tmp_path / "z.zarr"
    out.mkdir()
    (out / ("zarr." + "0" * 32 + ".partial")).write_text("{")
    assert main(["transform", store, data, str(out), "-q"]) == 0
    np.testing.assert_allclose(zarr.open_array(str(out), mode="r")[:], dkpca.load(store).transform(X), atol=1e-12)


@pytest.mark.parametrize("lost", ["missing", "unreadable"])
def test_an_output_whose_record_is_lost_is_said_as_that_and_kept(tmp_path, capsys, fitted, lost):
    """Before: transform said 'a directory of other files', verify and info 'not a dkpca store ... it holds no Zarr
    group' (or json's error) of an output whose ``zarr.json`` was lost or cut short.  Still refused -- dkpca cannot
    tell it wrote the chunks -- but said as what it is, with the fix, and nothing removed, even with --overwrite."""
    X, data, store = fitted
    out = tmp_path / "z.zarr"
    assert main(["transform", store, data, str(out), "-q"]) == 0
    meta = out / "zarr.json"
    meta.unlink() if lost == "missing" else meta.write_bytes(meta.read_bytes()[:40])
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    for argv in (["transform", store, data, str(out), "-q"], ["transform", store, data, str(out), "--overwrite"],
                 ["verify", str(out)], ["info", str(out)]):
        err = cli_error(capsys, argv)
        assert f"holds a Zarr array's chunk files, but its metadata (zarr.json) is {lost}" in err, err
        assert "remove the directory yourself" in err, err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_a_damaged_data_copy_is_found_before_any_output_is_made(tmp_path, capsys, fitted):
    """Before: one line, but an empty incomplete output (its zarr.json) was left behind."""
    X, data, store = fitted
    chunk = os.path.join(store, "data", "X", "c", "0", "0")
    with open(chunk, "rb") as f:
        raw = bytearray(f.read())
    raw[9] ^= 1
    with open(chunk, "wb") as f:
        f.write(bytes(raw))
    err = cli_error(capsys, ["transform", store, data, str(tmp_path / "z.zarr")])
    assert "data/X" in err and "overwrite" in err, err
    assert not (tmp_path / "z.zarr").exists()


@pytest.mark.parametrize("slot", [None, 7, "../data"])
def test_verify_of_a_solver_group_without_a_saved_pass_is_one_line(fitted, capsys, slot):
    """A fit killed just after its Gram build leaves ``solver/`` with no slot yet: verify raised TypeError."""
    X, data, store = fitted
    g = zarr.open_group(os.path.join(store, "solver"), mode="w")
    if slot is not None:
        g.attrs["slot"] = slot
    assert main(["verify", store]) == 0
    assert "solver checkpoint: none complete" in capsys.readouterr().out


def test_a_memory_url_output_is_refused_as_a_memory_store_is(tmp_path, capsys, fitted):
    """Before: "wrote 300 x 3 projections to memory://mo.zarr", gone when the command exited."""
    X, data, store = fitted
    err = cli_error(capsys, ["transform", store, data, "memory://mo.zarr"])
    assert "memory://" in err and "gone when dkpca exits" in err, err
    err = cli_error(capsys, ["fit", data, "--store", "memory://s.zarr"])  # the store's lock refuses it
    assert "cannot lock the store 'memory://" in err, err


def test_an_output_named_as_a_files_member_is_refused(tmp_path, capsys, fitted):
    """``dkpca transform STORE new.h5:/g/X new.h5:/out`` made a Zarr directory named ``new.h5:`` beside the file."""
    X, data, store = fitted
    np.save(tmp_path / "new.npy", X[:10])
    err = cli_error(capsys, ["transform", store, data, f"{tmp_path / 'new.npy'}:/out"])
    assert "names a member of the file" in err and "'out.zarr'" in err, err
    assert sorted(os.listdir(tmp_path)) == sorted(["d.zarr", "s.dkpca.zarr", "new.npy"])


@pytest.mark.parametrize("name", ["z.npy", "z.csv", "z.parquet", "z.h5"])
def test_an_output_named_as_another_format_is_refused_naming_a_zarr_one(tmp_path, capsys, fitted, name):
    """Before: 'wrote 300 x 3 projections to z.npy' -- a Zarr directory that np.load cannot read."""
    _, data, store = fitted
    out = tmp_path / name
    assert main(["transform", store, data, str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert "writes a Zarr array" in err and f"{str(tmp_path / 'z.zarr')!r}" in err and not out.exists()


def test_an_earlier_output_so_named_is_still_resumed(tmp_path, capsys, fitted):
    # written before the refusal: its projections are kept and finished, not refused
    X, data, store = fitted
    out = str(tmp_path / "z.npy")
    zarr_out = str(tmp_path / "z.zarr")
    assert main(["transform", store, data, zarr_out, "-q"]) == 0
    os.rename(zarr_out, out)
    assert main(["transform", store, data, out, "-q"]) == 0
    assert "already complete" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["abc", -2, 1.5])
def test_a_bad_num_workers_setting_is_named(tmp_path, capsys, value):
    """DASK_NUM_WORKERS=abc: one line naming the setting and what it must be (before: "invalid literal for int()
    with base 10: 'abc'", or "max_workers must be greater than 0" for -2; 1.5 ran on 1 thread)."""
    import dask

    path = str(tmp_path / "x.npy")
    np.save(path, make_data(60, d=3))
    with dask.config.set({"num_workers": value}):
        err = cli_error(capsys, ["fit", path, "-k", "2", "--store", str(tmp_path / "s.dkpca.zarr")])
    assert f"the Dask setting num_workers is {value!r} (DASK_NUM_WORKERS" in err and "positive integer" in err
    assert not (tmp_path / "s.dkpca.zarr").exists()  # refused before any work


@pytest.mark.parametrize("key, value, kind", [("distributed.comm.timeouts.connect", "abc", "duration"),
                                              ("distributed.admin.tick.interval", "abc", "duration"),
                                              ("distributed.worker.memory.target", "abc", "number")])
def test_a_bad_distributed_setting_is_named_before_a_local_cluster_starts(tmp_path, capsys, key, value, kind):
    """DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=abc with --cluster local, or the demo: one line naming the setting
    and its environment variable, before any file is written (before: a traceback from inside LocalCluster --
    "KeyError: 'Invalid time unit: abc'", "TLSOnlyNanny failed to start." -- exit 1, the demo's data left)."""
    import dask

    data = _data_npy(tmp_path)
    env = "DASK_" + key.upper().replace(".", "__").replace("-", "_")
    with dask.config.set({key: value}):
        err = cli_error(capsys, ["fit", data, "-k", "2", "--no-progress", "--cluster", "local", "--store",
                                 str(tmp_path / "s.dkpca.zarr")])
        assert f"the Dask setting {key} is {value!r}, not a {kind}" in err and env in err
        assert not (tmp_path / "s.dkpca.zarr").exists()
        (tmp_path / "demo").mkdir()
        err = cli_error(capsys, ["demo", "--n-samples", "300", "--dir", str(tmp_path / "demo")])
        assert f"the Dask setting {key} is {value!r}" in err and os.listdir(tmp_path / "demo") == []
