"""svmlight / libsvm text -> snapfit Parquet, streaming in blocks of lines.

Each block (whole lines, ``block_bytes`` at most) is parsed by scikit-learn's compiled
``load_svmlight_file``, so rows, comments, ``qid:`` and values are read exactly as scikit-learn
reads them; blocks are then written as they come, so memory stays bounded. Index base follows
scikit-learn's ``zero_based="auto"`` rule over the whole file: one-based (indices shifted down
by 1) unless some index is 0 or the file has no features at all. Since that is only known at the
end, an "auto" file found one-based is rewritten once from the Parquet it produced (cheap next to
parsing text).

Labels are read as scikit-learn and Vowpal Wabbit read them, as numbers, and ``target`` says
what they are: "class" (0/1 or -1/+1, written as int8), "real" (regression targets, written as
float32 with ``snapfit.target`` "real"), or "auto": classes while every label is 0, 1 or -1,
real targets once one is not (the conversion then starts over as "real").
"""

from __future__ import annotations

import io
import os

import numpy as np
import pyarrow as pa
from sklearn.datasets import load_svmlight_file

from snapfit.data.reader import Dataset
from snapfit.data.schema import DEFAULT_ROW_GROUP_ROWS
from snapfit.data.writer import ChunkWriter, atomic_output, check_output
from snapfit.datasets.criteo import ConvertReport
from snapfit.datasets.textio import open_binary, read_error
from snapfit.errors import DataError


def _blocks(path, block_bytes: int):
    """(first line number, bytes) of whole-line blocks of the (decompressed) file."""
    line, rest = 1, b""
    with open_binary(path) as f:
        while True:
            try:
                data = f.read(block_bytes)
            except (OSError, EOFError) as e:  # e.g. a truncated .gz
                raise read_error(path, e) from None
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            yield line, data[:cut]
            line += data.count(b"\n", 0, cut)
            rest = data[cut:]
    if rest:
        yield line, rest


def _parse(path, first_line: int, block: bytes):
    """scikit-learn's parse of one block; on failure, find and name the bad line."""
    try:
        return load_svmlight_file(io.BytesIO(block), zero_based=True, dtype=np.float64)
    except ValueError as e:
        reason = str(e)
    for k, text in enumerate(block.split(b"\n")):
        try:
            load_svmlight_file(io.BytesIO(text + b"\n"), zero_based=True)
        except ValueError as e:
            shown = text[:60].decode(errors="replace")
            raise DataError(
                f"{path}, line {first_line + k}: {e} ({shown!r}); fix the line."
            ) from None
    raise DataError(f"{path}, near line {first_line}: {reason}; fix the file.")


class _RealTarget(Exception):
    """An "auto" conversion met a label that is not 0, 1 or -1: start over as "real"."""


def _labels(path, first_line: int, block: bytes, y: np.ndarray, target: str) -> np.ndarray:
    if target == "real":
        out = y.astype(np.float32)
        bad = ~np.isfinite(out)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise DataError(
                f"{path}, line {first_line + _row_line(block, row)}: target is {y[row]:g}; "
                "targets must be finite numbers within float32's range, fix or drop the line."
            )
        return out
    ok = (y == 0) | (y == 1) | (y == -1)
    if ok.all():
        return y.astype(np.int8)
    if target == "auto":
        raise _RealTarget
    row = int(np.flatnonzero(~ok)[0])
    line = first_line + _row_line(block, row)
    raise DataError(
        f"{path}, line {line}: label is {y[row]:g}; snapfit trains binary labels 0/1 or -1/+1, "
        "map the classes before converting (regression targets: convert with target 'real')."
    )


def _check_finite(path, first_line: int, block: bytes, X) -> None:
    """Refuse nan and inf values here, naming the line (a fit would refuse them later, with
    only a row group to go on)."""
    bad = ~np.isfinite(X.data)
    if not bad.any():
        return
    pos = int(np.flatnonzero(bad)[0])
    row = int(np.searchsorted(X.indptr, pos, side="right") - 1)
    line = first_line + _row_line(block, row)
    raise DataError(
        f"{path}, line {line}: feature {X.indices[pos]} has value {X.data[pos]}; snapfit needs "
        "finite values, fix or drop the line."
    )


def _row_line(block: bytes, row: int) -> int:
    """Offset (in lines) of data row ``row`` inside a block."""
    seen = -1
    for k, ln in enumerate(block.split(b"\n")):
        if ln.split(b"#", 1)[0].split():
            seen += 1
            if seen == row:
                return k
    return 0


