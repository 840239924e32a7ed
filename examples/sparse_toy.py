"""Tipping (2000), Figs. 1-3: kernel PCA vs sparse kernel PCA on three Gaussian clusters.

Three clusters of 30 points (std 0.1), Gaussian kernel exp(-|x - x'|^2 / r^2)
with r = 0.25, no centring (the paper's footnote 1), sigma = 0.25 for the
sparse model.  Writes

* ``sparse_toy_fig1_kpca.png``   first nine components of standard kernel PCA
* ``sparse_toy_fig2_sparse.png`` the nine components of sparse kernel PCA
* ``sparse_toy_fig3_recon.png``  data, representing kernels circled, contours
  of the feature-space reconstruction error (eq. 18)

Usage::

    python examples/sparse_toy.py --out /tmp/sparse_toy [--seed 0] [--update em] [--tol 1e-4]

``--update em`` fits the weights by EM (eq. 13) instead of the fast update
(eq. 14); EM needs far more iterations for the same tolerance.
"""

from __future__ import annotations

import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg  # noqa: E402

from dkpca.kernels import RBF  # noqa: E402
from dkpca.sparse import SparseKernelPCA  # noqa: E402

R = 0.25
SIGMA = 0.25
CENTERS = np.array([[-0.5, -0.2], [0.0, 0.6], [0.5, 0.0]])


def toy(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.vstack([c + 0.1 * rng.standard_normal((30, 2)) for c in CENTERS])


def grid(n: int = 120):
    xs, ys = np.linspace(-1.0, 1.0, n), np.linspace(-0.6, 1.0, n)
    gx, gy = np.meshgrid(xs, ys)
    return gx, gy, np.column_stack([gx.ravel(), gy.ravel()])


def contour_panel(fig_title: str, X: np.ndarray, Z: np.ndarray, eig: np.ndarray, path: str,
                  highlight: np.ndarray | None = None) -> None:
    gx, gy, _ = grid()
    fig, axes = plt.subplots(3, 3, figsize=(10, 9))
    for j, ax in enumerate(axes.ravel()):
        if j >= Z.shape[1]:
            ax.axis("off")
            continue
        ax.contour(gx, gy, Z[:, j].reshape(gx.shape), levels=12, linewidths=0.8)
        ax.plot(X[:, 0], X[:, 1], "r.", ms=3)
        if highlight is not None:
            ax.plot(X[highlight, 0], X[highlight, 1], "ko", mfc="none", ms=8)
        ax.set_title(f"eigenvalue {eig[j]:.4f}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(fig_title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for the PNG figures")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--update", choices=("fast", "em"), default="fast", help="weight update: eq. 14 or eq. 13")
    ap.add_argument("--tol", type=float, default=None,
                    help="log-likelihood tolerance per sample (default: SparseKernelPCA's)")
    ap.add_argument("--max-iter", type=int, default=50000)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    X = toy(args.seed)
    kernel = RBF(1.0 / R**2)
    _, _, G = grid()

    # Fig. 1: standard (uncentred, as in the paper) kernel PCA, eq. 3: z = k(x)^T U Lambda^-1/2.
    # The eigenvalues shown are those of the feature covariance K / n.
    K = kernel(X)
    lam, U = scipy.linalg.eigh(K, subset_by_index=(K.shape[0] - 9, K.shape[0] - 1))
    lam, U = lam[::-1], U[:, ::-1]
    Zs = kernel(G, X) @ (U / np.sqrt(lam))
    contour_panel("Kernel PCA (all 90 kernels)", X, Zs, lam / X.shape[0],
                  os.path.join(args.out, "sparse_toy_fig1_kpca.png"))

    # Fig. 2: sparse kernel PCA with sigma = 0.25
    tol = {} if args.tol is None else {"tol": args.tol}
    est = SparseKernelPCA(kernel=kernel, noise_variance=SIGMA**2, update=args.update, max_iter=args.max_iter,
                          **tol).fit(X)
    m = est.representing_indices_.size
    Zp = est.transform(G)
    contour_panel(f"Sparse kernel PCA ({m} representing kernels, sigma={SIGMA})", X, Zp, est.eigenvalues_,
                  os.path.join(args.out, "sparse_toy_fig2_sparse.png"), est.representing_indices_)

    # Fig. 3: reconstruction error (eq. 18) over input space
    gx, gy, _ = grid()
    err = est.reconstruction_error(G).reshape(gx.shape)
    fig, ax = plt.subplots(figsize=(6, 5))
    cs = ax.contour(gx, gy, err, levels=np.linspace(0.05, 1.0, 12), linewidths=0.8)
    ax.clabel(cs, fontsize=6)
    ax.plot(X[:, 0], X[:, 1], "r.", ms=4)
    ax.plot(X[est.representing_indices_, 0], X[est.representing_indices_, 1], "ko", mfc="none", ms=10)
    ax.set_title(f"Data, {m} representing kernels (circled), reconstruction error")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "sparse_toy_fig3_recon.png"), dpi=110)
    plt.close(fig)

    summary = {"seed": args.seed, "update": args.update, "n_representing": int(m),
               "indices": est.representing_indices_.tolist(), "eigenvalues": np.round(est.eigenvalues_, 5).tolist(),
               "log_likelihood": round(float(est.log_likelihood_[-1]), 4), "converged": est.converged_,
               "n_iter": est.n_iter_}
    print(summary)
    return summary


if __name__ == "__main__":
    main()
