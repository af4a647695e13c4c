"""numpy / scipy.sparse arrays behind the same interface as a Parquet :class:`Dataset`.

The engine iterates chunks of either kind through the same few methods, so in-memory and
out-of-core training share one code path. Chunks here are views of one CSR matrix: no copies.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from snapfit.data import validate as v
from snapfit.data.base import ChunkedDataset
from snapfit.data.chunk import Chunk
from snapfit.data.reader import ChunkRef
from snapfit.data.schema import DEFAULT_ROW_GROUP_ROWS
from snapfit.errors import DataError

MEMORY = "<arrays>"


def csr_arrays(X, y=None, weight=None, *, n_features=None):
    """Checked CSR arrays ``(indptr int64, indices int32, values float32|None, y±1|None,
    weight float32|None, n_features)`` from a dense or sparse matrix and labels.

    ``values`` is None when every stored value is 1 (one-hot data needs no values column).
    Duplicates inside a row are kept (they add); explicit zeros are kept as stored.
    """
    if sp.issparse(X):
        X = sp.csr_array(X)
    else:
        X = np.asarray(X)
        if X.ndim != 2 or X.dtype.kind not in "biuf":
            raise TypeError(
                f"X must be a 2-d numeric numpy array or a scipy.sparse matrix; got {type(X)} "
                f"with dtype {getattr(X, 'dtype', None)} and shape {getattr(X, 'shape', None)}."
            )
        X = sp.csr_array(X)
    n_rows, width = X.shape
    n_features = width if n_features is None else int(n_features)
    where = lambda row: f"X, row {row}"  # noqa: E731
    indptr = X.indptr.astype(np.int64)
    indices = X.indices.astype(np.int32, copy=False)
    values = X.data.astype(np.float32, copy=False)
    if X.data.dtype.kind == "f" and not np.isfinite(X.data).all():
        v.check_values(indptr, X.data, where)  # names the row; float32 overflow is caught below
    v.check_values(indptr, values, where)
    v.check_indices(indptr, indices, n_features, where)
    if len(values) and values.min() == 1 and values.max() == 1:
        values = None
    if y is not None:
        y = np.asarray(y).ravel()
        if len(y) != n_rows:
            raise DataError(f"y has {len(y)} labels but X has {n_rows} rows; pass one per row.")
        y = v.labels_to_pm1(y, lambda row: f"y, row {row}", column="y")
    if weight is not None:
        weight = np.asarray(weight, dtype=np.float32).ravel()
        if len(weight) != n_rows:
            raise DataError(
                f"weight has {len(weight)} entries but X has {n_rows} rows; pass one per row."
            )
        v.check_weight(weight, lambda row: f"weight, row {row}")
    return indptr, indices, values, y, weight, n_features


class ArrayDataset(ChunkedDataset):
    """In-memory dataset: a CSR matrix cut into chunks of ``chunk_rows`` rows.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (n_rows, n_features)
    y : array-like of 0/1 or ±1 labels, optional (None: unlabelled, ``y`` of chunks is zeros)
    weight : array-like of per-row weights, optional
    chunk_rows : int, optional
        Rows per chunk (default :data:`DEFAULT_ROW_GROUP_ROWS`).
    n_features : int, optional
        Width of the feature space if larger than ``X.shape[1]``.
    """

    def __init__(self, X, y=None, weight=None, *, chunk_rows=None, n_features=None):
        indptr, indices, values, y, weight, n_features = csr_arrays(
            X, y, weight, n_features=n_features
        )
        if len(indptr) == 1:
            raise DataError("X has no rows; the dataset is empty, pass at least one row.")
        self.source = MEMORY
        self.files: list[str] = []
        self.metadata: dict[str, object] = {}
        self.validate = True
        self.n_features = n_features
        self.has_labels = y is not None
        self._arrays = (indptr, indices, values, y, weight)
        rows = int(chunk_rows or DEFAULT_ROW_GROUP_ROWS)
        n = len(indptr) - 1
        bounds = list(range(0, n, rows)) + [n]
        self._bounds = bounds
        self.chunks = [
            ChunkRef(MEMORY, k, b - a, int(indptr[b] - indptr[a]))
            for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))
        ]

    def __repr__(self):
        return (
            f"ArrayDataset({self.n_rows} rows, {self.nnz} nnz, {self.n_features} features, "
            f"{len(self.chunks)} chunks)"
        )

    def read_chunk(self, k: int) -> Chunk:
        """Chunk ``k`` as views of the arrays (indptr rebased, so a small copy)."""
        indptr, indices, values, y, weight = self._arrays
        a, b = self._bounds[k], self._bounds[k + 1]
        lo, hi = indptr[a], indptr[b]
        return Chunk(
            indptr[a : b + 1] - lo,
            indices[lo:hi],
            None if values is None else values[lo:hi],
            np.zeros(b - a, np.float32) if y is None else y[a:b],
            None if weight is None else weight[a:b],
        )
