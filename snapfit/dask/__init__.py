"""The cluster door: train on a Dask cluster, each worker running the engine on its own share.

The driver (your client) reads Parquet footers only and deals row groups to workers by nnz; each
worker reads its row groups itself and keeps them (resident, or streamed within its memory
budget), their dual variables and its threads in a ``Part`` actor between rounds. A round: each
part runs the engine on its subproblem (CoCoA+ with sigma' = all units of all workers, a
worker's threads that share ``w`` counting once, plus a gradient correction) and returns
``dw``; the driver sums, every part measures the new point (exact duality gap, gradient), the
driver accepts or rejects the round, checkpoints alpha, and survives a lost worker by
re-placing its share. See ``docs/dask.md``.

>>> from distributed import Client, LocalCluster              # doctest: +SKIP
>>> from snapfit.dask import DaskLogisticRegression            # doctest: +SKIP
>>> with LocalCluster(n_workers=2) as cluster, Client(cluster) as client:  # doctest: +SKIP
...     est = DaskLogisticRegression(client=client, C=0.1).fit("train/")
...     est.to_local().save("model.npz")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = [
    "DaskFit",
    "DaskLinearSVC",
    "DaskLogisticRegression",
    "DaskRidge",
    "FitTimeoutError",
    "WorkerLost",
    "balance",
    "cluster_client",
    "fit",
    "train",
    "warm_up",
]
# Those defined by the driver side; the others are the estimator side's (``api``).
_FROM_DRIVER = {"DaskFit", "FitTimeoutError", "WorkerLost", "balance", "train"}

if TYPE_CHECKING:
    from snapfit.dask._driver import DaskFit, FitTimeoutError, WorkerLost, balance, train
    from snapfit.dask.api import (
        DaskLinearSVC,
        DaskLogisticRegression,
        DaskRidge,
        cluster_client,
        fit,
        warm_up,
    )


def __getattr__(name: str):
    # The estimator side (and scikit-learn with it) loads on first use: worker processes import
    # this package to reach the worker code (``_worker``, ``_kernels``) and never need it.
    if name in __all__:
        import importlib

        module = "_driver" if name in _FROM_DRIVER else "api"
        return getattr(importlib.import_module(f"snapfit.dask.{module}"), name)
    raise AttributeError(f"module 'snapfit.dask' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
