"""A fit on grown data is an update: new rows reuse the store, and the answer is a fresh fit's.

``dkpca.fit(grown, store=S)`` where S's data copy holds the first rows of
``grown`` (checked chunk by chunk by digest, never trusted from a shape):

1. only the new rows are copied (:meth:`~dkpca.storage.FitStore.grow_data`);
2. the Gram store keeps its grid and only the blocks touching new rows are
   computed (:func:`~dkpca.storage.growth.grow_gram`, then the usual build,
   which reduces the row sums, diagonal, grand mean and trace again from the
   per-block sums: exactly as a fresh fit's);
3. the solver starts from the old fit, to the same tolerance as a fresh fit.
   Where the store holds the old fit's Ritz record (:func:`save_ritz`: its
   leading Ritz pairs ``U`` and their exact products ``K U``, which block
   Lanczos leaves without an extra pass), the start is a Rayleigh-Ritz step on
   ``[U, 0]`` and ``[0, E]`` (``E`` the new rows' Nystroem extension of U,
   ``k~(x)^T U Lambda^-1`` with the old model's out-of-sample centring), and
   its product with K is known without reading the old rows' K: ``K U`` from
   the record, ``k(x)^T U`` from the build (its blocks times ``[U, 1]`` on the
   old rows) and ``K [0, E]`` from the blocks touching new rows alone
   (:func:`ritz_start`): the solver's first pass costs those blocks, as a
   fresh fit's first pass is fused into its build.  Without the record (a
   model of another solver, a damaged record: both logged) the start is the
   old eigenvectors extended plus the usual start block's other directions
   (``extend_basis``), and the first pass reads all of K.  No kernel entry is
   evaluated twice.

Crash safety is the store's: every step is idempotent and recorded, the old
model stays the store's model (reading only its own rows, :class:`~dkpca.storage.rowview.RowPrefix`)
until the new one is switched in, and the same command resumes.

:func:`find_update` and :func:`grow_store` are what :func:`dkpca.fit` calls;
:func:`grow_store` is the store path an estimator's ``partial_fit(store=)`` reaches
through ``dkpca.fit``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import dask.array as da
import numpy as np

from .eigensolve import algebra_blas, initial_block
from .io import Fingerprint
from .kernels import Kernel
from .linalg import Centering, extend_basis
from .model import KPCAModel
from .operator import CenteredKernelOperator
from .planning import Precision, StartPolicy
from .planning.growthplan import growth_request
from .request import FitRequest
from .storage import FitStore, GramInfo, Lease
from .storage.fitstore import RITZ
from .storage.growth import Growth, grow_gram, retire_gram

__all__ = ["RitzRecord", "Update", "find_update", "grow_store", "load_ritz", "nystroem_rows",
           "ritz_count", "ritz_start", "save_ritz", "update_report"]

logger = logging.getLogger("dkpca")


def nystroem_rows(scores: np.ndarray, eigenvalues: np.ndarray) -> np.ndarray:
    """New rows' eigenvector entries ``k~(x)^T U Lambda^-1`` (Nystroem) from their scores ``k~(x)^T U Lambda^-1/2``.

    Columns with a non-positive eigenvalue extend by 0.  The one formula of the store update's warm start
    (:meth:`Update.extension`) and ``partial_fit``'s (:func:`dkpca.incremental.extend_eigenvectors`).
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    return scores * np.divide(1.0, np.sqrt(np.maximum(lam, 0.0)), out=np.zeros_like(lam), where=lam > 0)


#: Ritz pairs a fit records beyond its subspace width (:func:`ritz_count`).  Measured by Rayleigh-Ritz starts
#: on dense K (clustered rbf, d = 50, k = 10, width 20, tol 1e-6), 20,000 -> 24,000 rows, passes with the first
#: free: 20 old pairs 4 (residuals 4.5e-3 6.1e-5 1.0e-6 1.1e-8), 30 or 40 old pairs 3 (4.5e-3 6.0e-5 9.1e-7);
#: the extension of the leading 20 only (the width) gives the same as of 40.
RITZ_EXTRA = 10

#: largest departure from orthonormality a recorded U may show (it is read back: a Ritz basis is orthonormal
#: to ~1e-13; a start built on a skewed one would still be exact, but it was not what the fit wrote)
RITZ_ORTHONORMAL = 1e-8


