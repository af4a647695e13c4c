"""A table of named columns (Parquet or CSV) -> snapfit Parquet, by hashing its features.

A user's own click log is a table (``site``, ``ad``, ``price``, ``clicked``), not Criteo TSV or
svmlight; this turns such a table into the format the way Vowpal Wabbit's namespaces or a
feature hasher would, with the feature map written into the file. For each row:

* a categorical column ``c`` holding ``v`` -> key ``"c=v"``, value 1 (one-hot);
* a numeric column ``x`` holding ``v`` -> key ``"x"``, value ``transform(v)``: ``log1p`` is
  ``sign(v) * log1p(|v|)`` (the default: tames the heavy tails of counts and prices, keeps the
  sign and maps 0 to 0), ``identity`` is ``v``;
* a cross ``(a, b)`` -> key ``"a=va^b=vb"``, value 1, when every column of the cross has a value
  (columns taken as text, as categorical columns are);
* a null or empty value (a NaN for a numeric column) gives no feature.

Each key's index is its :mod:`snapfit.datasets.keyhash` hash mod ``2**hash_bits``. Entries of a
row are in the order categorical, numeric, crosses (each as listed); two keys of one row hashing
to one index are both kept (duplicates add, as the format says).

Memory stays bounded: Parquet is read in record batches of a few million cells, CSV through
pyarrow's streaming reader, block by block. Each batch is hashed column by column with numpy,
over the column's distinct values (Arrow's dictionary encoding), and appended to the writer.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from snapfit.data.schema import DEFAULT_ROW_GROUP_ROWS
from snapfit.data.writer import ChunkWriter, atomic_output, check_output
from snapfit.datasets.criteo import ConvertReport
from snapfit.datasets.criteo_hash import check_hash_bits
from snapfit.datasets.keyhash import hash_keys, key_index
from snapfit.datasets.table_io import Place, missing_columns, open_table
from snapfit.datasets.table_values import (
    category_codes,
    is_numeric,
    is_text,
    join,
    labels01,
    numbers,
)
from snapfit.errors import DataError

#: Numeric transforms: name -> formula (as recorded in the file's ``transform``).
TRANSFORMS = {"log1p": "sign(v)*log1p(|v|)", "identity": "v"}

_CELLS_PER_BATCH = 1 << 22  # Parquet rows per batch x feature columns: ~40 MB of work arrays
#: Keys recorded per categorical column and cross (``names`` in the file's metadata): enough to
#: read a model's largest weights, bounded whatever the number of distinct values.
NAMES_PER_FIELD = 256


class FeatureMap(NamedTuple):
    """Which columns become which features: what a model needs to hash new data alike."""

    label: str | None
    weight: str | None
    categorical: tuple[str, ...]
    numeric: tuple[str, ...]
    crosses: tuple[tuple[str, ...], ...]
    numeric_transform: str
    hash_bits: int

    def columns(self) -> list[str]:
        """Every column read, once each."""
        names = [self.label, self.weight, *self.categorical, *self.numeric]
        names += [c for cross in self.crosses for c in cross]
        return list(dict.fromkeys(n for n in names if n is not None))

    def provenance(self, source: str) -> dict:
        bits = self.hash_bits
        return {
            "source": source,
            "format": "table",
            "hash_bits": bits,
            "transform": (
                f"table: key 'c=value' of a categorical column and 'a=va^b=vb' of a cross -> "
                f"value 1; key 'x' of a numeric column -> value "
                f"{TRANSFORMS[self.numeric_transform]}; index keyhash(key) mod 2^{bits}"
            ),
            "numeric_transform": self.numeric_transform,
            "label": self.label,
            "weight": self.weight,
            "categorical": list(self.categorical),
            "numeric": list(self.numeric),
            "crosses": [list(c) for c in self.crosses],
        }


def _default_role(t: pa.DataType) -> str | None:
    """'categorical', 'numeric' or None (not used) for a column of type ``t``."""
    if is_numeric(t):
        return "numeric"
    if is_text(t) or pa.types.is_boolean(t) or pa.types.is_dictionary(t) or pa.types.is_null(t):
        return "categorical"
    return None


def _names(value, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = (value,) if isinstance(value, str) else tuple(value)
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names a column twice: {', '.join(names)}.")
    return names


def check_options(
    *,
    label=None,
    weight=None,
    categorical=None,
    numeric=None,
    crosses=(),
    numeric_transform="log1p",
) -> tuple:
    """The column options as tuples (``categorical``/``numeric`` None when not given); raises
    ValueError for options that cannot go together, before any data is read."""
    if numeric_transform not in TRANSFORMS:
        raise ValueError(
            f"numeric_transform is {numeric_transform!r}; choose one of {', '.join(TRANSFORMS)}."
        )
    categorical, numeric = _names(categorical, "categorical"), _names(numeric, "numeric")
    crosses = tuple(_names(c, "a cross") for c in crosses)
    if any(len(c) < 2 for c in crosses):
        raise ValueError("a cross needs two or more columns, e.g. site,ad.")
    if label is not None and label == weight:
        raise ValueError(f"column '{label}' cannot be both the label and the weight.")
    for group in (categorical or (), numeric or (), *crosses):
        for name in group:
            if name in (label, weight):
                role = "label" if name == label else "weight"
                raise ValueError(f"column '{name}' is the {role}; it cannot also be a feature.")
    return categorical, numeric, crosses


def feature_map(
    source: str,
    types: dict[str, pa.DataType],
    *,
    label: str | None,
    weight: str | None = None,
    categorical=None,
    numeric=None,
    crosses=(),
    numeric_transform: str = "log1p",
    hash_bits: int = 20,
) -> FeatureMap:
    """The feature map of a table whose columns have ``types`` (name -> Arrow type, in order).

    With neither ``categorical`` nor ``numeric`` given, every other column is used: text,
    boolean and dictionary columns as categorical, numbers as numeric (dates and nested columns
    are left out). Naming one list only leaves the other empty.
    """
    hash_bits = check_hash_bits(hash_bits)
    categorical, numeric, crosses = check_options(
        label=label,
        weight=weight,
        categorical=categorical,
        numeric=numeric,
        crosses=crosses,
        numeric_transform=numeric_transform,
    )
    named = [n for n in (label, weight) if n is not None]
    named += [n for g in (categorical or (), numeric or (), *crosses) for n in g]
    missing = [n for n in dict.fromkeys(named) if n not in types]
    if missing:
        raise missing_columns(source, missing, types)
    if categorical is None and numeric is None:
        roles = {n: _default_role(t) for n, t in types.items() if n not in (label, weight)}
        categorical = tuple(n for n, r in roles.items() if r == "categorical")
        numeric = tuple(n for n, r in roles.items() if r == "numeric")
    categorical, numeric = categorical or (), numeric or ()
    if not (categorical or numeric or crosses):
        raise DataError(
            f"{source}: no feature columns (columns: {', '.join(types) or 'none'}); name them "
            "with --categorical / --numeric."
        )
    return FeatureMap(label, weight, categorical, numeric, crosses, numeric_transform, hash_bits)


class _Hasher:
    """Turns record batches into CSR arrays under one feature map; ``real``: the label column
    is a numeric regression target (float32), not 0/1 labels."""

    def __init__(self, fmap: FeatureMap, real: bool = False):
        self.fmap = fmap
        self.real = real
        self.mask = np.uint64((1 << fmap.hash_bits) - 1)
        self.slots = [key_index(x, fmap.hash_bits) for x in fmap.numeric]
        self.n_fields = len(fmap.categorical) + len(fmap.numeric) + len(fmap.crosses)
        self.seen: dict = {}
        # index -> key of the first NAMES_PER_FIELD distinct keys of each field; indices two
        # recorded keys share (a hash collision: the weight is theirs together)
        self.names: dict[int, str] = {int(i): x for i, x in zip(self.slots, fmap.numeric,
                                                                 strict=True)}  # fmt: skip
        self.collisions: set[int] = set()
        self._named: dict[tuple, int] = {}

    def _keys(self, names, coded) -> tuple[pa.Array, np.ndarray]:
        """Distinct keys ``a=va^b=vb...`` of a categorical column or a cross, and row codes."""
        keys, codes = None, None
        for name in names:
            values, c = coded(name)
            prefix = pa.scalar(name.encode() + b"=", pa.large_binary())
            prefixed = join(prefix, values, b"")
            if keys is None:
                keys, codes = prefixed, c
                continue
            both = (codes >= 0) & (c >= 0)
            pair, inv = np.unique(codes[both] * len(values) + c[both], return_inverse=True)
            keys = join(keys.take(pair // len(values)), prefixed.take(pair % len(values)), b"^")
            codes = np.full(len(c), -1, dtype=np.int64)
            codes[both] = inv
        return keys, codes

    def __call__(self, batch: pa.RecordBatch, place: Place):
        fmap, n = self.fmap, batch.num_rows
        cache: dict = {}

        def coded(name):
            if name not in cache:
                cache[name] = category_codes(batch.column(name), name, place.file)
            return cache[name]

        idx = np.zeros((n, self.n_fields), dtype=np.int32)
        present = np.zeros((n, self.n_fields), dtype=bool)
        val = np.ones((n, self.n_fields), dtype=np.float32) if fmap.numeric else None
        for j, name in enumerate(fmap.categorical):
            self._hash_into((name,), coded, idx[:, j], present[:, j], self.record)
        base = len(fmap.categorical)
        for k, (name, slot) in enumerate(zip(fmap.numeric, self.slots, strict=True)):
            x = numbers(batch.column(name), name, place, "numeric")
            self._transform_into(x, name, place, val[:, base + k], present[:, base + k])
            idx[:, base + k] = slot
        base += len(fmap.numeric)
        for k, names in enumerate(fmap.crosses):
            self._hash_into(names, coded, idx[:, base + k], present[:, base + k], self.record)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.count_nonzero(present, axis=1), out=indptr[1:])
        labels = weight = None
        if fmap.label is not None and self.real:
            labels = self._target(batch.column(fmap.label), place)
        elif fmap.label is not None:
            labels = labels01(batch.column(fmap.label), fmap.label, place, self.seen)
        if fmap.weight is not None:
            weight = self._weight(batch.column(fmap.weight), place)
        values = None if val is None else val[present]
        return indptr, idx[present], values, labels, weight

    def _hash_into(self, names, coded, idx_col, present_col, record=None) -> None:
        keys, codes = self._keys(names, coded)
        present_col[:] = codes >= 0
        if len(keys):
            h = (hash_keys(keys) & self.mask).astype(np.int32)
            idx_col[:] = h[np.maximum(codes, 0)]
            if record is not None:
                record(names, keys, h, codes)

    def record(self, field: tuple, keys: pa.Array, h: np.ndarray, codes: np.ndarray) -> None:
        """Remember up to ``NAMES_PER_FIELD`` distinct keys of ``field`` (of the rows: an
        empty value's key gives no feature) by their index."""
        room = NAMES_PER_FIELD - self._named.get(field, 0)
        if room <= 0:
            return
        used = np.unique(codes[codes >= 0])[:room]
        for key, i in zip(keys.take(used).to_pylist(), h[used].tolist(), strict=True):
            text = key.decode("utf-8", "replace")
            known = self.names.setdefault(i, text)
            if known != text:
                self.collisions.add(i)
        self._named[field] = self._named.get(field, 0) + len(used)

    def names_record(self) -> dict:
        """The ``names`` metadata: ``{index: key}`` and the indices of recorded collisions."""
        return {
            "per_field": NAMES_PER_FIELD,
            "keys": {str(i): k for i, k in sorted(self.names.items())},
            "collisions": sorted(self.collisions),
        }

    def _transform_into(self, x, name, place, val_col, present_col) -> None:
        present_col[:] = ~np.isnan(x)
        if np.isinf(x).any():
            i = int(np.flatnonzero(np.isinf(x))[0])
            raise DataError(
                f"{place(i)}: numeric column '{name}' holds {x[i]}; values must be finite "
                "(empty or NaN for a missing one)."
            )
        if self.fmap.numeric_transform == "log1p":
            x = np.sign(x) * np.log1p(np.abs(x))
        with np.errstate(over="ignore"):
            val_col[:] = np.where(present_col, x, 0.0)
        if not np.isfinite(val_col).all():
            i = int(np.flatnonzero(~np.isfinite(val_col))[0])
            raise DataError(
                f"{place(i)}: numeric column '{name}' holds {x[i]:g}, beyond float32's range; "
                "use the log1p transform or rescale the column."
            )

    def _target(self, arr: pa.Array, place: Place) -> np.ndarray:
        name = self.fmap.label
        t = numbers(arr, name, place, "target")
        with np.errstate(over="ignore"):
            out = t.astype(np.float32)
        bad = ~np.isfinite(out)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            shown = "nothing (empty)" if np.isnan(t[i]) else f"{t[i]:g}"
            raise DataError(
                f"{place(i)}: target column '{name}' holds {shown}; every row needs a finite "
                "number within float32's range, fill or drop the row."
            )
        return out

    def _weight(self, arr: pa.Array, place: Place) -> np.ndarray:
        name = self.fmap.weight
        w = numbers(arr, name, place, "weight")
        bad = ~(np.isfinite(w) & (w >= 0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            shown = "nothing (empty)" if np.isnan(w[i]) else f"{w[i]:g}"
            raise DataError(
                f"{place(i)}: weight column '{name}' holds {shown}; weights must be finite "
                "numbers >= 0."
            )
        return w.astype(np.float32)


def convert_table(
    input,
    output,
    *,
    label: str | None = None,
    target: str | None = None,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    force: bool = False,
    delimiter: str | None = None,
    **columns,
) -> ConvertReport:
    """Hash the named columns of a Parquet dataset or a CSV file into a snapfit Parquet file.

    Parameters
    ----------
    input : str, path or list
        A Parquet file, directory, glob or list; or a CSV file (plain or gzip, header line first;
        comma-separated, or tab-separated when the header has tabs and no commas).
    output : str or path
        Parquet file to write (atomically; refused if it exists unless ``force``).
    label : str or None
        Label column: 0/1, -1/+1 or booleans (or their text); written as int8 0/1. None (and no
        ``target``) writes an unlabelled file (data to score).
    target : str or None
        Instead of ``label``: a numeric target column (numbers or their text; every row needs
        one), written as the float32 ``label`` with ``snapfit.target`` "real", for a regressor
        (``snapfit.Ridge``, ``snapfit train --loss squared``).
    weight, categorical, numeric, crosses, numeric_transform, hash_bits
        ``feature_map``'s keywords (``**columns``), passed on as given:
    weight : str, optional
        Sample-weight column (numbers >= 0).
    categorical, numeric : list of str, optional
        Columns hashed as ``"c=value"`` (value 1) and as ``"x"`` (value ``transform(x)``). With
        neither given, every other column is used by its type (text, booleans: categorical;
        numbers: numeric).
    crosses : list of lists of str
        Column combinations hashed as ``"a=va^b=vb"`` (value 1).
    numeric_transform : {"log1p", "identity"}
        ``sign(v) * log1p(|v|)`` or ``v``.
    hash_bits : int
        ``n_features = 2**hash_bits``.
    row_group_rows : int
        Rows per row group.
    delimiter : str, optional
        CSV field separator (default: from the header line).

    Returns
    -------
    ConvertReport

    Raises
    ------
    DataError
        A named column missing (the message lists the columns), a label that is not 0/1, -1/+1
        or boolean, text that is not a number in a numeric or weight column, an empty input.
        Rows are named as ``file, line N`` (CSV) or ``file, row N`` (Parquet, from 0).
    """
    if label is not None and target is not None:
        raise ValueError("give label (classes) or target (real values), not both.")
    table = open_table(input, delimiter)
    src = os.fspath(input) if not isinstance(input, (list, tuple)) else os.fspath(input[0])
    fmap = feature_map(src, table.types, label=label if target is None else target, **columns)
    out = check_output(output, table.files, force=force)
    hasher = _Hasher(fmap, real=target is not None)
    rows = max(1024, min(1 << 16, _CELLS_PER_BATCH // max(hasher.n_fields, 1)))
    provenance = fmap.provenance(os.path.basename(os.path.normpath(src)))
    if target is not None:
        provenance["target"] = "real"
    n_rows = 0
    with atomic_output(out) as tmp:
        writer = ChunkWriter(
            tmp,
            n_features=1 << fmap.hash_bits,
            has_labels=fmap.label is not None,
            label_type=pa.float32() if target is not None else None,
            has_values=bool(fmap.numeric),
            has_weight=columns.get("weight") is not None,
            row_group_rows=row_group_rows,
            provenance=provenance,
        )
        with writer:  # closed at the end, aborted on an error
            for batch, place in table.batches(fmap.columns(), rows):
                if batch.num_rows:
                    writer.append(*hasher(batch, place))
                    n_rows += batch.num_rows
            if n_rows == 0:
                raise DataError(f"{src}: holds no rows; the output would be an empty dataset.")
            writer.close(more={"names": hasher.names_record()})
    nnz, groups = sum(writer.row_group_nnz), len(writer.row_group_nnz)
    return ConvertReport(out, writer.n_rows, nnz, groups, 0, [])
