"""A ``pyarrow.Table`` in snapfit's format behind the Dataset interface (one chunk)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from snapfit.data import validate as v
from snapfit.data.base import ChunkedDataset
from snapfit.data.chunk import Chunk
from snapfit.data.reader import ChunkRef, _check_schema, decode_table, merge_counts
from snapfit.data.schema import LABEL, decode_metadata
from snapfit.errors import DataError

TABLE = "<pyarrow.Table>"


class TableDataset(ChunkedDataset):
    """The whole table is one chunk; ``n_features`` from its metadata or its largest index."""

    def __init__(self, table: pa.Table, *, n_features: int | None = None, targets: str = "auto"):
        if table.num_rows == 0:
            raise DataError(f"{TABLE}: has no rows; the dataset is empty, pass at least one row.")
        _check_schema(TABLE, table.schema, targets)
        self.source = TABLE
        self.has_labels = LABEL in table.column_names
        meta = decode_metadata(table.schema.metadata)
        # in memory: the labels themselves say what they are
        if self.has_labels and not table.column(LABEL).null_count:
            y = table.column(LABEL).to_numpy(zero_copy_only=False)
            if meta.get("target") == "real":
                self.target_kind, self.target_note = "real", "metadata snapfit.target = real"
            elif y.dtype.kind in "iuf" and not np.isin(y, (-1, 0, 1)).all():
                self.target_kind, self.target_note = "real", "label values other than -1, 0, 1"
            else:
                self.target_kind = "class"
        self.targets = targets if targets != "auto" else (self.target_kind or "class")
        if n_features is None:
            n_features = meta.get("n_features")
        where = v.row_group_where(TABLE, 0)
        if n_features is None:
            probe = decode_table(table, n_features=2**31 - 1, has_labels=False, where=where,
                                 validate=False)  # fmt: skip
            n_features = int(probe.indices.max()) + 1 if len(probe.indices) else 1
        self.n_features = int(n_features)
        self.metadata = meta
        self._table = table
        self._chunk = decode_table(
            table, n_features=self.n_features, has_labels=self.has_labels, where=where,
            targets=self.targets,
        )  # fmt: skip
        self.chunks = [ChunkRef(TABLE, 0, self._chunk.n_rows, self._chunk.nnz)]

    def with_classes(self, classes) -> TableDataset:
        out = super().with_classes(classes)
        out._chunk = decode_table(
            self._table, n_features=self.n_features, has_labels=self.has_labels,
            where=v.row_group_where(TABLE, 0), targets="index", classes=out.classes,
        )  # fmt: skip
        return out

    def label_values(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct labels, sorted, and the rows of each."""
        y = self._table.column(LABEL).to_numpy(zero_copy_only=False)
        return merge_counts(np.zeros(0), np.zeros(0, np.int64), y)

    def read_chunk(self, k: int) -> Chunk:
        if k != 0:
            raise IndexError(f"{TABLE} has one chunk; asked for chunk {k}")
        return self._chunk
