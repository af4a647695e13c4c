"""snapfit: out-of-core dual coordinate descent for sparse L2-regularized linear models."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = ["LinearSVC", "LogisticRegression", "Ridge", "TableHasher", "load", "__version__"]

if TYPE_CHECKING:
    from snapfit.datasets.featurize import TableHasher
    from snapfit.estimator import LogisticRegression, load
    from snapfit.ridge import Ridge
    from snapfit.svm import LinearSVC


def __getattr__(name: str):
    # The estimator, and scikit-learn with it (1-2 s), is imported on first use: the CLI's
    # --help and a Dask worker loading the worker code do not pay for it.
    if name in ("LogisticRegression", "load"):
        from snapfit import estimator

        return getattr(estimator, name)
    if name == "LinearSVC":
        from snapfit.svm import LinearSVC

        return LinearSVC
    if name == "Ridge":
        from snapfit.ridge import Ridge

        return Ridge
    if name == "TableHasher":
        from snapfit.datasets.featurize import TableHasher

        return TableHasher
    raise AttributeError(f"module 'snapfit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
