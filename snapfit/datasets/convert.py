"""One entry point for converters: pick the format (from the content when not given) and run."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from snapfit.data.reader import Dataset, _open, resolve_files
from snapfit.data.schema import DEFAULT_ROW_GROUP_ROWS, INDICES, WEIGHT
from snapfit.data.writer import ChunkWriter, atomic_output, check_output
from snapfit.datasets.criteo import ConvertReport, convert_criteo
from snapfit.datasets.criteo_hash import N_FIELDS
from snapfit.datasets.svmlight import convert_svmlight
from snapfit.datasets.tabular import convert_table
from snapfit.datasets.textio import head
from snapfit.errors import DataError

FORMATS = ("criteo", "svmlight", "parquet", "table")


def _is_number(token: bytes) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def detect_format(path) -> str:
    """ "criteo" for 39/40 tab-separated fields, "svmlight" for ``label idx:val ...`` lines."""
    path = os.fspath(path)
    data = head(path)
    if data[:4] == b"PAR1" or path.endswith(".parquet"):
        return "parquet"  # a damaged .parquet file is reported by the Parquet reader
    for line in data.split(b"\n")[:-1] or [data]:
        if line.count(b"\t") + 1 in (N_FIELDS, N_FIELDS + 1):
            return "criteo"
        tokens = line.split(b"#", 1)[0].split()
        if not tokens:
            continue
        if all(b":" in t for t in tokens[1:]) and _is_number(tokens[0]):
            return "svmlight"
        break
    raise DataError(
        f"{path}: format not recognized from the first lines; "
        "pass --format criteo|svmlight|parquet, or --format table --label NAME for a CSV table "
        "of named columns."
    )


def convert_parquet(
    input, output, *, row_group_rows: int = DEFAULT_ROW_GROUP_ROWS, force: bool = False
) -> ConvertReport:
    """Re-write a Parquet dataset (file, directory or glob) as one checked snapfit file.

    Every chunk is validated on the way (the reader's checks), so this is also how to vet a
    file from another writer, or to change its row-group size. Labels are written as int8 ±1,
    or as float32 when the files record real targets (``snapfit.target``).
    """
    files = resolve_files(input)
    if files and INDICES not in (names := _open(files[0]).schema_arrow.names):
        raise DataError(
            f"{files[0]}: has no 'indices' column (columns: {', '.join(names) or 'none'}); for "
            "a table of named columns, convert with --format table --label NAME (convert_table)."
        )
    ds = Dataset(input, require_labels=False, targets="auto")
    real = ds.has_labels and ds.targets == "real"
    out = check_output(output, ds.files, force=force)
    has_values = any(ds.has_values_in(f) for f in ds.files)
    has_weight = any(WEIGHT in ds._columns[f] for f in ds.files)
    provenance = {k: v for k, v in ds.metadata.items() if k not in ("row_group_nnz",)}
    provenance.pop("n_features", None)
    provenance.pop("format_version", None)
    provenance.setdefault("source", os.path.basename(os.fspath(input)))
    with atomic_output(out) as tmp:
        writer = ChunkWriter(
            tmp,
            n_features=ds.n_features,
            has_labels=ds.has_labels,
            has_values=has_values,
            has_weight=has_weight,
            label_type=pa.float32() if real else None,
            row_group_rows=row_group_rows,
            provenance=provenance,
        )
        with writer:  # closed at the end, aborted on an error
            for chunk in ds.iter_chunks():
                values = chunk.values
                if has_values and values is None:
                    values = np.ones(chunk.nnz, np.float32)
                weight = chunk.weight
                if has_weight and weight is None:
                    weight = np.ones(chunk.n_rows, np.float32)
                labels = chunk.y if real else chunk.y.astype(np.int8) if ds.has_labels else None
                writer.append(chunk.indptr, chunk.indices, values, labels, weight)
    nnz = sum(writer.row_group_nnz)
    return ConvertReport(out, writer.n_rows, nnz, len(writer.row_group_nnz), 0, [])


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
    n_features: int | None = None,
    target: str | None = None,
    **table,
) -> ConvertReport:
    """Convert Criteo TSV, svmlight, Parquet or a table of named columns to snapfit Parquet (see
    the per-format functions).

    ``hash_bits`` applies to Criteo and tables, ``skip_bad_rows`` to Criteo, ``zero_based`` and
    ``n_features`` (the width of the training data, for a test file whose largest index is
    smaller) to svmlight; ``table`` holds :func:`convert_table`'s options (``label`` is
    required) and needs ``format="table"``: a table is never detected, its label column must be
    named. ``target``: for svmlight "auto" (default), "class" or "real" (``convert_svmlight``);
    for a table the numeric target column, in place of ``label`` (``convert_table``).
    """
    fmt = format or detect_format(input)
    if target is not None and fmt not in ("svmlight", "table"):
        raise ValueError(f"target applies to formats 'svmlight' and 'table' only, not {fmt!r}.")
    extra = {} if row_group_rows is None else {"row_group_rows": row_group_rows}
    if n_features is not None and fmt != "svmlight":
        raise ValueError(f"n_features applies to format 'svmlight' only, not {fmt!r}.")
    if table and fmt != "table":
        raise ValueError(f"{', '.join(table)} apply to format 'table' only, not {fmt!r}.")
    if fmt == "table":
        if "label" not in table and target is None:
            raise ValueError("format 'table' needs label= (None for a table without labels).")
        return convert_table(input, output, hash_bits=hash_bits, force=force, target=target,
                             **table, **extra)  # fmt: skip
    if fmt == "criteo":
        return convert_criteo(
            input, output, hash_bits=hash_bits, force=force, skip_bad_rows=skip_bad_rows, **extra
        )
    if fmt == "svmlight":
        return convert_svmlight(input, output, zero_based=zero_based, n_features=n_features,
                                force=force, target=target or "auto", **extra)  # fmt: skip
    if fmt == "parquet":
        return convert_parquet(input, output, force=force, **extra)
    raise ValueError(f"format is {fmt!r}; choose one of {', '.join(FORMATS)}.")