def ritz_count(width: int) -> int:
    """Ritz pairs a fit of subspace width ``width`` records for its updates."""
    return width + RITZ_EXTRA


@dataclass(frozen=True)
class RitzRecord:
    """An old fit's leading Ritz pairs on its rows: ``values`` (p,), ``vectors`` U and ``products`` K U (n_old x p).

    ``K U`` is uncentred and exact (the Krylov relation, :func:`dkpca.solvers.lanczos.solve`'s ``ritz``),
    so an update knows K times any combination of U on the old rows without reading K.
    """

    values: np.ndarray
    vectors: np.ndarray
    products: np.ndarray


def save_ritz(store: FitStore, ritz: tuple[np.ndarray, np.ndarray, np.ndarray], centering: Centering,
              kernel: Kernel, dtype: np.dtype, block: int) -> None:
    """Record a finished fit's ``(theta, U, K~ U)`` beside its model (after it: the record names the model)."""
    theta, U, KtU = ritz
    chunks = (min(block, U.shape[0]), U.shape[1])
    store.write_ritz({"values": (theta, None), "vectors": (U, chunks),
                      "products": (centering.uncenter_product(KtU, U), chunks)},
                     {"model": store.model_group(), "kernel": kernel.to_dict(), "dtype": np.dtype(dtype).name,
                      "rows": int(U.shape[0])})


def load_ritz(store: FitStore, n_old: int, kernel: Kernel, dtype: np.dtype) -> RitzRecord | None:
    """The Ritz record of the store's current model of ``n_old`` rows with this kernel and K's precision, or None.

    None also for a record of another model (a fit killed between its model and its record) and for a
    damaged one (logged): the update then starts as without it, one pass dearer, never from wrong products.
    """
    if store.model_group(RITZ) is None:
        return None
    try:
        arrays, attrs = store.read_ritz()
    except ValueError as exc:  # damaged (DamagedModelError, CorruptChunkError), or withdrawn while we read
        logger.warning("the store's Ritz record cannot start the update (%s); starting without it", exc)
        return None
    if (attrs.get("model") != store.model_group() or attrs.get("kernel") != kernel.to_dict()
            or attrs.get("dtype") != np.dtype(dtype).name or attrs.get("rows") != n_old):
        logger.info("the store's Ritz record belongs to another model; the update starts without it")
        return None
    theta, U, KU = (arrays.get(k) for k in ("values", "vectors", "products"))
    ok = all(a is not None and a.dtype.kind == "f" and np.isfinite(a).all() for a in (theta, U, KU))
    ok = ok and theta.ndim == 1 and U.shape == KU.shape == (n_old, theta.size) and theta.size > 0
    if not ok or np.abs(U.T @ U - np.eye(theta.size)).max() > RITZ_ORTHONORMAL:
        logger.warning("the store's Ritz record is not a set of orthonormal Ritz vectors of %d rows with their "
                       "products; the update starts without it", n_old)
        return None
    # the pairs with a positive value: the Nystroem extension (and the build's sums, k(x)^T U Lambda^-1/2) needs them
    keep = theta > 0
    return RitzRecord(theta[keep], U[:, keep], KU[:, keep])


def ritz_start(op: CenteredKernelOperator, ritz: RitzRecord, ext: np.ndarray, new_KW: np.ndarray,
               width: int) -> np.ndarray:
    """An update's start block of ``width`` columns; its product with K is handed to ``op`` (``op.prime``).

    Rayleigh-Ritz on ``Q = [[U, 0], [0, E]]`` (``E``: the new rows' Nystroem extension ``ext`` of the leading
    ``width`` Ritz vectors, made orthonormal), whose product with K is ``[[K U, K_on E], [K_no U, K_nn E]]``:
    ``K U`` recorded, ``K_no U`` from the build's ``new_KW`` (the new rows' ``k(x)^T U Lambda^-1/2`` over the
    old rows, :meth:`Update.probe`), the ``E`` columns one product over the blocks touching new rows.  The
    top ``width`` Ritz vectors of ``Q^T K~ Q`` start the solver; the product of any combination of Q's
    columns is that combination of theirs, so the solver's first pass reads no block of the old rows.
    """
    n_old, p = ritz.vectors.shape
    E, sv, _ = np.linalg.svd(ext[:, :width], full_matrices=False)
    E = E[:, : int(np.sum(sv > 1e-10 * sv[0]))] if sv.size and sv[0] > 0 else E[:, :0]
    Q = np.zeros((op.n, p + E.shape[1]))
    Q[:n_old, :p], Q[n_old:, p:] = ritz.vectors, E
    KQ = np.empty_like(Q)
    KQ[:n_old, :p], KQ[n_old:, :p] = ritz.products, new_KW * np.sqrt(ritz.values)
    KQ[:, p:] = op.raw_matmat(Q[:, p:], zero_above=n_old)
    M = Q.T @ op.centering.center_product(KQ.copy(), Q)
    Y = np.linalg.eigh(0.5 * (M + M.T))[1][:, ::-1][:, :width]
    V = Q @ Y
    op.prime(V, KQ @ Y)
    logger.debug("update start: Rayleigh-Ritz on %d recorded Ritz vectors and %d of the new rows' directions",
                 p, E.shape[1])
    return V


