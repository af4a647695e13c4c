"""Writing snapfit Parquet files: atomically, in row groups of a fixed number of rows.

Every writer (``write_parquet``, the converters, the Criteo-like maker) goes through
:class:`ChunkWriter`, so equal input rows give byte-for-byte equal row groups whoever writes them.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from snapfit import progress
from snapfit.data.schema import (
    DEFAULT_ROW_GROUP_ROWS,
    INDICES,
    KEY_N_FEATURES,
    KEY_ROW_GROUP_NNZ,
    LABEL,
    VALUES,
    WEIGHT,
    arrow_schema,
    encode_metadata,
)
from snapfit.errors import DataError, ResourceError

#: Parquet writer options chosen by ``bench/bench_data.py`` (see docs/data-format.md): lz4 keeps
#: files ~2x smaller than none at nearly the same decode speed; dictionary pages do not pay off
#: for hashed indices and slow the reader.
PARQUET_OPTIONS = dict(compression="lz4", use_dictionary=False, write_statistics=True)

#: Rows per slice handed to the Parquet writer within a row group (see ``_GroupBuffer.table``).
SLICE_ROWS = 1 << 14


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
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise DataError(f"{out}: directory {parent} does not exist; create it first.")
    if os.path.exists(out) and not force:
        raise DataError(f"{out}: already exists; pass --force (force=True) to overwrite it.")
    check_writable(out)
    return out


def check_writable(output) -> None:
    """Refuse, before any work, an output whose directory cannot take a new file (read-only,
    no permission, a pseudo file system): the writers' temporary file is made there."""
    out = os.fspath(output)
    directory = os.path.dirname(os.path.abspath(out))
    try:
        fd, probe = tempfile.mkstemp(prefix=".snapfit-probe-", dir=directory)
    except OSError as e:
        raise ResourceError(
            f"{out}: cannot write in {directory} ({e.strerror}); choose a writable directory."
        ) from None
    os.close(fd)
    os.remove(probe)


_UMASK_LOCK = threading.Lock()


def publish(tmp: str, out: str) -> None:
    """Give ``tmp`` the permissions a plain ``open(out, "w")`` would (0666 less the umask; a
    temporary file is made 0600) and rename it to ``out``."""
    with _UMASK_LOCK:  # reading the umask means setting it: briefly, under a lock
        mask = os.umask(0o022)
        os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)
    os.replace(tmp, out)


