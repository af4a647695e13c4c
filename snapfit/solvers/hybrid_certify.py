"""The hybrid's exact check, and what was tried to close its certificate's lag.

Why: under ``hybrid`` the primal reaches the optimum's neighbourhood about as fast as sequential
dual CD, but the certified gap ``sum_i g_i + 1/2 ||w_H - v_H(alpha)||^2`` lags, because the
``alag`` step keeps ``w_H`` off ``v_H(alpha)`` by ``f M (w_H - wbar)``: the rows' alpha answered
the ``w_H`` of their segment, not today's. Two cheap remedies at an exact check, either for the
certificate only (``True``) or taken by the iterate too (``"keep"``):

- ``line``: the primal along ``w_H(t) = w_H + t (v_H - w_H)`` (``t = 1`` is ``w(alpha)``, the
  plain dual CD certificate), minimized in ``t``: the margins and ``x_iH . (v_H - w_H)`` once,
  then ``n`` scalar terms per trial, no data read again;
- ``dual``: the dual point that the rows would have reached had they seen today's ``w_H``, to
  first order: ``alpha_i - D_i y_i x_iH . (w_H - w_H^seen(i))`` with ``D_i = alpha_i (C_i -
  alpha_i) / C_i`` and ``w_H^seen`` the ``w_H`` of the row's segment; then ``v_H(alpha')`` is
  ``w_H`` to first order (the step's fixed point). Its dual needs ``v(alpha')``: one pass that
  adds the rows' changes, then a 1-D search along that direction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.optimize import minimize_scalar

from snapfit.solvers import cpu


@dataclass
class Check:
    """One exact check: ``P``, ``D``, the hot term, ``sum g_i``, the identity's residual
    relative to ``|P|``, ``||w_S||^2`` and the dual's entropy sum."""

    primal: float
    dual: float
    hot: float
    gsum: float
    identity: float
    ws2: float
    ent: float


def exact_check(args, c_pos, c_neg, bias, alpha, w, hot, v_h) -> Check:
    """``P(w)``, ``D(alpha)`` (the full dual, ``v_S(alpha) = w_S``) and the identity
    ``P - D = sum g_i + 1/2 ||w_H - v_H||^2``, all from one objective pass."""
    loss, ent, gsum = cpu.chunk_objective(*args, c_pos, c_neg, bias, alpha, w)
    w_s = w.copy()
    w_s[hot] = 0.0
    ws2 = cpu.squared_norm(w_s)
    w_h = w[hot]
    primal = 0.5 * cpu.squared_norm(w) + loss
    dual = -0.5 * (ws2 + v_h @ v_h) - ent
    hot_term = 0.5 * float((w_h - v_h) @ (w_h - v_h))
    identity = abs((primal - dual) - (gsum + hot_term)) / abs(primal)
    return Check(primal, dual, hot_term, gsum, identity, ws2, ent)


@njit(nogil=True, cache=True)
def margins(indptr, indices, values, has_values, y, bias, w, out):
    """``out[i] = y_i w . x_i``."""
    for i in range(len(indptr) - 1):
        out[i] = y[i] * cpu.row_dot(indptr[i], indptr[i + 1], indices, values, has_values, w, bias)


@njit(nogil=True, cache=True)
def add_rows(indptr, indices, values, has_values, bias, coef, out):
    """``out += sum_i coef_i x_i`` (the intercept included)."""
    for i in range(len(indptr) - 1):
        if coef[i] != 0.0:
            cpu.row_axpy(indptr[i], indptr[i + 1], indices, values, has_values, out, bias, coef[i])


@njit(nogil=True, cache=True)
def hot_dots(h_indptr, h_pos, h_val, u, out):
    """``out[i] = x_iH . u`` for every row."""
    for i in range(len(h_indptr) - 1):
        s = 0.0
        for k in range(h_indptr[i], h_indptr[i + 1]):
            s += h_val[k] * u[h_pos[k]]
        out[i] = s


