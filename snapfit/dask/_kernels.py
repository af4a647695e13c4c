"""The two whole-share passes a Dask part needs besides the engine's coordinate passes.

``measure`` reads a chunk once at the global ``w``: the exact additive pieces of the objective
(loss, dual entropy, duality gap) and the chunk's share of the gradient ``r``. A part's
``w(alpha)`` is ``solvers.cpu.accumulate_w``. The scalar math is ``snapfit.solvers.dual``'s, as
compiled for the CPU kernels (``cpu.row_terms_of``, ``cpu.alpha_at``, ``cpu.row_coef``), for
every loss code of ``dual.LOSSES``.

Why ``r``: the primal gradient at ``w`` is ``grad P(w) = w - sum_i p_i y_i x_i`` with ``p_i``
the dual point paired with ``w`` (``dual.alpha_at``: ``C_i / (1 + exp(m_i))`` for logistic;
``p_i x_i`` without ``y_i`` for the squared loss), and since ``w = w(alpha)`` it splits over the
parts as ``sum_k r_k`` with ``r_k = sum_{i in k} (a_i - p_i) y_i x_i``. The hinge has no
gradient at margin 1, where its free rows (``0 < a_i < C``) sit at the optimum: such a row pairs
with its own ``a_i`` (a subgradient's choice), so ``r`` vanishes at the optimum as it does for
the smooth losses (pairing it with ``alpha_at``'s 0 or ``C`` had the driver reject half of the
rounds); the driver's acceptance test guards the rest.
"""

from __future__ import annotations

from math import exp

from numba import njit

from snapfit.solvers.cpu import (
    alpha_at,
    prefetch_row,
    row_axpy,
    row_bound,
    row_coef,
    row_dot,
    row_terms_of,
    unpack_alpha,
)
from snapfit.solvers.dual import HINGE, LOGISTIC

_inline = njit(inline="always", nogil=True)


@_inline
def _sigmoid(m):
    """``1 / (1 + exp(-m))`` without overflow."""
    if m >= 0.0:
        return 1.0 / (1.0 + exp(-m))
    e = exp(m)
    return e / (1.0 + e)


@njit(nogil=True, cache=True)
def measure(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, alpha, w, r, loss=0,
):  # fmt: skip
    """Exact ``(loss, entropy, gap)`` sums of a chunk at ``w``; adds the chunk's ``r`` into ``r``.

    Logistic's ``a_i - p_i`` is taken on the side of the packed alpha that is stored exactly:
    ``a - C s(-m)`` when ``a <= C/2``, else ``C s(m) - (C - a)``, so rows near their bound lose
    no digits. The other losses store ``a_i`` itself: ``row_coef`` of ``a_i`` minus that of
    ``p_i``.
    """
    total = 0.0
    ent = 0.0
    gap = 0.0
    n = len(indptr) - 1
    for i in range(n):
        if i + 2 < n:
            prefetch_row(indptr, indices, w, i + 2)
            prefetch_row(indptr, indices, r, i + 2)
        c = row_bound(i, y, weight, has_weight, c_pos, c_neg)
        if c <= 0.0:
            continue
        lo = indptr[i]
        hi = indptr[i + 1]
        dot = row_dot(lo, hi, indices, values, has_values, w, bias)
        yi = y[i]
        li, ei, gi = row_terms_of(dot, yi, alpha[i], c, loss)
        total += li
        ent += ei
        gap += gi
        if loss == LOGISTIC:
            m = yi * dot
            a, ca = unpack_alpha(alpha[i], c)
            if a <= ca:
                coef = (a - c * _sigmoid(-m)) * yi
            else:
                coef = (c * _sigmoid(m) - ca) * yi
        else:
            paired = alpha_at(dot, yi, c, loss)
            if loss == HINGE and 0.0 < alpha[i] < c:
                paired = alpha[i]
            coef = row_coef(alpha[i], c, yi, loss) - row_coef(paired, c, yi, loss)
        if coef != 0.0:
            row_axpy(lo, hi, indices, values, has_values, r, bias, coef)
    return total, ent, gap
