"""The two whole-share passes a Dask part needs besides the engine's coordinate passes.

``measure`` reads a chunk once at the global ``w``: the exact additive pieces of the objective
(loss, dual entropy, duality gap) and the chunk's share of the gradient ``r``. ``accumulate``
adds ``sum_i a_i y_i x_i`` (a part's ``w(alpha)``). The scalar math is
``snapfit.solvers.dual``'s, compiled here with ``inline="always"`` as ``solvers.cpu`` does.

Why ``r``: the primal gradient at ``w`` is ``grad P(w) = w - sum_i p_i y_i x_i`` with
``p_i = C_i / (1 + exp(m_i))`` (the dual point paired with ``w``), and since ``w = w(alpha)``
it splits over the parts as ``sum_k r_k`` with ``r_k = sum_{i in k} (a_i - p_i) y_i x_i``.
"""

from __future__ import annotations

from math import exp

import numpy as np
from numba import njit

from snapfit.solvers import dual

_inline = njit(inline="always", nogil=True)
_math = dual.compile_with(_inline)
_unpack = _math.unpack_alpha
_row_loss = _math.row_loss
_row_entropy = _math.row_dual_entropy

EMPTY_F32 = np.zeros(0, np.float32)


@_inline
def _bound(i, y, weight, has_weight, c_pos, c_neg):
    c = c_pos if y[i] > 0 else c_neg
    if has_weight:
        c *= weight[i]
    return c


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
    c_pos, c_neg, bias, alpha, w, r,
):  # fmt: skip
    """Exact ``(loss, entropy, gap)`` sums of a chunk at ``w``; adds the chunk's ``r`` into ``r``.

    ``a_i - p_i`` is taken on the side of the packed alpha that is stored exactly: ``a - C s(-m)``
    when ``a <= C/2``, else ``C s(m) - (C - a)``, so rows near their bound lose no digits.
    """
    d = len(w) - 1
    loss = 0.0
    ent = 0.0
    gap = 0.0
    for i in range(len(indptr) - 1):
        c = _bound(i, y, weight, has_weight, c_pos, c_neg)
        if c <= 0.0:
            continue
        lo = indptr[i]
        hi = indptr[i + 1]
        dot = w[d] * bias
        if has_values:
            for k in range(lo, hi):
                dot += w[indices[k]] * values[k]
        else:
            for k in range(lo, hi):
                dot += w[indices[k]]
        yi = y[i]
        m = yi * dot
        s = alpha[i]
        a, ca = _unpack(s, c)
        li = _row_loss(m, c)
        ei = _row_entropy(s, c)
        loss += li
        ent += ei
        gap += li + a * m + ei
        if a <= ca:
            coef = a - c * _sigmoid(-m)
        else:
            coef = c * _sigmoid(m) - ca
        if coef != 0.0:
            step = coef * yi
            r[d] += step * bias
            if has_values:
                for k in range(lo, hi):
                    r[indices[k]] += step * values[k]
            else:
                for k in range(lo, hi):
                    r[indices[k]] += step
    return loss, ent, gap


@njit(nogil=True, cache=True)
def accumulate(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, alpha, out,
):  # fmt: skip
    """``out += sum_i a_i y_i x_i`` over the chunk's rows (``x_i`` with the bias feature last)."""
    d = len(out) - 1
    for i in range(len(indptr) - 1):
        c = _bound(i, y, weight, has_weight, c_pos, c_neg)
        if c <= 0.0:
            continue
        a, _ = _unpack(alpha[i], c)
        if a == 0.0:
            continue
        step = a * y[i]
        out[d] += step * bias
        if has_values:
            for k in range(indptr[i], indptr[i + 1]):
                out[indices[k]] += step * values[k]
        else:
            for k in range(indptr[i], indptr[i + 1]):
                out[indices[k]] += step


def chunk_args(chunk) -> tuple:
    """A chunk as the kernels take it (absent values / weights as empty arrays plus a flag)."""
    values = chunk.values if chunk.values is not None else EMPTY_F32
    weight = chunk.weight if chunk.weight is not None else EMPTY_F32
    return (
        chunk.indptr,
        chunk.indices,
        values,
        chunk.values is not None,
        chunk.y,
        weight,
        chunk.weight is not None,
    )
