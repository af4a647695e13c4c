"""The scikit-learn door to linear SVMs: ``snapfit.LinearSVC`` (hinge and squared hinge).

The fit is ``LogisticRegression``'s (arrays, device arrays, Parquet, checkpoints, warm starts,
every device) with another loss in THE scalar update (``dual.row_step``). The objective is
liblinear's, like ``sklearn.svm.LinearSVC(dual=True)`` (solvers 3 and 1): a regularized bias
feature ``intercept_scaling`` for the intercept. No probabilities: an SVM scores margins.
"""

from __future__ import annotations

from sklearn.utils._param_validation import StrOptions
from sklearn.utils.metaestimators import available_if

from snapfit import model as model_io
from snapfit.estimator import LogisticRegression


def _never(est) -> bool:
    return False


class LinearSVC(LogisticRegression):
    """L2-regularized linear SVM by dual coordinate descent, in memory or out of core.

    Minimizes ``1/2 ||w||^2 + sum_i C_i max(0, 1 - y_i (w.x_i + b))`` (``loss="hinge"``) or
    the same with the hinge squared (``loss="squared_hinge"``, the default, as scikit-learn's),
    ``C_i = C * class_weight[y_i] * sample_weight_i``, the intercept ``b`` the weight of a
    constant feature ``intercept_scaling`` (regularized, as in liblinear). ``C`` is
    scikit-learn's; Snap ML's ``SupportVectorMachine(regularizer=...)`` is ``1/C``. The other
    parameters are ``snapfit.LogisticRegression``'s; early stopping scores ``validation_metric``:
    ``"auc"`` (the default), ``"accuracy"`` or ``"hinge"`` (the mean hinge loss, lower is
    better, for either loss).
    """

    _parameter_constraints: dict = {
        **LogisticRegression._parameter_constraints,
        "loss": [StrOptions({"hinge", "squared_hinge"})],
        "validation_metric": [StrOptions({"auc", "accuracy", "hinge"})],
    }

    def __init__(
        self,
        C=1.0,
        *,
        loss="squared_hinge",
        fit_intercept=True,
        intercept_scaling=1.0,
        class_weight=None,
        tol=1e-4,
        max_iter=1000,
        device="auto",
        n_jobs=None,
        deterministic=True,
        device_ids=None,
        memory_budget=None,
        chunk_rows=None,
        random_state=None,
        warm_start=False,
        verbose=0,
        checkpoint_dir=None,
        checkpoint_every=1,
        early_stopping_rounds=None,
        validation_metric="auc",
        early_stopping_gap=1e-2,
    ):
        super().__init__(
            C, fit_intercept=fit_intercept, intercept_scaling=intercept_scaling,
            class_weight=class_weight, tol=tol, max_iter=max_iter, device=device,
            n_jobs=n_jobs, deterministic=deterministic, device_ids=device_ids,
            memory_budget=memory_budget, chunk_rows=chunk_rows, random_state=random_state,
            warm_start=warm_start, verbose=verbose, checkpoint_dir=checkpoint_dir,
            checkpoint_every=checkpoint_every, early_stopping_rounds=early_stopping_rounds,
            validation_metric=validation_metric, early_stopping_gap=early_stopping_gap,
        )  # fmt: skip
        self.loss = loss

    def _loss_name(self) -> str:
        return self.loss

    # An SVM has no probabilities (scikit-learn's LinearSVC has neither method).
    predict_proba = available_if(_never)(LogisticRegression.predict_proba)
    predict_log_proba = available_if(_never)(LogisticRegression.predict_log_proba)

    def to_sklearn(self):
        """A fitted ``sklearn.svm.LinearSVC`` with the same coefficients."""
        from sklearn.svm import LinearSVC as SkSVC
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self)
        sk = SkSVC(C=self.C, loss=self.loss, dual=True, fit_intercept=self.fit_intercept,
                   intercept_scaling=self.intercept_scaling, class_weight=self.class_weight,
                   tol=self.tol, max_iter=self.max_iter)  # fmt: skip
        sk.coef_ = self.coef_.copy()
        sk.intercept_ = self.intercept_.copy()
        sk.classes_ = self.classes_.copy()
        sk.n_features_in_ = self.n_features_in_
        sk.n_iter_ = int(self.n_iter_[0])
        return sk


def load(path) -> LinearSVC:
    """Load a model written by ``LinearSVC.save``; a file of another model is refused."""
    return model_io.load_estimator(path, LinearSVC())