def convert_svmlight(
    input,
    output,
    *,
    zero_based: bool | str = "auto",
    n_features: int | None = None,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    force: bool = False,
    block_bytes: int = 1 << 23,
    target: str = "auto",
) -> ConvertReport:
    """Convert an svmlight / libsvm file (plain or gzip) to snapfit Parquet.

    Parameters
    ----------
    input, output : str or path
        Text file and Parquet file to write (atomically; refused if it exists unless ``force``).
    zero_based : bool or "auto"
        Index base; "auto" mirrors ``sklearn.datasets.load_svmlight_file``.
    n_features : int, optional
        Feature-space width; default is the largest index + 1.
    row_group_rows : int
        Rows per row group.
    block_bytes : int
        Bytes of text parsed at a time.
    target : {"auto", "class", "real"}
        What the labels are (see the module): class labels 0/1 or -1/+1 (as written: a file
        with both 0 and -1 is refused on reading), real regression targets, or "auto": real
        as soon as a label is not 0, 1 or -1.

    ``qid:`` is ignored; indices inside a line must ascend, as scikit-learn requires.
    """
    path = os.fspath(input)
    out = check_output(output, [path], force=force)
    if zero_based not in (True, False, "auto"):
        raise ValueError(f"zero_based is {zero_based!r}; pass True, False or 'auto'.")
    if target not in ("auto", "class", "real"):
        raise ValueError(f"target is {target!r}; pass 'auto', 'class' or 'real'.")
    kw = dict(zero_based=zero_based, n_features=n_features, row_group_rows=row_group_rows,
              block_bytes=block_bytes)  # fmt: skip
    try:
        return _convert(path, out, target=target, **kw)
    except _RealTarget:
        return _convert(path, out, target="real", **kw)


def _convert(path, out, *, zero_based, n_features, row_group_rows, block_bytes, target):
    """One pass over the text (see ``convert_svmlight``); "auto" raises ``_RealTarget`` at the
    first label that is not 0, 1 or -1."""
    real = target == "real"
    shift = 1 if zero_based is False else 0
    # In "auto" mode the shift (0 or 1) is known at the end: an index is surely too big if it
    # is too big after shifting by 1; the case it is too big only unshifted is checked at the end.
    slack = 1 if zero_based == "auto" else 0
    provenance = {"source": os.path.basename(path), "format": "svmlight", "transform": "none"}
    if real:
        provenance["target"] = "real"
    label_type = pa.float32() if real else None
    lo, hi = None, -1
    with atomic_output(out) as tmp:
        writer = ChunkWriter(tmp, n_features=None, row_group_rows=row_group_rows,
                             provenance=provenance, label_type=label_type)  # fmt: skip
        with writer:  # closed at the end, aborted on an error
            for first_line, block in _blocks(path, block_bytes):
                X, y = _parse(path, first_line, block)
                if X.shape[0] == 0:
                    continue
                ind = X.indices.astype(np.int64) - shift
                bad = ind < 0
                if n_features is not None:
                    bad |= ind - slack >= n_features
                if bad.any():
                    pos = int(np.flatnonzero(bad)[0])
                    row = int(np.searchsorted(X.indptr, pos, side="right") - 1)
                    what = (
                        "index 0 in a one-based file; pass zero_based=True or 'auto'"
                        if ind[pos] < 0
                        else f"index {X.indices[pos]} is beyond n_features={n_features}; "
                        "raise n_features"
                    )
                    raise DataError(f"{path}, line {first_line + _row_line(block, row)}: {what}.")
                if len(ind):
                    lo = int(ind.min()) if lo is None else min(lo, int(ind.min()))
                    hi = max(hi, int(ind.max()))
                labels = _labels(path, first_line, block, y, target)
                _check_finite(path, first_line, block, X)
                writer.append(X.indptr, ind.astype(np.int32), X.data, labels)
            one_based = zero_based == "auto" and lo is not None and lo > 0
            width = hi + 1 - one_based if n_features is None else n_features
            if hi - one_based >= width:
                raise DataError(
                    f"{path}: index {hi} is beyond n_features={n_features} in a zero-based "
                    "file; raise n_features."
                )
            writer.close(n_features=max(width, 1))
        if writer.n_rows == 0:
            raise DataError(f"{path}: holds no rows; the output would be an empty dataset.")
        if one_based:
            _shift_down(tmp, row_group_rows, provenance, width, label_type)
    nnz = sum(writer.row_group_nnz)
    return ConvertReport(out, writer.n_rows, nnz, len(writer.row_group_nnz), 0, [])


def _shift_down(tmp: str, row_group_rows, provenance, width, label_type=None) -> None:
    """Rewrite ``tmp`` with every index minus 1 (an "auto" file found one-based)."""
    src = Dataset(tmp, n_features=width + 1, validate=False, targets="auto")
    prov = dict(provenance, transform="indices shifted from one-based to zero-based")
    with atomic_output(tmp) as tmp2:
        writer = ChunkWriter(tmp2, n_features=width, row_group_rows=row_group_rows,
                             provenance=prov, label_type=label_type)  # fmt: skip
        with writer:  # closed at the end, aborted on an error
            for k, ref in enumerate(src.chunks):
                chunk = src.read_chunk(k)
                table = src._pf(ref.file).read_row_group(ref.row_group, columns=["label"])
                labels = table.column(0).to_numpy()
                writer.append(chunk.indptr, chunk.indices - 1, chunk.values, labels)
