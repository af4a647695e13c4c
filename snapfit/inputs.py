"""What ``fit`` accepts, turned into what the engine takes: chunks, ±1 labels, weights.

Kept apart from the estimators so the doors stay doors: labels, class bounds and chunks with
scikit-learn's conventions, for the local and the Dask estimator alike.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import scipy.sparse as sp
from sklearn.utils.multiclass import check_classification_targets

from snapfit.data import Dataset
from snapfit.data.chunk import Chunk
from snapfit.data.table import TableDataset


def class_labels(y) -> tuple[np.ndarray, np.ndarray]:
    """``(classes, codes)``: the classes of ``y`` (any values, at least two) and each row's
    label as the kernels take it, float32: ±1 for two classes (``classes[1]`` positive), the
    class index ``0 .. K-1`` for more (one-vs-rest, ``snapfit.solvers.ovr``)."""
    check_classification_targets(y)
    classes = np.unique(y)
    if len(classes) < 2:
        raise ValueError(
            "This solver needs samples of at least 2 classes in the data, but the data "
            f"contains only one class: {classes[0]!r}"
        )
    if len(classes) == 2:
        return classes, np.where(y == classes[1], 1.0, -1.0).astype(np.float32)
    return classes, np.searchsorted(classes, y).astype(np.float32)


def class_counts(codes: np.ndarray, weight: np.ndarray | None, n_classes: int) -> np.ndarray:
    """Rows of each class index (one-vs-rest codes), each counted with its sample weight."""
    w = None if weight is None else weight.astype(np.float64)
    return np.bincount(codes.astype(np.int64), weights=w, minlength=n_classes)


def ovr_bounds(C: float, class_weight, classes, counts) -> tuple[tuple[float, float], ...]:
    """Per class k of one-vs-rest, ``(c_neg, c_pos)`` = ``(C, C * weight of class k)``:
    liblinear's (its ``train`` gives problem k the class weight on its positives and ``C`` on
    the rest). "balanced" is scikit-learn's ``n / (K n_k)`` over the (weighted) ``counts``."""
    C = float(C)
    if class_weight == "balanced":
        counts = np.asarray(counts, dtype=np.float64)
        weights = counts.sum() / (len(classes) * counts)
    else:
        cw = class_weight or {}
        weights = [float(cw.get(c, 1.0)) for c in classes]
    return tuple((C, C * float(wk)) for wk in weights)


def weighted_counts(y_pm: np.ndarray, weight: np.ndarray | None) -> tuple[float, float]:
    """``(n_neg, n_pos)``: the rows of each class, each counted with its sample weight."""
    pos = y_pm > 0
    if weight is None:
        n_pos = int(pos.sum())
        return len(y_pm) - n_pos, n_pos
    w = weight.astype(np.float64)
    return float(w[~pos].sum()), float(w[pos].sum())


def class_bounds(C: float, class_weight, classes, counts) -> tuple[float, float]:
    """``(c_neg, c_pos)``: ``C`` times the weight of ``classes[0]`` / ``classes[1]``.

    "balanced" is scikit-learn's ``n / (2 n_c)`` over the label ``counts`` ``(n_neg, n_pos)``
    (weighted by sample weight, as scikit-learn >= 1.6 counts them); a dict maps class labels
    to weights (1 for a class it does not name).
    """
    if class_weight == "balanced":
        n_neg, n_pos = (float(c) for c in counts)
        n = n_neg + n_pos
        return C * n / (2.0 * n_neg), C * n / (2.0 * n_pos)
    cw = class_weight or {}
    return C * float(cw.get(classes[0], 1.0)), C * float(cw.get(classes[1], 1.0))


def csr_chunks(X: sp.csr_matrix, y_pm, weight, chunk_rows: int | None) -> list[Chunk]:
    """Split a CSR matrix into chunks without copying values (views of its arrays)."""
    n = X.shape[0]
    step = n if not chunk_rows else int(chunk_rows)
    indptr = X.indptr.astype(np.int64, copy=False)
    indices = X.indices.astype(np.int32, copy=False)
    chunks = []
    for lo in range(0, n, max(step, 1)):
        hi = min(n, lo + step)
        a, b = indptr[lo], indptr[hi]
        chunks.append(
            Chunk(
                indptr[lo : hi + 1] - a,
                indices[a:b],
                X.data[a:b],
                y_pm[lo:hi],
                None if weight is None else weight[lo:hi],
            )
        )
    return chunks


def rows_key(y_pm: np.ndarray, weight: np.ndarray | None) -> str:
    """Fingerprint of the rows' labels and weights: a warm start may reuse the previous dual
    variables only for the same rows in the same order."""
    h = hashlib.sha256(np.ascontiguousarray(y_pm).tobytes())
    if weight is not None:
        h.update(np.ascontiguousarray(weight).tobytes())
    return h.hexdigest()


def as_dataset(X, *, require_labels: bool = True, targets: str = "auto"):
    """A snapfit Dataset for Parquet paths / globs / lists of paths and pyarrow Tables;
    ``targets``: how chunks carry the labels (``Dataset``'s: "class", "real" or "auto")."""
    if isinstance(X, (str, os.PathLike)) or (
        isinstance(X, (list, tuple)) and X and all(isinstance(p, (str, os.PathLike)) for p in X)
    ):
        return Dataset(X, require_labels=require_labels, targets=targets)
    import pyarrow as pa

    if isinstance(X, pa.Table):
        return TableDataset(X, targets=targets)
    return None


def model_callback(cb, d: int, bias: float):
    """Adapt a user callback ``cb(record, coef, intercept)`` to the engine's ``(record, w)``;
    one-vs-rest's K blocks come as ``coef`` (K, d) and ``intercept`` (K,) views."""

    def call(rec, w):
        if len(w) == d + 1:
            return cb(rec, w[:d], float(w[d] * bias))
        blocks = w.reshape(-1, d + 1)
        return cb(rec, blocks[:, :d], blocks[:, d] * bias)

    return call
