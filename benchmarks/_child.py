"""One fit in its own process; prints a JSON line (used by the benchmarks)."""

from __future__ import annotations

import json
import shutil
import sys
import time

import numpy as np


def main() -> None:
    method, npy, zpath, k = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])  # npy may be "-"
    extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    res: dict = {"method": method}
    if method.startswith("sklearn-"):
        from sklearn.decomposition import KernelPCA

        X = np.load(npy)
        t = time.perf_counter()
        m = KernelPCA(k, kernel="rbf", eigen_solver=method.split("-", 1)[1], random_state=0, **extra).fit(X)
        res["fit_s"] = time.perf_counter() - t
        res["eigenvalues"] = [float(v) for v in m.eigenvalues_]
    elif method.startswith("dkpca"):  # "dkpca", "dkpca-ref", "dkpca-<label>"
        import dkpca

        fit = dkpca.fit  # resolves dkpca's lazy names: its imports are not timed, as scikit-learn's are not
        store = zpath.replace(".zarr", f".{method}.dkpca.zarr")
        shutil.rmtree(store, ignore_errors=True)
        cluster = extra.pop("workers", None)
        if cluster:
            from dkpca.cluster import connected

            with connected({"dkpca": {"cluster": {"local": {"n_workers": int(cluster)}}}}):
                t = time.perf_counter()  # cluster start-up excluded
                m = fit(zpath, n_components=k, kernel="rbf", store=store, random_state=0, **extra)
        else:
            t = time.perf_counter()
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
