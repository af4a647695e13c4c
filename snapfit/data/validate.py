"""Vectorized checks of one chunk's arrays, failing with one line that names the place.

Each check is a few numpy reductions over the chunk (min/max of indices, ``isfinite`` of values,
a compare on labels), cheap next to decoding the row group, so the reader runs them on every chunk.
Only on failure do we look for the first bad row, to name it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from snapfit.errors import DataError

#: Formats the place of a row for a message, e.g. ``"day_03.parquet, row group 12, row 40517"``.
Where = Callable[[int], str]


def row_group_where(file: str, row_group: int) -> Where:
    """Place formatter for rows of one row group (rows count from 0 inside the row group)."""
    return lambda row: f"{file}, row group {row_group}, row {row}"


def _row_of(indptr: np.ndarray, pos: int) -> int:
    return int(np.searchsorted(indptr, pos, side="right") - 1)


def check_indices(indptr: np.ndarray, indices: np.ndarray, n_features: int, where: Where) -> None:
    """Every index in ``[0, n_features)``."""
    if len(indices) == 0:
        return
    lo, hi = int(indices.min()), int(indices.max())
    if lo >= 0 and hi < n_features:
        return
    pos = int(np.flatnonzero((indices < 0) | (indices >= n_features))[0])
    bad = int(indices[pos])
    if bad < 0:
        raise DataError(
            f"{where(_row_of(indptr, pos))}: column 'indices' holds {bad}, a negative index; "
            "indices count from 0, fix the writer."
        )
    raise DataError(
        f"{where(_row_of(indptr, pos))}: column 'indices' holds {bad} but n_features is "
        f"{n_features}; re-convert with more hash bits or fix the writer."
    )


def check_values(indptr: np.ndarray, values: np.ndarray | None, where: Where) -> None:
    """No NaN or infinite values."""
    if values is None or len(values) == 0:
        return
    finite = np.isfinite(values)
    if finite.all():
        return
    pos = int(np.flatnonzero(~finite)[0])
    raise DataError(
        f"{where(_row_of(indptr, pos))}: column 'values' holds {values[pos]}; "
        "values must be finite, drop or impute them before writing."
    )


def check_same_lengths(ind_offsets: np.ndarray, val_offsets: np.ndarray, where: Where) -> None:
    """``indices`` and ``values`` lists of the same length in every row."""
    ind_len, val_len = np.diff(ind_offsets), np.diff(val_offsets)
    if np.array_equal(ind_len, val_len):
        return
    row = int(np.flatnonzero(ind_len != val_len)[0])
    raise DataError(
        f"{where(row)}: 'indices' has {ind_len[row]} entries but 'values' has {val_len[row]}; "
        "the two lists must pair up entry by entry, fix the writer."
    )


def labels_to_pm1(labels: np.ndarray, where: Where, column: str = "label") -> np.ndarray:
    """Labels in {0, 1} or {-1, +1} as float32 ±1; anything else (or a mix of 0 and -1) fails."""
    lab = np.asarray(labels)
    if lab.dtype.kind not in "iuf" and lab.dtype != bool:
        raise DataError(
            f"{where(0)}: column '{column}' has type {lab.dtype}; labels must be numbers "
            "0/1 or -1/+1 (int8 or float32), re-convert the labels."
        )
    pos, zero, neg = lab == 1, lab == 0, lab == -1
    ok = pos | zero | neg
    if not ok.all():
        row = int(np.flatnonzero(~ok)[0])
        raise DataError(
            f"{where(row)}: column '{column}' holds {lab[row].item()}; labels must be 0/1 or "
            "-1/+1, map the classes to one of these before writing (real-valued targets: fit a "
            "regressor, snapfit.Ridge or `snapfit train --loss squared`)."
        )
    if zero.any() and neg.any():
        row = int(max(np.argmax(zero), np.argmax(neg)))
        raise DataError(
            f"{where(row)}: column '{column}' mixes 0 and -1 (here {lab[row].item()}); use 0/1 or "
            "-1/+1 throughout, re-convert the labels."
        )
    return np.where(pos, np.float32(1), np.float32(-1))


def real_targets(targets: np.ndarray, where: Where, column: str = "label") -> np.ndarray:
    """Regression targets as float32: numbers (any int or float type), finite."""
    t = np.asarray(targets)
    if t.dtype.kind not in "iuf" and t.dtype != bool:
        raise DataError(
            f"{where(0)}: column '{column}' has type {t.dtype}; a regressor needs numeric "
            "targets (float32), convert them to numbers."
        )
    with np.errstate(over="ignore"):
        out = t.astype(np.float32)
    finite = np.isfinite(out)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        raise DataError(
            f"{where(row)}: column '{column}' holds {t[row].item()}; targets must be finite "
            "numbers within float32's range, drop or fix the row."
        )
    return out


def class_codes(labels: np.ndarray, where: Where, classes: np.ndarray,
                column: str = "label") -> np.ndarray:  # fmt: skip
    """Class labels as their index in the sorted ``classes`` (float32): one-vs-rest's codes."""
    lab = np.asarray(labels)
    if lab.dtype.kind not in "iuf":
        raise DataError(
            f"{where(0)}: column '{column}' has type {lab.dtype}; class labels must be numbers "
            "(int8, int32 or float32), re-convert the labels."
        )
    idx = np.searchsorted(classes, lab)
    found = classes[np.minimum(idx, len(classes) - 1)] == lab
    if not found.all():
        row = int(np.flatnonzero(~found)[0])
        raise DataError(
            f"{where(row)}: column '{column}' holds {lab[row].item()}, not one of the classes "
            f"{classes.tolist()} the labels held when the fit began; fix the row or re-read "
            "the files."
        )
    return idx.astype(np.float32)


