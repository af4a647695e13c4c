"""Parquet row groups -> CSR chunks, planned from file metadata and decoded without row loops.

A dataset is a file, a directory of files or a glob (or a list of those); the row groups of all
its files, in order, are its chunks. Planning (rows, nnz, n_features per chunk) reads footers
only, so a driver can split chunks between workers and devices before any data moves.
"""

from __future__ import annotations

import copy
import glob
import os
import threading
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from snapfit.data import fs
from snapfit.data import validate as v
from snapfit.data.base import ChunkedDataset
from snapfit.data.chunk import Chunk
from snapfit.data.schema import (
    INDICES,
    KEY_N_FEATURES,
    KEY_ROW_GROUP_NNZ,
    KEY_TARGET,
    LABEL,
    VALUES,
    WEIGHT,
    decode_metadata,
)
from snapfit.errors import DataError


class ChunkRef(NamedTuple):
    """Where a chunk lives and how big it is, known from metadata alone."""

    file: str
    row_group: int
    n_rows: int
    nnz: int


def resolve_files(source) -> list[str]:
    """Files of a dataset: a file, a directory (its ``*.parquet`` files, sorted), a glob or a list.

    Names starting with ``.`` or ``_`` are skipped in directories: writers' temporary files and
    ``_SUCCESS``-style markers.
    """
    if isinstance(source, (list, tuple)):
        return [f for s in source for f in resolve_files(s)]
    path = os.fspath(source)
    if fs.is_url(path):
        return fs.list_files(path)
    if os.path.isdir(path):
        return sorted(
            os.path.join(path, n)
            for n in os.listdir(path)
            if n.endswith(".parquet") and not n.startswith((".", "_"))
        )
    if os.path.exists(path):
        return [path]
    if glob.has_magic(path):
        return sorted(glob.glob(path))
    raise DataError(f"{path}: no such file or directory; check the path.")


