"""The fitted kernel PCA model: projections, scores, persistence.

A model lives in the ``model/`` group of its store, next to the training data (``data/X``) it needs for
out-of-sample projections: eigenpairs and centering statistics as Zarr arrays, everything else as JSON
attributes.  Loading never unpickles anything.

Out-of-sample projection (Neal's notes; :mod:`dkpca.linalg.centering`): for a new point x with
``k(x)_i = k(x, x_i)``,

    k~(x) = k(x) - r - mean(k(x)) 1 + c 1,        z_k(x) = k~(x)^T u_k / sqrt(lambda_k)

evaluated blockwise against the training rows, never holding more than one (new block x training block) kernel
block per task.
"""

from __future__ import annotations

import datetime
import html
import os
import pickle
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any

import dask
import dask.array as da
import numpy as np

from .execution import compute
from .fitreport import REPORT_SCHEMA, FitReport, read_gram_mode, read_report, stored_gram_mode
from .grammode import GramMode
from .io import as_dask, check_feature_names, open_input, read_feature_names
from .jsonsafe import printable
from .kernels import Kernel, from_dict
from .linalg import Centering, ProjectionWeights
from .plot import plot_embedding, plot_spectrum
from .projection import check_temporary, project_stored
from .request import TemporaryStore
from .solvers import Solver, spec_of
from .storage import EDITED, DamagedModelError, FitStore, GramStore, edited
from .version import __version__

__all__ = ["KPCAModel", "load"]


