"""One fit in its own process; prints a JSON line (used by the benchmarks).

    python benchmarks/_child.py METHOD NPY ZARR K [EXTRA_JSON]

Methods (rbf kernel, gamma = 1/d, K components):

* ``sklearn-<solver>``: scikit-learn ``KernelPCA(eigen_solver=<solver>, random_state=0)`` on the .npy;
* ``sklearn-default``: ``sklearn.decomposition.KernelPCA(n_components=K, kernel="rbf")``, defaults otherwise;
* ``sklearn-nystroem-pca``: ``Nystroem(n_components=1000, random_state=0)`` then ``PCA(K)`` (approximate);
* ``dkpca-numpy``: ``dkpca.fit(X)`` with X the numpy array from the .npy;
* ``dkpca-KernelPCA``: ``dkpca.KernelPCA(n_components=K, kernel="rbf").fit(X)``, defaults otherwise;
* ``dkpca``, ``dkpca-ref``, ``dkpca-<label>``: ``dkpca.fit`` of the Zarr path.

``EXTRA_JSON`` holds keyword arguments of the fit; ``"plan": true`` (dkpca, dkpca-numpy) first calls
``dkpca.plan`` with the same arguments (measure=True) and records its estimate and wall time (not timed
as part of the fit; its memory counts in the peak RSS of the process).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import sys
import time

import numpy as np
from _common import start_timing


def _plan(source, k: int, **kw) -> dict:
    import dkpca

    t = time.perf_counter()
    p = dkpca.plan(source, n_components=k, kernel="rbf", **kw)
    return {"plan_s": time.perf_counter() - t, "plan_total_s": p.total_seconds, "plan_solver": p.solver,
            "plan_gram": p.gram}


def main() -> None:
    method, npy, zpath, k = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])  # npy may be "-"
    extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    want_plan = extra.pop("plan", False)
    res: dict = {"method": method}
    if method == "sklearn-default":
        from sklearn.decomposition import KernelPCA

        X = np.load(npy)
        t = start_timing(res)
        m = KernelPCA(n_components=k, kernel="rbf", **extra).fit(X)
        res["fit_s"] = time.perf_counter() - t
        res["eigenvalues"] = [float(v) for v in m.eigenvalues_]
        # scikit-learn does not expose its choice; its rule (KernelPCA._fit_transform_in_place):
        res["solver"] = "arpack" if X.shape[0] > 200 and k < 10 else "dense"
    elif method == "sklearn-nystroem-pca":
        from sklearn.decomposition import PCA
        from sklearn.kernel_approximation import Nystroem

        X = np.load(npy)
        n, d = X.shape
        m_features = extra.pop("n_components", 1000)
        t = start_timing(res)
        F = Nystroem(kernel="rbf", gamma=1.0 / d, n_components=m_features, random_state=0).fit_transform(X)
        p = PCA(k, random_state=0).fit(F)
        res["fit_s"] = time.perf_counter() - t
        # F F^T approximates K; PCA centres F, so the eigenvalues of the centred K (scikit-learn's
        # KernelPCA.eigenvalues_, not divided by n) are the squared singular values of F - mean, i.e.
        # explained_variance_ (ddof=1) * (n - 1).  Checked: with n_components = n (exact Nyström)
        # this matches KernelPCA(eigen_solver="dense") to 2e-15 relative (n=400, d=10, k=10);
        # "* n" would be off by 1/n.
        res["eigenvalues"] = [float(v) for v in p.explained_variance_ * (n - 1)]
        res["solver"] = f"Nystroem m={min(m_features, n)} + PCA {p._fit_svd_solver}"
    elif method.startswith("sklearn-"):
        from sklearn.decomposition import KernelPCA

        X = np.load(npy)
        t = start_timing(res)
        m = KernelPCA(k, kernel="rbf", eigen_solver=method.split("-", 1)[1], random_state=0, **extra).fit(X)
        res["fit_s"] = time.perf_counter() - t
        res["eigenvalues"] = [float(v) for v in m.eigenvalues_]
    elif method == "dkpca-numpy":
        import dkpca

        fit = dkpca.fit  # resolves dkpca's lazy names: its imports are not timed, as scikit-learn's are not
        X = np.load(npy)
        if want_plan:
            res.update(_plan(X, k, **extra))
        t = start_timing(res)
        m = fit(X, n_components=k, kernel="rbf", random_state=0, **extra)
        res["fit_s"] = time.perf_counter() - t
        res["eigenvalues"] = [float(v) for v in m.eigenvalues_]
        res["report"] = m.report
        m.close()  # removes its temporary store
    elif method == "dkpca-KernelPCA":
        import dkpca

        KernelPCA = dkpca.KernelPCA  # resolved before timing, as above
        X = np.load(npy)
        t = start_timing(res)
        m = KernelPCA(n_components=k, kernel="rbf", **extra).fit(X)
        res["fit_s"] = time.perf_counter() - t
        res["eigenvalues"] = [float(v) for v in m.eigenvalues_]
        res["solver"] = m.eigen_solver_
        if hasattr(m, "model_"):  # out-of-core fits keep the pipeline's model (and its report)
            res["report"] = m.model_.report
    elif method.startswith("dkpca"):  # "dkpca", "dkpca-ref", "dkpca-<label>"
        import dkpca

        fit = dkpca.fit  # resolves dkpca's lazy names: its imports are not timed, as scikit-learn's are not
        store = zpath.replace(".zarr", f".{method}.dkpca.zarr")
        shutil.rmtree(store, ignore_errors=True)
        cluster = extra.pop("workers", None)
        # "threads": N runs the local scheduler on N threads (dask's num_workers setting)
        import dask

        threads = dask.config.set(num_workers=extra.pop("threads")) if "threads" in extra else contextlib.nullcontext()
        if want_plan:  # plan creates nothing in the store
            res.update(_plan(zpath, k, store=store, **extra))
        if extra.pop("malloc", None) == "distributed":  # the before of cluster.resources.LOCAL_MALLOC
            from dkpca.cluster.resources import LOCAL_MALLOC, distributed_default

            # in this process's environment, which the workers inherit (glibc read its own at start-up): the
            # config's default value would be taken for an unset one and replaced
            os.environ.update({key.rsplit(".", 1)[1]: str(distributed_default(key)) for key in LOCAL_MALLOC})
        if extra.pop("housekeeping", None) == "distributed":
            # distributed's own intervals, in other units: dkpca's LocalCluster keeps a value that differs
            from dask.utils import parse_timedelta

            from dkpca.cluster.resources import LOCAL_HOUSEKEEPING, distributed_default

            dask.config.set({key: f"{parse_timedelta(distributed_default(key))}s" for key in LOCAL_HOUSEKEEPING})
        if cluster:
            from dkpca.cluster import connected

            with connected({"dkpca": {"cluster": {"local": {"n_workers": int(cluster)}}}}) as client:
                # the workers' imports are not timed either (1.6-1.7 s a worker, measured; a
                # fresh cluster's first tasks would otherwise pay them inside the fit)
                client.run(importlib.import_module, "dkpca.pipeline")
                t = start_timing(res)  # cluster start-up excluded, and its close (below)
                m = fit(zpath, n_components=k, kernel="rbf", store=store, random_state=0, **extra)
                res["fit_s"] = time.perf_counter() - t
                t = time.perf_counter()
            res["teardown_s"] = time.perf_counter() - t  # distributed's close of the cluster: 0.4-0.5 s here
        else:
            with threads:
                t = start_timing(res)
                m = fit(zpath, n_components=k, kernel="rbf", store=store, random_state=0, **extra)
            res["fit_s"] = time.perf_counter() - t
        res["eigenvalues"] = [float(v) for v in m.eigenvalues_]
        res["report"] = m.report
        shutil.rmtree(store, ignore_errors=True)
    else:
        raise SystemExit(f"unknown method {method}")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