@contextmanager
def atomic_output(output):
    """Yield a temporary path beside ``output``; rename it to ``output`` only on success.

    On any error the temporary file is removed, so a failed run leaves no partial output.
    """
    out = os.fspath(output)
    directory, name = os.path.split(os.path.abspath(out))
    if not os.path.isdir(directory):
        raise DataError(f"{out}: directory {directory} does not exist; create it first.")
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        yield tmp
        publish(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


class _GroupBuffer:
    """One row group being filled: CSR arrays with room for ``rows`` rows, reused group after
    group (no fresh allocation, no page faults, no concatenation per group)."""

    def __init__(self, rows: int, schema: pa.Schema):
        self.ptr = np.zeros(rows + 1, dtype=np.int32)
        self.indices = np.empty(0, dtype=np.int32)
        self.values = np.empty(0, dtype=np.float32) if VALUES in schema.names else None
        self.labels = None
        if LABEL in schema.names:
            self.labels = np.empty(rows, dtype=schema.field(LABEL).type.to_pandas_dtype())
        self.weight = np.empty(rows, dtype=np.float32) if WEIGHT in schema.names else None
        self.rows = self.nnz = 0

    def reserve(self, nnz: int) -> None:
        """Room for ``nnz`` entries in all, keeping the ones stored."""
        if nnz <= len(self.indices):
            return
        size = max(nnz, len(self.indices) * 2)
        for name in ("indices", "values"):
            old = getattr(self, name)
            if old is not None:
                new = np.empty(size, dtype=old.dtype)
                new[: self.nnz] = old[: self.nnz]
                setattr(self, name, new)

    def add(self, indptr, indices, values, labels, weight, a: int, b: int) -> None:
        """Copy rows ``a:b`` of a CSR block (any index and value dtypes) to the end."""
        lo, hi = int(indptr[a]), int(indptr[b])
        r, z = self.rows, self.nnz
        if z + hi - lo >= 2**31:
            raise DataError(
                f"a row group of more than {r} rows holds more than 2**31 - 1 nnz, more than "
                "int32 list offsets allow; pass a smaller row_group_rows."
            )
        self.reserve(z + hi - lo)
        np.subtract(
            indptr[a + 1 : b + 1], lo - z, out=self.ptr[r + 1 : r + 1 + b - a], casting="unsafe"
        )
        self.indices[z : z + hi - lo] = indices[lo:hi]
        if self.values is not None:
            self.values[z : z + hi - lo] = values[lo:hi]
        if self.labels is not None:
            self.labels[r : r + b - a] = labels[a:b]
        if self.weight is not None:
            self.weight[r : r + b - a] = weight[a:b]
        self.rows, self.nnz = r + b - a, z + hi - lo

    def table(self, schema: pa.Schema) -> pa.Table:
        """The rows stored, as a table over the buffers (no copy), in slices of
        :data:`SLICE_ROWS` rows: Parquet builds the levels of a list column per slice, in
        buffers it reuses, instead of one pair of level arrays as long as the row group
        (fresh memory for every group: sys time fell from 0.18 to 0.05 s for 1 M Criteo rows).
        The slicing depends on the row count only, so equal rows still give equal bytes."""
        n, z = self.rows, self.nnz
        offsets = pa.array(self.ptr[: n + 1])
        cols = []
        for field in schema:
            if field.name == LABEL:
                col = pa.array(self.labels[:n])
            elif field.name in (INDICES, VALUES):
                flat = self.indices if field.name == INDICES else self.values
                col = pa.ListArray.from_arrays(offsets, pa.array(flat[:z]), type=field.type)
            else:
                col = pa.array(self.weight[:n])
            cols.append(
                pa.chunked_array(
                    [col.slice(a, SLICE_ROWS) for a in range(0, n, SLICE_ROWS)], col.type
                )
            )
        return pa.Table.from_arrays(cols, schema=schema)


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

    Rows are copied into one of two reused row-group buffers as they are appended; a full
    group is encoded on a background thread while the other buffer fills, so memory stays at
    about two row groups and the caller's arrays may be reused as soon as ``append`` returns.
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
        self._buffers: list[_GroupBuffer] = []
        self._filling: _GroupBuffer | None = None
        self.row_group_nnz: list[int] = []
        self.n_rows = 0
        self._closed = False
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._inflight = None
        self._bar = progress.bar("write")

    def _wait(self) -> None:
        if self._inflight is not None:
            done, self._inflight = self._inflight, None
            done.result()

    def _buffer(self) -> _GroupBuffer:
        """The buffer being filled: a new one for the first two groups, then the one of two
        groups back, whose write finished before the last group was handed over."""
        if self._filling is None:
            if len(self._buffers) < 2:
                self._buffers.append(_GroupBuffer(self.row_group_rows, self.schema))
            self._filling = self._buffers[len(self.row_group_nnz) % 2]
            self._filling.rows = self._filling.nnz = 0
        return self._filling

    def append(self, indptr, indices, values=None, labels=None, weight=None) -> None:
        """Copy rows (CSR arrays; indptr may start anywhere); write every full row group."""
        indptr = np.asarray(indptr)
        n = len(indptr) - 1
        a = 0
        while a < n:
            buf = self._buffer()
            if not len(buf.indices):
                # Room for a whole group at this block's nnz per row, and some: pages of
                # np.empty are only mapped when first written, so a generous guess costs no
                # memory, while growing by copies would touch ~2x the final size.
                per_row = (int(indptr[-1]) - int(indptr[0])) / n
                buf.reserve(int(per_row * 1.25 * self.row_group_rows) + 4096)
            b = min(n, a + self.row_group_rows - buf.rows)
            buf.add(indptr, indices, values, labels, weight, a, b)
            a = b
            if buf.rows == self.row_group_rows:
                self._flush()

    def _flush(self) -> None:
        buf, self._filling = self._filling, None
        # Encoding a row group is the slow part: do it on a background thread (pyarrow releases
        # the GIL) while the caller fills the other buffer. One in flight at a time.
        self._wait()
        self._inflight = self._pool.submit(self._write_group, buf)
        self.row_group_nnz.append(buf.nnz)
        self.n_rows += buf.rows
        self._bar.update(buf.rows)

    def _write_group(self, buf: _GroupBuffer) -> None:
        self._writer.write_table(buf.table(self.schema), row_group_size=buf.rows)

    def close(self, n_features=None, more: dict | None = None) -> None:
        """Flush the last (short) row group and write the footer with the metadata (and
        ``more`` provenance, known only once every row was seen)."""
        self._closed = True
        if self._filling is not None and self._filling.rows:
            self._flush()
        nf = n_features if n_features is not None else self.n_features
        md = encode_metadata(nf, {**(self._provenance or {}), **(more or {})})
        md[KEY_ROW_GROUP_NNZ] = json.dumps(self.row_group_nnz)
        if nf is None:
            md.pop(KEY_N_FEATURES, None)
        self._wait()
        self._pool.shutdown()
        self._bar.close()
        self._writer.add_key_value_metadata(md)
        self._writer.close()

    def __enter__(self) -> ChunkWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Leaving a ``with`` block: ``close`` (unless the block did, with its own metadata),
        or ``abort`` on an error, which then propagates (the caller removes the file)."""
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.close()

    def abort(self) -> None:
        """Close the file handle after an error (the caller removes the file)."""
        self._closed = True
        try:
            self._wait()
        except Exception:
            pass  # the error being handled is the one to report
        self._pool.shutdown()
        self._bar.close()
        self._writer.close()


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
    targets="class",
) -> str:
    """Write a dense or scipy.sparse matrix and labels as a snapfit Parquet file, atomically.

    Parameters
    ----------
    path : str or path
        Output file; written under a temporary name in the same directory, then renamed.
    X : ndarray or scipy.sparse matrix, shape (n_rows, n_cols)
    y : array-like of 0/1 or ±1 labels, or of real targets, optional
        Labels are stored as int8 in the encoding given; None writes an unlabelled file.
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
    targets : {"class", "real", "classes"}
        "real": ``y`` holds regression targets, stored as float32 with ``snapfit.target``
        metadata "real" (for ``snapfit.Ridge``); "class": labels 0/1 or ±1; "classes": any
        whole-number labels, stored as int32 as given (more than two classes: one-vs-rest).

    Returns
    -------
    str
        The output path.
    """
    from snapfit.data.memory import csr_arrays
    from snapfit.data.validate import real_targets

    if targets not in ("class", "real", "classes"):
        raise ValueError(f"targets is {targets!r}; choose 'class', 'real' or 'classes'.")
    out = check_output(path, force=force)
    real = y is not None and targets in ("real", "classes")
    indptr, indices, values, _, weight, n_features = csr_arrays(
        X, None if real else y, weight, n_features=n_features
    )
    labels = None
    if real:
        labels = real_targets(np.asarray(y).ravel(), lambda row: f"y, row {row}", column="y")
        if targets == "classes":
            if not np.array_equal(labels, np.round(labels)):
                row = int(np.flatnonzero(labels != np.round(labels))[0])
                raise DataError(f"y, row {row}: {labels[row]} is not a whole number; class "
                                "labels are integers.")  # fmt: skip
            labels = labels.astype(np.int32)
        if len(labels) != len(indptr) - 1:
            raise DataError(
                f"y has {len(labels)} targets but X has {len(indptr) - 1} rows; pass one per row."
            )
    elif y is not None:
        labels = np.asarray(y).ravel().astype(np.int8)
    prov = {"source": "arrays", "transform": "none", **(provenance or {})}
    if real and targets == "real":
        prov["target"] = "real"
    with atomic_output(out) as tmp:
        writer = ChunkWriter(
            tmp,
            n_features=n_features,
            has_labels=labels is not None,
            has_values=values is not None,
            has_weight=weight is not None,
            label_type=(pa.float32() if targets == "real" else pa.int32()) if real else None,
            row_group_rows=row_group_rows,
            provenance=prov,
            parquet_options=parquet_options,
        )
        with writer:  # closed at the end, aborted on an error
            writer.append(indptr, indices, values, labels, weight)
    return out
