"""The scikit-learn door to ridge regression: ``snapfit.Ridge`` (the squared loss).

Arrays in memory (dense or sparse) and snapfit Parquet with real targets in its ``label``
column (a path, directory, glob, list or ``pyarrow.Table``; streamed under ``memory_budget``
like ``LogisticRegression``'s, through the same ``open_dataset``, checkpoints and early stopping)
go to ``snapfit.train.train`` with the squared loss in THE scalar update (``dual.row_step``,
SDCA's closed-form step). ``alpha`` is scikit-learn's: ``||y - Xw - b||^2 + alpha ||w||^2`` is
``alpha`` times the dual CD objective ``1/2 ||w||^2 + sum_i C_i/2 (y_i - w.x_i - b)^2`` with
``C_i = sample_weight_i / alpha``. The intercept is the weight of a constant feature
``intercept_scaling`` and so is regularized (by ``alpha (b / intercept_scaling)^2``), where
scikit-learn's is not; a larger ``intercept_scaling`` brings the two closer. Targets are kept
as float32, like the labels.
"""

from __future__ import annotations

import os
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from snapfit import featuremap
from snapfit import model as model_io
from snapfit.engine.source import InMemorySource
from snapfit.fit_hooks import FitHooks
from snapfit.inputs import as_dataset, csr_chunks, model_callback
from snapfit.solvers import cpu
from snapfit.solvers.dual import SQUARED
from snapfit.train import open_dataset, resolve_budget, resolve_devices, train


