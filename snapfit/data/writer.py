"""Writing snapfit Parquet files: atomically, in row groups of a fixed number of rows.

Every writer (``write_parquet``, the converters, the Criteo-like maker) goes through
:class:`ChunkWriter`, so equal input rows give byte-for-byte equal row groups whoever writes them.
"""

from __future__ import annotations

import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from snapfit.data.schema import (
    DEFAULT_ROW_GROUP_ROWS,
    KEY_N_FEATURES,
    KEY_ROW_GROUP_NNZ,
    arrow_schema,
    encode_metadata,
)
from snapfit.errors import DataError

#: Parquet writer options chosen by ``bench/bench_data.py`` (see docs/data-format.md): lz4 keeps
#: files ~2x smaller than none at nearly the same decode speed; dictionary pages do not pay off
#: for hashed indices and slow the reader.
PARQUET_OPTIONS = dict(compression="lz4", use_dictionary=False, write_statistics=True)


def check_output(output, inputs=(), *, force: bool = False) -> str:
    """Refuse an existing output without ``force``, and an output that is one of the inputs."""
    out = os.fspath(output)
    for src in inputs:
        src = os.fspath(src)
        same = os.path.realpath(src) == os.path.realpath(out)
        if os.path.exists(out) and os.path.exists(src):
            same = same or os.path.samefile(src, out)
        if same:
            raise DataError(f"{out}: is the input file; choose another output path.")
    if os.path.isdir(out):
        raise DataError(f"{out}: is a directory; give a file name for the output.")
    if os.path.exists(out) and not force:
        raise DataError(f"{out}: already exists; pass --force (force=True) to overwrite it.")
    return out