@dataclass(frozen=True)
class Update:
    """A fit that updates the store's: the store side (:class:`~dkpca.storage.growth.Growth`) and the old model.

    ``model``: the store's model of the old rows with the same kernel (its
    eigenvectors start the solver), or None (none, or of other rows: a cold start).
    ``ritz``: its Ritz record (:meth:`with_ritz`, read under the fit's lock), or None.
    ``precision``: the precision ``dtype="auto"`` chose for it where the store's K is float32
    (:func:`~dkpca.planning.growthplan.growth_request`), which the fit's decision takes; None: none measured.
    """

    growth: Growth
    model: KPCAModel | None
    ritz: RitzRecord | None = None
    precision: Precision | None = None

    def with_ritz(self, store: FitStore, dtype: np.dtype) -> Update:
        """This update with the store's Ritz record of the old model, if there is one that fits (:func:`load_ritz`)."""
        if self.model is None:
            return self
        return replace(self, ritz=load_ritz(store, self.n_old, self.model.kernel, dtype))

    @property
    def n_old(self) -> int:
        return self.growth.n_old

    @property
    def n_new(self) -> int:
        return self.growth.n_new

    def _pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(Lambda, U)`` the start extends: the Ritz record's where there is one, else the old model's."""
        if self.ritz is not None:
            return self.ritz.values, self.ritz.vectors
        return self.model.eigenvalues_, self.model.eigenvectors_

    def probe(self) -> np.ndarray | None:
        """``[U Lambda^-1/2, 1]`` on the old rows, 0 on the new: the build's product gives the extension's sums."""
        if self.model is None:
            return None
        W = self.model.centering.projection_weights(*self._pairs()).W
        P = np.zeros((self.n_new, W.shape[1] + 1))
        P[: self.n_old, :-1] = W
        P[: self.n_old, -1] = 1.0
        return P

    def extended(self, product: np.ndarray | None, X: da.Array) -> np.ndarray | None:
        """``[U; k~(x)^T U Lambda^-1]``: the old vectors and their Nystroem extension to the new rows.

        ``product``: the build's ``K P`` (:meth:`probe`), whose new rows hold
        ``k(x)^T W`` and ``k(x)^T 1`` over the old rows (U: :meth:`_pairs`); without it (K built
        already: a rerun) the old model projects the new rows itself (U: its eigenvectors).
        """
        model = self.model
        if model is None:
            return None
        if product is not None:
            lam, U = self._pairs()
            weights = model.centering.projection_weights(lam, U)
            k = U.shape[1]
            Z = model.centering.center_scores(product[self.n_old:, :k].copy(), product[self.n_old:, k] / self.n_old,
                                              weights)
        else:
            lam, U = model.eigenvalues_, model.eigenvectors_
            Z = np.asarray(model.transform(X[self.n_old:].compute()))
        return np.vstack([U, nystroem_rows(Z, lam)])

    def start_block(self, info: GramInfo | None, X: da.Array, policy: StartPolicy, kernel: Kernel,
                    rng: np.random.Generator, op: CenteredKernelOperator | None = None) -> np.ndarray | None:
        """The solver's start: :func:`ritz_start` where it can, else ``extend_basis`` of :meth:`extended`.

        ``info``: the build's, whose product (:meth:`probe`) holds the extension's sums when it computed every
        block touching a new row (not a rerun that found some built); else the old model projects the new rows.
        ``op``: the stored K's operator, primed with the start's product by :func:`ritz_start` (None: no K stored).

        ``extend_basis`` adds the policy's block (Nystroem or random, :func:`dkpca.planning.start_policy`)
        beyond the extension for the oversampling columns, as in a fresh fit.
        """
        _, computed, _ = self.growth.gram_blocks()
        whole = info is not None and info.probe_product is not None and info.computed_blocks == computed
        full = self.extended(info.probe_product if whole else None, X)
        if full is None:
            return None
        if whole and op is not None and self.ritz is not None and self.ritz.values.size >= policy.width:
            with algebra_blas(policy):
                return ritz_start(op, self.ritz, full[self.n_old:],
                                  info.probe_product[self.n_old:, :self.ritz.values.size], policy.width)
        usual = initial_block(policy, X, kernel, rng)
        with algebra_blas(policy):  # the policy's BLAS threads (one for narrow blocks: measured faster)
            return extend_basis(full[:, : policy.width], usual)

    def warm(self, fused: bool) -> str:
        """The start, in words (the report's ``warm_start``); ``fused``: :func:`ritz_start` gave it."""
        if self.model is None:
            return "none: no model of the old rows with this kernel in the store; the solver's usual start"
        if fused:
            return ("Rayleigh-Ritz on the old fit's recorded Ritz vectors and their "
                    "extension to the new rows (Nystroem), its product with K read only from the blocks "
                    "touching new rows")
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
    req, growth, precision = growth_request(req, chunk_size, dtype)  # a refit (after one, too) keeps the stored tile
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
    return req, Update(growth, model, precision=precision)


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
    if update.growth.copy_data:
        # the build reads every old row: a damaged chunk of them (or the copy's lost metadata) is written again from
        # the input, which holds the rows its digest names (the refit's repair), rather than refused midway through
        # the build; first, so that the comparison below reads an intact copy
        store.mend_data(req.X[:update.n_old], lease)
        changed = store.changed_chunk(req.X, update.n_old)
        if changed is not None:
            raise ValueError(
                "row chunk {} (rows {} to {}) of the input differs from ".format(*changed)
                + f"the store's copy of the data fitted in {store.path!r}: the input does not extend that data, so "
                "it cannot update the fit. Pass overwrite=True (CLI: --overwrite) to fit it from scratch, or "
                "choose another store.")
        Xs = store.grow_data(req.X, fp.to_dict(), update.n_old, progress=req.progress, lease=lease, seen=fp.chunks)
    else:
        Xs = store.store_data(req.X, fp.to_dict(), False, progress=req.progress, source=source, lease=lease,
                              seen=fp.chunks)
    if store_gram and update.growth.gram:
        rows = update.growth.gram_rows
        grow_gram(store, rows, {"fingerprint": fp.to_dict(), "kernel": req.kernel.to_dict(), "block": req.tile,
                                "dtype": np.dtype(req.dtype).name, "n": req.n}, older=rows < update.n_old)
    elif store_gram:  # K is built anew: one of another tile or precision goes (Growth.rebuilt); the model stays
        retire_gram(store, req.tile, req.dtype)
    return Xs


def update_report(update: Update, gram: dict[str, Any], passes: int, fused: bool = False) -> dict[str, Any]:
    """The report's ``update`` section: rows before and after, blocks reused and computed, passes, warm start,
    ``tile``: ``[the store's, K's now]`` where the update re-tiled K (:func:`~dkpca.storage.growth.retile`), else None,
    and ``dtype`` likewise where it built K in another precision (K's now: the gram report's).

    ``fused``: the first pass was :func:`ritz_start`'s (it read only the blocks touching new rows).
    """
    _, planned, entries = update.growth.gram_blocks()
    # the planned blocks' entries, where the build computed those blocks; not after a killed earlier update left
    # other blocks to compute (then None, rather than a count of other blocks)
    return {"rows_before": update.n_old, "rows_after": update.n_new, "rows_added": update.n_new - update.n_old,
            "blocks_reused": gram.get("reused_blocks"), "blocks_computed": gram.get("computed_blocks"),
            "entries_computed": entries if gram.get("computed_blocks") == planned else None,
            "passes": passes, "first_pass_fused": fused, "warm_start": update.warm(fused),
            "tile": None if update.growth.retiled is None else [update.growth.retiled, update.growth.block],
            "dtype": None if update.growth.retyped is None else [update.growth.retyped, gram.get("dtype")]}
