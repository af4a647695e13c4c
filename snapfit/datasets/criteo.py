"""Criteo TSV (plain or gzip, labelled or not) -> snapfit Parquet, streaming in blocks.

The input is cut into blocks of whole lines; on two worker threads, pyarrow's CSV reader splits
each block into columns in C++ (labels as 1 byte, integers as int64, tokens as 8 bytes) and the
fields are turned into features with vectorized numpy (the feature map is
:mod:`snapfit.datasets.criteo_hash`). Memory is bounded: a few blocks in flight plus two row
groups. Unlabelled files (39 fields: Criteo test sets) are written without a ``label`` column;
read them with ``Dataset(..., require_labels=False)``.
"""

from __future__ import annotations

import os
import queue
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
    cat_index,
    check_hash_bits,
    int_values,
    splitmix64,
)
from snapfit.datasets.textio import arrow_stream, head, open_binary, read_error
from snapfit.errors import DataError

_INT_RE = re.compile(rb"-?[0-9]+")
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


_U = np.uint64
_LOW_NIBBLES = _U(0x0F0F0F0F0F0F0F0F)
_TOP_BITS = _U(0x8080808080808080)


def hex8_words(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and a mask of non-hex tokens, from 8 hex digits packed in a uint64 each.

    ``w`` holds the 8 characters of a token as they lie in memory (first character in the lowest
    byte of a little-endian word). The digits are checked and decoded eight at a time in the
    word's bytes (SWAR), ~20 numpy operations per token and no table look-ups: 4x faster than
    decoding byte by byte. Returns the tokens as uint64 (< 2**32, first digit most significant).
    """
    # Bytes < 0x80 never carry into their neighbour in these sums; a token with a byte >= 0x80
    # is bad anyway.
    lower = w | _U(0x2020202020202020)
    ge = w + _U(0x5050505050505050)  # top bit set where byte >= '0'
    ok = w + _U(0x4646464646464646)  # top bit set where byte > '9'
    np.invert(ok, out=ok)
    ok &= ge
    ge = lower + _U(0x1F1F1F1F1F1F1F1F)  # lower >= 'a'
    lower += _U(0x1919191919191919)  # lower > 'f'
    np.invert(lower, out=lower)
    lower &= ge
    ok |= lower
    ok &= _TOP_BITS
    bad = ok != _TOP_BITS
    bad |= (w & _TOP_BITS) != 0
    # digit value: low nibble, plus 9 for letters (bit 6 set)
    nib = w & _LOW_NIBBLES
    ge = w >> _U(6)
    ge &= _U(0x0101010101010101)
    ge *= _U(9)
    nib += ge
    # pack nibble pairs into bytes, bytes into 16-bit, then 32-bit values (first digit on top)
    out = nib & _U(0x000F000F000F000F)
    out <<= _U(4)
    nib >>= _U(8)
    nib &= _U(0x000F000F000F000F)
    out |= nib
    nib = out & _U(0x000000FF000000FF)
    nib <<= _U(8)
    out >>= _U(16)
    out &= _U(0x000000FF000000FF)
    nib |= out
    out = nib & _U(0xFFFF)
    out <<= _U(16)
    nib >>= _U(32)
    out |= nib
    return out, bad


def _present(arr: pa.Array) -> np.ndarray:
    """Validity of an Arrow array as a bool array (the CSV reader's nulls are empty fields)."""
    n = len(arr)
    if arr.null_count == 0:
        return np.ones(n, dtype=bool)
    bits = np.frombuffer(arr.buffers()[0], np.uint8)
    return np.unpackbits(bits, count=arr.offset + n, bitorder="little")[arr.offset :].view(bool)


def _label_column(arr: pa.Array, bad: np.ndarray) -> np.ndarray:
    """Labels (int8) of the label column; marks rows whose label is not 0 or 1."""
    n = len(arr)
    if pa.types.is_fixed_size_binary(arr.type):  # fast path: 1 byte each
        lab = np.frombuffer(arr.buffers()[1], np.uint8, count=n, offset=arr.offset) - np.uint8(48)
        bad |= (lab > 1) | ~_present(arr)
        return lab.view(np.int8)
    one = np.asarray(pc.fill_null(pc.equal(arr, "1"), False))
    zero = np.asarray(pc.fill_null(pc.equal(arr, "0"), False))
    bad |= ~(one | zero)
    return one.astype(np.int8)


def _int_column(arr: pa.Array, bad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values (int64; anything where empty) and presence of one integer column.

    The fast path gets int64 from the CSV reader; the string path (after a parse error, to skip
    bad rows) marks rows that are not integers.
    """
    present = _present(arr)
    if arr.type == pa.int64():
        return np.frombuffer(
            arr.buffers()[1], np.int64, count=len(arr), offset=arr.offset * 8
        ), present
    try:
        vals = pc.cast(arr, pa.int64())
    except pa.ArrowInvalid:
        ok = pc.fill_null(pc.match_substring_regex(arr, r"^-?[0-9]+$"), True)
        bad |= ~np.asarray(ok)
        vals = pc.cast(pc.if_else(ok, arr, pa.scalar(None, pa.string())), pa.int64())
        present = present & np.asarray(ok)
    return np.asarray(pc.fill_null(vals, 0)), present


def _cat_column(arr: pa.Array, bad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (uint64 < 2**32) and presence of one categorical column; marks bad rows.

    The fast path gets 8-byte fixed-size binary from the CSV reader; the string path checks
    the lengths.
    """
    n = len(arr)
    present = _present(arr)
    if pa.types.is_fixed_size_binary(arr.type):
        words = np.frombuffer(arr.buffers()[1], "<u8", count=n, offset=arr.offset * 8)
    else:
        _, off_buf, data_buf = arr.buffers()
        offsets = np.frombuffer(off_buf, np.int32, count=n + 1, offset=arr.offset * 4)
        wrong = present & (np.diff(offsets) != 8)
        bad |= wrong
        present = present & ~wrong
        data = np.frombuffer(data_buf, np.uint8)
        words = np.zeros(n, dtype=np.uint64)
        starts = offsets[:-1][present]
        words[present] = data[starts[:, None] + np.arange(8)].view("<u8").ravel()
    tokens, nonhex = hex8_words(words)
    nonhex &= present
    bad |= nonhex
    return tokens, present & ~nonhex


class _Scratch:
    """Per-block arrays of the feature step, reused block after block (a pool of them is
    shared by the workers): fresh multi-MB arrays per block were page-faulted in every time,
    as freed memory went back to the OS (~150 k faults, 0.5 s of system time per 1 M rows)."""

    def __init__(self, rows: int):
        self.rows = rows
        self.present = np.empty((rows, N_FIELDS), dtype=bool)
        self.idx = np.empty((rows, N_FIELDS), dtype=np.int32)
        self.val = np.empty((rows, N_FIELDS), dtype=np.float32)
        self.idx[:, :N_INT] = np.arange(N_INT, dtype=np.int32)  # never overwritten
        self.val[:, N_INT:] = 1
        self.indptr = np.empty(rows + 1, dtype=np.int64)
        self.indices = np.empty(rows * N_FIELDS, dtype=np.int32)
        self.values = np.empty(rows * N_FIELDS, dtype=np.float32)

    @classmethod
    def take(cls, pool: queue.SimpleQueue, rows: int) -> _Scratch:
        """One from ``pool`` if there is one big enough, else a new one (with some room)."""
        try:
            scratch = pool.get_nowait()
        except queue.Empty:
            scratch = None
        if scratch is None or scratch.rows < rows:
            scratch = cls(rows + rows // 4)
        return scratch


_COMPACT_ROWS = 256  # rows compacted per numpy call: the index temporary stays ~80 kB


def _features(batch: pa.RecordBatch, labelled: bool, hash_bits: int, scratch: _Scratch):
    """CSR arrays and labels of a batch's good rows (views into ``scratch``), and the number of
    bad rows dropped.

    Column by column (each ~100 kB, so the temporaries stay in cache) into (n, 39) index,
    value and presence arrays; then a compaction of the present entries in row order.
    """
    n = batch.num_rows
    bad = np.zeros(n, dtype=bool)
    cols = batch.columns
    labels = None
    if labelled:
        labels = _label_column(cols[0], bad)
        cols = cols[1:]
    present, idx, val = scratch.present[:n], scratch.idx[:n], scratch.val[:n]
    for j in range(N_INT):
        ints, present[:, j] = _int_column(cols[j], bad)
        val[:, j] = int_values(ints)
    slots = np.uint64((1 << hash_bits) - N_INT)
    for c in range(N_CAT):
        tokens, present[:, N_INT + c] = _cat_column(cols[N_INT + c], bad)
        # criteo_hash.cat_index, in place and with the division by a constant (numpy divides
        # by a scalar with a multiply and shift; its % does a hardware division per element)
        tokens |= np.uint64(c + 1) << np.uint64(32)
        h = splitmix64(tokens)
        np.subtract(h, np.floor_divide(h, slots) * slots, out=h)
        np.add(h, np.uint64(N_INT), out=idx[:, N_INT + c], casting="unsafe")
    n_bad = int(np.count_nonzero(bad))
    if n_bad:
        keep = ~bad
        present, idx, val = present[keep], idx[keep], val[keep]
        labels = None if labels is None else labels[keep]
    m = len(present)
    indptr = scratch.indptr[: m + 1]
    indptr[0] = 0
    np.cumsum(np.count_nonzero(present, axis=1), out=indptr[1:])
    indices, values = scratch.indices[: indptr[m]], scratch.values[: indptr[m]]
    for a in range(0, m, _COMPACT_ROWS):
        b = min(a + _COMPACT_ROWS, m)
        lo, hi = indptr[a], indptr[b]
        pos = np.flatnonzero(present[a:b])
        np.take(idx[a:b].ravel(), pos, out=indices[lo:hi])
        np.take(val[a:b].ravel(), pos, out=values[lo:hi])
    return (indptr, indices, values, labels), n_bad


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


def _read_full(stream, view: memoryview) -> int:
    """Fill ``view`` from ``stream`` (short only at the end); the number of bytes read."""
    got = 0
    while got < len(view):
        n = stream.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def _line_blocks(stream, size: int, free: queue.SimpleQueue, path: str = "input"):
    """Blocks of about ``size`` bytes of whole lines (the last line may lack its newline).

    Yields ``(text, holder)``: ``text`` a pyarrow buffer over ``holder``, a bytearray taken from
    ``free`` (or new) that the consumer puts back there once it has parsed the text; reused
    buffers are not page-faulted in again for every block.
    """
    rest = b""
    while True:
        need = len(rest) + size
        try:
            holder = free.get_nowait()
        except queue.Empty:
            holder = None
        if holder is None or len(holder) < need:
            holder = bytearray(max(need, size + (1 << 16)))
        view = memoryview(holder)
        view[: len(rest)] = rest
        try:
            end = len(rest) + _read_full(stream, view[len(rest) : need])
        except (OSError, EOFError) as e:  # e.g. a truncated .gz: "Truncated compressed stream"
            raise read_error(path, e) from None
        if end == len(rest):  # end of input
            free.put(holder)
            break
        cut = holder.rfind(b"\n", 0, end) + 1
        if cut == 0:  # no line end yet: a line longer than size
            rest = bytes(view[:end])
            free.put(holder)
            continue
        rest = bytes(view[cut:end])
        yield pa.py_buffer(view[:cut]), holder
    if rest:
        yield pa.py_buffer(rest), None


class _TypedFailed(Exception):
    """The typed CSV reader rejected a field and bad rows may be skipped: use strings."""


class _Job(NamedTuple):
    path: str
    labelled: bool
    hash_bits: int
    row_group_rows: int
    skip_bad_rows: int
    block_bytes: int
    provenance: dict

    def csv_options(self, typed: bool, counter: _RowCounter):
        """Reader options. Typed: label as 1 byte, integers as int64 and tokens as 8 bytes,
        converted by the CSV reader in C++; else every field as a string (checked in numpy)."""
        names = (["label"] if self.labelled else []) + [f"I{j + 1}" for j in range(N_INT)]
        names += [f"C{c + 1}" for c in range(N_CAT)]
        if typed:
            types = dict.fromkeys(names[: -N_CAT - N_INT], pa.binary(1))
            types |= dict.fromkeys(names[-N_CAT - N_INT : -N_CAT], pa.int64())
            types |= dict.fromkeys(names[-N_CAT:], pa.binary(8))
        else:
            types = dict.fromkeys(names, pa.string())
        return (
            pacsv.ReadOptions(column_names=names, block_size=1 << 30, use_threads=False),
            pacsv.ParseOptions(
                delimiter="\t",
                quote_char=False,
                ignore_empty_lines=False,
                invalid_row_handler=counter,
            ),
            pacsv.ConvertOptions(
                column_types=types,
                strings_can_be_null=True,
                null_values=[""],
                check_utf8=False,
            ),
        )

    def run(self, tmp: str, typed: bool) -> tuple[ChunkWriter, int]:
        """One pass over the input into ``tmp``: the closed writer and the bad rows skipped."""
        path, labelled = self.path, self.labelled
        counter = _RowCounter(self.skip_bad_rows)
        writer = ChunkWriter(
            tmp,
            n_features=1 << self.hash_bits,
            has_labels=labelled,
            row_group_rows=self.row_group_rows,
            provenance=self.provenance,
        )
        options = self.csv_options(typed, counter)
        n_bad = 0

        texts, scratches = queue.SimpleQueue(), queue.SimpleQueue()

        def block(text: pa.Buffer, holder) -> list:
            """Parse a block of whole lines and make its features (on a worker thread)."""
            table = pacsv.read_csv(pa.BufferReader(text), *options)
            if holder is not None:
                texts.put(holder)  # the table holds copies: the text buffer is free again
            out = []
            for batch in table.to_batches():
                scratch = _Scratch.take(scratches, batch.num_rows)
                out.append((_features(batch, labelled, self.hash_bits, scratch), scratch))
            return out

        def append(future) -> None:
            nonlocal n_bad
            for (arrays, bad), scratch in future.result():
                n_bad += bad
                if n_bad + counter.n > self.skip_bad_rows:
                    raise _fail(path, labelled, "a field cannot be parsed")
                writer.append(*arrays)  # copies
                scratches.put(scratch)

        try:
            with arrow_stream(path) as stream, ThreadPoolExecutor(max_workers=2) as pool:
                # Blocks of whole lines are parsed and turned into features by two workers at
                # once (pyarrow and numpy release the GIL), taken here in order and copied
                # into the writer's row-group buffer; the writer encodes full row groups on its
                # own thread. Parsing is the largest stage: split over two threads it no
                # longer holds up the others.
                pending = deque()
                try:
                    for text, holder in _line_blocks(stream, self.block_bytes, texts, path):
                        pending.append(pool.submit(block, text, holder))
                        while pending and (len(pending) > 3 or pending[0].done()):
                            append(pending.popleft())
                    while pending:
                        append(pending.popleft())
                finally:
                    for future in pending:
                        future.cancel()
            if n_bad + counter.n > self.skip_bad_rows:
                raise _fail(path, labelled, "a row has the wrong number of fields")
            writer.close()
        except pa.ArrowInvalid as e:
            writer.abort()
            if typed and self.skip_bad_rows > 0 and counter.n <= self.skip_bad_rows:
                raise _TypedFailed() from None
            raise _fail(path, labelled, str(e).splitlines()[0]) from None
        except BaseException:
            writer.abort()
            raise
        return writer, n_bad + counter.n


NAMES_PER_FIELD = 256  # tokens recorded per categorical field (see ``head_names``)
_NAMES_BYTES = 1 << 22


def head_names(path, labelled: bool, hash_bits: int) -> dict:
    """The ``names`` metadata of a conversion: up to ``NAMES_PER_FIELD`` distinct tokens of
    each categorical field ``Cc`` as ``"Cc=token"`` by feature index, taken from the file's
    first 4 MB (frequent tokens show up early; the hot conversion path is left alone), and
    the indices where recorded keys collide. The integer fields are ``I1..I13`` at 0..12."""
    names: dict[int, str] = {}
    collisions: set[int] = set()
    text = head(path, _NAMES_BYTES)
    text = text[: text.rfind(b"\n") + 1] if len(text) == _NAMES_BYTES else text
    cols = (["label"] if labelled else []) + [f"I{j + 1}" for j in range(N_INT)]
    cols += [f"C{c + 1}" for c in range(N_CAT)]
    try:
        table = pacsv.read_csv(
            pa.BufferReader(text),
            read_options=pacsv.ReadOptions(column_names=cols, use_threads=False),
            parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False,
                                             invalid_row_handler=lambda row: "skip"),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(cols, pa.string()), strings_can_be_null=True,
                include_columns=cols[-N_CAT:], check_utf8=False,
            ),
        )  # fmt: skip
    except (pa.ArrowInvalid, OSError, EOFError):
        table = None  # the conversion itself reports what is wrong with the file
    for c in range(N_CAT if table is not None else 0):
        seen = [t for t in pc.unique(table.column(c)).to_pylist() if t is not None]
        tokens = [t for t in seen if _HEX_RE.fullmatch(t.encode())][:NAMES_PER_FIELD]
        if not tokens:
            continue
        idx = cat_index(c, np.array([int(t, 16) for t in tokens], dtype=np.uint64), hash_bits)
        for i, t in zip(idx.tolist(), tokens, strict=True):
            key = f"C{c + 1}={t}"
            if names.setdefault(i, key) != key:
                collisions.add(i)
    return {
        "per_field": NAMES_PER_FIELD,
        "keys": {str(i): k for i, k in sorted(names.items())},
        "collisions": sorted(collisions),
    }


def convert_criteo(
    input,
    output,
    *,
    hash_bits: int = 20,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    force: bool = False,
    skip_bad_rows: int = 0,
    block_bytes: int = 1 << 21,
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
        Bytes of whole lines parsed at a time by each of two workers. Memory is about 35 times
        this (at most six blocks in flight, as text and as feature arrays) plus two row groups.
        2 MB: larger blocks were no faster and page-faulted more.

    Returns
    -------
    ConvertReport
    """
    path = os.fspath(input)
    hash_bits = check_hash_bits(hash_bits)
    out = check_output(output, [path], force=force)
    labelled = detect_labelled(path)
    provenance = {
        "source": os.path.basename(path),
        "format": "criteo",
        "hash_bits": hash_bits,
        "transform": criteo_transform(hash_bits),
        "names": head_names(path, labelled, hash_bits),
    }
    job = _Job(path, labelled, hash_bits, row_group_rows, skip_bad_rows, block_bytes, provenance)
    with atomic_output(out) as tmp:
        try:
            writer, n_bad = job.run(tmp, typed=True)
        except _TypedFailed:
            # A field the typed reader rejects (e.g. a 3-digit token, a non-integer in an
            # integer column) stops that reader; with rows to skip, start again reading
            # strings, which finds and drops such rows one by one.
            writer, n_bad = job.run(tmp, typed=False)
        if writer.n_rows == 0:
            raise DataError(f"{path}: holds no rows; the output would be an empty dataset.")
    bad_lines = find_bad_lines(path, labelled, min(n_bad, 20)) if n_bad else []
    return ConvertReport(
        out, writer.n_rows, sum(writer.row_group_nnz), len(writer.row_group_nnz), n_bad, bad_lines
    )
