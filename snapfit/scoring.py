"""A fitted model applied to a Parquet dataset chunk by chunk: scores, predictions, metrics.

Memory stays bounded by one chunk (one row group) plus the model: nothing here holds a whole
dataset, so the same code serves a test file of any size.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from snapfit import featuremap, progress
from snapfit.data import Dataset, atomic_output
from snapfit.errors import DataError
from snapfit.metrics import evaluate_batches
from snapfit.solvers import cpu


def open_for(model, path, *, require_labels: bool = True) -> Dataset:
    """Open ``path`` and check its feature map is the model's (format, hash bits, ...)."""
    data = Dataset(path, require_labels=require_labels)
    check_map(model, data)
    return data


def check_map(model, data) -> None:
    """Refuse ``data`` (a Dataset) whose feature map differs from the fitted ``model``'s."""
    featuremap.check(featuremap.of_model(model), featuremap.of_data(data), data.source)


def model_weights(model) -> tuple[np.ndarray, np.ndarray | float]:
    """A fitted model's ``(coef, intercept)`` as ``chunk_scores`` takes them: a vector and a
    number for one problem, ``(K, d)`` and ``(K,)`` for one-vs-rest over K classes."""
    coef = np.atleast_2d(np.ascontiguousarray(model.coef_, dtype=np.float64))
    intercept = np.ravel(model.intercept_).astype(np.float64)  # a Ridge's is a number
    if coef.shape[0] == 1:
        return coef.ravel(), float(intercept[0])
    return coef, intercept


def chunk_scores(coef: np.ndarray, intercept, chunk) -> np.ndarray:
    """Decision values ``coef . x + intercept`` of one chunk's rows; ``(rows, K)`` for the
    ``(K, d)`` coefficients of one-vs-rest (``model_weights``)."""
    values = chunk.values if chunk.values is not None else cpu.EMPTY_F32
    args = (chunk.indptr, chunk.indices, values, chunk.values is not None)
    if coef.ndim == 2:
        out = np.empty((coef.shape[0], chunk.n_rows))
        for k in range(coef.shape[0]):
            cpu.decision_function(*args, coef[k], float(intercept[k]), out[k])
        return out.T
    out = np.empty(chunk.n_rows)
    cpu.decision_function(*args, coef, float(intercept), out)
    return out


def iter_scores(model, data: Dataset) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(scores, y, weight)`` per chunk of ``data`` (``y`` in {-1, +1}; zeros if unlabelled)."""
    coef, intercept = model_weights(model)
    with progress.bar("score", total=data.n_rows) as bar:
        for chunk in data.iter_chunks():
            yield chunk_scores(coef, intercept, chunk), chunk.y, chunk.weight
            bar.update(chunk.n_rows)


def evaluate(model, data: Dataset, *, memory_budget: int, tol: float = 1e-4) -> dict:
    """Log loss, accuracy, calibration and ROC AUC of ``model`` on ``data`` (see metrics)."""
    return evaluate_batches(
        lambda: iter_scores(model, data), n_rows=data.n_rows, memory_budget=memory_budget, tol=tol
    )


def predict_to_parquet(model, data: Dataset, out, *, labels: bool = False,
                       id_column: str | None = None) -> int:  # fmt: skip
    """Write ``probability`` (float64) and, with ``labels``, ``predicted_label`` (int8 0/1) for
    every row of ``data`` in its order, one row group per chunk, under a temporary name that is
    renamed to ``out`` on success; with ``id_column``, that column of ``data`` first, as stored,
    so predictions join by key. Returns the number of rows."""
    fields = [pa.field("probability", pa.float64(), nullable=False)]
    if labels:
        fields.append(pa.field("predicted_label", pa.int8(), nullable=False))
    if id_column is not None:
        data.check_column(id_column)
        id_type = pq.ParquetFile(data.files[0]).schema_arrow.field(id_column).type
        fields.insert(0, pa.field(id_column, id_type))
    schema = pa.schema(fields, metadata={b"snapfit.model_source": b"predict"})
    rows = 0
    with atomic_output(out) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="lz4") as writer:
            for k, (s, _, _) in enumerate(iter_scores(model, data)):
                cols = [pa.array(0.5 * (1.0 + np.tanh(0.5 * s)))]
                if labels:
                    cols.append(pa.array((s > 0).astype(np.int8)))
                if id_column is not None:
                    cols.insert(0, data.read_column(k, id_column).cast(id_type))
                writer.write_table(pa.Table.from_arrays(cols, schema=schema))
                rows += len(s)
    return rows


def raw_scores(model, X) -> np.ndarray:
    """Decision values of raw rows ``X`` (a CSV, Criteo TSV or table in memory), featurized
    batch by batch as ``convert`` featurized the model's training data."""
    from snapfit.datasets.featurize import raw_batches

    coef, intercept = model_weights(model)
    scores = [chunk_scores(coef, intercept, b) for b in raw_batches(featuremap.of_model(model), X)]
    return np.concatenate(scores) if scores else np.empty(0)


def predict_raw_to_parquet(model, source, out, *, labels: bool = False,
                           id_column: str | None = None) -> int:  # fmt: skip
    """:func:`predict_to_parquet` for raw rows (see :func:`raw_scores`), streamed: one row
    group per batch; with ``id_column``, that column of the table first, as read."""
    from snapfit.datasets.featurize import raw_batches

    coef, intercept = model_weights(model)
    rows, writer, schema = 0, None, None
    with atomic_output(out) as tmp:
        try:
            for batch in raw_batches(featuremap.of_model(model), source, id_column=id_column):
                s = chunk_scores(coef, intercept, batch)
                cols = [pa.array(0.5 * (1.0 + np.tanh(0.5 * s)))]
                names = ["probability"]
                if labels:
                    cols.append(pa.array((s > 0).astype(np.int8)))
                    names.append("predicted_label")
                if id_column is not None:
                    cols.insert(0, batch.ids)
                    names.insert(0, id_column)
                table = pa.Table.from_arrays(cols, names=names)
                if writer is None:
                    schema = table.schema.with_metadata({b"snapfit.model_source": b"predict"})
                    writer = pq.ParquetWriter(tmp, schema, compression="lz4")
                writer.write_table(table.cast(schema))
                rows += len(s)
            if writer is None:
                raise DataError(f"{source}: holds no rows to score.")
        finally:
            if writer is not None:
                writer.close()
    return rows
