"""One column of a table batch as numpy arrays: category codes, numbers, labels, weights.

Arrow compute does the per-value work (dictionary encoding, parsing text as numbers, casts) and
numpy the checks; a bad value raises a one-line :class:`~snapfit.errors.DataError` naming its
row (through the batch's :class:`~snapfit.datasets.table_io.Place`) and the way out.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from snapfit.datasets.table_io import Place
from snapfit.errors import DataError

# Text a label column may hold (after trimming and lower-casing) and the class it means.
_LABEL_TEXT = {
    1.0: ["1", "+1", "1.0", "+1.0", "true"],
    0.0: ["0", "0.0", "-0", "false"],
    -1.0: ["-1", "-1.0"],
}


def is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def is_text(t: pa.DataType) -> bool:
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def _text(arr: pa.Array, name: str, file: str) -> pa.Array:
    """A column's values as bytes (nulls kept): text as is, other scalars as Arrow prints them."""
    t = arr.type
    if is_text(t):
        return pc.cast(arr, pa.large_binary())
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.large_binary())
    if pa.types.is_boolean(t) or is_numeric(t) or pa.types.is_temporal(t):
        return pc.cast(pc.cast(arr, pa.string()), pa.large_binary())
    raise DataError(
        f"{file}: column '{name}' has type {t}; categorical columns must hold text, numbers, "
        "booleans or dates."
    )


def category_codes(arr: pa.Array, name: str, file: str) -> tuple[pa.Array, np.ndarray]:
    """Distinct values (bytes) of a column and each row's code into them (-1: no value)."""
    if pa.types.is_dictionary(arr.type):
        values, indices = _text(arr.dictionary, name, file), arr.indices
    else:
        enc = pc.dictionary_encode(_text(arr, name, file))
        values, indices = enc.dictionary, enc.indices
    codes = np.asarray(pc.fill_null(indices, -1), dtype=np.int64)
    empty = np.asarray(pc.fill_null(pc.equal(pc.binary_length(values), 0), True))
    if empty.any() and len(codes):
        codes[(codes >= 0) & empty[np.maximum(codes, 0)]] = -1
    return values, codes


def join(a: pa.Array, b: pa.Array, sep: bytes) -> pa.Array:
    return pc.binary_join_element_wise(a, b, pa.scalar(sep, pa.large_binary()))


def _decoded(arr: pa.Array) -> pa.Array:
    """A dictionary-encoded column (e.g. a pandas category) as plain values."""
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


def _first_unparsable(s: pa.Array) -> int:
    """Row of the first value of a text column that does not cast to float64 (bisection)."""
    lo, hi = 0, len(s)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            pc.cast(s.slice(lo, mid - lo), pa.float64())
            lo = mid
        except pa.ArrowInvalid:
            hi = mid
    return lo


def numbers(arr: pa.Array, name: str, place: Place, role: str) -> np.ndarray:
    """A column as float64, NaN where there is no value; text is parsed (errors name the row)."""
    arr = _decoded(arr)
    t = arr.type
    if is_numeric(t) or pa.types.is_boolean(t):
        v = pc.cast(arr, pa.float64())
    elif pa.types.is_null(t):
        return np.full(len(arr), np.nan)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        s = pc.utf8_trim_whitespace(arr)
        s = pc.if_else(pc.equal(s, ""), pa.scalar(None, s.type), s)
        try:
            v = pc.cast(s, pa.float64())
        except pa.ArrowInvalid:
            i = _first_unparsable(s)
            raise DataError(
                f"{place(i)}: {role} column '{name}' holds {s[i].as_py()!r}, not a number; "
                "fix the value or leave it empty for a missing one."
            ) from None
    else:
        raise DataError(
            f"{place.file}: {role} column '{name}' has type {t}; it must hold numbers "
            "(or their text)."
        )
    return np.asarray(pc.fill_null(v, np.nan), dtype=np.float64)


def labels01(arr: pa.Array, name: str, place: Place, seen: dict) -> np.ndarray:
    """0/1 labels (int8) of a label column holding 0/1, -1/+1 or booleans (or their text).

    ``seen`` records where a 0 and where a -1 first appeared: a column may not mix them.
    """
    arr = _decoded(arr)
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        s = pc.utf8_lower(pc.utf8_trim_whitespace(arr))
        v = np.full(len(arr), np.nan)
        for value, texts in _LABEL_TEXT.items():
            v[np.asarray(pc.fill_null(pc.is_in(s, pa.array(texts)), False))] = value
    elif is_numeric(t) or pa.types.is_boolean(t):
        v = np.asarray(pc.fill_null(pc.cast(arr, pa.float64()), np.nan), dtype=np.float64)
    else:
        v = np.full(len(arr), np.nan)
    ok = (v == 1) | (v == 0) | (v == -1)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        value = arr[i].as_py()
        shown = "nothing (empty)" if value is None else repr(value)
        raise DataError(
            f"{place(i)}: label column '{name}' holds {shown}; labels must be 0/1, -1/+1 or "
            "true/false, map the classes before converting."
        )
    for kind in (0.0, -1.0):
        hit = np.flatnonzero(v == kind)
        if len(hit) and kind not in seen:
            seen[kind] = (place, int(hit[0]))  # named only for a message: a CSV line costs a scan
    if len(seen) == 2:
        (p0, i0), (p1, i1) = seen[0.0], seen[-1.0]
        raise DataError(
            f"{p1(i1)}: label column '{name}' holds -1 but {p0(i0)} holds 0; use 0/1 or -1/+1 "
            "throughout, map the classes before converting."
        )
    return (v == 1).astype(np.int8)
