"""dkpca.datasets: downloaded once into the cache, checked by SHA-256, or read from an offline copy; no network.

Every download here is a ``file://`` URL of a small file the test writes, and ``urlopen`` is replaced by a
function that fails where a test must not download at all.  References: ``hashlib.sha256`` of the content
written (decompressed, for ``.gz``), the directory listings, and the rows written.
"""

from __future__ import annotations

import gzip
import hashlib
import os

import dask
import numpy as np
import pytest

from dkpca import datasets
from dkpca.datasets import ChecksumError, Source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "usps/zip.train.gz"


def usps_rows(n: int = 3) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.column_stack([rng.integers(0, 10, n), rng.uniform(-1, 1, (n, 256))])


def published(tmp_path, monkeypatch, rows: np.ndarray | None = None, sha: str | None = None) -> str:
    """A 'public source' of NAME: a gzip file at a file:// URL, registered with its content digest (or ``sha``)."""
    text = "\n".join(" ".join(f"{v:.4f}" for v in row) for row in (usps_rows() if rows is None else rows)) + "\n"
    src = tmp_path / "server" / "zip.train.gz"
    src.parent.mkdir(exist_ok=True)
    src.write_bytes(gzip.compress(text.encode()))
    monkeypatch.setitem(datasets.SOURCES, NAME, Source(src.as_uri(), sha or hashlib.sha256(text.encode()).hexdigest()))
    return str(src)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(datasets.DATA_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def no_network(*args, **kwargs):
    raise AssertionError("no download was expected")


def test_a_file_is_downloaded_once_into_the_cache_and_checked(tmp_path, monkeypatch, cache):
    src = published(tmp_path, monkeypatch)
    path = datasets.fetch(NAME)
    assert path == cache / NAME and sorted(os.listdir(cache / "usps")) == ["zip.train.gz"]
    os.remove(src)  # the source is gone: the cached copy is used, not downloaded again
    monkeypatch.setattr(datasets.urllib.request, "urlopen", no_network)
    X, y = datasets.load_usps("train")
    assert np.allclose(np.column_stack([y, X]), usps_rows(), atol=5e-5)


def test_a_download_with_other_content_is_refused_and_not_kept(tmp_path, monkeypatch, cache):
    published(tmp_path, monkeypatch, sha="0" * 64)
    with pytest.raises(ChecksumError, match=r"download of usps/zip.train.gz from file://.* refused: content SHA-256 "
                                            r"[0-9a-f]{64}, not the published 0{64}; nothing was kept"):
        datasets.fetch(NAME)
    assert not cache.exists()  # no partial or temporary file left behind, nor the directories made for it


def test_a_failed_download_says_how_to_work_offline(tmp_path, monkeypatch, cache):
    monkeypatch.setitem(datasets.SOURCES, NAME, Source((tmp_path / "absent.gz").as_uri(), "0" * 64))
    with pytest.raises(OSError, match="could not download usps/zip.train.gz .* without network, copy the files .* "
                                      "with data_dir="):
        datasets.fetch(NAME)
    assert not cache.exists()


def test_a_failed_download_keeps_directories_that_were_there(tmp_path, monkeypatch, cache):
    (cache / "usps").mkdir(parents=True)
    monkeypatch.setitem(datasets.SOURCES, NAME, Source((tmp_path / "absent.gz").as_uri(), "0" * 64))
    with pytest.raises(OSError, match="could not download"):
        datasets.fetch(NAME)
    assert os.listdir(cache / "usps") == []


def test_a_download_the_server_refuses_names_its_answer_not_the_network(tmp_path, monkeypatch, cache):
    """Before: HTTP 404 got the advice for a machine without network."""
    import urllib.error

    def not_found(url, timeout=None):
        raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)

    monkeypatch.setattr(datasets.urllib.request, "urlopen", not_found)
    with pytest.raises(OSError, match="answered HTTP 404 Not Found; the source may have moved") as info:
        datasets.fetch(NAME)
    assert "without network" not in str(info.value) and not cache.exists()


def test_a_data_directory_that_cannot_be_written_is_named_not_blamed_on_the_network(tmp_path, monkeypatch):
    """Before: "[Errno 20] Not a directory ...); without network, pass --data-dir" -- with --data-dir given."""
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv(datasets.DATA_ENV, str(tmp_path / "afile" / "sub"))
    published(tmp_path, monkeypatch)
    with pytest.raises(OSError, match=r"could not write usps/zip.train.gz into the data directory .*afile/sub "
                                      r"\(.*Not a directory.*\); choose a writable one") as info:
        datasets.fetch(NAME)
    assert "network" not in str(info.value)


