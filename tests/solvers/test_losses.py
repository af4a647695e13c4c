"""The losses beside logistic in THE scalar update (``dual.row_step``) and the CPU kernels: each
closed-form step is the exact coordinate maximizer, its gap terms are >= 0 and vanish at the
paired dual point, and epochs of ``cpu.cd_pass`` reach the reference optimum (liblinear for the
SVMs, the normal equations for the squared loss) with a certificate that is exact."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar
from sklearn.svm import LinearSVC as SkSVC

from snapfit.solvers import cpu, dual

HINGE, SQHINGE, SQUARED = dual.HINGE, dual.SQUARED_HINGE, dual.SQUARED


def conjugate(a, y, c, loss):
    """``l*(-a)``: the dual term ``row_terms_of`` reports (the dual is ``-1/2||w||^2 - sum``)."""
    if loss == HINGE:
        return -a
    if loss == SQHINGE:
        return a * a / (4 * c) - a
    return a * a / (2 * c) - a * y


@settings(max_examples=200, deadline=None)
@given(
    loss=st.sampled_from([HINGE, SQHINGE, SQUARED]),
    q=st.floats(1e-3, 1e3),
    dot=st.floats(-5, 5),
    y=st.sampled_from([-1.0, 1.0, 0.3]),
    frac=st.floats(0, 1),
    c=st.floats(1e-3, 1e3),
)
def test_closed_form_step_maximizes_the_row_dual(loss, q, dot, y, frac, c):
    """The step maximizes ``-1/2 q (a - s)^2 - (a - s) * grad - l*(-a)`` over the feasible set."""
    if loss != SQUARED:
        y = 1.0 if y > 0 else -1.0
    s = frac * c
    a, move, _, e = dual.row_step(q, dot, y, s, c, loss)
    sign = 1.0 if loss == SQUARED else y

    def neg_dual(z):
        return 0.5 * q * (z - s) ** 2 + (z - s) * sign * dot + conjugate(z, y, c, loss)

    hi = c if loss == HINGE else 10 * c + 100
    lo = -(10 * c + 100) if loss == SQUARED else 0.0
    best = minimize_scalar(neg_dual, bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
    assert neg_dual(a) <= best.fun + 1e-7 * (1 + abs(best.fun))
    assert move == pytest.approx((a - s) * sign, abs=1e-15)
    assert e == pytest.approx(conjugate(a, y, c, loss), rel=1e-12, abs=1e-15)
    if loss == HINGE:
        assert 0.0 <= a <= c
    elif loss == SQHINGE:
        assert a >= 0.0


@settings(max_examples=200, deadline=None)
@given(
    loss=st.sampled_from([HINGE, SQHINGE, SQUARED]),
    dot=st.floats(-50, 50),
    y=st.sampled_from([-1.0, 1.0, 2.5]),
    frac=st.floats(0, 1),
    c=st.floats(1e-6, 1e6),
)
def test_row_terms_gap_is_fenchel_young(loss, dot, y, frac, c):
    """``gap = loss + dual term + a m >= 0`` and zero at the paired ``alpha_at``."""
    if loss != SQUARED:
        y = 1.0 if y > 0 else -1.0
    s = frac * c
    m = dot if loss == SQUARED else y * dot
    li, ei, gi = dual.row_terms_of(dot, y, s, c, loss)
    assert gi >= 0.0
    assert gi == pytest.approx(li + ei + s * m, rel=1e-9, abs=1e-9 * c * (1 + abs(dot)))
    assert ei == pytest.approx(conjugate(s, y, c, loss), rel=1e-12, abs=1e-300)
    paired = dual.alpha_at(dot, y, c, loss)
    assert dual.row_terms_of(dot, y, paired, c, loss)[2] <= 1e-9 * c * (1 + abs(dot)) ** 2


def test_empty_row_without_intercept_goes_to_its_limit():
    """``q = 0`` (no entries, no intercept): the hinge step goes to the bound its sign asks."""
    assert dual.row_step(0.0, 0.0, 1.0, 0.2, 1.0, HINGE)[0] == 1.0
    assert dual.row_step(0.0, 2.0, 1.0, 0.2, 1.0, HINGE)[0] == 0.0
    assert dual.row_step(0.0, 1.0, 1.0, 0.2, 1.0, HINGE)[0] == 0.2
    # zero-weight rows never move and count for nothing
    assert dual.row_step(1.0, 0.0, 1.0, 0.0, 0.0, SQUARED) == (0.0, 0.0, 0.0, 0.0)
    assert dual.row_terms_of(0.5, 1.0, 0.0, 0.0, HINGE) == (0.0, 0.0, 0.0)
    assert dual.row_coef(0.3, 0.0, 1.0, SQHINGE) == 0.0
    assert dual.alpha_at(0.5, 1.0, 0.0, SQUARED) == 0.0


def data(n=120, d=9, seed=0, regression=False):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.5, format="csr", random_state=seed, dtype=np.float32)
    X.data = (X.data * 2 - 1).astype(np.float32)
    w_true = rng.normal(size=d)
    z = X @ w_true + 0.3 * rng.normal(size=n)
    y = z.astype(np.float32) if regression else np.where(z > 0, 1.0, -1.0).astype(np.float32)
    wt = rng.uniform(0, 2, n).astype(np.float32)
    wt[:5] = 0.0
    return X, y, wt


def solve(X, y, wt, c_pos, c_neg, bias, loss, epochs, n_threads_sigma=1.0):
    n, d = X.shape
    args = (X.indptr.astype(np.int64), X.indices, X.data, True, y, wt, True)
    sq = np.zeros(n)
    cpu.row_sqnorms(args[0], args[1], args[2], True, sq)
    alpha, w = np.zeros(n), np.zeros(d + 1)
    rng = np.random.default_rng(1)
    for _ in range(epochs):
        gap, ent = cpu.cd_pass(*args, c_pos, c_neg, bias, sq, alpha, w,
                               rng.permutation(n).astype(np.int64), 1.0, loss)  # fmt: skip
    lsum, esum, gsum = cpu.chunk_objective(*args, c_pos, c_neg, bias, alpha, w, loss)
    return args, alpha, w, ent, (lsum, esum, gsum)


def reference(X, y, wt, c_pos, c_neg, bias, loss):
    """The optimum ``w`` (intercept weight last, its feature ``bias``) from another solver."""
    Xb = sp.hstack([X, np.full((X.shape[0], 1), bias)]).tocsr().astype(np.float64)
    c = np.where(y > 0, c_pos, c_neg) * wt.astype(np.float64)
    if loss == SQUARED:
        A = np.eye(Xb.shape[1]) + (Xb.T @ sp.diags(c) @ Xb).toarray()
        return np.linalg.solve(A, Xb.T @ (c * y.astype(np.float64)))
    sk = SkSVC(C=1.0, loss="hinge" if loss == HINGE else "squared_hinge", dual=True,
               fit_intercept=False, tol=1e-10, max_iter=100_000)  # fmt: skip
    sk.fit(Xb, y, sample_weight=c)
    return sk.coef_.ravel()


def primal(X, y, wt, c_pos, c_neg, bias, loss, w):
    z = X @ w[:-1] + w[-1] * bias
    c = np.where(y > 0, c_pos, c_neg) * wt
    if loss == SQUARED:
        return 0.5 * w @ w + 0.5 * np.sum(c * (y - z) ** 2)
    u = np.maximum(0.0, 1.0 - y * z)
    return 0.5 * w @ w + np.sum(c * (u if loss == HINGE else u * u))


@pytest.mark.parametrize("loss", [HINGE, SQHINGE, SQUARED])
@pytest.mark.parametrize("bias", [1.0, 0.0])
def test_cd_pass_reaches_the_reference_optimum_with_an_exact_certificate(loss, bias):
    X, y, wt = data(regression=loss == SQUARED)
    c_pos, c_neg = 0.8, 1.7
    args, alpha, w, ent, (lsum, esum, gsum) = solve(X, y, wt, c_pos, c_neg, bias, loss, 1500)
    w_ref = reference(X, y, wt, c_pos, c_neg, bias, loss)
    p_ref = primal(X, y, wt, c_pos, c_neg, bias, loss, w_ref)
    p = 0.5 * w @ w + lsum
    assert p == pytest.approx(primal(X, y, wt, c_pos, c_neg, bias, loss, w), rel=1e-12)
    assert abs(p - p_ref) <= 1e-6 * p_ref
    # The dual from the pass's entropy sum is the exact one, and P - D is the summed row gaps.
    assert ent == pytest.approx(esum, rel=1e-9)
    d_val = -0.5 * w @ w - esum
    assert gsum == pytest.approx(p - d_val, rel=1e-6, abs=1e-12 * p)
    assert d_val <= p_ref * (1 + 1e-9)
    assert gsum <= 1e-7 * p
    # w(alpha) rebuilt from alpha alone is the w the pass kept.
    w2 = np.zeros_like(w)
    cpu.accumulate_w(*args, c_pos, c_neg, bias, alpha, w2, loss)
    np.testing.assert_allclose(w2, w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("loss", [SQHINGE, SQUARED])
def test_warm_start_from_the_optimum_is_the_optimum(loss):
    """``alpha_from_margins`` at the optimal ``w`` gives the optimal dual point (where the
    paired point is unique: not the hinge, whose margin-1 rows pair with a whole interval)."""
    X, y, wt = data(regression=loss == SQUARED, seed=3)
    args, alpha, w, _, _ = solve(X, y, wt, 1.0, 1.0, 1.0, loss, 300)
    a2 = np.zeros_like(alpha)
    cpu.alpha_from_margins(*args, 1.0, 1.0, 1.0, w, a2, loss)
    np.testing.assert_allclose(a2, alpha, rtol=1e-6, atol=1e-9)
