"""The public data sets of the examples and benchmarks (USPS, MNIST, Pima): downloaded once, checked by SHA-256.

Each file comes from a public source (:data:`SOURCES`: the URL, pinned to a
commit, and the SHA-256 of its content) and is kept in a cache directory
(:func:`data_home`), laid out as ``usps/zip.train.gz``, ``mnist/...``,
``pima/...``.  A download goes to a temporary file beside its destination,
hashed once written, and is renamed into place only when its digest
matches: a wrong or truncated file is refused, named, and not left behind.
A file already in the cache is checked on every use.

An offline copy (a directory laid out the same way, e.g. one a colleague
downloaded) is used with ``data_dir=`` (``--data-dir`` in the examples and
benchmarks): dkpca then never touches the network, and a missing file is an
error that says how to get it.

The digest of a ``.gz`` file is the digest of its decompressed content:
mirrors of one data set differ in the gzip wrapper (time stamp, level) only.

From the command line, ``python -m dkpca.datasets [usps mnist pima]``
downloads them and prints where they are.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import hashlib
import http.client
import os
import shutil
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .config import setting

__all__ = ["Source", "SOURCES", "DATASETS", "DATA_ENV", "ChecksumError", "data_home", "digest", "fetch",
           "load_usps", "load_mnist", "load_pima"]

#: environment variable naming the cache directory (as scikit-learn's ``SCIKIT_LEARN_DATA``)
DATA_ENV = "DKPCA_DATA"

_RAW = "https://raw.githubusercontent.com"
_ESL = f"{_RAW}/dgkim5360/the-elements-of-statistical-learning-notebooks/2c13a4818379451bcce802bcd7917f4878e12977"
_MNIST = f"{_RAW}/fgnt/mnist/ae608a02b796c9ee908c082585a5f006fe05258e"
_MASS = f"{_RAW}/vincentarelbundock/Rdatasets/1dcc2bf5f955cc1224a3e1307256e1fe86b68dae/csv/MASS"


@dataclass(frozen=True)
class Source:
    """Where a file comes from and the SHA-256 of its content (decompressed for ``.gz``)."""

    url: str
    sha256: str


#: every file, by its path in the cache directory
SOURCES: dict[str, Source] = {
    # USPS digits as the Elements of Statistical Learning distribute them (label, then 256 pixels in [-1, 1])
    "usps/zip.train.gz": Source(f"{_ESL}/data/zipcode/zip.train.gz",
                                "abc9f5c75b997cabe66b5d01727d5a681c69298e1641a8d37b55433a52129dc0"),
    "usps/zip.test.gz": Source(f"{_ESL}/data/zipcode/zip.test.gz",
                               "6bde17b4f1cd68e0630cd2751d6495b5795d9165ab2dc4a0be8b7002b732f4cc"),
    # MNIST (LeCun & Cortes, CC BY-SA 3.0), a byte-identical mirror of the original files
    "mnist/train-images-idx3-ubyte.gz": Source(f"{_MNIST}/train-images-idx3-ubyte.gz",
                                               "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
    "mnist/train-labels-idx1-ubyte.gz": Source(f"{_MNIST}/train-labels-idx1-ubyte.gz",
                                               "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
    "mnist/t10k-images-idx3-ubyte.gz": Source(f"{_MNIST}/t10k-images-idx3-ubyte.gz",
                                              "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
    "mnist/t10k-labels-idx1-ubyte.gz": Source(f"{_MNIST}/t10k-labels-idx1-ubyte.gz",
                                              "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
    # the Pima Indians diabetes data of R's MASS package (Ripley's split: Pima.tr 200 rows, Pima.te 332)
    "pima/Pima.tr.csv": Source(f"{_MASS}/Pima.tr.csv",
                               "78e6284c75bf81eaae97815f7d0dd2992a119629ec6622de7918258311c32a7a"),
    "pima/Pima.te.csv": Source(f"{_MASS}/Pima.te.csv",
                               "b00bf6540cce6b6bc44ea65a149da3142b2039b37980dbcdf18d3750fc9db032"),
}

#: the files of each data set
DATASETS = {name: tuple(f for f in SOURCES if f.startswith(f"{name}/")) for name in ("usps", "mnist", "pima")}

_BLOCK = 1 << 20


class ChecksumError(ValueError):
    """A data file's content is not the published one (a wrong, truncated or damaged file)."""


