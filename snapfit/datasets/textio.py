"""Opening text inputs (plain or gzip, detected from the first bytes, not the file name), from
local paths or URLs (``snapfit.data.fs``)."""

from __future__ import annotations

import gzip
import os

import pyarrow as pa

from snapfit.data import fs
from snapfit.errors import DataError

GZIP_MAGIC = b"\x1f\x8b"


def _raw(path):
    if fs.is_url(path):
        return fs.open_input(path, stream=True)
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file; check the input path.")
    return open(path, "rb")


def is_gzip(path) -> bool:
    with _raw(path) as f:
        return f.read(2) == GZIP_MAGIC


def open_binary(path):
    """A binary file object over ``path``, decompressing gzip."""
    if fs.is_url(path):
        return arrow_stream(path)
    return gzip.open(path, "rb") if is_gzip(path) else _raw(path)


def arrow_stream(path) -> pa.NativeFile:
    """A pyarrow input stream over ``path``, decompressing gzip."""
    compression = "gzip" if is_gzip(path) else None
    if fs.is_url(path):
        return fs.open_input(path, stream=True, compression=compression)
    return pa.input_stream(os.fspath(path), compression=compression)


def head(path, n_bytes: int = 1 << 16) -> bytes:
    """The first ``n_bytes`` of the (decompressed) content."""
    try:
        with open_binary(path) as f:
            return f.read(n_bytes)
    except (OSError, EOFError) as e:
        raise read_error(path, e) from None


def read_error(path, e: BaseException) -> DataError:
    """The one-line error for a text input that fails mid-read (e.g. a truncated .gz)."""
    return DataError(f"{path}: cannot be read ({e}); the file is damaged or truncated.")
