"""The unit of data that flows through snapfit: one CSR chunk (one Parquet row group).

Every layer speaks this one shape, in this one order, so kernels take
``indptr, indices, values, y, weight`` and nothing else has to be converted on the way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class Chunk(NamedTuple):
    """Rows of a sparse design matrix with their labels.

    indptr  : int64 (n_rows + 1,), CSR row pointers starting at 0.
    indices : int32 (nnz,), column of each stored value; unsorted and duplicated indices are
              legal inside a row and duplicates add (as in scipy.sparse).
    values  : float32 (nnz,) or None; None means every stored value is 1 (one-hot data).
    y       : float32 (n_rows,), labels in {-1, +1}.
    weight  : float32 (n_rows,) or None; per-row sample weight (None means 1).
    """

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray | None
    y: np.ndarray
    weight: np.ndarray | None

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1] - self.indptr[0])

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (what a memory budget charges for keeping it resident)."""
        return sum(a.nbytes for a in self if a is not None)

    def rows(self, lo: int, hi: int) -> Chunk:
        """Rows ``[lo, hi)`` as a chunk of views of these arrays (``indptr`` rebased to 0)."""
        a, b = int(self.indptr[lo]), int(self.indptr[hi])
        return Chunk(
            self.indptr[lo : hi + 1] - a,
            self.indices[a:b],
            None if self.values is None else self.values[a:b],
            self.y[lo:hi],
            None if self.weight is None else self.weight[lo:hi],
        )


def _concat_optional(parts, sizes) -> np.ndarray | None:
    """Concatenate optional float32 arrays; an absent one counts as ones (its default)."""
    if all(p is None for p in parts):
        return None
    return np.concatenate(
        [p if p is not None else np.ones(n, np.float32) for p, n in zip(parts, sizes, strict=True)]
    )


def concat_chunks(chunks: Sequence[Chunk]) -> Chunk:
    """One chunk holding all rows of ``chunks`` in order."""
    if len(chunks) == 1:
        return chunks[0]
    nnz = np.cumsum([0] + [c.nnz for c in chunks])
    indptr = np.concatenate(
        [np.zeros(1, np.int64)]
        + [c.indptr[1:] - c.indptr[0] + nnz[i] for i, c in enumerate(chunks)]
    )
    values = _concat_optional([c.values for c in chunks], [c.nnz for c in chunks])
    weight = _concat_optional([c.weight for c in chunks], [c.n_rows for c in chunks])
    return Chunk(
        indptr,
        np.concatenate([c.indices for c in chunks]),
        values,
        np.concatenate([c.y for c in chunks]),
        weight,
    )


def split_rows(chunk: Chunk, chunk_rows: int | None) -> list[Chunk]:
    """``chunk`` cut into chunks of ``chunk_rows`` rows (views; None: the chunk itself)."""
    n = chunk.n_rows
    if not chunk_rows or chunk_rows >= n:
        return [chunk]
    return [chunk.rows(lo, min(n, lo + chunk_rows)) for lo in range(0, n, chunk_rows)]