@contextmanager
def atomic_output(output):
    """Yield a temporary path beside ``output``; rename it to ``output`` only on success.

    On any error the temporary file is removed, so a failed run leaves no partial output.
    """
    out = os.fspath(output)
    directory, name = os.path.split(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


class ChunkWriter:
    """Append CSR blocks of any size; write row groups of exactly ``row_group_rows`` rows.

    Parameters
    ----------
    path : str
        File to write (callers pass a temporary name from :func:`atomic_output`).
    n_features : int or None
        Stored as ``snapfit.n_features``; None means "set it in :meth:`close`".
    has_labels, has_values, has_weight : bool
        Which optional columns the file has.
    label_type : pyarrow.DataType, optional
        ``int8`` (default) or ``float32``.
    row_group_rows : int
        Rows per row group, i.e. per chunk.
    provenance : dict, optional
        Stored as ``snapfit.<key>`` metadata (source, hash_bits, transform, ...).
    """

    def __init__(
        self,
        path,
        *,
        n_features,
        has_labels=True,
        has_values=True,
        has_weight=False,
        label_type=None,
        row_group_rows=DEFAULT_ROW_GROUP_ROWS,
        provenance=None,
        parquet_options=None,
    ):
        if row_group_rows < 1:
            raise ValueError(f"row_group_rows is {row_group_rows}; it must be at least 1.")
        self.schema = arrow_schema(
            has_labels=has_labels,
            has_values=has_values,
            has_weight=has_weight,
            label_type=label_type,
        )
        self.n_features = n_features
        self.row_group_rows = int(row_group_rows)
        self._provenance = provenance
        opts = dict(PARQUET_OPTIONS, **(parquet_options or {}))
        self._writer = pq.ParquetWriter(path, self.schema, **opts)
        self._pending: list[tuple] = []
        self._pending_rows = 0
        self.row_group_nnz: list[int] = []
        self.n_rows = 0
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._inflight = None

    def _wait(self) -> None:
        if self._inflight is not None:
            done, self._inflight = self._inflight, None
            done.result()

    def append(self, indptr, indices, values=None, labels=None, weight=None) -> None:
        """Buffer rows (CSR arrays; indptr may start anywhere); flush every full row group."""
        indptr = np.asarray(indptr, dtype=np.int64)
        lo, hi = int(indptr[0]), int(indptr[-1])
        self._pending.append(
            (
                indptr - lo,
                np.asarray(indices)[lo:hi],
                None if values is None else np.asarray(values)[lo:hi],
                labels,
                weight,
            )
        )
        self._pending_rows += len(indptr) - 1
        while self._pending_rows >= self.row_group_rows:
            self._flush(self.row_group_rows)

    def _flush(self, n: int) -> None:
        take, rest, got = [], [], 0
        for blk in self._pending:
            rows = len(blk[0]) - 1
            if got >= n:
                rest.append(blk)
            elif got + rows <= n:
                take.append(blk)
                got += rows
            else:
                k = n - got
                take.append(_rows(blk, 0, k))
                rest.append(_rows(blk, k, rows))
                got = n
        self._pending, self._pending_rows = rest, self._pending_rows - n
        nnz = sum(int(b[0][-1]) for b in take)
        if nnz >= 2**31:
            raise DataError(
                f"a row group of {n} rows holds {nnz} nnz, more than int32 list offsets "
                "allow; pass a smaller row_group_rows."
            )
        # Assembling and encoding a row group is the slow part (~20 M nnz/s): do it on a
        # background thread (numpy and pyarrow release the GIL) while the caller makes the next
        # one. One in flight at a time bounds memory to about two row groups.
        self._wait()
        self._inflight = self._pool.submit(self._write_group, take)
        self.row_group_nnz.append(nnz)
        self.n_rows += n

    def _write_group(self, blocks) -> None:
        sizes = np.cumsum([0] + [int(b[0][-1]) for b in blocks])
        ptr = np.concatenate([[0]] + [b[0][1:] + s for b, s in zip(blocks, sizes, strict=False)])
        n_rows = len(ptr) - 1
        offsets = pa.array(ptr.astype(np.int32))
        cols = []
        for field in self.schema:
            if field.name == "label":
                lab = np.concatenate([b[3] for b in blocks]).astype(field.type.to_pandas_dtype())
                cols.append(pa.array(lab))
            elif field.name in ("indices", "values"):
                k, dtype = (1, np.int32) if field.name == "indices" else (2, np.float32)
                flat = np.concatenate([b[k] for b in blocks]).astype(dtype, copy=False)
                cols.append(pa.ListArray.from_arrays(offsets, pa.array(flat), type=field.type))
            else:
                w = np.concatenate([b[4] for b in blocks]).astype(np.float32, copy=False)
                cols.append(pa.array(w))
        table = pa.Table.from_arrays(cols, schema=self.schema)
        self._writer.write_table(table, row_group_size=n_rows)

    def close(self, n_features=None) -> None:
        """Flush the last (short) row group and write the footer with the metadata."""
        if self._pending_rows:
            self._flush(self._pending_rows)
        nf = n_features if n_features is not None else self.n_features
        md = encode_metadata(nf, self._provenance)
        md[KEY_ROW_GROUP_NNZ] = json.dumps(self.row_group_nnz)
        if nf is None:
            md.pop(KEY_N_FEATURES, None)
        self._wait()
        self._pool.shutdown()
        self._writer.add_key_value_metadata(md)
        self._writer.close()

    def abort(self) -> None:
        """Close the file handle after an error (the caller removes the file)."""
        try:
            self._wait()
        except Exception:
            pass  # the error being handled is the one to report
        self._pool.shutdown()
        self._writer.close()


def _rows(blk, a: int, b: int):
    """Rows ``a:b`` of a buffered block (indptr based at 0), rebased to 0 again."""
    indptr, indices, values, labels, weight = blk
    lo, hi = int(indptr[a]), int(indptr[b])
    return (
        indptr[a : b + 1] - lo,
        indices[lo:hi],
        None if values is None else values[lo:hi],
        None if labels is None else labels[a:b],
        None if weight is None else weight[a:b],
    )


def write_parquet(
    path,
    X,
    y=None,
    weight=None,
    *,
    row_group_rows=DEFAULT_ROW_GROUP_ROWS,
    n_features=None,
    provenance=None,
    force=False,
    parquet_options=None,
) -> str:
    """Write a dense or scipy.sparse matrix and labels as a snapfit Parquet file, atomically.

    Parameters
    ----------
    path : str or path
        Output file; written under a temporary name in the same directory, then renamed.
    X : ndarray or scipy.sparse matrix, shape (n_rows, n_cols)
    y : array-like of 0/1 or ±1 labels, optional
        Stored as int8 in the encoding given; None writes an unlabelled file.
    weight : array-like, optional
        Per-row sample weights (float32).
    row_group_rows : int
        Rows per row group (= per chunk when read).
    n_features : int, optional
        Feature-space width if larger than ``X.shape[1]``.
    provenance : dict, optional
        Stored as ``snapfit.<key>`` metadata; ``source`` defaults to ``"arrays"``.
    force : bool
        Overwrite an existing file.

    Returns
    -------
    str
        The output path.
    """
    from snapfit.data.memory import csr_arrays

    out = check_output(path, force=force)
    indptr, indices, values, _, weight, n_features = csr_arrays(X, y, weight, n_features=n_features)
    labels = None
    if y is not None:
        labels = np.asarray(y).ravel().astype(np.int8)
    prov = {"source": "arrays", "transform": "none", **(provenance or {})}
    with atomic_output(out) as tmp:
        writer = ChunkWriter(
            tmp,
            n_features=n_features,
            has_labels=labels is not None,
            has_values=values is not None,
            has_weight=weight is not None,
            row_group_rows=row_group_rows,
            provenance=prov,
            parquet_options=parquet_options,
        )
        try:
            writer.append(indptr, indices, values, labels, weight)
            writer.close()
        except BaseException:
            writer.abort()
            raise
    return out
