"""The scikit-learn door to ridge regression: ``snapfit.Ridge`` (the squared loss).

Arrays in memory (dense or sparse, NumPy or SciPy) go to ``snapfit.train.train`` with the
squared loss in THE scalar update (``dual.row_step``, SDCA's closed-form step). ``alpha`` is
scikit-learn's: ``||y - Xw - b||^2 + alpha ||w||^2`` is ``alpha`` times the dual CD objective
``1/2 ||w||^2 + sum_i C_i/2 (y_i - w.x_i - b)^2`` with ``C_i = sample_weight_i / alpha``. The
intercept is the weight of a constant feature ``intercept_scaling`` and so is regularized
(by ``alpha (b / intercept_scaling)^2``), where scikit-learn's is not; a larger
``intercept_scaling`` brings the two closer. Targets are kept as float32, like the labels.
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from snapfit import model as model_io
from snapfit.engine.source import InMemorySource
from snapfit.inputs import csr_chunks
from snapfit.solvers import cpu
from snapfit.solvers.dual import SQUARED
from snapfit.train import resolve_devices, train


class Ridge(RegressorMixin, BaseEstimator):
    """L2-regularized least squares by dual coordinate descent (SDCA) on CPU threads or GPUs.

    Minimizes ``sum_i s_i (y_i - w.x_i - b)^2 + alpha (||w||^2 + (b / intercept_scaling)^2)``
    (``s_i`` the sample weights). ``alpha`` is scikit-learn's ``Ridge(alpha)`` (see
    docs/losses.md for Snap ML). ``tol`` bounds the relative duality gap; ``max_iter`` counts
    epochs.
    """

    _parameter_constraints: dict = {
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "device": [StrOptions({"auto", "cpu", "gpu"})],
        "n_jobs": [Integral, None],
        "random_state": ["random_state"],
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
        random_state=None,
    ):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.tol = tol
        self.max_iter = max_iter
        self.device = device
        self.n_jobs = n_jobs
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _loss_name(self) -> str:
        return "squared"

    def fit(self, X, y, sample_weight=None):
        """Fit on an array or sparse matrix with real targets ``y`` (1-d)."""
        from snapfit.engine import Problem

        self._validate_params()
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32],
                             order="C", y_numeric=True)  # fmt: skip
        weight = None
        if sample_weight is not None:
            weight = _check_sample_weight(sample_weight, X, dtype=np.float64).astype(np.float32)
        X = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
        target = np.asarray(y, dtype=np.float32)
        source = InMemorySource(csr_chunks(X, target, weight, None), X.shape[1])
        bias = float(self.intercept_scaling) if self.fit_intercept else 0.0
        c = 1.0 / float(self.alpha)
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        problem = Problem(n_features=X.shape[1], c_pos=c, c_neg=c, bias=bias, tol=float(self.tol),
                          max_iter=int(self.max_iter), seed=seed, loss=SQUARED)  # fmt: skip
        result = train(source, problem, devices=resolve_devices(self.device, self.n_jobs),
                       keep_alpha=False)  # fmt: skip
        d = X.shape[1]
        self.coef_ = np.asarray(result.w[:d], dtype=np.float64).copy()
        self.intercept_ = float(result.w[d] * bias)
        self.n_iter_ = int(result.n_iter)
        self.history_ = [rec.as_dict() for rec in result.history]
        if not result.converged:
            gap = self.history_[-1]["rel_gap"] if self.history_ else float("nan")
            warnings.warn(
                f"snapfit did not reach tol={self.tol} in max_iter={self.max_iter} epochs "
                f"(relative duality gap {gap:.3g}); increase max_iter.",
                ConvergenceWarning,
                stacklevel=2,
            )
        return self

    def predict(self, X):
        """``X w + b``."""
        check_is_fitted(self)
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
                "history": self.history_, "loss": "squared"}  # fmt: skip
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