def check_class_labels(data, *, name: str | None = None) -> None:
    """Refuse, before any work, a dataset whose labels are real-valued targets (its metadata or
    its label column's statistics say so): a classifier would fail on its first row."""
    if getattr(data, "target_kind", None) != "real":
        return
    raise DataError(
        f"{name or data.source}: holds real-valued targets ({data.target_note}), not class "
        "labels 0/1 or -1/+1; fit a regressor (snapfit.Ridge, `snapfit train --loss squared`), "
        "or convert the data with class labels."
    )


def check_weight(weight: np.ndarray | None, where: Where) -> None:
    """Sample weights finite and not negative."""
    if weight is None or len(weight) == 0:
        return
    ok = np.isfinite(weight) & (weight >= 0)
    if ok.all():
        return
    row = int(np.flatnonzero(~ok)[0])
    raise DataError(
        f"{where(row)}: column 'weight' holds {weight[row]}; weights must be finite and >= 0, "
        "fix the writer."
    )


def check_two_classes(data, *, name: str | None = None) -> None:
    """Fail unless the labels hold both classes; the trainer calls this before fitting.

    Parameters
    ----------
    data : Dataset, ArrayDataset or array-like of labels (0/1 or ±1)
    name : str, optional
        How to call the data in the message (default: the dataset's source).

    Raises
    ------
    DataError
        If the data has no labels, holds real-valued targets, or every label is one class.
    """
    if hasattr(data, "label_counts"):
        check_class_labels(data, name=name)
        if not data.has_labels:
            raise DataError(
                f"{name or data.source}: has no 'label' column (unlabelled, e.g. a Criteo test "
                "file); training needs labels, convert a labelled file."
            )
        n_neg, n_pos = data.label_counts()
        name = name or data.source
    else:
        y = labels_to_pm1(np.asarray(data), lambda row: f"{name or 'y'}, row {row}")
        n_pos = int((y > 0).sum())
        n_neg = len(y) - n_pos
        name = name or "y"
    if n_neg and n_pos:
        return
    only = "+1 (positive)" if n_pos else "-1/0 (negative)"
    raise DataError(
        f"{name}: every one of the {n_neg + n_pos} labels is {only}; training needs both "
        "classes, check the labels or the file selection."
    )
