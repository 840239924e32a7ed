import numpy as np
import pytest
import scipy.linalg


def centered(K: np.ndarray) -> np.ndarray:
    """H K H with H = I - 11^T/n, the dense reference."""
    n = K.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n
    return H @ K @ H


def reference_eigh(K: np.ndarray, k: int):
    """Top-k eigenpairs of the dense centred kernel, descending."""
    Kc = centered(K)
    n = Kc.shape[0]
    lam, U = scipy.linalg.eigh(Kc, subset_by_index=(n - k, n - 1))
    return lam[::-1], U[:, ::-1]


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def blobs(rng):
    """Well-separated spectrum: a few Gaussian clusters in 6-D."""
    centers = rng.standard_normal((4, 6)) * 3
    labels = rng.integers(0, 4, 600)
    return centers[labels] + 0.5 * rng.standard_normal((600, 6))
