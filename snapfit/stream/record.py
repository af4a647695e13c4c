"""The compact piece record of the chunk cache: what a Criteo day costs on the temp disk.

The raw record (``indptr`` int64, ``indices`` int32, ``values``/``y``/``sqnorm`` float32) is 336
bytes for a Criteo-like row of 40 entries, 2.4x its Parquet size: 200M rows need ~67 GB of
scratch beside ~30 GB of Parquet, more than a typical machine's free disk, and the fit then fell
back to decoding Parquet every epoch (4x slower per epoch). The compact record stores

* row lengths, not offsets, in 1, 2 or 4 bytes (whatever the piece's longest row needs);
* indices in 2, 3 or 4 bytes (whatever ``n_features`` needs: 3 for 2^20 hashed features);
* values only where they are not 1.0 (one-hot categoricals are all 1.0), with a bitmap saying
  which entries those are;
* labels as int8 when they are +-1 (real regression targets stay float32: the header's
  label width, 1 or 4, says which);

and weights and norms as float32. By the layout, a row of 40 entries with 13 valued ones and
2^20 features takes ~185 bytes instead of 336; measured on ``make-data criteo-like`` (2^20
features, ~33 entries a row): 152 bytes instead of 284 (docs/out-of-core.md). Reading a piece
back is one ``preadv`` into a scratch buffer and one pass of ``expand`` (numba, GIL released)
into the chunk buffer: a few ns per entry, far below the solver's cost per entry.

Layout, every section starting at a multiple of 4 bytes::

    uint32 n_valued | uint8 length width | uint8 label width | 2 pad | lengths | indices
    | bitmap (ceil(nnz/8)) | valued f32 | y int8 or f32 (n) | weight f32 (n) | sqnorm f32 (n)

(bitmap and valued only when the data set has values, weight only when it has weights).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_HEADER = 8


def _up4(n):
    """``n`` (an int or an int64 array) rounded up to a multiple of 4."""
    return (n + 3) & ~3


def index_width(n_features: int) -> int:
    """Bytes per stored index: 2 up to 2^16 features, 3 up to 2^24, else 4."""
    return 2 if n_features <= 1 << 16 else 3 if n_features <= 1 << 24 else 4


def _length_width(longest: int) -> int:
    return 1 if longest < 1 << 8 else 2 if longest < 1 << 16 else 4


def nbytes(n, nnz, n_valued, *, index_bytes: int, has_values: bool, has_weight: bool,
           length_bytes: int = 1, label_bytes: int = 1):  # fmt: skip
    """Bytes of a record (arrays in, arrays out); ``length_bytes`` 1 for most click logs,
    ``label_bytes`` 1 for labels +-1, 4 for real targets."""
    n, nnz, n_valued = (np.asarray(x, np.int64) for x in (n, nnz, n_valued))
    size = _HEADER + _up4(length_bytes * n) + _up4(index_bytes * nnz)
    if has_values:
        size = size + _up4((nnz + 7) // 8) + 4 * n_valued
    size = size + _up4(label_bytes * n) + (4 * n if has_weight else 0) + 4 * n
    return size


def encode(indptr_tail, indices, values, y, weight, sqnorm, *, index_bytes: int) -> np.ndarray:
    """The record (uint8) of one piece; ``indptr_tail`` is ``indptr[1:]`` (piece-local)."""
    n, nnz = len(y), len(indices)
    y = np.asarray(y, np.float32)
    yw = 1 if bool(np.all((y == 1) | (y == -1))) else 4
    lengths = np.diff(np.concatenate([[0], np.asarray(indptr_tail, np.int64)]))
    lw = _length_width(int(lengths.max(initial=0)))
    valued = None if values is None else (np.asarray(values, np.float32) != np.float32(1.0))
    n_valued = int(valued.sum()) if valued is not None else 0
    size = int(nbytes(n, nnz, n_valued, index_bytes=index_bytes, has_values=values is not None,
                      has_weight=weight is not None, length_bytes=lw,
                      label_bytes=yw))  # fmt: skip
    out = np.zeros(size, np.uint8)
    out[:4] = np.frombuffer(np.uint32(n_valued).tobytes(), np.uint8)
    out[4] = lw
    out[5] = yw
    pos = _HEADER

    def put(raw: np.ndarray) -> None:
        nonlocal pos
        b = raw.view(np.uint8).ravel()
        out[pos : pos + len(b)] = b
        pos += _up4(len(b))

    put(lengths.astype({1: np.uint8, 2: np.uint16, 4: np.uint32}[lw]))
    idx = np.ascontiguousarray(indices, dtype=np.uint32).view(np.uint8).reshape(-1, 4)
    put(np.ascontiguousarray(idx[:, :index_bytes]))
    if values is not None:
        put(np.packbits(valued, bitorder="little"))
        put(np.asarray(values, np.float32)[valued])
    put(y.astype(np.int8) if yw == 1 else y)
    if weight is not None:
        put(np.asarray(weight, np.float32))
    put(np.asarray(sqnorm, np.float32))
    return out


@njit(nogil=True, cache=True)
def _expand(rec, n, nnz, index_bytes, has_values, has_weight,
            indptr, indices, values, y, weight, sqnorm):  # fmt: skip
    n_valued = (
        np.int64(rec[0])
        | (np.int64(rec[1]) << 8)
        | (np.int64(rec[2]) << 16)
        | (np.int64(rec[3]) << 24)
    )
    lw = rec[4]
    pos = 8
    acc = 0
    for i in range(n):
        if lw == 1:
            length = np.int64(rec[pos + i])
        elif lw == 2:
            j = pos + 2 * i
            length = np.int64(rec[j]) | (np.int64(rec[j + 1]) << 8)
        else:
            j = pos + 4 * i
            length = (np.int64(rec[j]) | (np.int64(rec[j + 1]) << 8)
                      | (np.int64(rec[j + 2]) << 16) | (np.int64(rec[j + 3]) << 24))  # fmt: skip
        acc += length
        indptr[i] = acc
    pos += (lw * n + 3) & ~3
    for k in range(nnz):
        j = pos + index_bytes * k
        v = np.int64(rec[j]) | (np.int64(rec[j + 1]) << 8)
        if index_bytes >= 3:
            v |= np.int64(rec[j + 2]) << 16
        if index_bytes == 4:
            v |= np.int64(rec[j + 3]) << 24
        indices[k] = v
    pos += (index_bytes * nnz + 3) & ~3
    if has_values:
        bits = pos
        pos += ((nnz + 7) // 8 + 3) & ~3
        vals = rec[pos : pos + 4 * n_valued].view(np.float32)
        t = 0
        for k in range(nnz):
            if (rec[bits + (k >> 3)] >> (k & 7)) & 1:
                values[k] = vals[t]
                t += 1
            else:
                values[k] = 1.0
        pos += 4 * n_valued
    if rec[5] == 4:
        y[:] = rec[pos : pos + 4 * n].view(np.float32)
        pos += 4 * n
    else:
        for i in range(n):
            y[i] = np.float32(np.int8(rec[pos + i]))
        pos += (n + 3) & ~3
    if has_weight:
        weight[:] = rec[pos : pos + 4 * n].view(np.float32)
        pos += 4 * n
    sqnorm[:] = rec[pos : pos + 4 * n].view(np.float32)


_NONE_F32 = np.zeros(0, np.float32)


def expand(rec: np.ndarray, n: int, nnz: int, index_bytes: int, targets: list[np.ndarray],
           has_values: bool, has_weight: bool) -> None:  # fmt: skip
    """Write a record into ``targets``: the raw record's arrays in its order (``indptr[1:]``
    int64, indices int32, values f32 if any, y f32, weight f32 if any, sqnorm f32)."""
    it = iter(targets)
    indptr, indices = next(it), next(it)
    values = next(it) if has_values else _NONE_F32
    y = next(it)
    weight = next(it) if has_weight else _NONE_F32
    sqnorm = next(it)
    _expand(rec, n, nnz, index_bytes, has_values, has_weight,
            indptr, indices, values, y, weight, sqnorm)  # fmt: skip
