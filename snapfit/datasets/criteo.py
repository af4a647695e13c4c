"""Criteo TSV (plain or gzip, labelled or not) -> snapfit Parquet, streaming in blocks.

pyarrow's CSV reader splits each block into columns in C++; the fields are then turned into
features with vectorized numpy (see :mod:`snapfit.datasets.criteo_hash`), so memory is bounded by
the block size plus one row group. Unlabelled files (39 fields: Criteo test sets) are written
without a ``label`` column; read them with ``Dataset(..., require_labels=False)``.
"""

from __future__ import annotations

import os
import re
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from snapfit.data.schema import DEFAULT_ROW_GROUP_ROWS
from snapfit.data.writer import ChunkWriter, atomic_output, check_output
from snapfit.datasets.criteo_hash import (
    N_CAT,
    N_FIELDS,
    N_INT,
    check_hash_bits,
    parse_hex8,
    rows_to_csr,
)
from snapfit.datasets.textio import arrow_stream, head, open_binary
from snapfit.errors import DataError

_INT_RE = re.compile(rb"[+-]?[0-9]+")
_HEX_RE = re.compile(rb"[0-9a-fA-F]{8}")


class ConvertReport(NamedTuple):
    """What a conversion wrote, and the bad rows it skipped (line numbers count from 1)."""

    output: str
    rows: int
    nnz: int
    row_groups: int
    bad_rows: int
    bad_lines: list


def criteo_transform(hash_bits: int) -> str:
    return (
        f"criteo: int field j -> index j, log1p(max(x,0)); token t of field c -> "
        f"13 + splitmix64((c+1)<<32|t) mod (2^{hash_bits}-13), value 1"
    )


def detect_labelled(path) -> bool:
    """True for 40 tab-separated fields on the first line, False for 39."""
    first = head(path).split(b"\n", 1)[0]
    n = first.count(b"\t") + 1
    if n == N_FIELDS + 1:
        return True
    if n == N_FIELDS:
        return False
    raise DataError(
        f"{path}, line 1: has {n} tab-separated fields; Criteo files have 40 (labelled) or "
        "39 (unlabelled test files). Is this the right file or --format?"
    )


def line_problem(line: bytes, labelled: bool) -> str | None:
    """Why one raw line is not a valid Criteo row, or None (the slow path, for messages)."""
    fields = line.rstrip(b"\r\n").split(b"\t")
    want = N_FIELDS + labelled
    if len(fields) != want:
        return f"expected {want} tab-separated fields, found {len(fields)}"
    if labelled:
        if fields[0] not in (b"0", b"1"):
            return f"label is {fields[0].decode(errors='replace')!r}, expected 0 or 1"
        fields = fields[1:]
    for j, f in enumerate(fields[:N_INT]):
        if f and not _INT_RE.fullmatch(f):
            return f"integer field I{j + 1} holds {f.decode(errors='replace')!r}"
    for c, f in enumerate(fields[N_INT:]):
        if f and not _HEX_RE.fullmatch(f):
            return (
                f"categorical field C{c + 1} holds {f.decode(errors='replace')!r}, not 8 hex digits"
            )
    return None


def find_bad_lines(path, labelled: bool, limit: int) -> list[tuple[int, str]]:
    """The first ``limit`` bad lines as (line number, reason), by a plain Python scan."""
    found = []
    with open_binary(path) as f:
        for number, line in enumerate(f, 1):
            problem = line_problem(line, labelled)
            if problem:
                found.append((number, problem))
                if len(found) >= limit:
                    break
    return found


def _int_column(arr: pa.Array, bad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values (int64, 0 where empty) and presence of one integer column; marks bad rows."""
    present = np.asarray(arr.is_valid())
    try:
        vals = pc.cast(arr, pa.int64())
    except pa.ArrowInvalid:
        ok = pc.fill_null(pc.match_substring_regex(arr, r"^[+-]?[0-9]+$"), True)
        bad |= ~np.asarray(ok)
        vals = pc.cast(pc.if_else(ok, arr, pa.scalar(None, pa.string())), pa.int64())
        present = present & np.asarray(ok)
    return np.asarray(pc.fill_null(vals, 0)), present


def _cat_column(arr: pa.Array, bad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (uint32) and presence of one categorical column; marks bad rows."""
    n = len(arr)
    present = np.asarray(arr.is_valid())
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, np.int32, count=n + 1, offset=arr.offset * 4)
    data = np.frombuffer(data_buf, np.uint8)
    wrong = present & (np.diff(offsets) != 8)
    use = present & ~wrong
    tokens = np.zeros(n, dtype=np.uint32)
    tok, nonhex = parse_hex8(data, offsets[:-1][use])
    tokens[use] = tok
    wrong[use] |= nonhex
    bad |= wrong
    return tokens, present & ~wrong


def parse_batch(batch: pa.RecordBatch, labelled: bool):
    """One CSV batch -> (labels int8 | None, ints, int_present, tokens, cat_present, bad)."""
    n = batch.num_rows
    bad = np.zeros(n, dtype=bool)
    cols = batch.columns
    labels = None
    if labelled:
        lab = cols[0]
        one = np.asarray(pc.fill_null(pc.equal(lab, "1"), False))
        zero = np.asarray(pc.fill_null(pc.equal(lab, "0"), False))
        bad |= ~(one | zero)
        labels = one.astype(np.int8)
        cols = cols[1:]
    ints = np.empty((n, N_INT), dtype=np.int64)
    int_present = np.empty((n, N_INT), dtype=bool)
    for j in range(N_INT):
        ints[:, j], int_present[:, j] = _int_column(cols[j], bad)
    tokens = np.empty((n, N_CAT), dtype=np.uint32)
    cat_present = np.empty((n, N_CAT), dtype=bool)
    for c in range(N_CAT):
        tokens[:, c], cat_present[:, c] = _cat_column(cols[N_INT + c], bad)
    return labels, ints, int_present, tokens, cat_present, bad


