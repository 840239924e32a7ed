"""USPS digits: kernel PCA features + a linear SVM (Schölkopf, Smola & Müller 1998), in one run.

    python benchmarks/usps.py [--data-dir DIR] [--n-train 7291] [--no-write]

(USPS is downloaded once into dkpca's data cache, see ``dkpca.datasets``; ``--data-dir``: an offline copy.)

Kernel PCA (polynomial kernel of degree 3, ``(gamma x.y + coef0)^3``, by
default scikit-learn's gamma = 1/256, coef0 = 1; 256 components) is fitted on
the USPS training digits (``zip.train.gz``, 7291 x 256, pixels in [-1, 1] as
distributed); training and test digits (``zip.test.gz``, 2007) are projected on
the components, standardised (``StandardScaler`` fitted on the training
projections), and ``LinearSVC(C=1, dual="auto", max_iter=10000,
random_state=0)`` trained on the training projections gives the test error
(``dual="auto"`` picks the primal problem here, n_samples > n_features; it
converged without warnings).  Methods, each in its own process (peak RSS of
the process tree, sampled every 50 ms, projections and SVM included):

* ``sklearn-arpack``: ``sklearn.decomposition.KernelPCA(eigen_solver="arpack", random_state=0)``;
* ``sklearn-default``: scikit-learn's ``KernelPCA`` with its defaults (for 256 components: dense eigh);
* ``dkpca-KernelPCA``: ``dkpca.KernelPCA`` with its defaults (in memory, numpy input);
* ``dkpca-lanczos``: the same with ``eigen_solver="lanczos"`` (block k + 10 from a Nystroem start;
  ``tol=0`` as scikit-learn's default: residuals 1e-10 of lambda_1);
* ``dkpca-lanczos-tol1e-6``: the same with ``tol=1e-6`` (dkpca's out-of-core default).

"fit time" is the ``fit`` call alone (kernel evaluation and eigensolver);
projecting and the SVM are timed separately.  Eigenvalue error:
the largest relative error of the 256 eigenvalues against a float64 reference
computed once in the parent (``scipy.linalg.eigh`` of the centred training
kernel, top 256 by ``subset_by_index``).  Writes the "usps" section of
benchmarks/RESULTS.md (``--no-write``: print only).

Parameters, from trials on the full training set (one float64 dense eigh
each, 256 components; LinearSVC with its squared hinge loss unless said;
"/ std 1" = all projections divided by the standard deviation of the first):

* (x.y/256 + 1)^3 (the default): StandardScaler, C=1: 6.93 %; / std 1, C=0.1, 1, 10, 100:
  6.43, 6.18, 6.58, 6.68 %; / std 1, hinge loss, C=1: 6.03 %.
* (x.y)^3 (Schölkopf's, ``--gamma 1 --coef0 0``): StandardScaler, C=1: 6.48 %; / std 1,
  C=0.1, 1, 10, 100: 5.88, 5.63, 6.18, 6.48 %; / std 1, hinge loss, C=1: 5.53 %.

On the unscaled projections of (x.y)^3, LinearSVC (primal, C=1) did not
finish in 5 minutes.  ``--scale global`` divides all projections
by the standard deviation of the first training component instead of
standardising each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _common import DATA_DIR_HELP, load_usps, machine, run_child
from _results import update_section

METHODS = ("sklearn-arpack", "sklearn-default", "dkpca-KernelPCA", "dkpca-lanczos", "dkpca-lanczos-tol1e-6")


def _kernel_params(a) -> dict:
    return {"kernel": "poly", "degree": a.degree, "gamma": a.gamma, "coef0": a.coef0}


def child(a) -> None:
    """One method: fit on train, project train and test, LinearSVC; prints a JSON line."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    Xtr, ytr = load_usps(a.data_dir, "train", a.n_train)
    Xte, yte = load_usps(a.data_dir, "test")
    kw = _kernel_params(a)
    if a.child == "sklearn-arpack":
        from sklearn.decomposition import KernelPCA

        est = KernelPCA(a.k, eigen_solver="arpack", random_state=0, **kw)
    elif a.child == "sklearn-default":
        from sklearn.decomposition import KernelPCA

        est = KernelPCA(a.k, **kw)
    elif a.child == "dkpca-KernelPCA":
        import dkpca

        est = dkpca.KernelPCA(a.k, **kw)  # resolves dkpca's lazy names before timing
    elif a.child.startswith("dkpca-lanczos"):
        import dkpca

        tol = 1e-6 if a.child.endswith("tol1e-6") else 0.0
        est = dkpca.KernelPCA(a.k, eigen_solver="lanczos", tol=tol, random_state=0, **kw)
    else:
        raise SystemExit(f"unknown method {a.child}")
    res: dict = {"method": a.child}
    t = time.perf_counter()
    est.fit(Xtr)
    res["fit_s"] = time.perf_counter() - t
    res["eigenvalues"] = [float(v) for v in est.eigenvalues_]
    # scikit-learn does not expose its choice; for "auto" its rule is arpack iff n > 200 and k < 10
    auto = "arpack" if len(Xtr) > 200 and a.k < 10 else "dense"
    res["solver"] = getattr(est, "eigen_solver_", None) or ("arpack" if a.child == "sklearn-arpack" else auto)
    t = time.perf_counter()
    Ztr, Zte = est.transform(Xtr), est.transform(Xte)
    res["transform_s"] = time.perf_counter() - t
    if a.scale == "standard":
        from sklearn.preprocessing import StandardScaler

        sc = StandardScaler().fit(Ztr)
        Ztr, Zte = sc.transform(Ztr), sc.transform(Zte)
    else:  # one number for all components: keeps the geometry, makes C independent of the kernel's scale
        scale = Ztr[:, 0].std()
        Ztr, Zte = Ztr / scale, Zte / scale
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        svm = LinearSVC(C=a.C, dual="auto", max_iter=a.max_iter, random_state=0).fit(Ztr, ytr)
    res["svm_s"] = time.perf_counter() - t
    res["svm_converged"] = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    res["train_error_pct"] = float(100 * np.mean(svm.predict(Ztr) != ytr))
    res["test_error_pct"] = float(100 * np.mean(svm.predict(Zte) != yte))
    print(json.dumps(res))


