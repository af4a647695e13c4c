"""Shared test helpers: the primal objective and reference optima from scikit-learn."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression as SkLR


def primal(X, y01, coef, intercept, C, *, sample_weight=None, class_weight=None, bias=1.0):
    """``1/2 (||coef||^2 + (intercept/bias)^2) + sum_i C_i log(1 + exp(-y_i f_i))`` in float64."""
    X = sp.csr_matrix(X, dtype=np.float64)
    y = np.where(np.asarray(y01) == np.unique(y01)[1], 1.0, -1.0)
    c = np.full(len(y), float(C))
    if class_weight is not None:
        classes = np.unique(y01)
        c *= np.where(y > 0, class_weight[classes[1]], class_weight[classes[0]])
    if sample_weight is not None:
        c *= sample_weight
    f = X @ np.ravel(coef) + intercept
    w2 = float(np.dot(np.ravel(coef), np.ravel(coef)))
    if bias:
        w2 += (intercept / bias) ** 2
    return 0.5 * w2 + float(np.sum(c * np.logaddexp(0.0, -y * f)))


def liblinear(X, y, C, **kw):
    """scikit-learn's liblinear optimum for the same objective (tight tolerance)."""
    X = sp.csr_matrix(X)
    # Copies: scikit-learn may sort indices in place, which would scramble a shared data array.
    X = sp.csr_matrix(
        (X.data.copy(), X.indices.astype(np.int32), X.indptr.astype(np.int32)), X.shape
    )
    X.sum_duplicates()
    sw = kw.pop("sample_weight", None)
    return SkLR(solver="liblinear", C=C, tol=1e-10, max_iter=100000, **kw).fit(
        X, y, sample_weight=sw
    )
