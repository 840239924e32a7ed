"""Denoising USPS digits with kernel PCA pre-images.

Gaussian noise is added to USPS digits (pixels scaled to [0, 1]); a kernel
PCA (rbf) is fitted on noisy training digits and noisy test digits are
projected on its leading components and mapped back to pixel space by each
pre-image method of :meth:`dkpca.KernelPCA.inverse_transform`:

* ``ridge``       learned kernel ridge map (Bakir et al. 2004; scikit-learn's),
* ``kwok-tsang``  closed form from distances to nearest training digits,
* ``fixed-point`` Mika et al. (1999) iteration started from Kwok-Tsang,

and, for reference, by linear PCA with the same number of components.
Writes ``denoise_usps.png`` (rows: clean, noisy, each method) and
``denoise_usps.md`` (mean squared error against the clean digits) to ``--out``.

``--compare`` additionally times dkpca's estimator against scikit-learn's on
the full training set (7291 x 256, rbf, 10 components) in this same run and
writes ``compare_sklearn.md``.

Usage::

    python examples/denoise_usps.py [--data-dir DIR] [--out examples/output] [--compare]

The USPS digits are downloaded once from their public source into dkpca's
data cache (``dkpca.datasets``: ``$DKPCA_DATA``, else ``~/.cache/dkpca``) and
checked by SHA-256; ``--data-dir DIR`` uses an offline copy instead, a
directory holding ``usps/zip.train.gz`` and ``usps/zip.test.gz``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from dkpca import datasets


def load_usps(data_dir: str | None, split: str) -> tuple[np.ndarray, np.ndarray]:
    """USPS digits: pixels in [0, 1] (n, 256) and labels (n,)."""
    try:
        X, y = datasets.load_usps(split, data_dir)
    except (OSError, ValueError) as exc:  # no network, a missing or altered file: the message says what to do
        raise SystemExit(f"denoise_usps.py: {exc}") from None
    return (X + 1.0) / 2.0, y


def plot_rows(rows: dict[str, np.ndarray], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = next(iter(rows.values())).shape[0]
    fig, axes = plt.subplots(len(rows), ncols, figsize=(0.75 * ncols, 0.85 * len(rows)))
    for r, (name, imgs) in enumerate(rows.items()):
        for c in range(ncols):
            ax = axes[r, c]
            ax.imshow(imgs[c].reshape(16, 16), cmap="gray_r", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
        axes[r, 0].set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
    fig.tight_layout(pad=0.2)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def denoise(args: argparse.Namespace) -> str:
    from sklearn.decomposition import PCA

    from dkpca import KernelPCA

    rng = np.random.default_rng(args.seed)
    Xtr, _ = load_usps(args.data_dir, "train")
    Xte, _ = load_usps(args.data_dir, "test")
    Xtr = Xtr[rng.permutation(len(Xtr))[: args.n_train]]
    Xte = Xte[: args.n_test]
    Xtr_noisy = Xtr + args.noise * rng.standard_normal(Xtr.shape)
    Xte_noisy = Xte + args.noise * rng.standard_normal(Xte.shape)

    k = args.n_components
    results: dict[str, np.ndarray] = {"clean": Xte, "noisy": Xte_noisy}
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    pca = PCA(k, random_state=0).fit(Xtr_noisy)
    results["linear PCA"] = pca.inverse_transform(pca.transform(Xte_noisy))
    seconds["linear PCA"] = time.perf_counter() - t

    t = time.perf_counter()
    kpca = KernelPCA(k, kernel="rbf", gamma=args.gamma, fit_inverse_transform=True, alpha=args.alpha,
                     random_state=0).fit(Xtr_noisy)
    fit_s = time.perf_counter() - t
    Z = kpca.transform(Xte_noisy)
    for method in ("ridge", "kwok-tsang", "fixed-point"):
        t = time.perf_counter()
        results[f"kPCA {method}"] = kpca.inverse_transform(Z, method=method, n_neighbors=args.n_neighbors)
        seconds[f"kPCA {method}"] = time.perf_counter() - t

    os.makedirs(args.out, exist_ok=True)
    show = np.concatenate([np.flatnonzero(_labels_of(args) == d)[:1] for d in range(10)])
    plot_rows({name: np.clip(v[show], 0, 1) for name, v in results.items()},
              os.path.join(args.out, "denoise_usps.png"))
    lines = [
        f"USPS denoising: {args.n_train} noisy training digits, {args.n_test} noisy test digits, "
        f"noise sigma={args.noise} on [0, 1] pixels, {k} components, rbf gamma={args.gamma}, "
        f"ridge alpha={args.alpha}, n_neighbors={args.n_neighbors}; kernel PCA fit {fit_s:.1f} s.",
        "",
        "| method | MSE vs clean | pre-image time (s) |",
        "|---|---|---|",
    ]
    for name, v in results.items():
        if name == "clean":
            continue
        mse = float(np.mean((v - Xte) ** 2))
        sec = f"{seconds[name]:.2f}" if name in seconds else "-"
        lines.append(f"| {name} | {mse:.4f} | {sec} |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "denoise_usps.md"), "w") as f:
        f.write(table)
    return table


def _labels_of(args: argparse.Namespace) -> np.ndarray:
    return load_usps(args.data_dir, "test")[1][: args.n_test]


def compare(args: argparse.Namespace) -> str:
    """dkpca vs scikit-learn KernelPCA on the full USPS training set, one run."""
    import tempfile

    import dask.array as da
    from sklearn.decomposition import KernelPCA as SKKernelPCA

    from dkpca import KernelPCA

    X, _ = load_usps(args.data_dir, "train")
    k, gamma = 10, 1.0 / X.shape[1]
    kw = {"kernel": "rbf", "gamma": gamma, "random_state": 0}
    runs = [
        ("scikit-learn", "auto (dense eigh)", lambda: SKKernelPCA(k, eigen_solver="auto", **kw).fit(X)),
        ("scikit-learn", "arpack", lambda: SKKernelPCA(k, eigen_solver="arpack", **kw).fit(X)),
        ("scikit-learn", "randomized", lambda: SKKernelPCA(k, eigen_solver="randomized", **kw).fit(X)),
        ("dkpca in memory", "auto (dense eigh)", lambda: KernelPCA(k, eigen_solver="auto", **kw).fit(X)),
        ("dkpca in memory", "arpack", lambda: KernelPCA(k, eigen_solver="arpack", **kw).fit(X)),
        ("dkpca in memory", "randomized", lambda: KernelPCA(k, eigen_solver="randomized", **kw).fit(X)),
        ("dkpca out of core (dask, float32 Gram store)", "randomized",
         lambda: KernelPCA(k, eigen_solver="randomized", store=os.path.join(tempfile.mkdtemp(), "u.dkpca.zarr"),
                           **kw).fit(da.from_array(X, chunks=(2048, X.shape[1])))),
    ]
    ref = None
    lines = [f"USPS train {X.shape[0]} x {X.shape[1]}, rbf gamma=1/256, {k} components, "
             f"{os.cpu_count()} cores. Reference: the first row.", "",
             "| estimator | eigen_solver | fit (s) | max rel. eigenvalue diff | max rel. projection diff |",
             "|---|---|---|---|---|"]
    Xq = X[:500]
    for who, solver, run in runs:
        t = time.perf_counter()
        est = run()
        sec = time.perf_counter() - t
        Zq = np.asarray(est.transform(Xq))
        if ref is None:
            ref = (est.eigenvalues_, Zq)
        rel = float(np.max(np.abs(est.eigenvalues_ - ref[0]) / ref[0]))
        signs = np.sign(np.sum(Zq * ref[1], axis=0))  # scikit-learn's randomized may differ in sign
        pdiff = float(np.abs(Zq * signs - ref[1]).max() / np.abs(ref[1]).max())
        lines.append(f"| {who} | {solver} | {sec:.2f} | {rel:.1e} | {pdiff:.1e} |")
        print(lines[-1], flush=True)
    table = "\n".join(lines) + "\n"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compare_sklearn.md"), "w") as f:
        f.write(table)
    return table


def main(argv: list[str] | None = None) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=None,
                   help="offline copy holding usps/zip.train.gz and usps/zip.test.gz (default: download once into "
                        "dkpca's data cache, $DKPCA_DATA or ~/.cache/dkpca)")
    p.add_argument("--out", default=os.path.join(here, "output"), help="output directory (default examples/output)")
    p.add_argument("--n-train", type=int, default=3000)
    p.add_argument("--n-test", type=int, default=500)
    p.add_argument("--n-components", type=int, default=64)
    p.add_argument("--gamma", type=float, default=0.01)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--noise", type=float, default=0.25)
    p.add_argument("--n-neighbors", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compare", action="store_true", help="also time dkpca against scikit-learn (full train set)")
    args = p.parse_args(argv)
    print(denoise(args))
    if args.compare:
        print(compare(args))


if __name__ == "__main__":
    main()
