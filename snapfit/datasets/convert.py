"""One entry point for converters: pick the format (from the content when not given) and run."""

from __future__ import annotations

import os

from snapfit.datasets.criteo import ConvertReport, convert_criteo
from snapfit.datasets.criteo_hash import N_FIELDS
from snapfit.datasets.svmlight import convert_svmlight
from snapfit.datasets.textio import head
from snapfit.errors import DataError

FORMATS = ("criteo", "svmlight")


def detect_format(path) -> str:
    """ "criteo" for 39/40 tab-separated fields, "svmlight" for ``label idx:val ...`` lines."""
    path = os.fspath(path)
    data = head(path)
    if data[:4] == b"PAR1":
        raise DataError(f"{path}: is already Parquet; read it with snapfit.data.Dataset.")
    for line in data.split(b"\n")[:-1] or [data]:
        if line.count(b"\t") + 1 in (N_FIELDS, N_FIELDS + 1):
            return "criteo"
        tokens = line.split(b"#", 1)[0].split()
        if not tokens:
            continue
        if all(b":" in t for t in tokens[1:]) and b":" not in tokens[0]:
            return "svmlight"
        break
    raise DataError(
        f"{path}: cannot tell its format from the first lines; pass --format criteo|svmlight."
    )


def convert(
    input,
    output,
    *,
    format: str | None = None,
    hash_bits: int = 20,
    row_group_rows: int | None = None,
    force: bool = False,
    skip_bad_rows: int = 0,
    zero_based: bool | str = "auto",
) -> ConvertReport:
    """Convert a Criteo TSV or svmlight file to snapfit Parquet (see the per-format functions).

    ``hash_bits`` and ``skip_bad_rows`` apply to Criteo, ``zero_based`` to svmlight.
    """
    fmt = format or detect_format(input)
    extra = {} if row_group_rows is None else {"row_group_rows": row_group_rows}
    if fmt == "criteo":
        return convert_criteo(
            input, output, hash_bits=hash_bits, force=force, skip_bad_rows=skip_bad_rows, **extra
        )
    if fmt == "svmlight":
        return convert_svmlight(input, output, zero_based=zero_based, force=force, **extra)
    raise ValueError(f"format is {fmt!r}; choose one of {', '.join(FORMATS)}.")
