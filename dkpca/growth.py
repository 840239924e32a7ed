"""A fit on grown data is an update: new rows reuse the store, and the answer is a fresh fit's.

``dkpca.fit(grown, store=S)`` where S's data copy holds the first rows of
``grown`` (checked chunk by chunk by digest, never trusted from a shape):

1. only the new rows are copied (:meth:`~dkpca.storage.FitStore.grow_data`);
2. the Gram store keeps its grid and only the blocks touching new rows are
   computed (:func:`~dkpca.storage.growth.grow_gram`, then the usual build,
   which reduces the row sums, diagonal, grand mean and trace again from the
   per-block sums: exactly as a fresh fit's);
3. the solver starts from the old eigenvectors extended to the new rows
   (Nystroem: ``u(x) = k~(x)^T U Lambda^-1``, the old model's out-of-sample
   centring) plus the usual oversampling columns (random), to the same
   tolerance as a fresh fit.  The extension's kernel sums come with the
   build (its blocks times ``[U Lambda^-1/2, 1]`` on the old rows): no kernel
   entry is evaluated twice.

Crash safety is the store's: every step is idempotent and recorded, the old
model stays the store's model (reading only its own rows, :class:`~dkpca.storage.rowview.RowPrefix`)
until the new one is switched in, and the same command resumes.

:func:`find_update` and :func:`grow_store` are what :func:`dkpca.fit` calls;
:func:`grow_store` is the store path an estimator's ``partial_fit(store=)`` reaches
through ``dkpca.fit``.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np

from .eigensolve import initial_block
from .execution import serial_blas
from .io import Fingerprint
from .kernels import Kernel
from .model import KPCAModel
from .planning import StartPolicy
from .planning.growthplan import growth_request
from .request import FitRequest
from .storage import FitStore, GramInfo, Lease
from .storage.growth import Growth, grow_gram, update_blocks

__all__ = ["Update", "fill_start", "find_update", "grow_store", "nystroem_rows", "update_report"]

logger = logging.getLogger("dkpca")


def nystroem_rows(scores: np.ndarray, eigenvalues: np.ndarray) -> np.ndarray:
    """New rows' eigenvector entries ``k~(x)^T U Lambda^-1`` (Nystroem) from their scores ``k~(x)^T U Lambda^-1/2``.

    Columns with a non-positive eigenvalue extend by 0.  The one formula of the store update's warm start
    (:meth:`Update.extension`) and ``partial_fit``'s (:func:`dkpca.incremental.extend_eigenvectors`).
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    return scores * np.divide(1.0, np.sqrt(np.maximum(lam, 0.0)), out=np.zeros_like(lam), where=lam > 0)


def fill_start(U: np.ndarray, usual: np.ndarray) -> np.ndarray:
    """An orthonormal start of ``usual``'s width: ``U``'s span, then the directions of ``usual`` that U lacks most.

    ``usual`` (a Nystroem start block: the top eigenvectors of an approximation, in order) mostly repeats
    U's span in its first columns; its directions outside that span, by their size there (an SVD of the
    remainder), fill the other columns.  Taking its first columns instead (a QR of ``[U, usual]``) kept
    their near-noise remainders and dropped the next eigenvectors: grown fits took 5 passes where a fresh
    fit took 4 (20,000 -> 24,000 rows, two seeds of four).
    """
    Q, _ = np.linalg.qr(U)
    W = np.linalg.svd(usual - Q @ (Q.T @ usual), full_matrices=False)[0][:, : usual.shape[1] - Q.shape[1]]
    # Householder QR keeps U's span first and makes the columns orthonormal to rounding, also where usual
    # adds nothing to U (W is then noise)
    return np.linalg.qr(np.hstack([Q, W]))[0]