@njit(nogil=True, cache=True)
def lag_dots(h_indptr, h_pos, h_val, rows, seg, drift, out):
    """``out[i] = x_iH . drift[s]`` for row ``i`` in segment ``s`` of the epoch's ``rows``."""
    for t in range(len(rows)):
        i = rows[t]
        u = drift[t // seg]
        s = 0.0
        for k in range(h_indptr[i], h_indptr[i + 1]):
            s += h_val[k] * u[h_pos[k]]
        out[i] = s


def _softplus(m):
    return np.logaddexp(0.0, -m)


def _entropy(a, c):
    """``sum a log(a/C) + (C-a) log((C-a)/C)`` (0 log 0 = 0) over rows with ``C > 0``."""
    ok = c > 0
    a, c = a[ok], c[ok]
    ca = c - a
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = np.where(a > 0, a * np.log(a / c), 0.0)
        t2 = np.where(ca > 0, ca * np.log(ca / c), 0.0)
    return float(np.sum(t1) + np.sum(t2))


def improve(chk, args, c_pos, c_neg, bias, alpha, w, hot, hot_pos, v_h, hcsr, a, cs, rows, seg,
            ring, line, dual):  # fmt: skip
    """``chk`` with a better dual (``dual``) and primal (``line``) point; with ``"keep"`` the
    iterate (``alpha``, ``w``, ``v_h`` in place) moves there too."""
    indptr, indices, values, has_values, y = args[:5]
    n, nh = len(y), len(hot)
    yd = y.astype(np.float64)
    primal, best_dual = chk.primal, chk.dual
    if dual and nh:
        w_h = w[hot]
        lag = np.zeros(n)
        lag_dots(*hcsr, rows, seg, w_h[None, :] - ring, lag)
        safe = np.where(cs > 0, cs, 1.0)
        da = -(a * (cs - a) / safe) * yd * lag
        dv = np.zeros(len(w))
        add_rows(indptr, indices, values, has_values, bias, da * yd, dv)
        v = w.copy()
        v[hot] = v_h
        vv, vdv, dvdv = v @ v, v @ dv, dv @ dv
        with np.errstate(divide="ignore", invalid="ignore"):
            room = np.where(da > 0, (cs - a) / da, np.where(da < 0, -a / da, np.inf))
        s_max = min(1.5, float(np.min(room)) * (1 - 1e-12)) if n else 0.0

        def neg_dual(s):
            return 0.5 * (vv + 2 * s * vdv + s * s * dvdv) + _entropy(a + s * da, cs)

        s = minimize_scalar(neg_dual, bounds=(0.0, s_max), method="bounded").x if s_max > 0 else 0
        d_new = -neg_dual(s)
        if d_new > best_dual:
            best_dual = d_new
            if dual == "keep":  # the iterate moves: certify the new point from scratch
                a_new = np.clip(a + s * da, 0.0, cs)
                alpha[:] = np.where(a_new <= cs - a_new, a_new, -(cs - a_new))
                cold = hot_pos < 0
                w[cold] += s * dv[cold]
                v_h += s * dv[hot]
                chk = exact_check(args, c_pos, c_neg, bias, alpha, w, hot, v_h)
                primal, best_dual = chk.primal, chk.dual
    if line and nh:
        u = v_h - w[hot]
        m = np.zeros(n)
        margins(indptr, indices, values, has_values, y, bias, w, m)
        dl = np.zeros(n)
        hot_dots(*hcsr, u, dl)
        dl *= yd
        w_h = w[hot]
        cw = np.where(cs > 0, cs, 0.0)

        def prim(t):
            wt = w_h + t * u
            return 0.5 * (chk.ws2 + wt @ wt) + float(cw @ _softplus(m + t * dl))

        t = minimize_scalar(prim, bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-6}).x
        p_new = prim(t)
        if p_new < primal:
            primal = p_new
            if line == "keep":
                w[hot] = w_h + t * u
    return Check(primal, best_dual, chk.hot, chk.gsum, chk.identity, chk.ws2, chk.ent)
