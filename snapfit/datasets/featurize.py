"""Raw rows -> the features `convert` makes of them, so a model scores data it was not given.

A model records its feature map (``feature_map_``: format, hash bits, columns, transform). For
the two hashed formats that map is enough to featurize new raw rows exactly as ``convert`` did,
with the converters' own code:

* ``table`` (``convert --format table``): a CSV file, Parquet of named columns, a pandas
  DataFrame, a pyarrow Table or a list of dicts, hashed by ``tabular._Hasher`` under the
  model's columns, crosses, transform and hash bits. A CSV file is read as convert reads it
  (every field as text); in-memory rows and Parquet keep their types, as convert keeps a
  Parquet table's (so a DataFrame scores as convert would have hashed it written to Parquet).
* ``criteo`` / ``criteo-like``: a Criteo TSV file (plain or gzip, labelled or not), parsed and
  hashed by ``criteo._features``, the function ``convert`` runs on each block.

Either way the rows stream in batches of ``rows``: memory is a batch, whatever the input's
size. :class:`TableHasher` is the same hashing as a scikit-learn transformer (for a Pipeline),
fitted on a table or rebuilt from a model's map.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from snapfit.datasets.table_io import Place, is_parquet, missing_columns, open_table
from snapfit.datasets.tabular import FeatureMap, _Hasher, feature_map
from snapfit.errors import DataError

ROWS = 1 << 16  # rows per batch: the memory of raw scoring, whatever the input's size
CRITEO_FORMATS = ("criteo", "criteo-like")


class Batch:
    """One batch of featurized rows: CSR arrays, and the id column when one was asked for."""

    def __init__(self, indptr, indices, values, ids=None):
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.indices = np.asarray(indices, dtype=np.int32)
        self.values = values
        self.ids = ids

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    def csr(self, n_features: int) -> sp.csr_matrix:
        data = np.ones(len(self.indices), np.float32) if self.values is None else self.values
        shape = (self.n_rows, n_features)
        return sp.csr_matrix((data, self.indices, self.indptr), shape=shape, copy=True)


# -- what is raw ---------------------------------------------------------------------------
def _is_pandas(x) -> bool:
    return type(x).__module__.split(".")[0] == "pandas" and hasattr(x, "columns")


def _is_records(x) -> bool:
    return isinstance(x, list) and len(x) > 0 and all(isinstance(r, dict) for r in x)


def _parquet_without_indices(path: str) -> bool:
    from snapfit.data.reader import _open, resolve_files

    files = resolve_files(path)
    return bool(files) and "indices" not in _open(files[0]).schema_arrow.names


def is_raw(X, model_map: dict) -> bool:
    """Whether ``X`` is raw rows a model with ``model_map`` featurizes itself (see the
    module); False for snapfit Parquet, arrays, and models of other formats."""
    fmt = model_map.get("format")
    path = isinstance(X, (str, os.PathLike))
    if fmt == "table":
        if _is_pandas(X) or _is_records(X) or isinstance(X, pa.RecordBatch):
            return True
        if isinstance(X, pa.Table):
            return "indices" not in X.column_names
        if path:
            p = os.fspath(X)
            if "://" in p:
                return False
            return not is_parquet(p) or _parquet_without_indices(p)
        return False
    if fmt in CRITEO_FORMATS and path:
        p = os.fspath(X)
        return "://" not in p and os.path.isfile(p) and not is_parquet(p)
    return False


def as_arrow(X) -> pa.Table:
    """Rows in memory as an Arrow table: a pandas DataFrame, a pyarrow Table or RecordBatch, or
    a list of dicts (one per row)."""
    if isinstance(X, pa.Table):
        return X
    if isinstance(X, pa.RecordBatch):
        return pa.Table.from_batches([X])
    if _is_pandas(X):
        return pa.Table.from_pandas(X, preserve_index=False)
    if _is_records(X):
        try:
            return pa.Table.from_pylist(X)
        except (pa.ArrowTypeError, pa.ArrowInvalid) as e:
            raise DataError(
                f"input rows: {e}; give each key values of one type (None when missing)."
            ) from None
    raise TypeError(
        "raw rows must be a pandas DataFrame, a pyarrow Table or RecordBatch, a list of dicts, "
        f"or a CSV / Parquet path; got {type(X).__name__}."
    )


# -- tables ---------------------------------------------------------------------------------
def table_map(model_map: dict) -> FeatureMap:
    """The hashing of a ``table`` model's map (no label, no weight: rows to score)."""
    return FeatureMap(
        label=None,
        weight=None,
        categorical=tuple(model_map.get("categorical") or ()),
        numeric=tuple(model_map.get("numeric") or ()),
        crosses=tuple(tuple(c) for c in model_map.get("crosses") or ()),
        numeric_transform=model_map.get("numeric_transform", "log1p"),
        hash_bits=int(model_map["hash_bits"]),
    )


def _memory_batches(table: pa.Table, columns: list[str], rows: int):
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise missing_columns("input", missing, table.column_names)
    first = 0
    for batch in table.select(columns).to_batches(max_chunksize=rows):
        yield batch, Place("input", first_row=first)
        first += batch.num_rows


def table_batches(fmap: FeatureMap, X, *, rows: int = ROWS, id_column: str | None = None):
    """:class:`Batch` es of raw table rows ``X`` (a path, or rows in memory) hashed by
    ``fmap``, in order."""
    columns = fmap.columns() + ([id_column] if id_column and id_column not in fmap.columns()
                                else [])  # fmt: skip
    if isinstance(X, (str, os.PathLike)):
        batches = open_table(X).batches(columns, rows)
    else:
        batches = _memory_batches(as_arrow(X), columns, rows)
    hasher = _Hasher(fmap)
    for batch, place in batches:
        if not batch.num_rows:
            continue
        indptr, indices, values, _, _ = hasher(batch, place)
        ids = batch.column(id_column) if id_column else None
        yield Batch(indptr, indices, values, ids)


