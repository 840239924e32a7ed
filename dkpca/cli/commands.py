"""The ``dkpca`` command's subcommands: each imports the layers it runs when it runs (``--help`` loads none).

Results go to stdout; the plan, the dashboard link and progress go to stderr
through the ``dkpca`` logger and the progress bar.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
from typing import Any

import numpy as np

from ..grammode import GramMode
from ..jsonsafe import json_safe, printable
from ..version import __version__
from .demo import cmd_demo
from .parser import FIT_OPTIONS, wants_progress

__all__ = ["COMMANDS", "cmd_fit", "cmd_plan", "cmd_info", "cmd_verify", "cmd_transform", "cmd_demo", "model_facts",
           "why_lines"]


@contextlib.contextmanager
def _client(a: argparse.Namespace, memory_per_worker: int | None = None):
    from ..cluster import connected
    from ..execution import check_scheduler

    target = getattr(a, "cluster", None) or getattr(a, "scheduler", None)
    with connected(target, scheduler_file=getattr(a, "scheduler_file", None),
                   timeout=getattr(a, "cluster_timeout", None), memory_per_worker=memory_per_worker) as client:
        check_scheduler()  # Dask's scheduler setting refused by name before any work
        yield client


def _fit_options(a: argparse.Namespace) -> dict[str, Any]:
    """The options ``fit`` and ``plan`` share (:data:`.parser.FIT_OPTIONS`), by keyword."""
    return {o.name: getattr(a, o.name) for o in FIT_OPTIONS}


def _lasting(path: str | None, what: str) -> None:
    """Refuse a ``memory://`` URL for what a command leaves behind: fsspec's memory filesystem ends with the
    process, so the command would report an output written that is gone when it exits (a store there is refused
    by its lock, which cannot be taken on memory://)."""
    if path is not None and str(path).startswith("memory://"):
        raise ValueError(f"{what} {str(path)!r} is in this process's memory (fsspec's memory://), gone when dkpca "
                         "exits; give a path or a lasting URL (e.g. s3://bucket/key).")


def _zarr_named(output: str) -> None:
    """Refuse a new output named as a file of another format (``out.npy``): the transform writes a Zarr array, a
    directory, which ``np.load`` or pandas would then fail to read (an earlier output of that name is resumed)."""
    from ..io.formats import SAID, named_kind
    from ..storage import exists

    kind = named_kind(output)
    if kind is not None and not exists(output):
        stem = os.path.splitext(output.rstrip("/"))[0]
        raise ValueError(f"output {output!r} is named as {SAID[kind][0]}, but dkpca transform writes a Zarr array (a "
                         f"directory, resumed if the transform is killed): name it e.g. {stem + '.zarr'!r}, and read "
                         f"it with zarr.open_array({stem + '.zarr'!r})[:] (then np.save, to_csv, ... for another "
                         "format).")


def cmd_fit(a: argparse.Namespace) -> int:
    from ..pipeline import fit
    from ..planning import plan

    need = None
    if a.cluster:  # refused before anything starts when a Gram block task cannot fit in a worker
        need = plan(a.input, **_fit_options(a), cluster=a.cluster, measure=False,
                    cluster_block=False).memory_per_worker  # fit's own block, not the one plan recommends
    elif a.scheduler or a.scheduler_file:  # the input and the options refused before a scheduler is reached
        from ..request import FitOptions, make_request

        make_request(a.input, FitOptions(**_fit_options(a)), create_store=False)
    with _client(a, need):
        model = fit(a.input, **_fit_options(a), random_state=a.random_state, overwrite=a.overwrite,
                    progress=wants_progress(a))
    if a.json:  # stdout is the JSON object only (the log and progress are on stderr)
        print(json.dumps(model_facts(model), indent=2, allow_nan=False))
        return 0
    g, resumed = model.report.get("gram", {}), (model.report.get("solver_info") or {}).get("resumed_at_pass")
    if model.gram_mode is GramMode.STORE:
        print(f"Gram blocks: {g.get('computed_blocks')} computed, {g.get('reused_blocks')} reused from the store")
    for line in update_lines(model.report):
        print(line)
    if resumed:
        print(f"Solver: resumed at pass {resumed} from the checkpoint in the store "
              f"({model.report.get('passes')} passes in all)")
    print(model.summary())
    return 0


def cmd_plan(a: argparse.Namespace) -> int:
    from ..planning import plan

    # a running scheduler is asked for its workers; a cluster is sized from its configuration, not started
    with _client(a) if (a.scheduler or a.scheduler_file) else contextlib.nullcontext() as client:
        p = plan(a.input, **_fit_options(a), cluster=client or a.cluster, measure=not a.no_measure,
                 fs_bandwidth=a.fs_bandwidth)
    print(p)
    return 0


def cmd_info(a: argparse.Namespace) -> int:
    from ..model import load
    from ..storage import FitStore
    from ..storage.outputs import describe, output_facts

    if (facts := output_facts(a.store)) is not None:  # a transform output: what made it, and whether complete
        print(json.dumps(json_safe(facts, nonfinite_null=True), indent=2, allow_nan=False) if a.json
              else describe(facts))
        return 0
    store = FitStore.at(a.store)
    sparse = sparse_facts(store)  # None where it holds none (what is not a store is refused as load does)
    model = load(store.path) if sparse is None or store.model_group() is not None else None
    if a.json:
        facts = {**(model_facts(model) if model is not None else {}), **({"sparse_model": sparse} if sparse else {})}
        print(json.dumps(facts, indent=2, allow_nan=False))
        return 0
    lines = [model.summary(), *update_lines(model.report), *why_lines(model.report)] if model is not None else []
    print("\n".join(lines + sparse_lines(sparse)))
    return 0


def sparse_lines(facts: dict[str, Any] | None) -> list[str]:
    """The store's sparse model (:func:`sparse_facts`) in a few lines; none where it holds none."""
    if facts is None:
        return []
    return [f"sparse kernel PCA model (dkpca.SparseKernelPCA.load({facts['store']!r})): n={facts['n_samples']}, "
            f"d={facts['n_features']}, k={facts['n_components']}",
            f"  kernel: {facts['kernel']}; noise_variance={facts['noise_variance']}; {facts['n_representing']} "
            f"representing points; EM: {facts['n_iter']} iterations, converged={facts['converged']}",
            "   k   eigenvalue", *(f"  {i + 1:2d}  {lam:14.6g}" for i, lam in enumerate(facts["eigenvalues"]))]


def sparse_facts(store: Any) -> dict[str, Any] | None:
    """The sparse model of ``store`` (a :class:`~dkpca.storage.FitStore`) as ``dkpca info`` says it (JSON-safe),
    or None where it holds none."""
    from ..sparse import load_sparse
    from ..storage.fitstore import SPARSE_MODEL

    if store.model_group(SPARSE_MODEL) is None:
        return None
    m = load_sparse(store.path)
    facts = {"store": store.path, "n_samples": m.fit_report_.get("n_samples"), "n_features": m.n_features_in_,
             "n_components": m.n_components_, "kernel": m.kernel_.to_dict(), "noise_variance": m.noise_variance,
             "n_representing": int(m.weights_.shape[0]), "n_iter": m.n_iter_, "converged": m.converged_,
             "eigenvalues": np.asarray(m.eigenvalues_, dtype=float).tolist()}
    return json_safe(facts, nonfinite_null=True)


def update_lines(report: dict[str, Any]) -> list[str]:
    """One line saying the fit was an update of the store's fit (``report["update"]``), or none."""
    u = report.get("update")
    if not isinstance(u, dict):
        return []
    blocks = (f"{u.get('blocks_computed')} Gram blocks computed, {u.get('blocks_reused')} reused; "
              if u.get("blocks_computed") is not None else "")
    for key, said in (("tile", "re-tiled"), ("dtype", "rebuilt")):
        if isinstance(u.get(key), list) and len(u[key]) == 2:
            blocks += f"K {said} from {printable(u[key][0])} to {printable(u[key][1])}; "
    return [f"Update: {u.get('rows_before')} -> {u.get('rows_after')} rows ({u.get('rows_added')} added): {blocks}"
            f"{u.get('passes')} passes; warm start: {printable(u.get('warm_start'))}"]


def why_lines(report: dict[str, Any]) -> list[str]:
    """The reason for each decision of the fit, one line each (the summary's ``solver:`` line names them only)."""
    reasons = (report.get("plan") or {}).get("reasons") or {}
    if not isinstance(reasons, dict) or not reasons:  # a report from before FitPlan: its one reason sentence
        reasons = {"solver": report.get("solver_reason")} if report.get("solver_reason") else {}
    return [f"  why {printable(key)}: {printable(' '.join(str(text).split()))}" for key, text in reasons.items()]


def model_facts(model: Any) -> dict[str, Any]:
    """What ``dkpca info`` prints, as JSON-safe data (``dkpca info --json``).

    Non-finite numbers in the report become ``null``: JSON has no NaN, and
    strict parsers reject Python's ``NaN`` extension.
    """
    ratio = np.asarray(model.explained_variance_ratio_, dtype=float)
    facts = {
        "dkpca_version": __version__,
        "store": model.store,
        "n_samples": model.n_samples,
        "n_features": model.n_features,
        "n_components": model.n_components,
        "kernel": model.kernel.to_dict(),
        "eigenvalues": np.asarray(model.eigenvalues_, dtype=float).tolist(),
        "explained_variance_ratio": ratio.tolist(),
        "cumulative_explained_variance_ratio": np.cumsum(ratio).tolist(),
        "trace": float(model.trace_),
        "report": model.report,
    }
    return json_safe(facts, nonfinite_null=True)


def cmd_verify(a: argparse.Namespace) -> int:
    from ..model import load
    from ..sparse import load_sparse
    from ..storage import verify_store
    from ..storage.outputs import verify_output

    if (found := verify_output(a.store)) is not None:  # a transform output: every chunk, and complete?
        print(f"{'ok ' if found.ok else 'BAD'}  {found.text}")
        print(f"transform output {a.store}: " + ("intact" if found.ok else "not usable (see above)"))
        return 0 if found.ok else 1
    findings = verify_store(a.store)
    for i, f in enumerate(findings):
        if f.part in ("model", "sparse_model") and f.ok and "verified" in f.text:
            try:  # the chunks are sound; is the content a valid model (every attribute checked)?
                load(a.store) if f.part == "model" else load_sparse(a.store)
            except ValueError as exc:
                data = getattr(exc, "array", "").startswith("data")  # the data finding names that damage and fix
                text = "its arrays verified, but it cannot load without its training data (see data/X)" if data \
                    else str(exc)
                findings[i] = dataclasses.replace(f, ok=False, text=f"{f.part}: {text}")
    for f in findings:
        print(f"{'ok ' if f.ok else 'BAD'}  {f.text}")
    damaged = [f.part for f in findings if not f.ok]
    print(f"store {a.store}: " + (f"damaged ({', '.join(damaged)})" if damaged else "intact"))
    return 1 if damaged else 0


def cmd_transform(a: argparse.Namespace) -> int:
    from ..config import check_settings
    from ..execution import compute
    from ..io import as_dask, check_feature_names, input_path, scan
    from ..model import load
    from ..storage import absolute, check_output
    from ..storage.outputs import model_digest, open_output, output_state

    # Refused before anything is read or written: an output that is, contains or lies inside the input (its file,
    # for 'file.h5:/X') or the store, and one holding anything but a transform output dkpca wrote (--overwrite or not).
    check_settings()
    _lasting(a.output, "output")
    _zarr_named(a.output)
    source = input_path(a.input)
    output = check_output(a.output, {"input": source, "store": a.store})
    output_state(output, a.output)
    model = load(a.store)
    check_feature_names(a.input, model.feature_names)  # a CSV's or Parquet file's columns in another order
    X = as_dask(a.input, min_samples=1, purpose="transform")  # its row chunks are the output's; read: none yet
    Z = model.transform(X)  # lazy; checks the features first: both refused before a cluster starts
    with _client(a):
        # what the output records of its origin, so that only the same command resumes it: the model's content
        # and the input's fingerprint (one read of the input, which also finds non-finite rows before any write)
        origin = {"store": model.store,
                  "model": model_digest([model.eigenvalues_, model.eigenvectors_, model.row_means_],
                                        {"kernel": model.kernel.to_dict(), "grand_mean": model.grand_mean_,
                                         "n_features": model.n_features}),
                  "input": {"path": absolute(source), "fingerprint": scan(X, "transform").to_dict()}}
        # the model's rows of the store's data, every chunk read verified once: damage found before any output
        compute(model.X_fit.sum(), label="checking the training data")
        with open_output(output, a.output, origin, Z.shape, (X.chunks[0][0], Z.shape[1]), a.overwrite) as out:
            out.write(Z, progress=wants_progress(a))  # nothing left to write: only marked complete, if it was not yet
    if not out.todo:
        print(f"{a.output} is already complete: {Z.shape[0]} x {Z.shape[1]} projections by the same model of the "
              "same input; nothing to do")
        return 0
    kept = f" (resumed: {out.kept} of {out.total} chunks were already written)" if out.kept else ""
    print(f"wrote {Z.shape[0]} x {Z.shape[1]} projections to {a.output}{kept}")
    return 0


#: subcommand -> what it does
COMMANDS = {"fit": cmd_fit, "plan": cmd_plan, "info": cmd_info, "transform": cmd_transform, "verify": cmd_verify,
            "demo": cmd_demo}