@dataclass
class KPCAModel:
    """Result of :func:`dkpca.fit`.

    Attributes
    ----------
    eigenvalues_ : ndarray of shape (k,)
        Top eigenvalues of the centred kernel matrix K~ (not divided by n).
    eigenvectors_ : ndarray of shape (n, k)
        Unit eigenvectors of K~ (deterministic signs).
    explained_variance_ratio_ : ndarray of shape (k,)
        ``lambda_k / trace(K~)``.
    row_means_ : ndarray of shape (n,)
        ``r = K 1 / n``.
    grand_mean_ : float
        ``c = 1^T K 1 / n^2``.
    trace_ : float
        ``trace(K~)``.
    kernel : Kernel
        Resolved kernel.
    store : str
        Store root holding the training data and this model.
    report : dict
        Solver, passes, residuals, timings, Gram build statistics (:meth:`FitReport.to_dict
        <dkpca.fitreport.FitReport.to_dict>`, or an older store's report as it was written).
    fit_report : FitReport or None
        The report, typed; None for a store written before report schemas.
    gram_mode : GramMode or None
        Where the fit's K lived (a load checks a stored K's kernel); None: no K built (Nystroem).
    temporary : TemporaryStore or None
        Set when ``store`` is a temporary directory dkpca made (in-memory
        input fitted without ``store=``): the model owns it, and it is removed
        by :meth:`close`, when the model (and every lazy result of its
        ``transform``) is garbage-collected, or at interpreter exit.  Such a
        model cannot be pickled: fit with ``store=`` to keep a model.
    """

    eigenvalues_: np.ndarray
    eigenvectors_: np.ndarray
    row_means_: np.ndarray
    grand_mean_: float
    trace_: float
    kernel: Kernel
    store: str
    block: int
    n_features: int
    report: dict[str, Any] = field(default_factory=dict)
    temporary: TemporaryStore | None = field(default=None, repr=False, compare=False)
    fit_report: FitReport | None = field(default=None, repr=False)
    gram_mode: GramMode | None = None
    #: the schema ``report`` is written in (None: an older store's report, saved again as it was read)
    report_schema: int | None = field(default=REPORT_SCHEMA, repr=False)
    #: a data frame's column names, which ``transform`` checks a data frame's by (None: fitted on an array)
    feature_names: tuple[str, ...] | None = None
    #: what binds the model to its rows of the store's data copy (:meth:`~dkpca.storage.FitStore.data_digest`),
    #: set by :meth:`save`; every read of the training data checks it (None: a model saved before dkpca recorded it)
    data_digest: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # a fit hands its typed report: the dict view and the Gram mode are derived from it, once
        if self.fit_report is not None:
            if not self.report:
                self.report = self.fit_report.to_dict()
            if self.gram_mode is None:
                self.gram_mode = self.fit_report.gram_mode

    # -- derived ----------------------------------------------------------
    @property
    def n_components(self) -> int:
        return int(self.eigenvalues_.shape[0])

    @property
    def n_samples(self) -> int:
        return int(self.eigenvectors_.shape[0])

    @property
    def explained_variance_ratio_(self) -> np.ndarray:
        return self.eigenvalues_ / self.trace_ if self.trace_ > 0 else np.zeros_like(self.eigenvalues_)

    @property
    def embedding_(self) -> np.ndarray:
        """Training points in component space, ``U sqrt(lambda)`` (n x k)."""
        return self.eigenvectors_ * np.sqrt(np.maximum(self.eigenvalues_, 0.0))

    @property
    def X_fit(self) -> da.Array:
        """The training data as stored (lazy)."""
        return self._open_store().training_data(self.n_samples, self.data_digest)

    # -- lifetime of a temporary store --------------------------------------
    def _open_store(self) -> FitStore:
        check_temporary(self.temporary)
        return FitStore.at(self.store)

    def close(self) -> None:
        """Remove the model's temporary store now (a fit of in-memory data without ``store=``).

        A store that was named (``store=``) or derived from a path input is
        always kept; closing such a model does nothing.  The model's arrays
        stay usable; ``transform`` of a closed temporary model is an error.
        """
        if self.temporary is not None:
            self.temporary.remove()

    def __enter__(self) -> KPCAModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        if self.temporary is not None:
            raise pickle.PicklingError(
                "this model lives in a temporary store that is removed with it, so a pickle could not use it; "
                "fit with store='path.dkpca.zarr' to keep the model (then pickle it, or reload it with "
                "dkpca.load(path)).")
        return self.__dict__.copy()

    @property
    def centering(self) -> Centering:
        """The training kernel's centring statistics (``trace(K) = trace(K~) + n c``)."""
        return Centering(self.row_means_, self.grand_mean_, self.trace_ + self.n_samples * self.grand_mean_)

    def projection_weights(self) -> ProjectionWeights:
        """``W = U / sqrt(lambda)`` and the sums that centre new points' scores."""
        return self.centering.projection_weights(self.eigenvalues_, self.eigenvectors_)

    # -- out of sample ----------------------------------------------------
    def _scores(self, X: Any) -> tuple[Any, bool]:
        store = self._open_store()
        check_feature_names(X, self.feature_names)
        raw = open_input(X)
        # dask in, dask out, with the caller's row chunks; paths and arrays give numpy
        lazy = isinstance(raw, da.Array) and not isinstance(X, (str, os.PathLike))
        Xd = as_dask(raw, block_rows=min(self.block, 4096), min_samples=1, purpose="transform",
                     keep_row_chunks=lazy)
        if Xd.shape[1] != self.n_features:
            raise ValueError(
                f"X has {Xd.shape[1]} features but the model was fitted with {self.n_features}."
            )
        # O(n k) inputs go into the graph once, not once per block task
        weights, centering = (dask.delayed(a, pure=True) for a in (self.projection_weights(), self.centering))
        k = self.n_components
        out = Xd.map_blocks(
            project_stored, store, self.block, self.n_samples, self.data_digest, self.kernel, weights, centering,
            self.temporary, dtype=np.float64, chunks=(Xd.chunks[0], (k + 2,)), meta=np.empty((0, 0)),
        )
        return out, lazy

    def transform(self, X: Any) -> Any:
        """Project new points onto the components.

        Parameters
        ----------
        X : array-like of shape (m, d), dask array, or Zarr path
            New points (same features as the training data).

        Returns
        -------
        Z : ndarray of shape (m, k), or a lazy dask array if X is one.
        """
        S, lazy = self._scores(X)
        Z = S[:, : self.n_components]
        return Z if lazy else compute(Z)[0]

    def reconstruction_error(self, X: Any, n_components: int | None = None) -> Any:
        """Squared feature-space distance from phi(x) to its projection.

        ``||phi~(x)||^2 - sum_{k<=q} z_k(x)^2`` with ``||phi~(x)||^2 = k(x,x) - 2 mean(k(x)) + c``; shape (m,);
        ``n_components`` q from 0 (the norm itself) to the model's k (None).
        """
        k = q = self.n_components
        if n_components is not None:  # the scores' two more columns (mean k(x), k(x,x)) are no components
            q = n_components if isinstance(n_components, Integral) and not isinstance(n_components, bool) else -1
            if not 0 <= q <= k:
                raise ValueError(f"n_components={n_components!r} is invalid; it must be an integer between 0 and "
                                 f"{k} (the components of the fitted model; None: all of them).")
        S, lazy = self._scores(X)
        norm2 = self.centering.feature_norms(S[:, k + 1], S[:, k])
        err = norm2 - (S[:, :q] ** 2).sum(axis=1)
        return err if lazy else compute(err)[0]

    # -- persistence ------------------------------------------------------
    def save(self) -> str:
        """Write the model into ``<store>/model`` (replacing an older one)."""
        rows, store = min(self.block, self.n_samples), FitStore.at(self.store)
        if self.data_digest is None:  # a fit's model, saved beside the data it was fitted on (a loaded one keeps its)
            self.data_digest = store.data_digest(self.n_samples)
        store.write_model(
            {"eigenvalues": (self.eigenvalues_, None),
             "eigenvectors": (self.eigenvectors_, (rows, max(1, self.n_components))),
             "row_means": (self.row_means_, (rows,))},
            {"kernel": self.kernel.to_dict(), "grand_mean": self.grand_mean_, "trace": self.trace_,
             "block": self.block, "n_features": self.n_features, "report": self.report,
             "gram_mode": self.gram_mode,
             **({} if self.report_schema is None else {"report_schema": self.report_schema}),
             **({} if self.feature_names is None else {"feature_names": list(self.feature_names)}),
             **({} if self.data_digest is None else {"data_digest": self.data_digest}),
             "saved": datetime.datetime.now(datetime.UTC).isoformat(), "dkpca_version": __version__})
        return self.store

    @classmethod
    def load(cls, path: str | os.PathLike) -> KPCAModel:
        """Read a model written by :meth:`save` (or :func:`dkpca.fit`), checking every field.

        Raises
        ------
        ValueError
            The store holds no complete model, or a field is missing, of the
            wrong shape or type, not finite, or inconsistent with the store's
            data or Gram matrix, or an array is not what was written (its
            digest): :class:`~dkpca.storage.DamagedModelError`, naming the field.
        """
        store = FitStore.at(path)

        def beside(arrays: dict, attrs: dict) -> tuple[dict | None, Any]:
            # a model fitted from the stored K must name the kernel K was built with (checked below)
            stored_K = stored_gram_mode(attrs) == GramMode.STORE
            extent, U = store.data_extent(), arrays.get("eigenvectors")
            rows = U.shape[0] if U is not None and U.ndim == 2 else None
            if rows is not None and extent.covers(rows, attrs.get("n_features")):  # else refused below, by name
                store.check_bound(rows, attrs.get("data_digest"))  # its own rows, not another store's of that shape
            return (GramStore(store).recorded_kernel() if stored_K else None), extent

        # read with the model: a refit switching it meanwhile makes all of it be read again
        arrays, a, (built, extent) = store.read_model_with(beside)

        def bad(field: str, why: str) -> DamagedModelError:
            return DamagedModelError(store.path, f"model field {field!r}", why)

        for name in ("eigenvalues", "eigenvectors", "row_means"):
            if name not in arrays:
                raise bad(name, "is missing")
            if arrays[name].dtype.kind != "f" or not np.isfinite(arrays[name]).all():
                raise bad(name, "is not an array of finite floats")
        lam, U, r = arrays["eigenvalues"], arrays["eigenvectors"], arrays["row_means"]
        if lam.ndim != 1 or U.ndim != 2 or U.shape[1] != lam.shape[0]:
            raise bad("eigenvectors", f"has shape {U.shape}, not (n, {lam.shape[0]})")
        if not (lam > 0).all():  # the spectrum policy keeps positive eigenvalues only: scores divide by sqrt
            raise bad("eigenvalues", f"holds {float(lam[lam <= 0][0])!r}, not a positive eigenvalue")
        if r.shape != (U.shape[0],):
            raise bad("row_means", f"has shape {r.shape}, not ({U.shape[0]},)")
        for name in ("grand_mean", "trace"):
            v = a.get(name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                raise bad(name, f"is {v!r}, not a finite number")
        for name, most in (("block", U.shape[0]), ("n_features", None)):
            v = a.get(name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1 or (most is not None and v > most):
                raise bad(name, f"is {v!r}, not a positive integer" + (f" up to {most}" if most else ""))
        report, schema = a.get("report", {}), a.get("report_schema")
        typed, mode = read_report(report, schema, bad), read_gram_mode(a, bad)
        try:
            kernel = from_dict(a.get("kernel"))
        except ValueError as exc:
            raise bad("kernel", f"is not a valid kernel spec ({exc})") from None
        if built is not None and built != kernel.to_dict():
            raise bad("kernel", f"is {kernel.to_dict()} but the store's Gram matrix was built with {built}")
        if edited(a, "kernel"):  # where K is recomputed, nothing else tells another valid kernel from the fit's
            raise bad("kernel", f"{kernel.to_dict()} {EDITED}")
        if not extent.covers(U.shape[0], a["n_features"]):  # its own rows: all, or the first before an update
            raise bad("n_features", f"does not match the stored training data of shape {(extent.rows, extent.d)}")
        return cls(eigenvalues_=lam, eigenvectors_=U, row_means_=r, grand_mean_=float(a["grand_mean"]),
                   trace_=float(a["trace"]), kernel=kernel, store=store.path, block=a["block"],
                   n_features=a["n_features"], report=report, fit_report=typed,
                   gram_mode=mode, report_schema=schema, feature_names=read_feature_names(a, bad),
                   data_digest=a.get("data_digest"))

    # -- display ----------------------------------------------------------
    def summary(self) -> str:
        """Plain-text spectrum, explained variance and solver report."""
        r = {key: printable(v) for key, v in self.report.items() if not isinstance(v, (dict, list))}
        resid, gram = self._residual(), {k: printable(v) for k, v in (self.report.get("gram") or {}).items()}
        lines = [
            f"dkpca model: n={self.n_samples}, d={self.n_features}, k={self.n_components}",
            f"  kernel: {self.kernel.to_dict()}",
            f"  store:  {printable(self.store)}",
            f"  solver: {r.get('solver')} (gram={gram.get('mode')}, dtype={gram.get('dtype')}; why: dkpca info); "
            f"passes={r.get('passes')}, {self._accuracy(resid)}",
            "   k   eigenvalue      explained   cumulative",
        ]
        cum = np.cumsum(self.explained_variance_ratio_)
        for i, (lam, ev) in enumerate(zip(self.eigenvalues_, self.explained_variance_ratio_, strict=True)):
            lines.append(f"  {i + 1:2d}  {lam:14.6g}  {ev:9.4%}  {cum[i]:9.4%}")
        t = {key: v for key, v in (self.report.get("timings") or {}).items() if isinstance(v, (int, float))}
        if t:
            lines.append("  time: " + ", ".join(f"{printable(k)} {v:.2f}s" for k, v in t.items()))
        return "\n".join(lines)

    def _accuracy(self, resid: float) -> str:
        """How far the eigenpairs are to be trusted, in words: a Nystrom fit is an approximation by design, whose
        "converged" would say nothing, so its size and trace error are said instead."""
        info, name = self.report.get("solver_info") or {}, self.report.get("solver")
        spec = spec_of(name) if name in set(Solver) else None  # a report of another dkpca: as it says
        if spec is not None and not spec.exact and isinstance(info, dict) and "n_landmarks" in info:
            rte = info.get("relative_trace_error")
            return (f"approximate: {info['n_landmarks']} landmarks, trace(K - K_nys) / trace(K) = "
                    f"{rte:.2e}" if isinstance(rte, (int, float)) else "approximate")
        return f"converged={printable(self.report.get('converged'))}, max rel. residual={resid:.2e}"

    def _residual(self) -> float:
        """The report's largest relative residual (NaN where it has none)."""
        resid = self.report.get("max_relative_residual")
        return float(resid) if isinstance(resid, (int, float)) and not isinstance(resid, bool) else float("nan")

    def __repr__(self) -> str:
        return (f"KPCAModel(n_samples={self.n_samples}, n_components={self.n_components}, "
                f"kernel={self.kernel.name!r}, store={self.store!r})")

    def _repr_html_(self) -> str:
        """Jupyter: the summary as tables (model facts, then the spectrum)."""
        r = self.report
        e = html.escape
        facts = [
            ("samples x features", f"{self.n_samples} x {self.n_features}"),
            ("kernel", e(str(self.kernel.to_dict()))),
            ("store", e(str(self.store))),
            ("solver", e(f"{r.get('solver')} ({r.get('solver_reason', '')})")),
            ("passes", e(str(r.get("passes")))),
            ("accuracy", e(self._accuracy(self._residual()))),
        ]
        g = r.get("gram") or {}
        if self.gram_mode is GramMode.STORE:
            facts.append(("Gram blocks", f"{g.get('computed_blocks')} computed, {g.get('reused_blocks')} reused"))
        t = r.get("timings") or {}
        if t:
            facts.append(("time", e(", ".join(f"{k} {v:.2f}s" for k, v in t.items()))))
        rows = "".join(f"<tr><th style='text-align:left'>{k}</th><td style='text-align:left'>{v}</td></tr>"
                       for k, v in facts)
        cum = np.cumsum(self.explained_variance_ratio_)
        spec = "".join(
            f"<tr><td>{i + 1}</td><td>{lam:.6g}</td><td>{ev:.4%}</td><td>{cum[i]:.4%}</td></tr>"
            for i, (lam, ev) in enumerate(zip(self.eigenvalues_, self.explained_variance_ratio_, strict=True))
        )
        return (
            "<div><strong>dkpca KPCAModel</strong>"
            f"<table>{rows}</table>"
            "<table><tr><th>k</th><th>eigenvalue</th><th>explained</th><th>cumulative</th></tr>"
            f"{spec}</table></div>"
        )

    # -- plots (matplotlib, the ``plot`` extra) ---------------------------
    def plot_spectrum(self, **kwargs: Any) -> Any:
        """Explained-variance bar chart; see :func:`dkpca.plot.plot_spectrum`."""
        return plot_spectrum(self, **kwargs)

    def plot_embedding(self, **kwargs: Any) -> Any:
        """Training points in two components; see :func:`dkpca.plot.plot_embedding`."""
        return plot_embedding(self, **kwargs)


def load(path: str | os.PathLike) -> KPCAModel:
    """Load a fitted model from its store (no pickle involved)."""
    return KPCAModel.load(path)