def reference(a) -> tuple[np.ndarray, float]:
    """Top-k eigenvalues (descending) of the centred training kernel, float64, and the seconds they took."""
    import scipy.linalg
    from sklearn.metrics.pairwise import polynomial_kernel

    X, _ = load_usps(a.data_dir, "train", a.n_train)
    t = time.perf_counter()
    K = polynomial_kernel(X, degree=a.degree, gamma=a.gamma, coef0=a.coef0)
    row = K.mean(axis=0)
    K -= row[:, None]
    K -= row[None, :]
    K += row.mean()
    n = K.shape[0]
    lam = scipy.linalg.eigh(K, eigvals_only=True, subset_by_index=(n - a.k, n - 1), overwrite_a=True,
                            check_finite=False)[::-1]
    return lam, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    ap.add_argument("--n-train", type=int, default=None, help="first n training digits (default: all 7291)")
    ap.add_argument("--k", type=int, default=256, help="components")
    ap.add_argument("--degree", type=int, default=3)
    ap.add_argument("--gamma", type=float, default=None,
                    help="default: 1/n_features (scikit-learn's); --gamma 1 --coef0 0 is (x.y)^3, Schölkopf's")
    ap.add_argument("--coef0", type=float, default=1.0)
    ap.add_argument("--scale", default="standard", choices=["standard", "global"],
                    help="projections before the SVM: StandardScaler, or / std of the first component")
    ap.add_argument("--C", type=float, default=1.0, help="LinearSVC's C")
    ap.add_argument("--max-iter", type=int, default=10000, help="LinearSVC's max_iter")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--no-reference", action="store_true", help="skip the float64 eigenvalue reference")
    ap.add_argument("--no-write", action="store_true", help="print only, do not update RESULTS.md")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    load_usps(a.data_dir, "test")  # downloaded (or the offline copy checked) once, before the children read it
    fwd = ["--data-dir", a.data_dir] if a.data_dir else []
    fwd += ["--k", str(a.k), "--degree", str(a.degree), "--coef0", repr(a.coef0),
           "--scale", a.scale, "--C", repr(a.C), "--max-iter", str(a.max_iter)]
    fwd += ["--n-train", str(a.n_train)] if a.n_train else []
    fwd += ["--gamma", repr(a.gamma)] if a.gamma is not None else []
    results = {}
    for m in a.methods:
        results[m] = run_child(["--child", m, *fwd], script=Path(__file__).resolve())
        print(json.dumps({k: v for k, v in results[m].items() if k != "eigenvalues"}), flush=True)
    lam_ref, ref_s = (None, None) if a.no_reference else reference(a)
    n_train = a.n_train or 7291
    arp = results.get("sklearn-arpack", {})
    table = ["| method | solver | fit time (s) | vs arpack | peak RSS (GB) | test error (%) "
             f"| max rel. eigenvalue error (top {a.k}) | project + SVM (s) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for m, r in results.items():
        if r.get("error"):
            table.append(f"| {m} | — | — | — | {r['peak_rss_gb']:.2f} | — | — | {r['error']} |")
            continue
        speed = f"{arp['fit_s'] / r['fit_s']:.2f}x" if arp.get("fit_s") else ""
        err = "—"
        if lam_ref is not None:
            lam = np.array(r["eigenvalues"])
            err = f"{np.max(np.abs(lam - lam_ref[:len(lam)]) / lam_ref[:len(lam)]):.1e}"
            if len(lam) < a.k:
                err += f" ({len(lam)} components)"
        svm = f"{r['transform_s']:.1f} + {r['svm_s']:.1f}" + ("" if r["svm_converged"] else " (not converged)")
        table.append(f"| {m} | {r['solver']} | {r['fit_s']:.2f} | {speed} | {r['peak_rss_gb']:.2f} | "
                     f"{r['test_error_pct']:.2f} | {err} | {svm} |")
    text = "\n".join(table)
    g = "x·y/256" if a.gamma is None else f"{a.gamma:g} x·y"
    kern = f"({g} + {a.coef0:g})^{a.degree}" if a.coef0 else f"({g})^{a.degree}"
    scaling = ("standardised (`StandardScaler` fitted on the training projections)" if a.scale == "standard"
               else "divided by the standard deviation of the first training component")
    head = (f"USPS, train {n_train} × 256 (pixels in [-1, 1]), test 2007; kernel {kern}; {a.k} components; "
            f"`LinearSVC(C={a.C:g}, dual=\"auto\", max_iter={a.max_iter}, random_state=0)` on the projections, "
            f"{scaling}.  One process per method; fit time is `fit` alone.  "
            + (f"Eigenvalue reference: float64 `scipy.linalg.eigh` of the centred training kernel "
               f"({ref_s:.1f} s, in the parent)." if ref_s is not None else "No eigenvalue reference."))
    print(head + "\n\n" + text)
    if not a.no_write:
        cmd = "python benchmarks/usps.py" + (f" --n-train {a.n_train}" if a.n_train else "")
        update_section("usps", f"{head}\nMachine: {machine()}\n\n{text}\n", command=cmd)


if __name__ == "__main__":
    sys.exit(main())
