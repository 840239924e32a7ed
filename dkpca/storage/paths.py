"""Where paths meet: local paths and URLs, and refusing writes that would destroy what is being read.

A location is a local path or an fsspec URL (``s3://bucket/key``); the
helpers here answer the same questions for both (is it there, does one lie
inside the other, how much room is left), reaching URLs through fsspec with
its own configuration of credentials and endpoints.

dkpca never deletes or overwrites a file the user did not ask it to: an
output may not be, contain or lie inside an input or a store; an existing
output is replaced only on request, and only if dkpca wrote it
(:mod:`dkpca.storage.outputs`).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import fsspec

__all__ = ["unreachable", "no_credentials", "absolute", "check_segments", "without_local_scheme", "relation",
           "check_output", "check_apart", "is_url", "exists", "free_bytes", "url_fs", "S3_PROTOCOLS"]

#: fsspec protocols served by s3fs (``pip install 'dkpca[s3]'``)
S3_PROTOCOLS = ("s3", "s3a")


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says a URL's storage could not be reached: no connection, or the client's endpoint,
    credentials or region settings (botocore's own errors, for s3fs) -- the user's to fix, never dkpca's fault."""
    return isinstance(exc, ConnectionError) or any(  # by name: botocore is imported only with s3fs
        c.__name__ == "BotoCoreError" and c.__module__ == "botocore.exceptions" for c in type(exc).__mro__)


def no_credentials(exc: BaseException) -> bool:
    """Whether ``exc`` is the client's having no credentials at all (botocore's, for s3fs): an :func:`unreachable`
    error whose fix is the credentials, not the endpoint or the network."""
    return any(c.__name__ in ("NoCredentialsError", "PartialCredentialsError") and c.__module__ == "botocore.exceptions"
               for c in type(exc).__mro__)


def url_fs(url: str) -> tuple[Any, str]:
    """``(fsspec filesystem, path within it)`` for ``url``; credentials and endpoint from fsspec's own config.

    Raises
    ------
    ImportError
        The URL's fsspec back end is not installed (for ``s3://``: ``pip install 'dkpca[s3]'``).
    """
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as exc:
        extra = " (pip install 'dkpca[s3]')" if url.split("://", 1)[0] in S3_PROTOCOLS else ""
        raise ImportError(f"{url!r} needs an fsspec back end that is not installed: {exc}{extra}") from exc


def is_url(path: str) -> bool:
    """Whether ``path`` is an fsspec URL (``protocol://...``) rather than a local path."""
    return "://" in str(path)


#: fsspec's URLs of local files: the same places as plain paths (``file:///x`` is ``/x``)
LOCAL_SCHEMES = ("file://", "local://")


def absolute(path: str | os.PathLike) -> str:
    """A local path made absolute (symlinks resolved), also one written as a ``file://`` URL; other URLs unchanged.

    One spelling per place: an output named ``x.zarr`` and an input ``file:///.../x.zarr`` are the same
    directory, and only the same string says so to :func:`relation`.
    """
    p = without_local_scheme(path)
    return p if is_url(p) else os.path.realpath(os.path.abspath(p))


def without_local_scheme(path: str | os.PathLike) -> str:
    """``path`` as a string, a ``file://`` (or ``local://``) URL as the local path it names."""
    p = os.fspath(path)
    return p.split("://", 1)[1] if p.startswith(LOCAL_SCHEMES) else p


def exists(path: str | os.PathLike) -> bool:
    """Whether anything is at ``path`` (a local path, or an fsspec URL: an object or a key prefix)."""
    p = os.fspath(path)
    if not is_url(p):
        return os.path.exists(p)
    fs, where = url_fs(p)
    fs.invalidate_cache(where)  # what other processes wrote since this instance last listed
    return bool(fs.exists(where))


def check_segments(url: str, what: str) -> str:
    """``url``, after a ``ValueError`` for one with an empty path segment (``s3://bucket//key``): zarr writes such
    keys, but fsspec's listings normalise them away, so what was written would then read as missing."""
    proto, _, rest = url.partition("://")
    if rest and "//" in rest.rstrip("/"):
        tidy = f"{proto}://" + "/".join(part for part in rest.split("/") if part)
        raise ValueError(f"{what} {url!r} has an empty path segment ('//'), which object stores keep in the key "
                         f"but their listings drop; write it as {tidy!r}.")
    return url


def _place(path: str | os.PathLike) -> str:
    """:func:`absolute`, with a URL's protocol as its file system's first name (``s3a://`` is ``s3://``)."""
    p = absolute(path).rstrip("/")
    if not is_url(p):
        return p
    proto, rest = p.split("://", 1)
    try:
        names = fsspec.get_filesystem_class(proto).protocol
    except (ImportError, ValueError):  # a back end not installed, or unknown: only its own spelling is the same
        return p
    return f"{names if isinstance(names, str) else names[0]}://{rest}"


def relation(a: str | os.PathLike, b: str | os.PathLike) -> str | None:
    """``"same"``, ``"inside"`` (a lies inside b), ``"contains"`` (b lies inside a) or None."""
    pa, pb = _place(a), _place(b)
    if pa == pb:
        return "same"
    if pa.startswith(pb + "/"):
        return "inside"
    if pb.startswith(pa + "/"):
        return "contains"
    return None


def free_bytes(path: str) -> int | None:
    """Free bytes on the filesystem that holds (or will hold) ``path``; None for URLs."""
    if is_url(path):
        return None
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    return shutil.disk_usage(probe).free


_WORDS = {"same": "is", "inside": "lies inside", "contains": "contains"}


def check_apart(name: str, path: str | os.PathLike, others: dict[str, str | os.PathLike | None]) -> None:
    """``ValueError`` if ``path`` is, contains or lies inside any of ``others`` (name -> path)."""
    for other_name, other in others.items():
        if other is None:
            continue
        rel = relation(path, other)
        if rel is not None:
            raise ValueError(f"{name} {os.fspath(path)!r} {_WORDS[rel]} the {other_name} {os.fspath(other)!r}; "
                             f"writing there would destroy data that is being read. Choose another {name}.")


def check_output(output: str | os.PathLike, others: dict[str, str | os.PathLike | None]) -> str:
    """The absolute output path, after refusing an output that is, contains or lies inside one of ``others``.

    ``others``: inputs and stores (name -> path).  What may already be at the
    output -- nothing, or a transform output dkpca wrote, to resume or, on
    request, to replace -- is :mod:`dkpca.storage.outputs`' decision.
    """
    head, colon, member = os.fspath(output).rpartition(":")
    if colon and member and not is_url(os.fspath(output)) and os.path.isfile(head):  # an input's 'file.h5:/x' form
        raise ValueError(f"output {os.fspath(output)!r} names a member of the file {head!r}; dkpca transform writes a "
                         "Zarr array (a directory or URL): name one such as 'out.zarr'.")
    out = check_segments(absolute(output), "output")
    check_apart("output", out, others)
    return out
