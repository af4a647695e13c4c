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
from snapfit.solvers.ovr import block_axpy, block_dot, class_row

_inline = njit(inline="always", nogil=True)


@_inline
def _sigmoid(m):
    """``1 / (1 + exp(-m))`` without overflow."""
    if m >= 0.0:
        return 1.0 / (1.0 + exp(-m))
    e = exp(m)
    return e / (1.0 + e)


@_inline
def _pair_coef(dot, yi, s, c, loss):
    """``(a_i - p_i) y_i`` of one row (``a_i - p_i`` for the squared loss): the row's share
    of ``r`` (module docstring); logistic's taken on the side of the packed alpha that is
    stored exactly: ``a - C s(-m)`` when ``a <= C/2``, else ``C s(m) - (C - a)``."""
    if loss == LOGISTIC:
        m = yi * dot
        a, ca = unpack_alpha(s, c)
        if a <= ca:
            return (a - c * _sigmoid(-m)) * yi
        return (c * _sigmoid(m) - ca) * yi
    paired = alpha_at(dot, yi, c, loss)
    if loss == HINGE and 0.0 < s < c:
        paired = s
    return row_coef(s, c, yi, loss) - row_coef(paired, c, yi, loss)


@njit(nogil=True, cache=True)
def measure_ovr(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, alpha, w, r, loss=0,
):  # fmt: skip
    """``measure`` of one-vs-rest's K problems (``snapfit.solvers.ovr``: ``alpha`` (rows, K),
    ``w`` and ``r`` K blocks, per-class bounds): the sums over rows and problems."""
    n_classes = alpha.shape[1]
    d = len(w) // n_classes - 1
    total = 0.0
    ent = 0.0
    gap = 0.0
    for i in range(len(indptr) - 1):
        lo = indptr[i]
        hi = indptr[i + 1]
        for k in range(n_classes):
            yk, c = class_row(i, k, y, weight, has_weight, c_pos, c_neg)
            if c <= 0.0:
                continue
            off = k * (d + 1)
            dot = block_dot(lo, hi, indices, values, has_values, w, off, d, bias)
            li, ei, gi = row_terms_of(dot, yk, alpha[i, k], c, loss)
            total += li
            ent += ei
            gap += gi
            coef = _pair_coef(dot, yk, alpha[i, k], c, loss)
            if coef != 0.0:
                block_axpy(lo, hi, indices, values, has_values, r, off, d, bias, coef)
    return total, ent, gap


@njit(nogil=True, cache=True)
def measure(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, alpha, w, r, loss=0,
):  # fmt: skip
    """Exact ``(loss, entropy, gap)`` sums of a chunk at ``w``; adds the chunk's ``r`` into ``r``
    (each row's ``_pair_coef``: logistic's rows near their bound lose no digits; the other
    losses store ``a_i`` itself, ``row_coef`` of ``a_i`` minus that of ``p_i``)."""
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
        coef = _pair_coef(dot, yi, alpha[i], c, loss)
        if coef != 0.0:
            row_axpy(lo, hi, indices, values, has_values, r, bias, coef)
    return total, ent, gap
