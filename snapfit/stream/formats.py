"""How the piece cache encodes a piece's record: ``FORMATS = {"raw", "compact", "lz4"}``.

Like xgboost's ``SparsePageFormat`` (``CreatePageFormat("raw")``), a format knows the bytes of
a record and how to write and read one; the cache file and its offsets
(``snapfit.stream.cache.PieceCache``) know nothing of formats. A raw record is the chunk's own
arrays (``snapfit.stream.decode``), read straight into a chunk buffer; a compact one is
``snapfit.stream.record``'s narrow layout, expanded on reading; an lz4 one is a compact record
compressed, decompressed then expanded.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from snapfit.stream import record as record_format
from snapfit.stream.decode import record_nbytes


def copy_into(targets: list[np.ndarray], record: np.ndarray) -> None:
    """Copy a raw ``record``'s bytes into ``targets`` (its arrays' places in a chunk buffer)."""
    pos = 0
    for t in targets:
        tb = t.view(np.uint8)
        tb[:] = record[pos : pos + len(tb)]
        pos += len(tb)


@dataclass(frozen=True)
class Shape:
    """What every record of a cache has in common: the optional arrays, the index width."""

    has_values: bool
    has_weight: bool
    index_bytes: int
    label_bytes: int = 1  # a compact record's labels: int8 +-1, or float32 real targets


class Raw:
    """The raw record: ``indptr[1:]``, indices, values, y, weight, sqnorm as they are."""

    name = "raw"
    direct = True  # stored bytes are the chunk buffer's: read with no expansion

    def nbytes(self, rows, nnz, n_valued, shape: Shape, ratio: float = 1.0):
        return record_nbytes(rows, nnz, shape.has_values, shape.has_weight)

    def encode(self, parts: list[np.ndarray], shape: Shape) -> tuple[list[np.ndarray], int]:
        """``(arrays to store, bytes of the record expanded)``."""
        return parts, sum(x.nbytes for x in parts)

    def expand(self, record, n: int, nnz: int, targets, shape: Shape, plain: int) -> None:
        copy_into(targets, record)


class Compact:
    """``snapfit.stream.record``: narrow lengths and indices, only the values that are not 1."""

    name = "compact"
    direct = False

    def nbytes(self, rows, nnz, n_valued, shape: Shape, ratio: float = 1.0):
        return record_format.nbytes(rows, nnz, n_valued, index_bytes=shape.index_bytes,
                                    has_values=shape.has_values, has_weight=shape.has_weight,
                                    label_bytes=shape.label_bytes)  # fmt: skip

    def encode(self, parts: list[np.ndarray], shape: Shape) -> tuple[list[np.ndarray], int]:
        it = iter(parts)
        indptr, indices = next(it), next(it)
        values = next(it) if shape.has_values else None
        y = next(it)
        weight = next(it) if shape.has_weight else None
        rec = record_format.encode(indptr, indices, values, y, weight, next(it),
                                   index_bytes=shape.index_bytes)  # fmt: skip
        return [rec], len(rec)

    def expand(self, record, n: int, nnz: int, targets, shape: Shape, plain: int) -> None:
        record_format.expand(record, n, nnz, shape.index_bytes, targets, shape.has_values,
                             shape.has_weight)  # fmt: skip


class Lz4(Compact):
    """Compact records compressed one by one with lz4: measured on 500k rows of ``make-data
    criteo-like`` (2^20 features), 152 B/row down to 107 (1.42x; the float values of the integer
    fields, the norms and the row lengths compress, the hashed ids hardly), decompressed at
    ~3.3 GB/s (46 ns a row). For a disk too small or too slow for the compact records."""

    name = "lz4"
    _local = threading.local()

    def nbytes(self, rows, nnz, n_valued, shape: Shape, ratio: float = 1.0):
        """The compact bytes over the sampled ``ratio``, with a 5 % margin."""
        return 1.05 * super().nbytes(rows, nnz, n_valued, shape) / ratio

    @classmethod
    def codec(cls):
        """This thread's lz4 codec."""
        codec = getattr(cls._local, "codec", None)
        if codec is None:
            import pyarrow as pa

            codec = cls._local.codec = pa.Codec("lz4")
        return codec

    def encode(self, parts: list[np.ndarray], shape: Shape) -> tuple[list[np.ndarray], int]:
        (plain,), size = super().encode(parts, shape)
        return [np.frombuffer(self.codec().compress(plain), np.uint8)], size

    def expand(self, record, n: int, nnz: int, targets, shape: Shape, plain: int) -> None:
        # into a buffer of Arrow's (GIL released while it decompresses)
        out = self.codec().decompress(record, decompressed_size=plain)
        super().expand(np.frombuffer(out, np.uint8), n, nnz, targets, shape, plain)


RAW, COMPACT, LZ4 = Raw(), Compact(), Lz4()
FORMATS = {"raw": RAW, "compact": COMPACT, "lz4": LZ4}
