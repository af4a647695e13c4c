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
    """Open ``path`` and check its feature map is the model's (format, hash bits, ...); a
    regressor reads the labels as real targets, a classifier refuses real-valued ones."""
    from snapfit.data.validate import check_class_labels

    real = _loss(model) == "squared"
    data = Dataset(path, require_labels=require_labels, targets="real" if real else "auto")
    if _n_problems(model) > 1:  # one-vs-rest: labels read as indices into the model's classes
        return _checked(model, data.with_classes(model.classes_) if data.has_labels else data)
    if require_labels and not real:
        check_class_labels(data)
    check_map(model, data)
    return data


def _checked(model, data):
    check_map(model, data)
    return data


def _n_problems(model) -> int:
    """K for a one-vs-rest model over K classes, else 1."""
    return int(np.atleast_2d(model.coef_).shape[0])


def _loss(model) -> str:
    return model._loss_name() if hasattr(model, "_loss_name") else "logistic"


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
    """The metrics of ``model``'s loss on ``data`` (``metrics.evaluate_batches``): log loss,
    accuracy, calibration and ROC AUC; an SVM's accuracy, hinge loss and AUC; a ridge model's
    RMSE, MAE and R²."""
    if _n_problems(model) > 1:
        return _evaluate_classes(model, data)
    return evaluate_batches(lambda: iter_scores(model, data), n_rows=data.n_rows,
                            memory_budget=memory_budget, tol=tol, loss=_loss(model))  # fmt: skip


def _evaluate_classes(model, data: Dataset) -> dict:
    """Accuracy (and for logistic regression the log loss of the one-vs-rest probabilities,
    normalized over the classes as ``predict_proba``) of a model over K > 2 classes, in one
    pass; labels are class indices (``open_for``)."""
    from scipy.special import expit

    n = right = logloss = 0.0
    for s, y, w in iter_scores(model, data):
        w = np.ones(len(y)) if w is None else w.astype(np.float64)
        idx = y.astype(np.int64)
        right += float(w @ (np.argmax(s, axis=1) == idx))
        p = expit(s)
        p /= p.sum(axis=1, keepdims=True)
        logloss -= float(w @ np.log(np.maximum(p[np.arange(len(idx)), idx], 1e-300)))
        n += float(w.sum())
    out = {"rows": data.n_rows, "classes": len(model.classes_), "accuracy": right / max(n, 1e-300)}
    if _loss(model) == "logistic":
        out["logloss"] = logloss / max(n, 1e-300)
    return out


def predict_to_parquet(model, data: Dataset, out, *, labels: bool = False,
                       id_column: str | None = None) -> int:  # fmt: skip
    """Write ``probability`` (float64; an SVM's ``decision``, a ridge model's ``prediction``,
    :func:`output_of`) and, with ``labels``, ``predicted_label`` (int8 0/1) for every row of
    ``data`` in its order, one row group per chunk, under a temporary name that is renamed to
    ``out`` on success; with ``id_column``, that column of ``data`` first, as stored, so
    predictions join by key. Returns the number of rows."""
    name, out_of = output_of(model)
    fields = [pa.field(name, pa.float64(), nullable=False)]
    if labels:
        label_type = pa.int8() if _n_problems(model) == 1 else pa.from_numpy_dtype(
            np.asarray(model.classes_).dtype)  # fmt: skip
        fields.append(pa.field("predicted_label", label_type, nullable=False))
    if id_column is not None:
        data.check_column(id_column)
        id_type = pq.ParquetFile(data.files[0]).schema_arrow.field(id_column).type
        fields.insert(0, pa.field(id_column, id_type))
    schema = pa.schema(fields, metadata={b"snapfit.model_source": b"predict"})
    rows = 0
    with atomic_output(out) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="lz4") as writer:
            for k, (s, _, _) in enumerate(iter_scores(model, data)):
                cols = [pa.array(out_of(s))]
                if labels:
                    cols.append(pa.array(predicted(model, s)))
                if id_column is not None:
                    cols.insert(0, data.read_column(k, id_column).cast(id_type))
                writer.write_table(pa.Table.from_arrays(cols, schema=schema))
                rows += len(s)
    return rows


def output_of(model):
    """``(column name, scores -> column)`` of predictions: a logistic model's probability, an
    SVM's margin (``decision``), a ridge model's prediction. Over K > 2 classes: the predicted
    class's (its one-vs-rest probability normalized over the classes, or its margin)."""
    loss = _loss(model)
    if _n_problems(model) > 1:
        from scipy.special import expit

        if loss == "logistic":
            return "probability", lambda s: expit(s).max(1) / expit(s).sum(1)
        return "decision", lambda s: s.max(axis=1)
    if loss == "logistic":
        return "probability", lambda s: 0.5 * (1.0 + np.tanh(0.5 * s))
    return ("prediction" if loss == "squared" else "decision"), lambda s: s


def predicted(model, s: np.ndarray) -> np.ndarray:
    """Predicted labels from scores: 0/1 (int8) for two classes, the class itself for more."""
    if s.ndim == 2:
        return np.asarray(model.classes_)[np.argmax(s, axis=1)]
    return (s > 0).astype(np.int8)


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
    name, out_of = output_of(model)
    with atomic_output(out) as tmp:
        try:
            for batch in raw_batches(featuremap.of_model(model), source, id_column=id_column):
                s = chunk_scores(coef, intercept, batch)
                cols = [pa.array(out_of(s))]
                names = [name]
                if labels:
                    cols.append(pa.array(predicted(model, s)))
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
