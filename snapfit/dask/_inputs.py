"""Training inputs as the driver sees them: chunk ids, their sizes, and where they may go.

Parquet: ids are the dataset's row groups, sized from the footers (the client reads metadata
only); each part gets the picklable ``Dataset`` and reads its own row groups. Dask arrays: ids
are row blocks, computed on the cluster as ``(X, y01, weight)`` tuples; a block stays on the
worker that holds it (as ``lightgbm.dask`` keeps partitions where they are) and reaches a part
as a constructor argument the scheduler resolves.
"""

from __future__ import annotations

import numpy as np

from snapfit.dask._driver import balance


class ParquetInput:
    kind = "parquet"

    def __init__(self, dataset):
        self.dataset = dataset
        self.name = dataset.source
        self.n_features = dataset.n_features
        self.sizes = {k: ref.nnz + ref.n_rows for k, ref in enumerate(dataset.chunks)}

    def place(self, workers: dict[str, int]) -> dict[str, list[int]]:
        return balance(self.sizes, sorted(workers))

    def payload(self, ids):
        return self.dataset


def _block(x, y, classes, w):
    """One row block as the parts want it: labels mapped to 0/1 (``classes[1]`` is 1), to their
    class index (float32) for more than two classes (one-vs-rest), or real targets as float32
    when ``classes`` is None."""
    y = np.asarray(y).ravel()
    if classes is None:
        y = y.astype(np.float32)
    elif len(classes) > 2:
        y = np.searchsorted(classes, y).astype(np.float32)
    else:
        y = (y == classes[1]).astype(np.int8)
    return (x, y, None if w is None else np.asarray(w).ravel())


class ArrayInput:
    """Dask arrays ``X`` and ``y``: labels of two ``classes`` (kind "arrays") or, with
    ``classes`` None, real targets (kind "targets", for the squared loss); more than two classes
    travel as their indices, kept as they are like targets (kind "targets")."""

    def __init__(self, client, X, y, sample_weight, classes):
        import dask
        import dask.array as da

        if X.ndim != 2:
            raise ValueError(f"X must be a 2-d dask array; got {X.ndim} dimensions.")
        X = X.rechunk({1: X.shape[1]})  # one block across the columns: a block = whole rows
        y = da.asarray(y).rechunk((X.chunks[0],))
        xs, ys = X.to_delayed().ravel(), y.to_delayed().ravel()
        if sample_weight is not None:
            ws = da.asarray(sample_weight).rechunk((X.chunks[0],)).to_delayed().ravel()
        else:
            ws = [None] * len(xs)
        blocks = [dask.delayed(_block, pure=True)(x, yy, classes, w)
                  for x, yy, w in zip(xs, ys, ws, strict=True)]  # fmt: skip
        self.futures = client.compute(blocks)  # computed where dask puts them, never gathered
        self.kind = "arrays" if classes is not None and len(classes) == 2 else "targets"
        self.client = client
        self.timeout = 600.0
        self.name = "dask array X"
        self.n_features = int(X.shape[1])
        self.sizes = {k: int(n) for k, n in enumerate(X.chunks[0]) if n}

    def place(self, workers: dict[str, int]) -> dict[str, list[int]]:
        """Each block on the worker holding it, up to that worker's fair share of the rows; the
        rest (blocks held by no live worker, or beyond a share: Dask may have computed every
        block on one worker) are balanced, so every worker trains."""
        from distributed import wait

        wait([self.futures[k] for k in self.sizes], timeout=self.timeout)
        who = self.client.who_has([self.futures[k] for k in self.sizes])
        fair = sum(self.sizes.values()) / max(1, len(workers))
        start: dict[str, list[int]] = {}
        kept: dict[str, int] = {}
        for k in sorted(self.sizes, key=lambda k: (-self.sizes[k], k)):
            holders = [a for a in who.get(self.futures[k].key, ()) if a in workers]
            a = min(holders, key=lambda a: (kept.get(a, 0), a)) if holders else None
            if a is not None and kept.get(a, 0) + self.sizes[k] <= fair:
                start.setdefault(a, []).append(k)
                kept[a] = kept.get(a, 0) + self.sizes[k]
        return balance(self.sizes, sorted(workers), start=start)

    def payload(self, ids):
        return [self.futures[k] for k in ids]
