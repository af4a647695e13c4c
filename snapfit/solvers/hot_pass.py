"""A CPU unit's pass under the hot block (``snapfit.engine.hot``): ``gpu.cd_pass_hot`` on a CPU.

Why a kernel of its own: ``cpu.cd_pass`` writes every column it touches, while under the hot
block a row writes only its cold columns of ``w`` and adds its hot moves into an accumulator
(``w_H`` is read-only for the round; the trainer takes the hot step after it). The row's
curvature is ``sigma`` times the cold part of its norm. The loop is ``cpu.cd_pass``'s
three-stage prefetch pipeline, the scalar math THE one (``dual.row_step``, as ``cpu`` compiles
it). The cold part of a row's norm is its stored norm (duplicated indices summed first, as
``cpu.row_sqnorms`` makes it) less the squares of its hot values, duplicated hot columns summed
first too. A row holds a column twice where its entries' squares, summed in ``row_sqnorms``'s
order, do not round to its stored norm: only such rows (rare) take ``hot_sq``'s exact merge.
Whether a column is hot is read from a bitmap (``hot_bits``: 128 KiB for 2^20 columns, it
stays in cache), the hot position (``hot_pos``, 8 bytes a column) only for hot columns, whose
few thousand entries stay in cache too: with ``hot_pos`` read for every entry, a pass on 200k
Criteo-like rows (2,000 hot columns) took ~2x ``cpu.cd_pass``'s time, its misses on an 8 MiB
array. With no hot column the pass is ``cpu.cd_pass`` bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from snapfit.solvers import cpu


def hot_bits(hot_pos: np.ndarray) -> np.ndarray:
    """The bitmap of the hot columns (``hot_pos >= 0``), bit ``j & 7`` of byte ``j >> 3``."""
    return np.packbits(np.asarray(hot_pos) >= 0, bitorder="little")


@njit(nogil=True, cache=True)
def hot_sq(lo, hi, indices, values, has_values, hot_pos):
    """The squared norm of a row's hot part, duplicated columns summed first (O(h^2): only
    for the rare rows that hold a hot column twice)."""
    s = 0.0
    for k in range(lo, hi):
        h = hot_pos[indices[k]]
        if h < 0:
            continue
        first = True
        for kk in range(lo, k):
            if indices[kk] == indices[k]:
                first = False
                break
        if first:
            v = values[k] if has_values else 1.0
            for kk in range(k + 1, hi):
                if indices[kk] == indices[k]:
                    v += values[kk] if has_values else 1.0
            s += v * v
    return s


@njit(nogil=True, cache=True)
def cd_pass_hot(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, sqnorm, hot_pos, bits, alpha, w, acc, rows, sigma, loss,
):  # fmt: skip
    """One pass over ``rows`` updating ``alpha`` and the cold columns of ``w`` (a view of
    ``n_features + 1``, the intercept last); ``hot_pos[j] >= 0`` marks a hot column (the
    intercept's is ``hot_pos[-1]``), whose move ``sigma delta x_ij`` goes to
    ``acc[hot_pos[j]]``; ``bits`` is ``hot_bits(hot_pos)``; ``sqnorm`` the rows' norms.
    Returns ``(gap, entropy)`` as ``cpu.cd_pass`` does."""
    gap = 0.0
    ent = 0.0
    d = len(w) - 1
    ib = hot_pos[d]
    b2 = bias * bias if ib < 0 else 0.0
    n = len(rows)
    for t in range(n):
        if t + 3 < n:
            cpu.prefetch(indptr, rows[t + 3])
        if t + 2 < n:
            r = rows[t + 2]
            for k in range(indptr[r], indptr[r + 1], 16):
                cpu.prefetch(indices, k)
                if has_values:
                    cpu.prefetch(values, k)
            cpu.prefetch(sqnorm, r)
            cpu.prefetch(alpha, r)
            cpu.prefetch(y, r)
        if t + 1 < n:
            r = rows[t + 1]
            for k in range(indptr[r], indptr[r + 1]):
                cpu.prefetch(w, indices[k])
        i = rows[t]
        yi = y[i]
        c = c_pos if yi > 0 else c_neg
        if has_weight:
            c *= weight[i]
        if c <= 0.0:
            continue
        lo = indptr[i]
        hi = indptr[i + 1]
        dot = w[d] * bias
        hsq = 0.0
        full = 0.0
        for k in range(lo, hi):
            j = indices[k]
            x = np.float64(values[k]) if has_values else 1.0
            dot += w[j] * x
            full += x * x
            hsq += x * x * ((bits[j >> 3] >> (j & 7)) & 1)  # no branch: most are hot, some not
        if np.float32(full) != sqnorm[i] and hsq > 0.0:  # a column twice: merge the hot part
            hsq = hot_sq(lo, hi, indices, values, has_values, hot_pos)
        q = sigma * (max(sqnorm[i] - hsq, 0.0) + b2)
        s_new, move, g, e = cpu.row_step(q, dot, yi, alpha[i], c, loss)
        alpha[i] = s_new
        gap += g
        ent += e
        if move != 0.0:
            step = sigma * move
            if ib >= 0:
                acc[ib] += step * bias
            else:
                w[d] += step * bias
            for k in range(lo, hi):
                j = indices[k]
                x = step * values[k] if has_values else step
                if (bits[j >> 3] >> (j & 7)) & 1:
                    acc[hot_pos[j]] += x
                else:
                    w[j] += x
    return gap, ent