def test_a_downloaded_file_is_as_readable_as_the_users_other_files(tmp_path, monkeypatch, cache):
    """mkstemp made it 0600: a colleague sharing the cache was told it was damaged (Permission denied)."""
    published(tmp_path, monkeypatch)
    old = os.umask(0o022)
    try:
        path = datasets.fetch(NAME)
    finally:
        os.umask(old)
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def test_an_unreadable_data_file_is_said_unreadable_not_damaged(tmp_path, monkeypatch, cache):
    published(tmp_path, monkeypatch)
    path = datasets.fetch(NAME)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(datasets.gzip, "open", denied)  # root reads a 0000 file: the refusal stands in for it
    with pytest.raises(PermissionError, match=f"{path}: cannot read it \\(Permission denied\\); ask its owner"):
        datasets.fetch(NAME)


@pytest.mark.parametrize("load, bad, says", [(datasets.load_usps, "bogus", "choose 'train' or 'test'"),
                                             (datasets.load_mnist, "bogus", "choose 'train' or 'test'"),
                                             (datasets.load_pima, "train", "choose 'tr' or 'te'")])
def test_an_unknown_split_is_refused_by_name(monkeypatch, load, bad, says):
    """Before: a bare KeyError('bogus'), or one naming an internal file key ('pima/Pima.train.csv')."""
    monkeypatch.setattr(datasets.urllib.request, "urlopen", no_network)
    with pytest.raises(ValueError, match=f"split='{bad}' is invalid; {says}"):
        load(bad)


def test_a_data_directory_that_is_a_file_is_named_not_blamed_on_the_network(tmp_path, monkeypatch):
    """Before: "could not download ... ([Errno 20] Not a directory ...); without network, pass --data-dir"."""
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv(datasets.DATA_ENV, str(afile))
    monkeypatch.setattr(datasets.urllib.request, "urlopen", no_network)
    with pytest.raises(NotADirectoryError, match=f"the data directory {afile} is a file; set \\$DKPCA_DATA"):
        datasets.fetch(NAME)


def test_a_cached_file_altered_later_is_refused_not_deleted(tmp_path, monkeypatch, cache):
    published(tmp_path, monkeypatch)
    path = datasets.fetch(NAME)
    path.write_bytes(gzip.compress(b"1 2 3\n"))
    with pytest.raises(ChecksumError, match=r"zip.train.gz: content SHA-256 .* replace it with a copy of file://.* "
                                            r"or delete it \(the next use downloads it again\)"):
        datasets.fetch(NAME)
    assert path.exists()  # the user's file is theirs to replace


def test_an_offline_copy_is_used_without_network(tmp_path, monkeypatch, cache):
    src = published(tmp_path, monkeypatch)
    offline = tmp_path / "copy"
    (offline / "usps").mkdir(parents=True)
    os.replace(src, offline / NAME)
    monkeypatch.setattr(datasets.urllib.request, "urlopen", no_network)
    X, y = datasets.load_usps("train", data_dir=offline)
    assert X.shape == (3, 256) and np.allclose(y, usps_rows()[:, 0])
    assert not cache.exists()  # nothing written to the cache either


def test_a_file_missing_from_the_offline_copy_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.urllib.request, "urlopen", no_network)
    with pytest.raises(FileNotFoundError, match=r"zip.test.gz not found in the offline data directory .*"
                                                r"python -m dkpca.datasets usps --data-dir .*https://"):
        datasets.load_usps("test", data_dir=tmp_path)


def test_the_cache_directory_follows_the_environment_then_dask_config_then_the_platform(tmp_path, monkeypatch):
    monkeypatch.delenv(datasets.DATA_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if os.name == "posix" and not os.uname().sysname == "Darwin":
        assert datasets.data_home() == tmp_path / "xdg" / "dkpca"
    with dask.config.set({"dkpca.data-dir": str(tmp_path / "cfg")}):
        assert datasets.data_home() == tmp_path / "cfg"
        monkeypatch.setenv(datasets.DATA_ENV, str(tmp_path / "env"))
        assert datasets.data_home() == tmp_path / "env"
        assert datasets.data_home(tmp_path / "arg") == tmp_path / "arg"


def test_the_command_downloads_into_the_directory_named(tmp_path, monkeypatch, capsys):
    published(tmp_path, monkeypatch)
    monkeypatch.setitem(datasets.DATASETS, "usps", (NAME,))
    assert datasets.main(["usps", "--data-dir", str(tmp_path / "mine")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "mine" / NAME)


def test_the_published_digests_match_the_projects_copy():
    """The SHA-256s in SOURCES are those of the data the project measured with (skipped where it is absent)."""
    shared = os.path.join(ROOT, "..", "shared", "data")
    if not os.path.isdir(shared):
        pytest.skip("no ../shared/data beside the repository")
    for name in datasets.SOURCES:
        assert datasets.fetch(name, shared) == datasets.data_home(shared) / name