def _list_type_ok(t: pa.DataType, value_type: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and t.value_type == value_type


def _check_schema(file: str, schema: pa.Schema, targets: str = "auto") -> None:
    names = schema.names
    if INDICES not in names:
        raise DataError(
            f"{file}: has no 'indices' column (columns: {', '.join(names) or 'none'}); "
            "it is not a snapfit file, convert the data with `snapfit convert`."
        )
    wanted = {INDICES: pa.int32(), VALUES: pa.float32()}
    for name, value_type in wanted.items():
        if name in names and not _list_type_ok(schema.field(name).type, value_type):
            raise DataError(
                f"{file}: column '{name}' has type {schema.field(name).type} but snapfit needs "
                f"list<{value_type}>; cast the column when writing or re-convert."
            )
    for name, ok in ((LABEL, "integer or float"), (WEIGHT, "float")):
        if name not in names:
            continue
        t = schema.field(name).type
        if not (pa.types.is_floating(t) or (name == LABEL and pa.types.is_integer(t))):
            if name == LABEL and targets == "real":
                raise DataError(
                    f"{file}: column 'label' has type {t} but a regressor needs numeric "
                    "targets (float32); convert them to numbers (`snapfit convert --format "
                    "table --target COLUMN`)."
                )
            raise DataError(
                f"{file}: column '{name}' has type {t} but snapfit needs {ok} numbers "
                f"(label: int8 or float32, 0/1 or -1/+1); re-convert the {name}s."
            )


def _open(file: str) -> pq.ParquetFile:
    try:
        return fs.parquet_file(file)
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(
            f"{file}: not a Parquet file or truncated ({str(e).splitlines()[0]}); "
            "re-write or re-convert it."
        ) from None


def _row_group_nnz(file: str, md: pq.FileMetaData, kv: dict) -> list[int | None]:
    """nnz per row group: our own key-value record, else the indices leaf's statistics.

    For a list column, ``num_values`` counts one level per empty or null list as well, and the
    statistics' ``null_count`` counts exactly those, so ``num_values - null_count`` is the nnz.
    """
    recorded = kv.get(KEY_ROW_GROUP_NNZ.removeprefix("snapfit."))
    if isinstance(recorded, list) and len(recorded) == md.num_row_groups:
        return [int(n) for n in recorded]
    leaf = next(i for i in range(md.num_columns) if md.schema.column(i).path.startswith(INDICES))
    out: list[int | None] = []
    for g in range(md.num_row_groups):
        col = md.row_group(g).column(leaf)
        stats = col.statistics
        ok = stats is not None and stats.has_null_count
        out.append(col.num_values - stats.null_count if ok else None)
    return out


def _stats_max_index(md: pq.FileMetaData) -> int | None:
    leaf = next(i for i in range(md.num_columns) if md.schema.column(i).path.startswith(INDICES))
    top = -1
    for g in range(md.num_row_groups):
        stats = md.row_group(g).column(leaf).statistics
        if stats is None or not stats.has_min_max:
            if md.row_group(g).num_rows:
                return None
            continue
        top = max(top, int(stats.max))
    return top


def _flat(arr: pa.Array, name: str, where: v.Where) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and the flattened child of a list array, zero-copy where Arrow allows."""
    if arr.null_count:
        row = int(np.flatnonzero(~np.asarray(arr.is_valid()))[0])
        raise DataError(f"{where(row)}: column '{name}' is null; write an empty list instead.")
    offsets = arr.offsets.to_numpy()
    child = arr.values
    if child.null_count:
        pos = int(np.flatnonzero(~np.asarray(child.is_valid()))[0])
        row = int(np.searchsorted(offsets, pos, side="right") - 1)
        raise DataError(f"{where(row)}: column '{name}' holds a null entry; fix the writer.")
    flat = child.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
    return offsets, flat


def _column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _scalar_column(table: pa.Table, name: str, where: v.Where) -> np.ndarray:
    arr = _column(table, name)
    if arr.null_count:
        row = int(np.flatnonzero(~np.asarray(arr.is_valid()))[0])
        raise DataError(f"{where(row)}: column '{name}' is null; every row needs a {name}.")
    return arr.to_numpy(zero_copy_only=False)


def decode_table(
    table: pa.Table,
    *,
    n_features: int,
    has_labels: bool,
    where: v.Where,
    validate: bool = True,
    targets: str = "class",
    classes: np.ndarray | None = None,
) -> Chunk:
    """One row group's table -> a :class:`Chunk` (offsets rebased to 0 as int64 indptr);
    ``targets="real"`` keeps the labels as float32 targets, "class" maps them to ±1, "index"
    to their index in ``classes`` (one-vs-rest over more than two classes)."""
    offsets, indices = _flat(_column(table, INDICES), INDICES, where)
    indptr = offsets.astype(np.int64)
    indptr -= indptr[0]
    values = None
    if VALUES in table.column_names:
        val_offsets, values = _flat(_column(table, VALUES), VALUES, where)
        v.check_same_lengths(offsets, val_offsets, where)
    n_rows = table.num_rows
    weight = None
    if WEIGHT in table.column_names:
        weight = _scalar_column(table, WEIGHT, where).astype(np.float32, copy=False)
    if has_labels and targets == "real":
        y = v.real_targets(_scalar_column(table, LABEL, where), where)
    elif has_labels and targets == "index":
        y = v.class_codes(_scalar_column(table, LABEL, where), where, classes)
    elif has_labels:
        y = v.labels_to_pm1(_scalar_column(table, LABEL, where), where)
    else:
        y = np.zeros(n_rows, dtype=np.float32)
    if validate:
        v.check_indices(indptr, indices, n_features, where)
        v.check_values(indptr, values, where)
        v.check_weight(weight, where)
    return Chunk(indptr, indices, values, y, weight)


def merge_counts(values, counts, labels) -> tuple[np.ndarray, np.ndarray]:
    """``(values, counts)`` of ``np.unique`` over labels seen so far, plus ``labels``."""
    if np.asarray(labels).dtype.kind not in "iuf":
        raise DataError(
            f"column 'label' has type {np.asarray(labels).dtype}; class labels must be numbers "
            "(int8, int32 or float32), re-convert the labels."
        )
    new, n = np.unique(labels, return_counts=True)
    both = np.concatenate([values, new.astype(np.float64)])
    keys, inverse = np.unique(both, return_inverse=True)
    total = np.bincount(inverse, weights=np.concatenate([counts, n]), minlength=len(keys))
    return keys, total.astype(np.int64)


def _label_kind(schema: pa.Schema, md: pq.FileMetaData, kv: dict) -> tuple[str | None, str]:
    """``(kind, why)``: "real" or "class" for the label column from the file's ``target``
    metadata, else its min/max statistics (a value other than -1, 0, 1 is a real target);
    None when unlabelled. Footer only: no data page is read."""
    if LABEL not in schema.names:
        return None, ""
    recorded = kv.get(KEY_TARGET.removeprefix("snapfit."))
    if recorded in ("real", "class"):
        return recorded, f"metadata snapfit.target = {recorded}"
    leaf = next(i for i in range(md.num_columns) if md.schema.column(i).path == LABEL)
    lo = hi = None
    for g in range(md.num_row_groups):
        stats = md.row_group(g).column(leaf).statistics
        if stats is None or not stats.has_min_max:
            continue
        lo = stats.min if lo is None else min(lo, stats.min)
        hi = stats.max if hi is None else max(hi, stats.max)
    if lo is not None and (lo not in (-1, 0, 1) or hi not in (-1, 0, 1)):
        return "real", f"label values from {lo:g} to {hi:g}"
    return "class", ""


def _check_same_conversion(first: str, first_kv: dict, file: str, kv: dict) -> None:
    """Refuse a dataset whose files were converted different ways (a model records one map:
    rows hashed another way would be learned as if they meant the same features)."""
    from snapfit import featuremap

    keys = featuremap.differences(first_kv, kv)
    if keys:
        raise DataError(
            f"{file}: converted another way than {first}: "
            f"{featuremap.name_differences(keys, kv, first_kv, os.path.basename(first))}; "
            "the files of one dataset must be converted the same way: re-convert it, or list "
            "only the files of one conversion."
        )


class Dataset(ChunkedDataset):
    """Parquet CSR dataset: chunks (= row groups) planned from metadata, read on demand.

    Parameters
    ----------
    source : str, path, or list of them
        A file, a directory of ``*.parquet`` files, a glob, or a list of these.
    n_features : int, optional
        Overrides ``snapfit.n_features`` from the files (needed for foreign files without it
        and without index statistics).
    require_labels : bool, default True
        Fail on unlabelled files. With False, unlabelled chunks carry ``y`` = zeros and
        :attr:`has_labels` is False (for prediction).
    validate : bool, default True
        Check every chunk as it is read (index range, finite values, labels, weights).
    targets : {"auto", "class", "real"}, default "auto"
        How chunks carry the ``label`` column: "class" as ±1 (0/1 or -1/+1 required), "real"
        as float32 targets (any numbers, for a regressor), "auto" as :attr:`target_kind` says.

    Attributes
    ----------
    target_kind : {"class", "real"} or None
        What the files' labels are, from their footers alone: "real" when a file's
        ``snapfit.target`` metadata says so or its label statistics hold a value other than
        -1, 0 and 1 (``target_note`` says which); None when unlabelled.

    Examples
    --------
    >>> ds = Dataset("train/")                                  # doctest: +SKIP
    >>> ds.n_rows, ds.nnz, ds.n_features, len(ds.chunks)        # doctest: +SKIP
    >>> for chunk in ds.iter_chunks(ids=[0, 2]):                # doctest: +SKIP
    ...     chunk.indptr, chunk.indices, chunk.values, chunk.y, chunk.weight

    Reading is thread-safe: each thread opens its own ``ParquetFile`` (one shared across
    threads crashed pyarrow 26.0.1).
    """

    def __init__(self, source, *, n_features=None, require_labels=True, validate=True,
                 targets="auto"):  # fmt: skip
        if targets not in ("auto", "class", "real"):
            raise ValueError(f"targets is {targets!r}; choose 'auto', 'class' or 'real'.")
        self.source = source if isinstance(source, str) else str(source)
        self.files = resolve_files(source)
        if not self.files:
            raise DataError(f"{self.source}: matches no files; check the path or glob.")
        self.validate = validate
        self._local = threading.local()
        self._plan(n_features, require_labels, targets)

    def _plan(self, n_features, require_labels, targets="auto"):
        chunks, label_files, found_nf, stats_nf, columns = [], [], {}, -1, {}
        self.target_kind, self.target_note = None, ""
        stored = []  # each row group's compressed bytes (the stream's plan reads them here)
        self.metadata: dict[str, object] = {}
        for file in self.files:
            pf = _open(file)
            schema = pf.schema_arrow
            _check_schema(file, schema, targets)
            kv = decode_metadata(pf.metadata.metadata)
            kind, why = _label_kind(schema, pf.metadata, kv)
            if kind is not None and self.target_kind != "real":
                where = f"{os.path.basename(file)}: " if len(self.files) > 1 else ""
                self.target_kind, self.target_note = kind, (where + why if why else "")
            if not self.metadata:
                self.metadata, meta_file = kv, file
            _check_same_conversion(meta_file, self.metadata, file, kv)
            if KEY_N_FEATURES.removeprefix("snapfit.") in kv:
                found_nf[file] = int(kv["n_features"])
            elif n_features is None:
                top = _stats_max_index(pf.metadata)
                if top is None:
                    raise DataError(
                        f"{file}: has no snapfit.n_features metadata and no index statistics; "
                        "pass n_features=... or re-write it with snapfit."
                    )
                stats_nf = max(stats_nf, top + 1)
            columns[file] = [c for c in (LABEL, INDICES, VALUES, WEIGHT) if c in schema.names]
            if LABEL in schema.names:
                label_files.append(file)
            nnz = _row_group_nnz(file, pf.metadata, kv)
            for g in range(pf.metadata.num_row_groups):
                rg = pf.metadata.row_group(g)
                chunks.append(ChunkRef(file, g, rg.num_rows, nnz[g]))
                sizes = (rg.column(c).total_compressed_size for c in range(rg.num_columns))
                stored.append(sum(sizes))
        self._columns = columns
        #: Compressed bytes of each row group, in ``chunks`` order, from the one footer read.
        self.stored_nbytes = tuple(stored)
        if 0 < len(label_files) < len(self.files):
            bad = next(f for f in self.files if f not in label_files)
            raise DataError(
                f"{bad}: has no 'label' column but {label_files[0]} has one; a dataset is "
                "either all labelled or all unlabelled, split the file list."
            )
        self.has_labels = bool(label_files)
        #: How chunks carry the labels: "real" (float32 targets) or "class" (±1).
        self.targets = targets if targets != "auto" else (self.target_kind or "class")
        if require_labels and not self.has_labels:
            raise DataError(
                f"{self.files[0]}: has no 'label' column (unlabelled, e.g. a Criteo test file); "
                "pass require_labels=False to read it for prediction, or convert labelled data."
            )
        if len(set(found_nf.values())) > 1 and n_features is None:
            items = list(found_nf.items())
            (f1, n1), (f2, n2) = next(
                (a, b) for a, b in zip(items, items[1:], strict=False) if a[1] != b[1]
            )
            raise DataError(
                f"{f2}: n_features is {n2} but {f1} has {n1}; files of one dataset must share "
                "one feature space, re-convert with the same hash bits."
            )
        if n_features is None:
            n_features = max([*found_nf.values(), stats_nf])
        self.n_features = int(n_features)
        self.chunks = [self._fill_nnz(c) for c in chunks]
        if not self.n_rows:
            raise DataError(f"{self.source}: the dataset holds no rows; check the file selection.")

    def _fill_nnz(self, ref: ChunkRef) -> ChunkRef:
        if ref.nnz is not None:
            return ref
        # Foreign file without statistics: count from the offsets of the indices column only.
        table = self._pf(ref.file).read_row_group(ref.row_group, columns=[INDICES])
        offsets = _column(table, INDICES).offsets.to_numpy()
        return ref._replace(nnz=int(offsets[-1] - offsets[0]))

    def subset(self, ids: Sequence[int]) -> Dataset:
        """This data set restricted to row groups ``ids`` (chunk indices, in that order): a Dask
        part's share, whose sources can read nothing else. Footers are not read again."""
        view = copy.copy(self)
        view.chunks = [self.chunks[k] for k in ids]
        view.stored_nbytes = tuple(self.stored_nbytes[k] for k in ids)
        used = {ref.file for ref in view.chunks}
        view.files = [f for f in self.files if f in used]
        view._local = threading.local()
        return view

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_local")  # open files are per thread and per process
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._local = threading.local()

    def __repr__(self):
        return (
            f"Dataset({self.source!r}: {self.n_rows} rows, {self.nnz} nnz, "
            f"{self.n_features} features, {len(self.chunks)} chunks)"
        )

    def _pf(self, file: str) -> pq.ParquetFile:
        files = getattr(self._local, "files", None)
        if files is None:
            files = self._local.files = {}
        if file not in files:
            files[file] = _open(file)
        return files[file]

    def read_chunk(self, k: int) -> Chunk:
        """Decode chunk ``k`` (one row group) into CSR arrays, checked if ``validate``."""
        ref = self.chunks[k]
        where = v.row_group_where(ref.file, ref.row_group)
        try:
            table = self._pf(ref.file).read_row_group(
                ref.row_group, columns=self._columns[ref.file], use_threads=False
            )
        except (pa.ArrowException, OSError) as e:
            raise DataError(
                f"{ref.file}, row group {ref.row_group}: cannot be read "
                f"({str(e).splitlines()[0]}); the file is corrupt, re-write it."
            ) from None
        chunk = decode_table(
            table,
            n_features=self.n_features,
            has_labels=self.has_labels,
            where=where,
            validate=self.validate,
            targets=self.targets,
            classes=self.classes,
        )
        if chunk.nnz != ref.nnz or chunk.n_rows != ref.n_rows:
            raise DataError(
                f"{ref.file}, row group {ref.row_group}: metadata promises {ref.n_rows} rows and "
                f"{ref.nnz} nnz but the data holds {chunk.n_rows} and {chunk.nnz}; re-write it."
            )
        return chunk

    def check_column(self, name: str) -> None:
        """Refuse a dataset where some file lacks column ``name`` (before any work)."""
        for file in self.files:
            names = _open(file).schema_arrow.names
            if name not in names:
                raise DataError(
                    f"{file}: has no column {name!r} (columns: {', '.join(names)}); name one of "
                    "them, or score the raw table (CSV or Parquet of named columns) instead: a "
                    "table model reads it with its other columns."
                )

    def read_column(self, k: int, name: str) -> pa.Array:
        """Column ``name`` of chunk ``k`` (its row group), as it is stored: ids to pass along
        with the chunk's scores."""
        ref = self.chunks[k]
        table = self._pf(ref.file).read_row_group(ref.row_group, columns=[name], use_threads=False)
        return table.column(0).combine_chunks()

    def has_values_in(self, file: str) -> bool:
        """Whether ``file`` stores a ``values`` column (without it every value is 1)."""
        return VALUES in self._columns[file]

    def has_weight_in(self, file: str) -> bool:
        """Whether ``file`` stores a ``weight`` column (without it every weight is 1)."""
        return WEIGHT in self._columns[file]

    def label_values(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct labels, sorted, and the rows of each, reading only the label column
        (the classes of a multiclass fit)."""
        values, counts = np.zeros(0), np.zeros(0, np.int64)
        for ref in self.chunks:
            table = self._pf(ref.file).read_row_group(
                ref.row_group, columns=[LABEL], use_threads=False
            )
            where = v.row_group_where(ref.file, ref.row_group)
            values, counts = merge_counts(values, counts, _scalar_column(table, LABEL, where))
        return values, counts

    def label_counts(self, ids: Sequence[int] | None = None) -> tuple[int, int]:
        """(negatives, positives) over chunks ``ids``, reading only the label column."""
        if not self.has_labels:
            return 0, 0
        n_pos = n = 0
        for k in range(len(self.chunks)) if ids is None else ids:
            ref = self.chunks[k]
            table = self._pf(ref.file).read_row_group(
                ref.row_group, columns=[LABEL], use_threads=False
            )
            where = v.row_group_where(ref.file, ref.row_group)
            y = v.labels_to_pm1(_scalar_column(table, LABEL, where), where)
            n_pos += int((y > 0).sum())
            n += len(y)
        return n - n_pos, n_pos

    def target_summary(self) -> dict:
        """Rows, mean, standard deviation, min and max of the targets (``label`` read as
        numbers), reading only the label column."""
        n, total, sq, lo, hi = 0, 0.0, 0.0, np.inf, -np.inf
        for ref in self.chunks:
            table = self._pf(ref.file).read_row_group(
                ref.row_group, columns=[LABEL], use_threads=False
            )
            where = v.row_group_where(ref.file, ref.row_group)
            y = v.real_targets(_scalar_column(table, LABEL, where), where).astype(np.float64)
            n, total, sq = n + len(y), total + float(y.sum()), sq + float(y @ y)
            if len(y):
                lo, hi = min(lo, float(y.min())), max(hi, float(y.max()))
        mean = total / max(n, 1)
        std = float(np.sqrt(max(sq / max(n, 1) - mean * mean, 0.0)))
        return {"rows": n, "mean": mean, "std": std, "min": lo, "max": hi}
