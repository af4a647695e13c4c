"""Early stopping on validation data: score every epoch, stop after rounds without progress,
keep the best epoch's model.

The solver's own stop is the duality gap: the optimum of the regularized training objective.
On click logs a user often wants the epoch whose *held-out* log loss (or AUC; an SVM's accuracy
or hinge loss, a ridge model's RMSE or R²: ``LOSS_METRICS``) was best, and to
stop once it has not improved for a few epochs (as xLearn, LightGBM, XGBoost and H2O do).
``EarlyStopping`` is an epoch callback of the node trainer and of the Dask driver alike: it gets
``w`` after every epoch (or round), scores the validation set chunk by chunk (memory: one chunk
and one float per validation row for AUC), and keeps a copy of the best ``w``.

Only an epoch whose relative duality gap is at most ``gap`` (``early_stopping_gap``, default
``DEFAULT_GAP``) can be kept or end the fit. Dual coordinate descent's early models are far from
the optimum and their held-out scores are not monotone: in a user's run on a9a with C=10,
patience 2 kept a validation log loss of 0.443 and patience 5 one of 0.345 where the converged
fit reached 0.326; on the Criteo-like rows of ``tests/test_early_stopping.py`` an epoch with a
gap of 0.06 scores better than the optimum, by luck of the path. With the gate, early stopping
chooses among models within about ``gap`` of the training optimum and saves the epochs from
there to ``tol``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

#: The validation metrics of each loss, its default first.
LOSS_METRICS = {
    "logistic": ("logloss", "auc"),
    "hinge": ("auc", "accuracy", "hinge"),
    "squared_hinge": ("auc", "accuracy", "hinge"),
    "squared": ("rmse", "r2"),
}
METRICS = ("logloss", "auc", "accuracy", "hinge", "rmse", "r2")
HIGHER_IS_BETTER = ("auc", "accuracy", "r2")
DEFAULT_GAP = 1e-2  # the relative gap an epoch must reach to be kept (see the module)

# Per-row terms of the metrics that are weighted means: (scores, y, weight) -> terms.
_MEANS = {
    "logloss": lambda s, y: np.logaddexp(0.0, -y * s),
    "hinge": lambda s, y: np.maximum(0.0, 1.0 - y * s),
    "accuracy": lambda s, y: ((s > 0) == (y > 0)).astype(np.float64),
}


def weighted_mean(batches, metric: str = "logloss") -> float:
    """Weighted mean of ``metric``'s per-row term (``_MEANS``) over ``(scores, y in {-1, +1},
    weight or None)`` batches."""
    term = _MEANS[metric]
    loss = total = 0.0
    for s, y, weight in batches:
        wt = np.ones(len(s)) if weight is None else np.asarray(weight, np.float64)
        loss += float(wt @ term(np.asarray(s, np.float64), y))
        total += float(wt.sum())
    return loss / total


def mean_logloss(batches) -> float:
    """Weighted mean log loss over ``(scores, y in {-1, +1}, weight or None)`` batches."""
    return weighted_mean(batches, "logloss")


def regression_scores(batches) -> tuple[float, float]:
    """``(RMSE, R²)`` of ``(predictions, targets, weight or None)`` batches, weighted; R² as
    scikit-learn's ``r2_score`` (1 - SSE / SST about the weighted mean target)."""
    W = sy = syy = sse = 0.0
    for s, y, weight in batches:
        y = np.asarray(y, np.float64)
        wt = np.ones(len(s)) if weight is None else np.asarray(weight, np.float64)
        e = np.asarray(s, np.float64) - y
        W, sy, syy, sse = W + wt.sum(), sy + wt @ y, syy + wt @ (y * y), sse + wt @ (e * e)
    sst = syy - sy * sy / W
    return float(np.sqrt(sse / W)), float(1.0 - sse / sst) if sst > 0 else float("nan")


