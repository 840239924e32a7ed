"""The first rows of a row-chunked stored array, every read verified: what a model fitted before an update reads.

An update (:mod:`dkpca.growth`) grows the data copy in place: chunks wholly
in the old rows are never rewritten, and the chunk the old boundary falls in
is rewritten with the old rows unchanged and new rows after them.  The
digests recorded for the old copy are :func:`~.integrity.padded_digest`\\ s
(the chunk's rows zero-padded), so the old rows of that chunk, clipped at the
boundary and padded again, still match them: a model fitted on the first
``rows`` rows reads exactly them, verified, before, during and after an
update, and never sees a new row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .corrupt import verify_digest
from .integrity import VerifiedArray, check_chunks, padded_digest, read_verified, store_name

__all__ = ["RowPrefix"]


@dataclass(frozen=True, kw_only=True)
class RowPrefix(VerifiedArray):
    """Rows ``[0, rows)`` of ``array`` (one chunk across its columns), each chunk checked against ``digests``.

    ``digests[c]``: the padded digest of chunk ``c``'s rows below ``rows``
    (for the chunk the boundary falls in, the one recorded when that
    boundary was the copy's end).  A :class:`~.integrity.VerifiedArray`
    (its ``array``, ``digests``, ``dtype``, ``ndim``) whose ``shape`` and
    row slicing stop at ``rows``.
    """

    digests: tuple[int, ...]
    rows: int

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.rows, *self.array.shape[1:])

    @property
    def chunk_coords(self) -> list[tuple[int, ...]]:
        """The coordinates of the chunks the prefix covers."""
        edge = self.array.chunks[0]
        return [(c,) + (0,) * (self.array.ndim - 1) for c in range(-(-self.rows // edge))]

    def __getitem__(self, selection: Any) -> np.ndarray:
        sel = selection if isinstance(selection, tuple) else (selection,)
        if selection is Ellipsis:
            sel = (slice(None),)
        if not sel or not isinstance(sel[0], slice) or (sel[0].step not in (None, 1)):
            return self[:][selection]  # integers, index arrays, steps: the prefix read verified, then indexed
        a, b, _ = sel[0].indices(self.rows)
        b = max(a, b)
        rest = sel[1:]
        if a == b:
            return np.empty((0, *self.array.shape[1:]), dtype=self.dtype)[(slice(None), *rest)]
        edge = self.array.chunks[0]
        h0, h1 = a // edge * edge, min(-(-b // edge) * edge, self.rows)
        whole = read_verified(self.array, (slice(h0, h1),))
        for c in range(h0 // edge, -(-h1 // edge)):
            part = whole[c * edge - h0:min((c + 1) * edge, self.rows) - h0]
            got = padded_digest(np.ascontiguousarray(part), self.array.chunks)
            if got != self.digests[c]:
                coords = (c,) + (0,) * (self.array.ndim - 1)
                check_chunks(self.array, [coords])  # "missing" says more than "not what was written"
                verify_digest(store_name(self.array), self.array.path, coords, got, self.digests[c])
        return whole[(slice(a - h0, b - h0), *rest)]
