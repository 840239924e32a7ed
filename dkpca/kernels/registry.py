"""The kernel registry: names, JSON specs and scikit-learn style construction.

``from_dict`` is the only way a stored spec becomes a kernel again; it
rejects unknown, missing and ill-typed fields by name, so a damaged or
hand-edited store fails with a message instead of evaluating a wrong kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Kernel, Product, Scaled, Sum, field_names
from .library import RBF, Cosine, Laplacian, Linear, Polynomial, Sigmoid

__all__ = ["KERNEL_NAMES", "from_dict", "make_kernel"]

_BASIC: dict[str, type[Kernel]] = {
    "rbf": RBF,
    "laplacian": Laplacian,
    "poly": Polynomial,
    "polynomial": Polynomial,
    "linear": Linear,
    "sigmoid": Sigmoid,
    "cosine": Cosine,
}
KERNEL_NAMES = ("rbf", "laplacian", "poly", "polynomial", "linear", "sigmoid", "cosine")
_COMBINED = {"sum": ("kernels",), "product": ("kernels",), "scaled": ("scale", "kernel")}


def _check_fields(name: str, spec: dict[str, Any], expected: tuple[str, ...] | list[str]) -> None:
    unknown = sorted(set(spec) - set(expected))
    missing = sorted(set(expected) - set(spec))
    if unknown or missing:
        parts = ([f"unknown field(s) {unknown}"] if unknown else []) + ([f"missing field(s) {missing}"] if missing
                                                                         else [])
        raise ValueError(f"kernel spec {name!r}: {' and '.join(parts)}; it has fields {sorted(expected)}.")


def from_dict(spec: dict[str, Any]) -> Kernel:
    """Rebuild and validate a kernel from :meth:`Kernel.to_dict` output (e.g. from JSON).

    Raises
    ------
    ValueError
        Not a spec, an unknown kernel name, unknown / missing fields, or a
        value of the wrong type or out of range (the message names the field).
    """
    if not isinstance(spec, dict) or "name" not in spec:
        raise ValueError(f"not a kernel spec: {spec!r}; expected a dict with a 'name' key.")
    spec = dict(spec)
    name = spec.pop("name")
    if name in _COMBINED:
        _check_fields(name, spec, _COMBINED[name])
        if name == "scaled":
            if not isinstance(spec["kernel"], dict):
                raise ValueError("kernel spec 'scaled': field 'kernel' must be a kernel spec dict.")
            k: Kernel = Scaled(spec["scale"], from_dict(spec["kernel"]))
        else:
            parts = spec["kernels"]
            if not isinstance(parts, (list, tuple)) or not all(isinstance(p, dict) for p in parts):
                raise ValueError(f"kernel spec {name!r}: field 'kernels' must be a list of kernel spec dicts.")
            k = (Sum if name == "sum" else Product)(tuple(from_dict(p) for p in parts))
    elif isinstance(name, str) and name in _BASIC:
        cls = _BASIC[name]
        _check_fields(name, spec, field_names(cls))
        k = cls(**spec)
    else:
        raise ValueError(f"unknown kernel {name!r}; choose one of {', '.join(KERNEL_NAMES)}.")
    k.validate()
    return k


def make_kernel(
    kernel: str | Kernel | dict = "rbf",
    gamma: float | None = None,
    degree: int = 3,
    coef0: float = 1.0,
    kernel_params: dict | None = None,
) -> Kernel:
    """Build and validate a kernel from scikit-learn style arguments.

    Parameters
    ----------
    kernel : str, Kernel or dict
        ``"rbf"``, ``"laplacian"``, ``"poly"``, ``"linear"``, ``"sigmoid"``,
        ``"cosine"``, a :class:`Kernel` (e.g. ``RBF(0.5) + Linear()``) or a spec
        dict from :meth:`Kernel.to_dict`.
    gamma, degree, coef0 : as in :class:`sklearn.decomposition.KernelPCA`
        Ignored by named kernels that do not take them; ``gamma`` (None: 1/n_features
        when resolved) is refused beside a :class:`Kernel` or spec dict, which
        carries its own, and beside ``kernel_params`` that set it too.
    kernel_params : dict, optional
        Extra keyword arguments for the kernel (never mutated).

    Raises
    ------
    ValueError
        Unknown kernel name, a parameter out of its allowed range, or one given
        twice (above).
    """
    if kernel_params is not None and (not isinstance(kernel_params, Mapping)
                                      or not all(isinstance(key, str) for key in kernel_params)):
        what = (kernel if isinstance(kernel, str) else kernel.get("name") if isinstance(kernel, dict)
                else getattr(kernel, "name", None)) or "the"
        raise ValueError(f"{what} kernel: kernel_params={kernel_params!r} is invalid; it must be None or a dict of "
                         "the kernel's parameters by name, e.g. kernel_params={'gamma': 0.1}.")
    if isinstance(kernel, (Kernel, dict)) and (gamma is not None or kernel_params):
        # they would be ignored without a word: the kernel object carries its own parameters
        given = f"gamma={gamma!r}" if gamma is not None else f"kernel_params={kernel_params!r}"
        raise ValueError(f"{given} applies to a kernel named by a string, but kernel={kernel!r} carries its own "
                         "parameters; drop it, or set it in the kernel (e.g. RBF(gamma=0.1)).")
    if isinstance(kernel, Kernel):
        k = kernel
    elif isinstance(kernel, dict):
        k = from_dict(kernel)
    elif isinstance(kernel, str):
        if gamma is not None and "gamma" in (kernel_params or {}):
            raise ValueError(f"{kernel} kernel: gamma={gamma!r} and kernel_params={kernel_params!r} both set gamma; "
                             "pass one of them.")
        if kernel not in _BASIC:
            raise ValueError(f"unknown kernel {kernel!r}; choose one of {', '.join(KERNEL_NAMES)}.")
        cls = _BASIC[kernel]
        given = {"gamma": gamma, "degree": degree, "coef0": coef0}
        names = field_names(cls)
        params = {f: given[f] for f in names if f in given}
        params.update(kernel_params or {})
        unknown = set(params) - set(names)
        if unknown:
            raise ValueError(
                f"{kernel} kernel: unknown parameter(s) {sorted(unknown)}; "
                f"it takes {sorted(names) or 'no parameters'}."
            )
        k = cls(**params)
    else:
        raise ValueError(f"kernel={kernel!r} is invalid; pass a kernel name, a dkpca Kernel or a spec dict.")
    k.validate()
    return k
