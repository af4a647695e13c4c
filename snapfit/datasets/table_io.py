"""Reading a table of named columns (Parquet or CSV) in bounded batches, naming rows for errors.

Only the columns a conversion needs are read: Parquet in record batches of ``rows`` rows, file by
file; CSV through pyarrow's streaming reader, block by block (plain or gzip). Each batch comes
with a :class:`Place` that turns a row of the batch into ``file, row N`` (Parquet, from 0, as
pandas counts) or ``file, line N`` (CSV, as an editor counts), so a bad value is reported where
the user can find it.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from snapfit.data.reader import _open, resolve_files
from snapfit.datasets.textio import arrow_stream, head, open_binary, read_error
from snapfit.errors import DataError

CSV_BLOCK_BYTES = 1 << 20


def missing_columns(file: str, missing: list[str], names) -> DataError:
    """The error for named columns a table lacks: it lists the columns there are."""
    which = ", ".join(repr(n) for n in missing)
    return DataError(
        f"{file}: has no column{'s' if len(missing) > 1 else ''} named {which}; its columns "
        f"are: {', '.join(names) or 'none'}."
    )


class Place:
    """Names a row of the input in messages: ``file, line N`` (CSV) or ``file, row N``."""

    def __init__(self, file: str, line_of=None, first_row: int = 0):
        self.file, self._line_of, self._first = file, line_of, first_row

    def __call__(self, i: int) -> str:
        r = self._first + i
        return f"{self.file}, line {self._line_of(r)}" if self._line_of else f"{self.file}, row {r}"


class ParquetTable:
    """A Parquet file, directory or glob, read in record batches of the needed columns."""

    def __init__(self, source):
        self.files = resolve_files(source)
        if not self.files:
            raise DataError(f"{source}: matches no files; check the path or glob.")
        schema = _open(self.files[0]).schema_arrow
        self.types = {f.name: f.type for f in schema}

    def batches(self, columns: list[str], rows: int):
        for file in self.files:
            pf = _open(file)
            names = pf.schema_arrow.names
            missing = [c for c in columns if c not in names]
            if missing:
                raise missing_columns(file, missing, names)
            first = 0
            try:
                for batch in pf.iter_batches(batch_size=rows, columns=columns, use_threads=False):
                    yield batch, Place(file, first_row=first)
                    first += batch.num_rows
            except (pa.ArrowInvalid, OSError) as e:
                raise DataError(
                    f"{file}: cannot be read ({str(e).splitlines()[0]}); the file is damaged."
                ) from None


class CsvTable:
    """A CSV file (plain or gzip) with a header line, streamed in blocks by pyarrow.

    Every needed column is read as text; numbers are parsed here, so a bad value is reported
    with its line. Column types (for the default feature roles) are pyarrow's inference on the
    first block. Blank lines are skipped.
    """

    def __init__(self, path, delimiter: str | None = None, block_bytes: int | None = None):
        self.path = os.fspath(path)
        self.files = [self.path]
        if delimiter is None:
            first = head(self.path).split(b"\n", 1)[0]
            delimiter = "\t" if b"\t" in first and b"," not in first else ","
        self.delimiter, self.block_bytes = delimiter, block_bytes or CSV_BLOCK_BYTES
        self._bad = None
        with self._reader(pacsv.ConvertOptions()) as reader:
            self.types = {f.name: f.type for f in reader.schema}
        # Text inferred as boolean is lower-cased, so True/TRUE/true are one value, as they are
        # in a boolean Parquet column.
        self._booleans = {n for n, t in self.types.items() if pa.types.is_boolean(t)}

    def _invalid(self, row) -> str:
        if not row.text.strip():  # spaces only (an empty line is skipped by the reader)
            return "skip"
        self._bad = row
        return "error"

    def _error(self, e: BaseException) -> DataError:
        bad = self._bad
        if bad is not None:
            return DataError(
                f"{self.path}, line {bad.number}: has {bad.actual_columns} fields, the header "
                f"{bad.expected_columns} ({bad.text[:60]!r}); fix the line."
            )
        if isinstance(e, pa.ArrowInvalid):
            msg = str(e).splitlines()[0]
            if "Empty CSV file" in msg:
                return DataError(
                    f"{self.path}: is empty; a CSV table needs a header line and rows."
                )
            return DataError(f"{self.path}: {msg}; check that it is a CSV file with a header line.")
        return read_error(self.path, e)

    @contextmanager
    def _reader(self, convert: pacsv.ConvertOptions):
        """An open streaming reader; read errors inside the block become one-line DataErrors."""
        self._bad = None
        try:
            with arrow_stream(self.path) as stream:
                yield pacsv.open_csv(
                    stream,
                    read_options=pacsv.ReadOptions(use_threads=False, block_size=self.block_bytes),
                    parse_options=pacsv.ParseOptions(
                        delimiter=self.delimiter,
                        invalid_row_handler=self._invalid,
                    ),
                    convert_options=convert,
                )
        except (pa.ArrowInvalid, OSError, EOFError) as e:
            raise self._error(e) from None

    def _line(self, row: int) -> int:
        """Line number of data row ``row`` (from 0), found by reading the lines up to it: the
        reader skips blank lines without telling where. Only called for an error message."""
        count = -2  # the header is row -1
        try:
            with open_binary(self.path) as f:
                for number, line in enumerate(f, 1):
                    if line.strip():
                        count += 1
                        if count == row:
                            return number
        except (OSError, EOFError):
            pass
        return row + 2

    def batches(self, columns: list[str], rows: int):
        convert = pacsv.ConvertOptions(
            column_types=dict.fromkeys(columns, pa.string()),
            include_columns=columns,
            strings_can_be_null=True,
        )
        first = 0
        with self._reader(convert) as reader:
            for batch in reader:
                if self._booleans.intersection(columns):
                    batch = pa.RecordBatch.from_arrays(
                        [
                            pc.utf8_lower(batch.column(n))
                            if n in self._booleans
                            else batch.column(n)
                            for n in batch.schema.names
                        ],
                        names=batch.schema.names,
                    )
                yield batch, Place(self.path, self._line, first)
                first += batch.num_rows


def is_parquet(source) -> bool:
    """True for a directory, glob or list (Parquet datasets) or a file starting with PAR1."""
    if isinstance(source, (list, tuple)):
        return True
    path = os.fspath(source)
    if os.path.isdir(path) or not os.path.exists(path):
        return True  # a directory or a glob; a missing path is reported by the Parquet resolver
    with open(path, "rb") as f:
        return f.read(4) == b"PAR1"


def open_table(source, delimiter: str | None = None):
    """A :class:`ParquetTable` or a :class:`CsvTable` (a file not starting with PAR1)."""
    return ParquetTable(source) if is_parquet(source) else CsvTable(source, delimiter)
