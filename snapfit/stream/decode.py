"""Row groups decoded batch by batch into piece records, with each row's exact squared norm.

Reading a whole row group with ``read_row_group`` held ~3.7x its decoded size in pyarrow's pool
at its peak (272 MB for a 262144-row Criteo-like group of 73 MB); reading it through a 1 MB
buffered stream in batches of 16384 rows held 24 MB, at the same speed. So the first pass and
the direct-from-Parquet epochs decode in batches, and a reader's memory does not grow with the
row-group size.

A piece record is the bytes the cache stores for a piece (see ``snapfit.stream.cache``)::

    indptr[1:] int64 (n) | indices int32 (nnz) | values f32 (nnz, if any) | y f32 (n)
    | weight f32 (n, if any) | sqnorm f32 (n)

Row norms (duplicates inside a row summed first) come from ``cpu.row_sqnorms``, whose scratch
is a small hash table sized by the longest row, so a reader needs no per-feature memory.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from snapfit.data.chunk import Chunk, concat_chunks
from snapfit.data.fs import parquet_file
from snapfit.data.reader import decode_table
from snapfit.data.schema import INDICES, LABEL, VALUES, WEIGHT
from snapfit.errors import DataError
from snapfit.solvers.cpu import count_columns, row_sqnorms

#: Rows decoded at a time; pyarrow's pool held ~5x the decoded batch at its peak.
BATCH_ROWS = 1 << 14
#: Read buffer of the Parquet stream (pyarrow otherwise reads whole column chunks at once).
STREAM_BUFFER = 1 << 20


def record_nbytes(n_rows, nnz, has_values: bool, has_weight: bool):
    """Bytes of a piece record of ``n_rows`` rows and ``nnz`` entries (arrays or ints)."""
    per_row = 8 + 4 + 4 + (4 if has_weight else 0)
    return n_rows * per_row + nnz * (4 + (4 if has_values else 0))


class PieceDecoder:
    """Decodes row groups of a Parquet ``Dataset`` into the records of their pieces.

    Parameters
    ----------
    dataset : snapfit.data.Dataset
    pieces : snapfit.stream.cache.Pieces
    has_values, has_weight : bool
        Whether records carry values / weights (true if any file of the data set has them; a
        file without them gets ones).
    batch_rows : int
    """

    def __init__(self, dataset, pieces, has_values: bool, has_weight: bool, batch_rows=None):
        self.dataset = dataset
        self.pieces = pieces
        self.has_values, self.has_weight = has_values, has_weight
        self.batch_rows = int(batch_rows or BATCH_ROWS)
        self.by_rg: dict[int, list[int]] = {}
        for p, g in enumerate(pieces.rg):
            self.by_rg.setdefault(int(g), []).append(p)
        self._local = threading.local()

    def _file(self, path: str) -> pq.ParquetFile:
        files = getattr(self._local, "files", None)
        if files is None:
            files = self._local.files = {}
        if path not in files:
            files[path] = parquet_file(path, buffer_size=STREAM_BUFFER, pre_buffer=False)
        return files[path]

    def _batches(self, g: int):
        """``(first row, Chunk)`` for the batches of row group ``g``, checked as ``read_chunk``."""
        ref = self.dataset.chunks[g]
        try:
            pf = self._file(ref.file)
            names = pf.schema_arrow.names
            cols = [c for c in (LABEL, INDICES, VALUES, WEIGHT) if c in names]
            batches = pf.iter_batches(
                batch_size=self.batch_rows, row_groups=[ref.row_group], columns=cols,
                use_threads=False,
            )  # fmt: skip
            row0 = 0
            for batch in batches:
                base = row0
                where = lambda row, base=base: (  # noqa: E731
                    f"{ref.file}, row group {ref.row_group}, row {base + row}"
                )
                chunk = decode_table(
                    pa.Table.from_batches([batch]), n_features=self.dataset.n_features,
                    has_labels=self.dataset.has_labels, where=where,
                    validate=self.dataset.validate, targets=self.dataset.targets,
                    classes=self.dataset.classes,
                )  # fmt: skip
                yield row0, chunk
                row0 += chunk.n_rows
        except (pa.ArrowException, OSError) as e:
            raise DataError(
                f"{ref.file}, row group {ref.row_group}: cannot be read "
                f"({str(e).splitlines()[0]}); the file is corrupt, re-write it."
            ) from None

    def decode(self, g: int, emit: Callable[[int, list[np.ndarray]], None], norms=None) -> None:
        """Call ``emit(p, parts)`` for every piece ``p`` of row group ``g``, in row order.

        ``parts`` are the record's arrays in record order (contiguous; they may be views of
        the batch, valid until ``emit`` returns). The norms are computed, or, when ``norms`` is
        given, ``norms(p)`` supplies piece ``p``'s (stored by an earlier pass).
        """
        ref = self.dataset.chunks[g]
        todo = self.by_rg.get(g, [])
        lo, hi = self.pieces.lo, self.pieces.hi
        i = 0
        carry: Chunk | None = None  # decoded rows not yet emitted, from row `base`
        carry_sq = np.zeros(0, np.float32)
        base = 0
        nnz = 0
        for _, batch in self._batches(g):
            nnz += batch.nnz
            sq = np.zeros(batch.n_rows, np.float32)
            if norms is None:
                values = batch.values if batch.values is not None else np.zeros(0, np.float32)
                has_values = batch.values is not None
                row_sqnorms(batch.indptr, batch.indices, values, has_values, sq)
            if carry is not None and carry.n_rows:
                batch = concat_chunks([carry, batch])
                sq = np.concatenate([carry_sq, sq])
            end = base + batch.n_rows
            while i < len(todo) and hi[todo[i]] <= end:
                p = todo[i]
                a, b = int(lo[p]) - base, int(hi[p]) - base
                emit(p, self._parts(batch.rows(a, b), sq[a:b] if norms is None else norms(p)))
                i += 1
            cut = int(lo[todo[i]]) - base if i < len(todo) else batch.n_rows
            carry, carry_sq = batch.rows(cut, batch.n_rows), sq[cut:]
            base += cut
        if i != len(todo) or base + (carry.n_rows if carry else 0) != ref.n_rows or nnz != ref.nnz:
            raise DataError(
                f"{ref.file}, row group {ref.row_group}: metadata promises {ref.n_rows} rows and "
                f"{ref.nnz} nnz but the data holds {base + (carry.n_rows if carry else 0)} and "
                f"{nnz}; re-write it."
            )

    def count_columns(self, n_rows: int, n_groups: int = 64) -> tuple[np.ndarray, int]:
        """Per-feature row counts over about ``n_rows`` rows: the first rows of up to
        ``n_groups`` row groups spread evenly over the data set (whole batches; every row of a
        small one). Returns ``(counts, rows counted)``. Threads sharing ``w`` choose their hot
        features from it before the first pass, which then stores their ids in the fit's
        order (``snapfit.engine.shared``). On a 200M-row file of 763 row groups it counted
        1,048,576 rows in 1.9 s (0.7 s with the file's pages cached); its first pass took
        ~130 s.
        """
        groups = sorted(self.by_rg)
        k = min(len(groups), n_groups)
        per = -(-int(n_rows) // max(1, k))
        counts = np.zeros(int(self.dataset.n_features), np.int64)
        counted = 0
        for g in (groups[i * len(groups) // k] for i in range(k)):
            got = 0
            batches = self._batches(g)
            for _, batch in batches:
                got += count_columns(batch.indptr, batch.indices, counts, 1)
                if got >= per:
                    break
            batches.close()
            counted += got
        return counts, counted

    def _parts(self, c: Chunk, sq: np.ndarray) -> list[np.ndarray]:
        n, z = c.n_rows, c.nnz
        parts = [c.indptr[1:], c.indices]
        if self.has_values:
            parts.append(c.values if c.values is not None else np.ones(z, np.float32))
        parts.append(c.y)
        if self.has_weight:
            parts.append(c.weight if c.weight is not None else np.ones(n, np.float32))
        parts.append(sq)
        return [np.ascontiguousarray(x) for x in parts]

    def record_nbytes(self, n_rows, nnz):
        """Bytes of a record of ``n_rows`` rows and ``nnz`` entries (arrays or ints)."""
        return record_nbytes(n_rows, nnz, self.has_values, self.has_weight)


def where(dataset, pieces, ps) -> str:
    """Where pieces ``ps`` come from, for error messages."""
    refs = dataset.chunks
    names = sorted({f"{os.path.basename(refs[g].file)} row group {refs[g].row_group}"
                    for g in pieces.rg[list(ps)]})  # fmt: skip
    return ", ".join(names[:4]) + (" ..." if len(names) > 4 else "")


def run_readers(todo, work: Callable[[int], None], n_readers: int, name: str) -> None:
    """Run ``work(item)`` for every item of ``todo`` on ``n_readers`` threads; re-raise the
    first error here. The caller's thread joins in short steps, so it still takes signals."""
    items = iter(todo)
    lock = threading.Lock()
    errors: list[BaseException] = []
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            with lock:
                item = next(items, None)
            if item is None:
                return
            try:
                work(item)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller
                errors.append(e)
                stop.set()

    threads = [
        threading.Thread(target=loop, name=f"{name}-{i}", daemon=True)
        for i in range(max(1, n_readers))
    ]
    for th in threads:
        th.start()
    try:
        for th in threads:
            while th.is_alive():
                th.join(0.2)
    except BaseException:
        stop.set()
        for th in threads:
            th.join(30)
        raise
    if errors:
        raise errors[0]