@dataclass(frozen=True)
class Update:
    """A fit that updates the store's: the store side (:class:`~dkpca.storage.growth.Growth`) and the old model.

    ``model``: the store's model of the old rows with the same kernel (its
    eigenvectors start the solver), or None (none, or of other rows: a cold start).
    """

    growth: Growth
    model: KPCAModel | None

    @property
    def n_old(self) -> int:
        return self.growth.n_old

    @property
    def n_new(self) -> int:
        return self.growth.n_new

    def probe(self) -> np.ndarray | None:
        """``[U Lambda^-1/2, 1]`` on the old rows, 0 on the new: the build's product gives the extension's sums."""
        if self.model is None:
            return None
        W = self.model.projection_weights().W
        P = np.zeros((self.n_new, W.shape[1] + 1))
        P[: self.n_old, :-1] = W
        P[: self.n_old, -1] = 1.0
        return P

    def extension(self, product: np.ndarray | None, X: da.Array) -> np.ndarray | None:
        """The old eigenvectors' Nystroem extension to the new rows, ``k~(x)^T U Lambda^-1`` (m x k).

        ``product``: the build's ``K P`` (:meth:`probe`), whose new rows hold
        ``k(x)^T W`` and ``k(x)^T 1`` over the old rows; without it (K built
        already: a rerun) the old model projects the new rows itself.
        """
        model = self.model
        if model is None:
            return None
        if product is not None:
            k = model.n_components
            KW, ksum = product[self.n_old:, :k].copy(), product[self.n_old:, k]
            Z = model.centering.center_scores(KW, ksum / self.n_old, model.projection_weights())
        else:
            Z = np.asarray(model.transform(X[self.n_old:].compute()))
        return nystroem_rows(Z, model.eigenvalues_)

    def start_block(self, info: GramInfo | None, X: da.Array, policy: StartPolicy, kernel: Kernel,
                    rng: np.random.Generator) -> np.ndarray | None:
        """The solver's start: ``[U; U_ext]``, then the policy's usual block for the other columns, orthonormal.

        ``info``: the build's, whose product (:meth:`probe`) holds the extension's sums when it computed every
        block touching a new row (not a rerun that found some built); else the old model projects the new rows.

        The policy's block (Nystroem or random, :func:`dkpca.planning.start_policy`) orthogonalised
        against the extension gives the oversampling columns, as in a fresh fit.
        """
        _, computed, _ = update_blocks(self.n_old, self.n_new, self.growth.block)
        whole = info is not None and info.probe_product is not None and info.computed_blocks == computed
        ext = self.extension(info.probe_product if whole else None, X)
        if ext is None:
            return None
        U = np.vstack([self.model.eigenvectors_, ext])[:, : policy.width]
        usual = initial_block(policy, X, kernel, rng)
        # the policy's BLAS threads for a start block's algebra (one for narrow blocks: measured faster)
        with serial_blas() if policy.serial else contextlib.nullcontext():
            return fill_start(U, usual)

    @property
    def warm(self) -> str:
        """The start, in words (the report's ``warm_start``)."""
        if self.model is None:
            return "none: no model of the old rows with this kernel in the store; the solver's usual start"
        return (f"the old model's {self.model.n_components} eigenvectors extended to the new rows (Nystroem), "
                "plus the usual start block's directions beyond them")


def find_update(req: FitRequest, chunk_size: int | None, dtype: str | None) -> tuple[FitRequest, Update | None]:
    """Whether ``req`` updates the fit in its store; the request re-chunked to the stored tile if so.

    ``chunk_size`` and ``dtype`` (None: ``auto``) as the user gave them: an
    update keeps the store's tile and precision, and refuses others by name
    (as it refuses another kernel).
    """
    if req.overwrite or req.temporary is not None:
        return req, None
    req, growth = growth_request(req, chunk_size, dtype)  # a refit (after an update, too) keeps the stored tile
    if growth is None:
        return req, None
    model = None
    if growth.model_rows == growth.n_old:
        try:
            model = KPCAModel.load(req.store.path)
        except ValueError as exc:  # a damaged old model only costs the warm start
            logger.warning("the store's model cannot start the update (%s); starting as a fresh fit does", exc)
        if model is not None and model.kernel.to_dict() != req.kernel.to_dict():
            model = None
    return req, Update(growth, model)


def grow_store(req: FitRequest, update: Update, fp: Fingerprint, lease: Lease, store_gram: bool,
               source: str | None = None) -> da.Array:
    """The store grown to ``req``'s rows: the old rows checked by digest, the new ones copied, K's grid grown.

    Under the fit's lock.  ``store_gram``: the fit stores K (the Gram store
    is grown; otherwise it is left as it is).  Returns the grown data copy, lazily.

    Raises
    ------
    ValueError
        A chunk of the input's first ``n_old`` rows differs from the store's
        copy (named, with its rows).
    """
    store: FitStore = req.store
    n_old, edge = update.n_old, update.growth.block
    if update.growth.copy_data:
        c = store.changed_chunk(req.X, n_old)
        if c is not None:
            raise ValueError(
                f"row chunk {c} (rows {c * edge} to {min((c + 1) * edge, n_old) - 1}) of the input differs from "
                f"the store's copy of the data fitted in {store.path!r}: the input does not extend that data, so "
                "it cannot update the fit. Pass overwrite=True (CLI: --overwrite) to fit it from scratch, or "
                "choose another store.")
        Xs = store.grow_data(req.X, fp.to_dict(), n_old, progress=req.progress, lease=lease)
    else:
        Xs = store.store_data(req.X, fp.to_dict(), False, progress=req.progress, source=source, lease=lease)
    if store_gram and update.growth.gram:
        grow_gram(store, n_old, {"fingerprint": fp.to_dict(), "kernel": req.kernel.to_dict(), "block": req.tile,
                                 "dtype": np.dtype(req.dtype).name, "n": req.n})
    return Xs


def update_report(update: Update, gram: dict[str, Any], passes: int) -> dict[str, Any]:
    """The report's ``update`` section: rows before and after, blocks reused and computed, passes, warm start."""
    _, _, entries = update_blocks(update.n_old, update.n_new, update.growth.block)
    return {"rows_before": update.n_old, "rows_after": update.n_new, "rows_added": update.n_new - update.n_old,
            "blocks_reused": gram.get("reused_blocks"), "blocks_computed": gram.get("computed_blocks"),
            "entries_computed": entries if gram.get("computed_blocks") is not None else None,
            "passes": passes, "warm_start": update.warm}