class EarlyStopping:
    """Callback ``(record, w) -> stop?`` scoring ``data`` with ``metric`` after every epoch.

    ``data`` is a Dataset (Parquet paths, a Table) or ``(X, y_pm, weight)`` arrays with labels
    in {-1, +1} (real targets for "rmse" and "r2"). ``rounds``: stop when the best score is
    that many eligible epochs old (None: score only). An epoch is eligible (to be the best, and
    to count towards ``rounds``) when its relative gap is at most ``gap`` (``tol`` when larger:
    the converged epoch always is).
    ``bias`` turns the last entry of ``w`` into the intercept.
    """

    def __init__(self, data, *, metric: str, rounds: int | None, n_features: int, bias: float,
                 gap: float = DEFAULT_GAP, tol: float = 0.0):  # fmt: skip
        if metric not in METRICS:
            raise ValueError(f"validation_metric is {metric!r}; choose one of {METRICS}.")
        self.data, self.metric, self.rounds = data, metric, rounds
        self.d, self.bias = int(n_features), float(bias)
        self.gap = max(float(gap), float(tol))
        self.scores: list[float] = []
        self.best_epoch = 0  # the epoch (or round) number of the best score
        self._best_at = 0  # how many scores had been taken then
        self._eligible = 0  # how many epochs scored were eligible
        self._best_eligible = 0  # ... when the best was scored
        self.best_score = np.nan
        self.best_w: np.ndarray | None = None
        self.best_record: dict | None = None  # the best epoch's primal, dual, gap...
        self.stopped = False

    def _batches(self, coef: np.ndarray, intercept: float):
        if isinstance(self.data, tuple):
            X, y, weight = self.data
            yield X @ coef + intercept, y, weight
            return
        from snapfit.scoring import chunk_scores

        for chunk in self.data.iter_chunks():
            yield chunk_scores(coef, intercept, chunk), chunk.y, chunk.weight

    def score(self, w: np.ndarray) -> float:
        """The metric of ``w`` (coefficients, intercept weight last) on the validation data."""
        coef = np.ascontiguousarray(w[: self.d], dtype=np.float64)
        intercept = float(w[self.d]) * self.bias
        if self.metric in _MEANS:
            return weighted_mean(self._batches(coef, intercept), self.metric)
        if self.metric in ("rmse", "r2"):
            rmse, r2 = regression_scores(self._batches(coef, intercept))
            return rmse if self.metric == "rmse" else r2
        from sklearn.metrics import roc_auc_score

        parts = list(self._batches(coef, intercept))
        s = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts]) > 0
        weight = None
        if any(p[2] is not None for p in parts):
            weight = np.concatenate([np.ones(len(p[0])) if p[2] is None else p[2] for p in parts])
        return float(roc_auc_score(y, s, sample_weight=weight))

    def _better(self, a: float, b: float) -> bool:
        if np.isnan(b):
            return True
        return a > b if self.metric in HIGHER_IS_BETTER else a < b

    def __call__(self, rec, w) -> bool:
        rec = rec if isinstance(rec, dict) else rec.as_dict()
        score = self.score(w)
        self.scores.append(score)
        if not rec["rel_gap"] <= self.gap:  # too far from the optimum to keep or stop on
            return False
        self._eligible += 1
        if self._better(score, self.best_score):
            self.best_score, self._best_at = score, len(self.scores)
            self._best_eligible = self._eligible
            self.best_epoch = int(rec["epoch"])
            self.best_w = np.array(w, dtype=np.float64, copy=True)
            self.best_record = dict(rec)
        since = self._eligible - self._best_eligible
        self.stopped = self.rounds is not None and since >= self.rounds
        return self.stopped

    @property
    def best_is_last(self) -> bool:
        return self._best_at == len(self.scores)

    def annotate(self, history: list[dict]) -> None:
        """Add ``validation_<metric>`` to the records of the epochs scored (the last ones: a
        resumed fit's history starts with the epochs of the run before)."""
        scored = history[len(history) - len(self.scores) :]
        for h, s in zip(scored, self.scores, strict=True):
            h[f"validation_{self.metric}"] = s


def validation_data(validation, classes, n_features: int, feature_map: dict | None = None):
    """What ``fit(validation=...)`` accepts, ready for :class:`EarlyStopping`: Parquet paths,
    globs or a Table (labels inside), or ``(X, y)`` / ``(X, y, sample_weight)`` arrays whose
    labels are the training classes (``classes`` None: a regressor's real targets). Parquet
    converted another way than the training data (``feature_map``) is refused before the first
    epoch, by the rule every scorer uses; a classifier's real-valued targets too."""
    from snapfit import featuremap
    from snapfit.data.validate import check_class_labels
    from snapfit.inputs import as_dataset

    data = as_dataset(validation, targets="real" if classes is None else "auto")
    if data is not None:
        if classes is not None:
            check_class_labels(data, name=f"{data.source} (validation)")
        train_map = feature_map or featuremap.of_width(n_features)
        featuremap.check(train_map, featuremap.of_data(data), f"{data.source} (validation)",
                         "the training data")  # fmt: skip
        return data
    if not isinstance(validation, tuple) or len(validation) not in (2, 3):
        raise TypeError(
            "validation must be Parquet paths, a pyarrow Table, or a tuple (X, y) or "
            f"(X, y, sample_weight); got {type(validation).__name__}."
        )
    X, y = validation[0], np.asarray(validation[1])
    weight = None if len(validation) == 2 else np.asarray(validation[2], dtype=np.float64)
    X = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
    if X.shape[1] != n_features or X.shape[0] != len(y):
        raise ValueError(
            f"validation X has shape {X.shape} and y {len(y)} labels; it must have "
            f"{n_features} features (as the training data) and one label per row."
        )
    if classes is None:
        return X.astype(np.float64), y.astype(np.float64), weight
    unknown = set(np.unique(y).tolist()) - set(np.asarray(classes).tolist())
    if unknown:
        raise ValueError(
            f"validation y has labels {sorted(unknown)} that the training data does not "
            f"have (classes {list(classes)})."
        )
    y_pm = np.where(y == classes[1], 1.0, -1.0)
    return X.astype(np.float64), y_pm, weight