class TableHasher(TransformerMixin, BaseEstimator):
    """Named columns -> the sparse features ``convert --format table`` makes of them.

    Parameters are ``convert_table``'s: ``categorical`` and ``numeric`` columns (None: by type,
    when both are None), ``crosses``, ``numeric_transform`` and ``hash_bits``. ``fit`` settles
    the columns from a table's types; ``transform`` returns a CSR matrix of
    ``2**hash_bits`` columns, equal entry for entry to the converted Parquet of the same rows.
    ``TableHasher.from_model(model)`` is the hashing a table model was trained with.

    Examples
    --------
    >>> import pandas as pd                                       # doctest: +SKIP
    >>> rows = pd.DataFrame({"site": ["news", "shop"], "price": [1.5, 20.0]})
    >>> X = TableHasher(crosses=[], hash_bits=18).fit_transform(rows)   # doctest: +SKIP
    >>> X.shape                                                   # doctest: +SKIP
    (2, 262144)
    """

    def __init__(self, *, categorical=None, numeric=None, crosses=(), numeric_transform="log1p",
                 hash_bits=20):  # fmt: skip
        self.categorical = categorical
        self.numeric = numeric
        self.crosses = crosses
        self.numeric_transform = numeric_transform
        self.hash_bits = hash_bits

    def fit(self, X, y=None):
        table = as_arrow(X)
        self.feature_map_ = feature_map(
            "input", {f.name: f.type for f in table.schema}, label=None,
            categorical=self.categorical, numeric=self.numeric, crosses=self.crosses,
            numeric_transform=self.numeric_transform, hash_bits=self.hash_bits,
        )  # fmt: skip
        self.n_features_out_ = 1 << self.feature_map_.hash_bits
        return self

    @classmethod
    def from_model(cls, model) -> TableHasher:
        """The fitted hasher of a model trained on ``convert --format table`` data."""
        m = getattr(model, "feature_map_", None) or {}
        if m.get("format") != "table":
            raise ValueError(
                f"the model's data was not a converted table (format {m.get('format')!r}); "
                "only table models carry the columns to hash raw rows."
            )
        fmap = table_map(m)
        out = cls(categorical=list(fmap.categorical), numeric=list(fmap.numeric),
                  crosses=[list(c) for c in fmap.crosses],
                  numeric_transform=fmap.numeric_transform, hash_bits=fmap.hash_bits)  # fmt: skip
        out.feature_map_, out.n_features_out_ = fmap, 1 << fmap.hash_bits
        return out

    def transform(self, X) -> sp.csr_matrix:
        check_is_fitted(self)
        parts = [b.csr(self.n_features_out_) for b in table_batches(self.feature_map_, X)]
        if not parts:
            return sp.csr_matrix((0, self.n_features_out_), dtype=np.float32)
        return sp.vstack(parts, format="csr") if len(parts) > 1 else parts[0]


# -- Criteo TSV -----------------------------------------------------------------------------
def criteo_batches(path, hash_bits: int, *, rows: int = ROWS) -> Iterator[Batch]:
    """:class:`Batch` es of a Criteo TSV file's rows hashed as ``convert`` hashes them; a row
    ``convert`` would have dropped or refused is refused here, naming its line (its
    prediction would be missing)."""
    from snapfit.datasets.criteo import (
        N_CAT,
        N_INT,
        _features,
        _Scratch,
        detect_labelled,
        find_bad_lines,
    )
    from snapfit.datasets.textio import arrow_stream

    path = os.fspath(path)
    labelled = detect_labelled(path)
    names = (["label"] if labelled else []) + [f"I{j + 1}" for j in range(N_INT)]
    names += [f"C{c + 1}" for c in range(N_CAT)]

    def bad_row() -> DataError:
        found = find_bad_lines(path, labelled, 1)
        where = f"{path}, line {found[0][0]}: {found[0][1]}" if found else f"{path}: a bad row"
        return DataError(f"{where}; fix or drop the line to score this file.")

    def refuse(row) -> str:
        return "error"

    read = pacsv.ReadOptions(column_names=names, block_size=1 << 20, use_threads=False)
    parse = pacsv.ParseOptions(
        delimiter="\t", quote_char=False, ignore_empty_lines=False, invalid_row_handler=refuse
    )
    convert = pacsv.ConvertOptions(
        column_types=dict.fromkeys(names, pa.string()),
        strings_can_be_null=True,
        null_values=[""],
        check_utf8=False,
    )
    try:
        with arrow_stream(path) as stream:
            for block in pacsv.open_csv(stream, read, parse, convert):
                for batch in pa.Table.from_batches([block]).to_batches(max_chunksize=rows):
                    scratch = _Scratch(batch.num_rows)
                    (indptr, indices, values, _), n_bad = _features(
                        batch, labelled, hash_bits, scratch
                    )
                    if n_bad:
                        raise bad_row()
                    yield Batch(indptr.copy(), indices.copy(), values.copy())
    except pa.ArrowInvalid:
        raise bad_row() from None


def raw_batches(model_map: dict, X, *, rows: int = ROWS, id_column: str | None = None):
    """The featurized batches of raw rows ``X`` for a model with ``model_map``."""
    fmt = model_map.get("format")
    if fmt == "table":
        return table_batches(table_map(model_map), X, rows=rows, id_column=id_column)
    if id_column is not None:
        raise DataError(
            f"{os.fspath(X)}: Criteo TSV has no named columns; --id-column is for tables."
        )
    return criteo_batches(X, int(model_map["hash_bits"]), rows=rows)