def data_home(data_dir: str | os.PathLike | None = None) -> Path:
    """The cache directory: ``data_dir``, else ``$DKPCA_DATA``, else Dask config ``dkpca.data-dir``, else the
    user's cache directory (``$XDG_CACHE_HOME/dkpca``, ``~/.cache/dkpca``; ``~/Library/Caches/dkpca`` on macOS,
    ``%LOCALAPPDATA%\\dkpca\\Cache`` on Windows)."""
    chosen = data_dir or os.environ.get(DATA_ENV) or setting("dkpca.data-dir")
    if chosen:
        return Path(chosen).expanduser().resolve()
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "dkpca" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "dkpca"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dkpca"


def digest(path: str | os.PathLike, gzipped: bool | None = None) -> str:
    """SHA-256 of a file's content (hex), decompressed if ``gzipped`` (default: the name ends in ``.gz``)."""
    h = hashlib.sha256()
    gzipped = os.fspath(path).endswith(".gz") if gzipped is None else gzipped
    with (gzip.open if gzipped else open)(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def _mismatch(path: str | os.PathLike, name: str) -> str | None:
    """None if ``path`` holds ``name``'s published content, else what it holds instead (for a message).

    Raises ``PermissionError`` where the file cannot be read: that says nothing of its content.
    """
    try:
        got = digest(path, gzipped=name.endswith(".gz"))  # a download's temporary file has its own suffix
    except PermissionError as exc:
        raise PermissionError(f"{path}: cannot read it ({exc.strerror}); ask its owner to make it readable "
                              "(chmod a+r), or use a data directory of your own") from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:  # a truncated or non-gzip file
        return f"unreadable content ({' '.join(str(exc).split()) or type(exc).__name__})"
    return None if got == SOURCES[name].sha256 else f"content SHA-256 {got}, not the published {SOURCES[name].sha256}"


def _check(path: Path, name: str, cached: bool = False) -> Path:
    wrong = _mismatch(path, name)
    if wrong:
        again = " or delete it (the next use downloads it again)" if cached else ""
        raise ChecksumError(f"{path}: {wrong} of {name}: the file is damaged or another one; replace it with a "
                            f"copy of {SOURCES[name].url}{again}.")
    return path


def _download(name: str, dest: Path) -> None:
    """``name``'s source into ``dest``, renamed into place only once its content digest matches."""
    made = [d for d in (dest.parent, *dest.parent.parents) if not d.exists()]  # deepest first
    dest.parent.mkdir(parents=True, exist_ok=True)
    # created as open() creates files (0666 less the umask), so a shared cache is readable by its group and
    # others as the user's other files are; mkstemp's are private (0600) and stay so when renamed into place
    tmp = str(dest.parent / f".{dest.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(SOURCES[name].url, timeout=60) as response:
            shutil.copyfileobj(response, out, _BLOCK)
        wrong = _mismatch(tmp, name)
        if wrong:
            raise ChecksumError(f"download of {name} from {SOURCES[name].url} refused: {wrong}; nothing was kept.")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):  # a failed or refused download leaves nothing behind, its directories neither
            os.unlink(tmp)
            for d in made:
                with contextlib.suppress(OSError):  # not empty: another download's meanwhile
                    d.rmdir()


def fetch(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """The checked local path of data file ``name`` (a key of :data:`SOURCES`, e.g. ``"usps/zip.train.gz"``).

    With ``data_dir`` the file must be in that offline copy (nothing is
    downloaded); without, it is downloaded into :func:`data_home` the first time.

    Raises
    ------
    KeyError
        ``name`` is not one of dkpca's data files.
    FileNotFoundError
        An offline copy without the file (the message says how to get it).
    ChecksumError
        The file, or the download, has other content than the published file.
    OSError
        The download failed (no network: use an offline copy).
    """
    if name not in SOURCES:
        raise KeyError(f"{name!r} is not one of dkpca's data files: {', '.join(SOURCES)}")
    if data_dir is not None:
        path = Path(data_dir).expanduser().resolve() / name
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found in the offline data directory {data_dir}: download it with "
                f"'python -m dkpca.datasets {name.split('/')[0]} --data-dir {data_dir}' (or copy {SOURCES[name].url} "
                f"there), or leave out --data-dir to download it into the cache ({data_home()}).")
        return _check(path, name)
    return _cached(name, data_home())


def _cached(name: str, home: Path) -> Path:
    """``home / name``, downloaded first if it is not there, checked."""
    path = home / name
    if path.is_file():
        return _check(path, name, cached=True)
    if home.exists() and not home.is_dir():
        raise NotADirectoryError(f"the data directory {home} is a file; set ${DATA_ENV}, the Dask config "
                                 "dkpca.data-dir or --data-dir (data_dir=) to a directory.")
    try:
        _download(name, path)
    except ChecksumError:
        raise
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise OSError(_download_failed(name, home, exc)) from exc
    return path  # checked by _download before it was renamed into place


def _download_failed(name: str, home: Path, exc: Exception) -> str:
    """Why a download of ``name`` into ``home`` failed, and the fix: the server's answer, the network, or the
    directory it was written into."""
    said = " ".join(str(exc).split())
    url = SOURCES[name].url
    if isinstance(exc, urllib.error.HTTPError):  # the server answered: the network is fine
        return (f"could not download {name}: {url} answered HTTP {exc.code} {exc.reason}; the source may have "
                f"moved (please report it), or use an offline copy laid out as {name} (data_dir=)")
    if isinstance(exc, (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException, ValueError)):
        return (f"could not download {name} from {url} ({said}); without network, copy the files from a machine "
                f"that has it ('python -m dkpca.datasets' there) and name that copy, laid out as {name}, with "
                "data_dir= (the examples' and benchmarks' --data-dir)")
    # the file system: a read-only or full disk, a path component that is a file, no permission
    return (f"could not write {name} into the data directory {home} ({said}); choose a writable one: "
            f"${DATA_ENV}, the Dask config dkpca.data-dir, or --data-dir")


def _split(split: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(split, str) or split not in choices:
        raise ValueError(f"split={split!r} is invalid; choose {' or '.join(map(repr, choices))}.")
    return split


def load_usps(split: str = "train", data_dir: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """USPS digits as distributed: pixels in [-1, 1], shape (n, 256) float64 (16 x 16, row-major), labels (n,).

    ``split``: ``"train"`` (7,291 digits) or ``"test"`` (2,007).
    """
    with gzip.open(fetch(f"usps/zip.{_split(split, ('train', 'test'))}.gz", data_dir), "rt") as f:
        raw = np.loadtxt(f, dtype=np.float64)
    return np.ascontiguousarray(raw[:, 1:]), raw[:, 0].astype(int)


def load_mnist(split: str = "train", data_dir: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """MNIST digits as distributed: pixels 0-255, shape (n, 784) uint8, and labels (n,) uint8.

    ``split``: ``"train"`` (60,000) or ``"test"`` (10,000).  Scale the pixels
    (``X / 255.0``) before an rbf kernel with its default gamma: on 0-255
    values ``exp(-|x - y|^2 / 784)`` is 0 for every pair of digits.
    """
    prefix = {"train": "train", "test": "t10k"}[_split(split, ("train", "test"))]
    with gzip.open(fetch(f"mnist/{prefix}-images-idx3-ubyte.gz", data_dir), "rb") as f:
        images = f.read()
    with gzip.open(fetch(f"mnist/{prefix}-labels-idx1-ubyte.gz", data_dir), "rb") as f:
        labels = f.read()
    n = int.from_bytes(images[4:8], "big")
    return (np.frombuffer(images, dtype=np.uint8, offset=16).reshape(n, 784),
            np.frombuffer(labels, dtype=np.uint8, offset=8).copy())


#: the Pima features (columns of Pima.tr.csv / Pima.te.csv); ``type`` is the label
PIMA_FEATURES = ("npreg", "glu", "bp", "skin", "bmi", "ped", "age")


def load_pima(split: str = "tr", data_dir: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The Pima data of R's MASS: the 7 features (n, 7) float64 and the label (n,): 1 for diabetic (``Yes``).

    ``split``: ``"tr"`` (200 women) or ``"te"`` (332).
    """
    with open(fetch(f"pima/Pima.{_split(split, ('tr', 'te'))}.csv", data_dir), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return (np.array([[float(r[c]) for c in PIMA_FEATURES] for r in rows]),
            np.array([r["type"] == "Yes" for r in rows], dtype=int))


def main(argv: list[str] | None = None) -> int:
    """``python -m dkpca.datasets``: download (or check) data sets and print where they are."""
    ap = argparse.ArgumentParser(prog="python -m dkpca.datasets",  # the docstring's markup is not for a terminal
                                 description="Download (or check) data sets and print where they are.")
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"data sets: {', '.join(DATASETS)} (default: all)")
    ap.add_argument("--data-dir", default=None,
                    help=f"download into this directory (default: ${DATA_ENV}, Dask config dkpca.data-dir, "
                         f"else {data_home()})")
    a = ap.parse_args(argv)
    unknown = sorted(set(a.names) - set(DATASETS))
    if unknown:
        ap.error(f"unknown data set(s) {', '.join(unknown)}; choose from {', '.join(DATASETS)}")
    home = data_home(a.data_dir)
    try:
        for name in a.names or DATASETS:
            for file in DATASETS[name]:
                print(_cached(file, home))
    except (OSError, ValueError) as exc:
        print(f"python -m dkpca.datasets: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