class Ridge(FitHooks, RegressorMixin, BaseEstimator):
    """L2-regularized least squares by dual coordinate descent (SDCA) on CPU threads or GPUs.

    Minimizes ``sum_i s_i (y_i - w.x_i - b)^2 + alpha (||w||^2 + (b / intercept_scaling)^2)``
    (``s_i`` the sample weights). ``alpha`` is scikit-learn's ``Ridge(alpha)`` (see
    docs/losses.md for Snap ML). ``tol`` bounds the relative duality gap; ``max_iter`` counts
    epochs. ``device_ids``, ``deterministic``, ``memory_budget``, ``chunk_rows``,
    ``checkpoint_dir``, ``checkpoint_every``, ``early_stopping_rounds`` and
    ``early_stopping_gap`` are ``snapfit.LogisticRegression``'s; early stopping watches
    ``validation_metric``, ``"rmse"`` (lower is better) or ``"r2"``.
    """

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "device": [StrOptions({"auto", "cpu", "gpu"})],
        "n_jobs": [Integral, None],
        "deterministic": ["boolean"],
        "device_ids": ["array-like", None],
        "memory_budget": [Interval(Integral, 1, None, closed="left"), str, None],
        "chunk_rows": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": ["random_state"],
        "checkpoint_dir": [str, os.PathLike, None],
        "checkpoint_every": [Interval(Integral, 1, None, closed="left")],
        "early_stopping_rounds": [Interval(Integral, 1, None, closed="left"), None],
        "validation_metric": [StrOptions({"rmse", "r2"})],
        "early_stopping_gap": [Interval(Real, 0, None, closed="both")],
    }

    def __init__(
        self,
        alpha=1.0,
        *,
        fit_intercept=True,
        intercept_scaling=1.0,
        tol=1e-4,
        max_iter=1000,
        device="auto",
        n_jobs=None,
        deterministic=True,
        device_ids=None,
        memory_budget=None,
        chunk_rows=None,
        random_state=None,
        checkpoint_dir=None,
        checkpoint_every=1,
        early_stopping_rounds=None,
        validation_metric="rmse",
        early_stopping_gap=1e-2,
    ):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.tol = tol
        self.max_iter = max_iter
        self.device = device
        self.n_jobs = n_jobs
        self.deterministic = deterministic
        self.device_ids = device_ids
        self.memory_budget = memory_budget
        self.chunk_rows = chunk_rows
        self.random_state = random_state
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_every = checkpoint_every
        self.early_stopping_rounds = early_stopping_rounds
        self.validation_metric = validation_metric
        self.early_stopping_gap = early_stopping_gap

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _loss_name(self) -> str:
        return "squared"

    def fit(self, X, y=None, sample_weight=None, *, validation=None, resume=False, callbacks=()):
        """Fit on an array or sparse matrix with real targets ``y`` (1-d), or on snapfit
        Parquet whose ``label`` column holds the targets (a path, directory, glob or list of
        them, or a ``pyarrow.Table``; weights from its ``weight`` column), streamed from disk
        when it does not fit ``memory_budget``.

        ``resume``, ``callbacks`` and ``validation`` are ``LogisticRegression.fit``'s
        (validation targets real, scored by ``validation_metric``)."""
        from snapfit.engine import Problem
        from snapfit.estimator import _how_read

        self._validate_params()
        if resume and self.checkpoint_dir is None:
            raise ValueError("resume=True needs checkpoint_dir; set it to the run's directory.")
        devices = resolve_devices(self.device, self.n_jobs, self.device_ids,
                                  deterministic=self.deterministic)  # fmt: skip
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        dataset = as_dataset(X, targets="real")
        if dataset is not None:
            if y is not None or sample_weight is not None:
                raise ValueError(
                    "Parquet input carries its targets and weights in its 'label' and 'weight' "
                    "columns; call fit(path) without y and sample_weight."
                )
            self.n_features_in_ = dataset.n_features
            source = open_dataset(dataset, budget=resolve_budget(self.memory_budget),
                                  devices=devices, chunk_rows=self.chunk_rows,
                                  seed=seed)  # fmt: skip
        else:
            source = self._array_source(X, y, sample_weight)
        d = source.n_features
        self.feature_map_ = featuremap.of_data(source if dataset is None else dataset)
        self.streamed_, self.cache_format_ = _how_read(source)
        bias = float(self.intercept_scaling) if self.fit_intercept else 0.0
        c = 1.0 / float(self.alpha)
        problem = Problem(n_features=d, c_pos=c, c_neg=c, bias=bias, tol=float(self.tol),
                          max_iter=int(self.max_iter), seed=seed, loss=SQUARED)  # fmt: skip
        stopper = self._early_stopping(validation, d, bias)
        user = [model_callback(cb, d, bias) for cb in callbacks]
        result = train(source, problem, devices=devices, checkpoint=self._checkpoints(resume),
                       callbacks=([stopper] if stopper else []) + user,
                       keep_alpha=False)  # fmt: skip
        self.history_ = [rec.as_dict() for rec in result.history]
        return self._keep(result.w, int(result.n_iter), bool(result.converged), bias, stopper)

    def _array_source(self, X, y, sample_weight) -> InMemorySource:
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32],
                             order="C", y_numeric=True)  # fmt: skip
        weight = None
        if sample_weight is not None:
            weight = _check_sample_weight(sample_weight, X, dtype=np.float64).astype(np.float32)
        X = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
        target = np.asarray(y, dtype=np.float32)
        return InMemorySource(csr_chunks(X, target, weight, self.chunk_rows), X.shape[1])

    def _keep(self, w, n_iter: int, converged: bool, bias: float, stopper):
        """The fitted attributes; with early stopping the best epoch's ``w`` (see
        ``LogisticRegression._keep``)."""
        self.stopped_early_ = False
        for name in ("best_iteration_", "best_score_"):
            self.__dict__.pop(name, None)
        if stopper is not None:
            stopper.annotate(self.history_)
            if stopper.best_w is not None:
                self.best_iteration_, self.best_score_ = stopper.best_epoch, stopper.best_score
                if self.early_stopping_rounds is not None:
                    w = stopper.best_w
                    self.stopped_early_ = bool(stopper.stopped)
                    converged = converged or stopper.stopped
        self.converged_ = bool(converged)
        d = len(w) - 1
        self.coef_ = np.asarray(w[:d], dtype=np.float64).copy()
        self.intercept_ = float(w[d] * bias)
        self.n_iter_ = int(n_iter)
        if not converged:
            gap = self.history_[-1]["rel_gap"] if self.history_ else float("nan")
            warnings.warn(
                f"snapfit did not reach tol={self.tol} in max_iter={self.max_iter} epochs "
                f"(relative duality gap {gap:.3g}); increase max_iter.",
                ConvergenceWarning,
                stacklevel=3,
            )
        return self

    def predict(self, X):
        """``X w + b``; ``X`` as ``fit`` takes it (Parquet read chunk by chunk after its
        feature map is checked against the model's; its labels are not needed)."""
        check_is_fitted(self)
        dataset = as_dataset(X, require_labels=False, targets="real")
        if dataset is not None:
            from snapfit.scoring import check_map, iter_scores

            check_map(self, dataset)
            scores = [s for s, _, _ in iter_scores(self, dataset)]
            return np.concatenate(scores) if scores else np.empty(0)
        X = validate_data(self, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=False)
        if not sp.issparse(X):
            return X @ self.coef_ + self.intercept_
        X = X.tocsr()
        out = np.empty(X.shape[0])
        cpu.decision_function(
            X.indptr.astype(np.int64, copy=False), X.indices.astype(np.int32, copy=False),
            X.data, True, self.coef_, float(self.intercept_), out,
        )  # fmt: skip
        return out

    def save(self, path) -> None:
        """Write the fitted model to ``path`` (.npz with a JSON header; no pickle)."""
        check_is_fitted(self)
        arrays = {"coef": self.coef_.reshape(1, -1), "intercept": np.array([self.intercept_]),
                  "classes": np.zeros(0)}  # fmt: skip
        meta = {"params": model_io.jsonable(self.get_params()), "n_iter": self.n_iter_,
                "history": self.history_, "loss": "squared",
                "feature_map": featuremap.of_model(self)}  # fmt: skip
        meta.update(self._fit_record())
        model_io.save_arrays(path, arrays, meta)

    def to_sklearn(self):
        """A fitted ``sklearn.linear_model.Ridge`` with the same coefficients."""
        from sklearn.linear_model import Ridge as SkRidge

        check_is_fitted(self)
        sk = SkRidge(alpha=self.alpha, fit_intercept=self.fit_intercept)
        sk.coef_ = self.coef_.copy()
        sk.intercept_ = self.intercept_
        sk.n_features_in_ = self.n_features_in_
        return sk


def load(path) -> Ridge:
    """Load a model written by ``Ridge.save``; a file of another model is refused."""
    est = model_io.load_estimator(path, Ridge())
    est.coef_ = est.coef_.ravel()
    est.intercept_ = float(est.intercept_[0])
    est.n_iter_ = int(est.n_iter_[0])
    del est.classes_
    return est
