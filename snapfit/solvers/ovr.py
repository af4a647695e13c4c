"""One-vs-rest on CPU threads: K binary problems (class k against the rest) in ONE pass.

Each row updates its K dual variables while its features are in cache. ``alpha`` is ``(rows,
K)``; ``w`` is K blocks of ``n_features + 1`` (class k's block ``w[k*(d+1) : (k+1)*(d+1)]``, its
intercept weight last); ``y`` holds class indices ``0 .. K-1``. In problem k row i is labelled
+1 when ``y_i == k`` and -1 otherwise, with the bound ``c_pos[k]`` or ``c_neg[k]`` times its
sample weight (liblinear's one-vs-rest: class k's weight on its positives, ``C`` on the rest).

The step is THE scalar update (``dual.row_step``, compiled in ``cpu``) and each problem's
arithmetic is the binary kernel's (``cpu.cd_pass``) in the same order, so the K problems of a
pass follow K binary fits of the same rows, order and seed update for update. The K problems
share nothing but the rows: their sums (loss, dual terms, gaps) add up to the objective of the
block-diagonal whole, whose duality gap certifies all K at once.
"""

from __future__ import annotations

from numba import njit

from snapfit.solvers.cpu import _prefetch, alpha_at, row_coef, row_step, row_terms_of


@njit(inline="always", nogil=True)
def class_row(i, k, y, weight, has_weight, c_pos, c_neg):
    """Row ``i`` in problem ``k`` of one-vs-rest: its label, +1 for class ``k`` and -1 for the
    rest, and its bound ``C_i`` (``cpu.row_bound`` with per-class bounds)."""
    yk = 1.0 if int(y[i]) == k else -1.0
    c = c_pos[k] if yk > 0 else c_neg[k]
    if has_weight:
        c *= weight[i]
    return yk, c


@njit(inline="always", nogil=True)
def block_dot(lo, hi, indices, values, has_values, w, off, d, bias):
    """``w_k . x_i`` with ``w_k`` the block at ``off`` (``cpu.row_dot``'s order of sums)."""
    dot = w[off + d] * bias
    if has_values:
        for t in range(lo, hi):
            dot += w[off + indices[t]] * values[t]
    else:
        for t in range(lo, hi):
            dot += w[off + indices[t]]
    return dot


@njit(inline="always", nogil=True)
def block_axpy(lo, hi, indices, values, has_values, w, off, d, bias, step):
    """``w_k += step * x_i`` with ``w_k`` the block at ``off`` (``cpu.row_axpy``'s order)."""
    w[off + d] += step * bias
    if has_values:
        for t in range(lo, hi):
            w[off + indices[t]] += step * values[t]
    else:
        for t in range(lo, hi):
            w[off + indices[t]] += step


@njit(nogil=True, cache=True)
def ovr_pass(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, sqnorm, alpha, w, rows, sigma, loss,
):  # fmt: skip
    """``cpu.cd_pass`` for K problems at once: each row of ``rows`` (in that order) takes
    its K steps in turn. Returns ``(gap, entropy)`` summed over rows and problems."""
    n_classes = alpha.shape[1]
    d = len(w) // n_classes - 1
    bias2 = bias * bias
    gap = 0.0
    ent = 0.0
    n = len(rows)
    for t in range(n):
        if t + 2 < n:
            r = rows[t + 2]
            lo = indptr[r]
            hi = indptr[r + 1]
            for z in range(lo, hi, 16):
                _prefetch(indices, z)
            _prefetch(sqnorm, r)
            _prefetch(y, r)
        i = rows[t]
        lo = indptr[i]
        hi = indptr[i + 1]
        q = sigma * (sqnorm[i] + bias2)
        for k in range(n_classes):
            yk, c = class_row(i, k, y, weight, has_weight, c_pos, c_neg)
            if c <= 0.0:
                continue
            off = k * (d + 1)
            dot = block_dot(lo, hi, indices, values, has_values, w, off, d, bias)
            s_new, move, g, e = row_step(q, dot, yk, alpha[i, k], c, loss)
            alpha[i, k] = s_new
            gap += g
            ent += e
            if move != 0.0:
                block_axpy(lo, hi, indices, values, has_values, w, off, d, bias, sigma * move)
    return gap, ent


@njit(nogil=True, cache=True)
def ovr_objective(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, alpha, w, loss,
):  # fmt: skip
    """``cpu.chunk_objective`` of the K problems: exact ``(loss, entropy, gap)`` sums."""
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
            dot = block_dot(lo, hi, indices, values, has_values, w, k * (d + 1), d, bias)
            li, ei, gi = row_terms_of(dot, yk, alpha[i, k], c, loss)
            total += li
            ent += ei
            gap += gi
    return total, ent, gap


@njit(nogil=True, cache=True)
def ovr_accumulate(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, alpha, w, loss,
):  # fmt: skip
    """``cpu.accumulate_w`` of the K problems: add ``w_k(alpha)`` of a chunk into each block."""
    n_classes = alpha.shape[1]
    d = len(w) // n_classes - 1
    for i in range(len(indptr) - 1):
        lo = indptr[i]
        hi = indptr[i + 1]
        for k in range(n_classes):
            yk, c = class_row(i, k, y, weight, has_weight, c_pos, c_neg)
            if c <= 0.0:
                continue
            coef = row_coef(alpha[i, k], c, yk, loss)
            block_axpy(lo, hi, indices, values, has_values, w, k * (d + 1), d, bias, coef)


@njit(nogil=True, cache=True)
def ovr_alpha_from_margins(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, w, alpha, loss,
):  # fmt: skip
    """``cpu.alpha_from_margins`` of the K problems: the dual point paired with ``w``."""
    n_classes = alpha.shape[1]
    d = len(w) // n_classes - 1
    for i in range(len(indptr) - 1):
        lo = indptr[i]
        hi = indptr[i + 1]
        for k in range(n_classes):
            yk, c = class_row(i, k, y, weight, has_weight, c_pos, c_neg)
            dot = 0.0
            if c > 0.0:
                dot = block_dot(lo, hi, indices, values, has_values, w, k * (d + 1), d, bias)
            alpha[i, k] = alpha_at(dot, yk, c, loss)
