"""``ChunkedDataset``: what every data set gives a source, whatever holds its rows.

A Parquet ``Dataset`` (row groups), an ``ArrayDataset`` (numpy / scipy.sparse cut into chunks)
and a ``TableDataset`` (one ``pyarrow.Table``) differ only in how a chunk is read; the refs of
their chunks, their sizes, the iteration and the label counts are the same code.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from snapfit.data.chunk import Chunk


class ChunkedDataset(ABC):
    """Rows in chunks read by index. ``chunks``: a ``ChunkRef`` (file, row group, rows, nnz)
    each; ``files``: the Parquet files behind them (none for data in memory)."""

    source: str
    chunks: list
    n_features: int
    has_labels: bool
    files: Sequence[str] = ()
    #: How chunks carry labels ("class": ±1; "real": float32 targets) and what the data's
    #: labels are ("class", "real", None when unlabelled; ``target_note`` says why).
    targets: str = "class"
    target_kind: str | None = None
    target_note: str = ""
    #: With ``targets="index"``: the sorted classes whose index each label becomes.
    classes: np.ndarray | None = None

    def with_classes(self, classes) -> ChunkedDataset:
        """This data with every label read as its index in ``classes`` (sorted; one-vs-rest
        over more than two classes, ``snapfit.solvers.ovr``). A copy; this one is unchanged."""
        out = copy.copy(self)
        out.targets, out.classes = "index", np.asarray(classes)
        return out

    @property
    def n_rows(self) -> int:
        return sum(c.n_rows for c in self.chunks)

    @property
    def nnz(self) -> int:
        return sum(c.nnz for c in self.chunks)

    @abstractmethod
    def read_chunk(self, k: int) -> Chunk:
        """Chunk ``k`` as CSR arrays, checked."""

    def iter_chunks(self, ids: Iterable[int] | None = None) -> Iterator[Chunk]:
        """Chunks ``ids`` (default: all, in order), read one at a time."""
        for k in range(len(self.chunks)) if ids is None else ids:
            yield self.read_chunk(k)

    def label_counts(self, ids: Sequence[int] | None = None) -> tuple[int, int]:
        """(negatives, positives) over chunks ``ids`` (default: all)."""
        if not self.has_labels:
            return 0, 0
        n = n_pos = 0
        for chunk in self.iter_chunks(ids):
            n, n_pos = n + chunk.n_rows, n_pos + int((chunk.y > 0).sum())
        return n - n_pos, n_pos