def _features(batch: pa.RecordBatch, labelled: bool, hash_bits: int):
    """CSR arrays and labels of a batch's good rows, and the number of bad rows dropped."""
    labels, ints, ip, tokens, cp, bad = parse_batch(batch, labelled)
    n_bad = int(bad.sum())
    if n_bad:
        keep = ~bad
        labels = None if labels is None else labels[keep]
        ints, ip, tokens, cp = ints[keep], ip[keep], tokens[keep], cp[keep]
    return (*rows_to_csr(ints, ip, tokens, cp, hash_bits), labels), n_bad


def _write(writer: ChunkWriter, result) -> int:
    arrays, n_bad = result
    writer.append(*arrays)
    return n_bad


class _RowCounter:
    """Counts rows pyarrow rejects for their field count (it cannot tell their line number)."""

    def __init__(self, limit: int):
        self.limit, self.n = limit, 0

    def __call__(self, row) -> str:
        self.n += 1
        return "skip" if self.n <= self.limit else "error"


def _fail(path, labelled, fallback: str):
    found = find_bad_lines(path, labelled, 1)
    if found:
        line, problem = found[0]
        return DataError(
            f"{path}, line {line}: {problem}; fix the line or pass --skip-bad-rows N "
            "(skip_bad_rows=N) to skip up to N bad rows."
        )
    return DataError(f"{path}: {fallback}; check that it is a Criteo TSV file.")


def convert_criteo(
    input,
    output,
    *,
    hash_bits: int = 20,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    force: bool = False,
    skip_bad_rows: int = 0,
    block_bytes: int = 1 << 22,
) -> ConvertReport:
    """Convert a Criteo TSV file (plain or gzip; labelled or unlabelled) to snapfit Parquet.

    Parameters
    ----------
    input, output : str or path
        TSV file and Parquet file to write (atomically; refused if it exists unless ``force``).
    hash_bits : int
        ``n_features = 2**hash_bits``; categorical tokens hash into ``[13, 2**hash_bits)``.
    row_group_rows : int
        Rows per row group (= per chunk when read).
    skip_bad_rows : int
        Tolerate (drop) up to this many malformed rows; one more is a :class:`DataError`.
    block_bytes : int
        Bytes of text parsed at a time (memory ~ a few times this, plus one row group).

    Returns
    -------
    ConvertReport
    """
    path = os.fspath(input)
    hash_bits = check_hash_bits(hash_bits)
    out = check_output(output, [path], force=force)
    labelled = detect_labelled(path)
    names = (["label"] if labelled else []) + [f"I{j + 1}" for j in range(N_INT)]
    names += [f"C{c + 1}" for c in range(N_CAT)]
    counter = _RowCounter(skip_bad_rows)
    read = pacsv.ReadOptions(column_names=names, block_size=block_bytes)
    parse = pacsv.ParseOptions(
        delimiter="\t", quote_char=False, ignore_empty_lines=False, invalid_row_handler=counter
    )
    convert = pacsv.ConvertOptions(
        column_types={n: pa.string() for n in names},
        strings_can_be_null=True,
        null_values=[""],
        check_utf8=False,
    )
    n_bad_fields = 0
    provenance = {
        "source": os.path.basename(path),
        "format": "criteo",
        "hash_bits": hash_bits,
        "transform": criteo_transform(hash_bits),
    }
    with atomic_output(out) as tmp:
        writer = ChunkWriter(
            tmp,
            n_features=1 << hash_bits,
            has_labels=labelled,
            row_group_rows=row_group_rows,
            provenance=provenance,
        )
        try:
            with arrow_stream(path) as stream, ThreadPoolExecutor(max_workers=1) as pool:
                # Features of batch i are made on a worker thread (numpy releases the GIL)
                # while pyarrow parses batch i+1 here: two cores busy, order kept.
                pending = deque()
                for batch in pacsv.open_csv(stream, read, parse, convert):
                    pending.append(pool.submit(_features, batch, labelled, hash_bits))
                    if len(pending) >= 2:
                        n_bad_fields += _write(writer, pending.popleft().result())
                        if n_bad_fields + counter.n > skip_bad_rows:
                            raise _fail(path, labelled, "a field cannot be parsed")
                while pending:
                    n_bad_fields += _write(writer, pending.popleft().result())
                    if n_bad_fields + counter.n > skip_bad_rows:
                        raise _fail(path, labelled, "a field cannot be parsed")
            writer.close()
        except pa.ArrowInvalid as e:
            writer.abort()
            raise _fail(path, labelled, str(e).splitlines()[0]) from None
        except BaseException:
            writer.abort()
            raise
        if writer.n_rows == 0:
            raise DataError(f"{path}: holds no rows; the output would be an empty dataset.")
    n_bad = n_bad_fields + counter.n
    bad_lines = find_bad_lines(path, labelled, min(n_bad, 20)) if n_bad else []
    return ConvertReport(
        out, writer.n_rows, sum(writer.row_group_nnz), len(writer.row_group_nnz), n_bad, bad_lines
    )
