"""GPU kernels: one pass of dual coordinate descent over one device-resident CSR chunk.

The same passes as ``cpu.py`` (same arguments, same order: ``indptr, indices, values, has_values,
y, weight, has_weight``, then ``c_pos, c_neg, bias``), on device arrays, in the style of TPA-SCD
(Parnell et al. 2017, "Large-scale stochastic learning using GPUs"): a *team* of ``team`` threads
works on one row. The team computes ``w.x_i`` by a tree reduction in shared memory, its lane 0
runs THE scalar update of ``snapfit.solvers.dual`` (compiled here as CUDA device functions, so
the math is the CPU's, line for line), and every lane adds its share of ``delta * y_i * x_i``
into ``w`` with ``cuda.atomic.add``. A block holds ``blockDim.x // team`` teams; the grid walks
the chunk's rows in the order of the ``rows`` permutation (a device array), so many rows are in
flight at once and read a ``w`` that other rows are updating: TPA-SCD's asynchronous semantics.
Atomics only keep ``w = w(alpha)`` (no update is lost); they do not make the steps safe. Rows in
flight that share a column (the intercept, Criteo's integer fields) each take a full Newton step
from the same stale ``w`` and together overshoot, so the fit stalls or diverges. ``cd_pass``
therefore takes a step that is safe for ``tau`` rows in flight, ``tau`` read from its own launch
(teams in the grid, capped by the rows of the pass): each row's curvature is raised by the
expected overlap of its columns with the other rows of a random wave of ``tau`` (the ESO of
Richtarik & Takac; ``snapfit.solvers.emulate`` models the kernel on the CPU and
docs/gpu-performance-model.md measures the price). With one row in flight it is the CPU's step.

``team`` is a power of two dividing ``blockDim.x`` (<= ``MAX_BLOCK``): 32 is a warp per row,
``blockDim.x`` a block per row (long rows); ``choose_team`` picks it from the mean row length.
Reductions use shared memory and ``syncthreads`` rather than warp shuffles so that one code path
runs both on GPUs and in Numba's CUDA simulator (which has no ``shfl_*_sync``); every thread of a
block runs the same number of loop iterations, so the barriers are always reached by all.

Every float32 input is widened with ``float()`` before arithmetic (the simulator runs NumPy
scalars, where ``float32 * python float`` stays float32). Launch geometry and CUDA streams are
the caller's (``snapfit.gpu``); kernels only do arithmetic.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float64

from snapfit.solvers import cudasim as simulator
from snapfit.solvers import dual


def restore_numpy_aliases() -> list[str]:
    """Put back the NumPy aliases numba-cuda still names and NumPy 2.5 removed; the names put.

    numba-cuda 0.30.4 registers ``overload(np.row_stack)`` while it types the first kernel, so
    with NumPy >= 2.5 every compile raised ``AttributeError: module 'numpy' has no attribute
    'row_stack'`` (seen on the first real GPU run). The alias is the function NumPy kept
    (``vstack``); nothing is touched where NumPy still has it."""
    put = []
    for old, new in (("row_stack", "vstack"),):
        try:
            getattr(np, old)
        except AttributeError:
            setattr(np, old, getattr(np, new))
            put.append(old)
    return put


restore_numpy_aliases()

if simulator.simulated():
    simulator.install()  # see snapfit.solvers.cudasim: shared arrays race, GIL hand-offs

# Device functions are inlined at Numba-IR level: besides saving the call, this compiles them as
# part of each kernel, so ``compile_ptx`` for a chosen ``cc`` needs no GPU (a separately compiled
# device function asks the current device for its compute capability).
_device = cuda.jit(device=True, inline="always")

# Shared-memory size of the reductions, hence the largest block the kernels accept.
MAX_BLOCK = 256
# Steps of the exact check's lag correction ``lag_terms`` takes at most (``hot.GRID`` has 9).
LAG_STEPS = 16

_math = dual.compile_with(_device)
row_update = _math.row_update
row_terms = _math.row_terms
unpack_alpha = _math.unpack_alpha
alpha_at_margin = _math.alpha_at_margin
row_step = _math.row_step
row_terms_of = _math.row_terms_of
row_coef = _math.row_coef
alpha_at = _math.alpha_at
lag_entropy = _math.lag_entropy
row_loss = _math.row_loss


@_device
def row_bound(i, y, weight, has_weight, c_pos, c_neg):
    """``C_i = C * class_weight[y_i] * sample_weight_i`` (as ``cpu.row_bound``)."""
    c = c_pos if y[i] > 0 else c_neg
    if has_weight:
        c *= float(weight[i])
    return c


@_device
def team_sum(sh, team, x):
    """Sum of ``x`` over the calling thread's team, returned to every lane of the team.

    Every thread of the block must call it (it holds ``syncthreads`` barriers); ``sh`` is a
    shared float64 array of at least ``blockDim.x`` entries. The last barrier keeps the next
    call's writes from overtaking this call's reads.
    """
    tid = cuda.threadIdx.x
    lane = tid % team
    sh[tid] = x
    cuda.syncthreads()
    off = team // 2
    while off > 0:
        if lane < off:
            sh[tid] += sh[tid + off]
        cuda.syncthreads()
        off //= 2
    total = sh[tid - lane]
    cuda.syncthreads()
    return total


@_device
def partial_dot(lo, hi, lane, team, indices, values, has_values, w):
    """This lane's share of ``sum_k w[indices[k]] * values[k]`` over ``k`` in ``[lo, hi)``."""
    s = 0.0
    if has_values:
        for k in range(lo + lane, hi, team):
            s += w[indices[k]] * float(values[k])
    else:
        for k in range(lo + lane, hi, team):
            s += w[indices[k]]
    return s


@_device
def team_sum2(sh, sh2, team, x, u):
    """``team_sum`` of two values at once (the same barriers): ``(sum of x, sum of u)``."""
    tid = cuda.threadIdx.x
    lane = tid % team
    sh[tid] = x
    sh2[tid] = u
    cuda.syncthreads()
    off = team // 2
    while off > 0:
        if lane < off:
            sh[tid] += sh[tid + off]
            sh2[tid] += sh2[tid + off]
        cuda.syncthreads()
        off //= 2
    total = sh[tid - lane]
    total2 = sh2[tid - lane]
    cuda.syncthreads()
    return total, total2


@_device
def partial_dot_overlap(lo, hi, lane, team, indices, values, has_values, w, counts, overlap):
    """``partial_dot``, and when ``overlap`` this lane's share of ``sum_k (counts[j] - 1) x_k^2``
    (``j = indices[k]``): how many other rows of the pass hold the row's columns, weighted by
    the entries' squares (``emulate.eso_curvature``)."""
    s = 0.0
    u = 0.0
    if has_values:
        for k in range(lo + lane, hi, team):
            v = float(values[k])
            s += w[indices[k]] * v
            if overlap:
                u += float(counts[indices[k]] - 1) * v * v
    else:
        for k in range(lo + lane, hi, team):
            s += w[indices[k]]
            if overlap:
                u += float(counts[indices[k]] - 1)
    return s, u


@_device
def row_span(i, valid, indptr, y, weight, has_weight, c_pos, c_neg):
    """``(C_i, lo, hi)`` of row ``i``: its bound and its entries ``[lo, hi)``. ``(0, 0, 0)``
    when not ``valid`` (a team past the last row, still looping for the block's barriers) or
    when the bound is 0 (a row that never moves is skipped)."""
    c = 0.0
    lo = 0
    hi = 0
    if valid:
        c = row_bound(i, y, weight, has_weight, c_pos, c_neg)
        if c > 0.0:
            lo = indptr[i]
            hi = indptr[i + 1]
    return c, lo, hi


@_device
def entries(i, n, indptr):
    """Row ``i``'s entries ``[lo, hi)`` in a kernel that walks rows in order; ``(0, 0)`` past
    the last row (a team without a row, still looping for the block's barriers)."""
    lo = 0
    hi = 0
    if i < n:
        lo = indptr[i]
        hi = indptr[i + 1]
    return lo, hi


@_device
def pass_row(p, rows, indptr, y, weight, has_weight, c_pos, c_neg):
    """Row ``rows[p]`` of a pass: ``(valid, i, C_i, lo, hi)`` as ``row_span`` gives them. A
    ``p`` past the pass's end is not ``valid`` (a team without a row, still looping for the
    block's barriers)."""
    valid = p < rows.shape[0]
    i = 0
    if valid:
        i = rows[p]
    c, lo, hi = row_span(i, valid, indptr, y, weight, has_weight, c_pos, c_neg)
    return valid, i, c, lo, hi


@_device
def scatter(w, step, lo, hi, lane, team, indices, values, has_values):
    """``w[indices[k]] += step * values[k]``, atomically, over this lane's share of ``[lo, hi)``."""
    if has_values:
        for k in range(lo + lane, hi, team):
            cuda.atomic.add(w, indices[k], step * float(values[k]))
    else:
        for k in range(lo + lane, hi, team):
            cuda.atomic.add(w, indices[k], step)


@_device
def geometry(n, team):
    """``(lane, team slot in block, position of this team's first row, stride, iterations)``.

    The iteration count is the same for every thread of the grid, so barriers stay uniform.
    """
    tid = cuda.threadIdx.x
    per_block = cuda.blockDim.x // team
    slot = tid // team
    stride = cuda.gridDim.x * per_block
    first = cuda.blockIdx.x * per_block + slot
    return tid % team, slot, first, stride, (n + stride - 1) // stride


@cuda.jit
def cd_pass(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, sqnorm, counts, alpha, w, rows, sigma, team, out, loss,
):  # fmt: skip
    """One pass of dual CD over ``rows`` of a chunk, updating ``alpha`` and ``w`` in place.

    As ``cpu.cd_pass``; the ``(gap, entropy)`` sums are added into ``out[0]``, ``out[1]`` (zero
    them first, or accumulate several passes). Rows are visited by teams of ``team`` threads.

    The step is safe for the ``tau`` rows in flight, every team of the grid (capped by the
    rows of the pass): with ``n`` rows in the pass and ``counts`` the stored entries of each
    column over them (``column_counts``), row ``i``'s curvature is
    ``sigma (||x_i||^2 + bias^2 + (tau - 1) (u_i / (n - 1) + bias^2))`` with
    ``u_i = sum_j (counts_j - 1) x_ij^2``: the expected-separable overapproximation of Richtarik
    & Takac for a random wave of ``tau`` rows (``emulate.eso_curvature``). With ``tau = 1``
    ``counts`` is not read and the step is the CPU's.
    """
    sh = cuda.shared.array(MAX_BLOCK, float64)
    sh2 = cuda.shared.array(MAX_BLOCK, float64)
    steps = cuda.shared.array(MAX_BLOCK, float64)
    d = w.shape[0] - 1
    bias2 = bias * bias
    n = rows.shape[0]
    lane, slot, first, stride, n_iter = geometry(n, team)
    tau = min(stride, n)  # rows in flight: the grid's teams (one block: a synchronous wave)
    theta = float(tau - 1)
    scale = 1.0 / max(1, n - 1)
    gap = 0.0
    ent = 0.0
    for it in range(n_iter):
        valid, i, c, lo, hi = pass_row(
            first + it * stride, rows, indptr, y, weight, has_weight, c_pos, c_neg
        )
        x, u = partial_dot_overlap(
            lo, hi, lane, team, indices, values, has_values, w, counts, tau > 1
        )
        if lane == 0 and c > 0.0:
            x += w[d] * bias
        dot, over = team_sum2(sh, sh2, team, x, u)
        q = 0.0
        if valid:
            q = sigma * (float(sqnorm[i]) + bias2 + theta * (over * scale + bias2))
        step, g, e = row_move(steps, slot, lane, c, i, q, dot, y, alpha, sigma, loss)
        gap += g
        ent += e
        if step != 0.0:
            if lane == 0 and bias != 0.0:
                cuda.atomic.add(w, d, step * bias)
            scatter(w, step, lo, hi, lane, team, indices, values, has_values)
        # The block's next rows read w after this row's updates (rows of other blocks stay
        # asynchronous, as in TPA-SCD); with one row per block the pass is the CPU's, exactly.
        cuda.syncthreads()
    pass_sums(out, lane, gap, ent)


@_device
def row_move(steps, slot, lane, c, i, q, dot, y, alpha, sigma, loss):
    """Lane 0 of a team runs THE scalar update of row ``i`` (curvature ``q``, margin
    ``y_i dot``, loss code ``loss``), writes ``alpha[i]`` and leaves the step ``sigma delta
    y_i`` (``sigma delta`` for the squared loss) in ``steps[slot]`` for the team; returns
    ``(step, gap term, entropy term)`` (the terms on lane 0 only). Every thread of the block
    calls it: it holds a barrier."""
    g = 0.0
    e = 0.0
    if lane == 0:
        step = 0.0
        if c > 0.0:
            yi = float(y[i])
            # Gap term before the update, entropy after it: see cpu.cd_pass.
            s_new, move, g, e = row_step(q, dot, yi, alpha[i], c, loss)
            alpha[i] = s_new
            step = sigma * move
        steps[slot] = step
    cuda.syncthreads()
    return steps[slot], g, e


@_device
def pass_sums(out, lane, gap, ent):
    """A team's ``(gap, entropy)`` sums into ``out[0:2]``."""
    if lane == 0:
        cuda.atomic.add(out, 0, gap)
        cuda.atomic.add(out, 1, ent)


@_device
def scatter_split(w, acc, hot_pos, step, lo, hi, lane, team, indices, values, has_values):
    """``scatter`` whose hot columns (``hot_pos[j] >= 0``) go into ``acc[hot_pos[j]]``
    instead of ``w[j]``: rows never write the hot block, they accumulate ``v_H``."""
    for k in range(lo + lane, hi, team):
        j = indices[k]
        x = step * float(values[k]) if has_values else step
        h = hot_pos[j]
        if h >= 0:
            cuda.atomic.add(acc, h, x)
        else:
            cuda.atomic.add(w, j, x)


@cuda.jit
def cd_pass_hot(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, curv, hot_pos, alpha, w, acc, rows, sigma, team, out, loss,
):  # fmt: skip
    """One pass of the hybrid over ``rows``: hot columns as a primal block
    (``snapfit.solvers.hybrid``, whose ``wave_pass`` this is on the device at ``sigma = 1``).

    As ``cd_pass``, except that each row's curvature is given (``curv``: ESO over its cold
    columns, the caller's ``sigma`` included; ``cold_curvature``) and that rows read all of
    ``w`` (the hot entries are the segment's ``w_H``, read-only here) but write only its cold
    columns: the hot part of each move (``sigma`` times the row's), the intercept's too when
    it is hot (``hot_pos[d] >= 0``), is added into ``acc`` (``sigma`` times ``v_H``'s
    increment). Rows in flight then share only cold columns. The caller runs the hot step
    between launches (after each segment, or after each round of a trainer's pass).
    """
    sh = cuda.shared.array(MAX_BLOCK, float64)
    steps = cuda.shared.array(MAX_BLOCK, float64)
    d = w.shape[0] - 1
    ib = hot_pos[d]
    n = rows.shape[0]
    lane, slot, first, stride, n_iter = geometry(n, team)
    gap = 0.0
    ent = 0.0
    for it in range(n_iter):
        valid, i, c, lo, hi = pass_row(
            first + it * stride, rows, indptr, y, weight, has_weight, c_pos, c_neg
        )
        x = partial_dot(lo, hi, lane, team, indices, values, has_values, w)
        if lane == 0 and c > 0.0:
            x += w[d] * bias
        dot = team_sum(sh, team, x)
        q = 0.0
        if valid:
            q = curv[i]
        step, g, e = row_move(steps, slot, lane, c, i, q, dot, y, alpha, sigma, loss)
        gap += g
        ent += e
        if step != 0.0:
            if lane == 0 and bias != 0.0:
                if ib >= 0:
                    cuda.atomic.add(acc, ib, step * bias)
                else:
                    cuda.atomic.add(w, d, step * bias)
            scatter_split(w, acc, hot_pos, step, lo, hi, lane, team, indices, values, has_values)
        cuda.syncthreads()
    pass_sums(out, lane, gap, ent)


@cuda.jit
def cold_curvature(indptr, indices, values, has_values, bias, sqnorm, hot_pos, counts, rows,
                   sigma, team, out):  # fmt: skip
    """``out[i]``: row ``i``'s curvature for ``cd_pass_hot`` launched on this grid over
    ``rows``, ``cd_pass``'s safe step over the row's cold columns only (hot columns and a hot
    intercept, ``hot_pos >= 0``, leave it):
    ``sigma (s_i + b + (tau - 1) (u_i / (n - 1) + b))`` with ``s_i`` the row's norm
    (``sqnorm``, duplicates summed) less its hot part's (duplicates summed too, as
    ``row_sqnorms`` sums them: the lane holding a hot column's first occurrence adds all),
    ``u_i = sum_j (counts_j - 1) x_ij^2`` over the cold entries and ``b = bias^2`` when the
    intercept is cold; ``counts`` (``column_counts``) is not read with one row in flight."""
    sh = cuda.shared.array(MAX_BLOCK, float64)
    sh2 = cuda.shared.array(MAX_BLOCK, float64)
    d = hot_pos.shape[0] - 1
    b2 = bias * bias if hot_pos[d] < 0 else 0.0
    n = rows.shape[0]
    lane, slot, first, stride, n_iter = geometry(n, team)
    tau = min(stride, n)
    theta = float(tau - 1)
    scale = 1.0 / max(1, n - 1)
    for it in range(n_iter):
        p = first + it * stride
        s = 0.0
        u = 0.0
        if p < n:
            i = rows[p]
            lo = indptr[i]
            hi = indptr[i + 1]
            for k in range(lo + lane, hi, team):
                j = indices[k]
                x = float(values[k]) if has_values else 1.0
                if hot_pos[j] >= 0:
                    lead = True  # this entry is the column's first in the row
                    for kk in range(lo, k):
                        if indices[kk] == j:
                            lead = False
                            break
                    if lead:
                        for kk in range(k + 1, hi):
                            if indices[kk] == j:
                                x += float(values[kk]) if has_values else 1.0
                        s += x * x
                elif tau > 1:
                    u += float(counts[j] - 1) * x * x
        s, u = team_sum2(sh, sh2, team, s, u)
        if p < n and lane == 0:
            i = rows[p]
            cold = max(float(sqnorm[i]) - s, 0.0)
            out[i] = sigma * (cold + b2 + theta * (u * scale + b2))


@cuda.jit
def column_counts(indptr, indices, rows, team, counts):
    """``counts[j] +=`` the stored entries of column ``j`` over the rows ``rows`` (zero
    ``counts`` first): what ``cd_pass`` needs for its step with many rows in flight. A row
    holding a column twice counts twice, which only makes the step more cautious."""
    n = rows.shape[0]
    lane, slot, first, stride, n_iter = geometry(n, team)
    for it in range(n_iter):
        p = first + it * stride
        if p < n:
            i = rows[p]
            for k in range(indptr[i] + lane, indptr[i + 1], team):
                cuda.atomic.add(counts, indices[k], 1)


@cuda.jit
def chunk_objective(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, alpha, w, row_lo, row_hi, team, out, loss,
):  # fmt: skip
    """Exact ``(loss, entropy, gap)`` sums of rows ``[row_lo, row_hi)`` added into ``out[0:3]``.

    As ``cpu.chunk_objective``, restricted to a row range so that a chunk shared between units
    is summed once.
    """
    sh = cuda.shared.array(MAX_BLOCK, float64)
    d = w.shape[0] - 1
    lane, slot, first, stride, n_iter = geometry(row_hi - row_lo, team)
    total = 0.0
    ent = 0.0
    gap = 0.0
    for it in range(n_iter):
        p = first + it * stride
        i = row_lo + p
        c, lo, hi = row_span(i, i < row_hi, indptr, y, weight, has_weight, c_pos, c_neg)
        x = partial_dot(lo, hi, lane, team, indices, values, has_values, w)
        if lane == 0 and c > 0.0:
            x += w[d] * bias
        dot = team_sum(sh, team, x)
        if lane == 0 and c > 0.0:
            li, ei, gi = row_terms_of(dot, float(y[i]), alpha[i], c, loss)
            total += li
            ent += ei
            gap += gi
    if lane == 0:
        cuda.atomic.add(out, 0, total)
        cuda.atomic.add(out, 1, ent)
        cuda.atomic.add(out, 2, gap)


@cuda.jit
def lag_terms(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, alpha, hot_pos, delta, grid, w, row_lo, row_hi, team, v, dv, out,
):  # fmt: skip
    """The exact check's sums under the hot block over rows ``[row_lo, row_hi)``:
    ``snapfit.engine.hot.lag_terms`` on the device, on the data's own ids (``hot_pos[j] >= 0``
    marks a hot column, ``hot_pos[d]`` the intercept).

    Each row's ``alpha`` answered ``w_H`` before the last hot step moved it by ``delta``; its
    first-order answer is ``da_i = -a_i (C_i - a_i) / C_i y_i x_iH . delta``. Adds
    ``sum_i a_i y_i x_i`` into ``v`` and ``sum_i da_i y_i x_i`` into ``dv`` (``d + 1``
    entries, the intercept last, hot columns at their own ids) and, for each step
    ``grid[j]``, the rows' dual entropy at ``a_i + grid[j] da_i`` into ``out[j]`` (``inf``
    once a row leaves ``[0, C_i]``), its slope into ``out[g + j]`` and the larger of each
    row's entropy curvature at ``grid[j]`` and ``grid[j + 1]`` into ``out[2 g + j]``
    (``g = len(grid) <= LAG_STEPS``), and the rows' primal loss at ``w`` into
    ``out[3 g - 1]`` (the check's primal from the same pass). A team sums a row's lag and
    margin; its lane 0 does the row's terms into its own sums, added into ``out`` once at the
    end."""
    sh = cuda.shared.array(MAX_BLOCK, float64)
    sh2 = cuda.shared.array(MAX_BLOCK, float64)
    # lane 0's coefficients of its row for the team's adds into v and dv, per team slot
    row_ay = cuda.shared.array(MAX_BLOCK, float64)
    row_step = cuda.shared.array(MAX_BLOCK, float64)
    ent = cuda.local.array(LAG_STEPS, float64)
    ent1 = cuda.local.array(LAG_STEPS, float64)
    bend = cuda.local.array(LAG_STEPS, float64)
    e2 = cuda.local.array(LAG_STEPS, float64)
    g = grid.shape[0]
    for j in range(g):
        ent[j] = 0.0
        ent1[j] = 0.0
        bend[j] = 0.0
    loss = 0.0
    d = v.shape[0] - 1
    ib = hot_pos[d]
    lane, slot, first, stride, n_iter = geometry(row_hi - row_lo, team)
    for it in range(n_iter):
        i = row_lo + first + it * stride
        c, lo, hi = row_span(i, i < row_hi, indptr, y, weight, has_weight, c_pos, c_neg)
        x = 0.0
        u = 0.0
        for k in range(lo + lane, hi, team):
            xk = float(values[k]) if has_values else 1.0
            u += w[indices[k]] * xk
            h = hot_pos[indices[k]]
            if h >= 0:
                x += delta[h] * xk
        lag, dot = team_sum2(sh, sh2, team, x, u)
        if lane == 0:
            ay = 0.0
            step = 0.0
            if c > 0.0:
                yi = float(y[i])
                loss += row_loss(yi * (dot + w[d] * bias), c)
                a, ca = unpack_alpha(alpha[i], c)
                if ib >= 0:
                    lag += delta[ib] * bias
                da = -(a * ca / c) * yi * lag
                ay = a * yi
                step = da * yi
                for j in range(g):
                    e, e1, e2[j] = lag_entropy(a, ca, c, da, grid[j])
                    ent[j] += e
                    ent1[j] += e1
                for j in range(g - 1):
                    bend[j] += max(e2[j], e2[j + 1])
            row_ay[slot] = ay
            row_step[slot] = step
        cuda.syncthreads()
        ay = row_ay[slot]
        step = row_step[slot]
        if ay != 0.0 or step != 0.0:
            if lane == 0 and bias != 0.0:
                cuda.atomic.add(v, d, ay * bias)
                cuda.atomic.add(dv, d, step * bias)
            for k in range(lo + lane, hi, team):
                xk = float(values[k]) if has_values else 1.0
                cuda.atomic.add(v, indices[k], ay * xk)
                cuda.atomic.add(dv, indices[k], step * xk)
        cuda.syncthreads()  # the slot's pair is written again by the next row
    if lane == 0:
        for j in range(g):
            cuda.atomic.add(out, j, ent[j])
            cuda.atomic.add(out, g + j, ent1[j])
            if j < g - 1:
                cuda.atomic.add(out, 2 * g + j, bend[j])
        cuda.atomic.add(out, 3 * g - 1, loss)


@cuda.jit
def warm_start(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, w0, from_margins, alpha, w, team, loss,
):  # fmt: skip
    """``w += sum_i a_i y_i x_i`` over the chunk (``cpu.accumulate_w``), after setting each
    ``alpha_i`` from its margin at ``w0`` (``cpu.alpha_from_margins``) when ``from_margins``.

    For chunks born on the device (CuPy input): a warm start, or ``w(alpha)`` after ``alpha``
    was uploaded from a checkpoint. Rows go in index order, one per team.
    """
    sh = cuda.shared.array(MAX_BLOCK, float64)
    d = w.shape[0] - 1
    n = indptr.shape[0] - 1
    lane, slot, first, stride, n_iter = geometry(n, team)
    for it in range(n_iter):
        i = first + it * stride
        c, lo, hi = row_span(i, i < n, indptr, y, weight, has_weight, c_pos, c_neg)
        x = 0.0
        if from_margins:
            x = partial_dot(lo, hi, lane, team, indices, values, has_values, w0)
            if lane == 0 and c > 0.0:
                x += w0[d] * bias
        dot = team_sum(sh, team, x)
        step = 0.0
        if c > 0.0:
            yi = float(y[i])
            s = alpha[i]
            if from_margins:
                s = alpha_at(dot, yi, c, loss)
            step = row_coef(s, c, yi, loss)
            if lane == 0:
                alpha[i] = s
                if bias != 0.0:
                    cuda.atomic.add(w, d, step * bias)
        if step != 0.0:
            scatter(w, step, lo, hi, lane, team, indices, values, has_values)


@cuda.jit
def decision_function(indptr, indices, values, has_values, coef, intercept, team, out):
    """``out[i] = coef . x_i + intercept`` for a CSR block on the device (prediction)."""
    sh = cuda.shared.array(MAX_BLOCK, float64)
    n = indptr.shape[0] - 1
    lane, slot, first, stride, n_iter = geometry(n, team)
    for it in range(n_iter):
        i = first + it * stride
        lo, hi = entries(i, n, indptr)
        s = team_sum(sh, team, partial_dot(lo, hi, lane, team, indices, values, has_values, coef))
        if lane == 0 and i < n:
            out[i] = s + intercept


@cuda.jit
def row_sqnorms(indptr, indices, values, has_values, team, out):
    """Exact ``||x_i||^2`` of each row with duplicated indices summed first (``cpu.row_sqnorms``).

    Without scratch arrays: the lane holding the first occurrence of an index sums the values of
    all its occurrences in the row, O(nnz_i^2 / team) per row. Rows are short and this runs once
    per chunk (for chunks that were born on the device; host chunks get theirs on the host).
    """
    sh = cuda.shared.array(MAX_BLOCK, float64)
    n = indptr.shape[0] - 1
    lane, slot, first, stride, n_iter = geometry(n, team)
    for it in range(n_iter):
        i = first + it * stride
        lo, hi = entries(i, n, indptr)
        s = 0.0
        for k in range(lo + lane, hi, team):
            j = indices[k]
            seen = False
            for kk in range(lo, k):
                if indices[kk] == j:
                    seen = True
                    break
            if not seen:
                v = float(values[k]) if has_values else 1.0
                for kk in range(k + 1, hi):
                    if indices[kk] == j:
                        v += float(values[kk]) if has_values else 1.0
                s += v * v
        s = team_sum(sh, team, s)
        if lane == 0 and i < n:
            out[i] = s


@cuda.jit
def class_labels(y, k, out):
    """``out[i] = +1`` where ``y[i]`` is class index ``k``, else -1: the labels of problem
    ``k`` of one-vs-rest (``ovr.class_row``), for the binary kernels to run it. Grid-stride:
    any launch covers every row (the pass's own geometry serves)."""
    for i in range(cuda.grid(1), y.shape[0], cuda.gridsize(1)):
        out[i] = 1.0 if int(y[i]) == k else -1.0


@cuda.jit
def set_entries(w, ids, values):
    """``w[ids[k]] = values[k]``: the hot step's new ``w_H`` into ``w`` between segments."""
    k = cuda.grid(1)
    if k < ids.shape[0]:
        w[ids[k]] = values[k]


@cuda.jit
def get_entries(w, ids, out):
    """``out[k] = w[ids[k]]``: ``w_H`` out of ``w`` for the hot step."""
    k = cuda.grid(1)
    if k < ids.shape[0]:
        out[k] = w[ids[k]]


def choose_team(mean_nnz: float, block: int) -> int:
    """Threads per row: the power of two nearest above the mean row length, in [4, block].

    A warp (32) suits Criteo-like rows (~39 nnz); longer rows get a whole block, shorter ones
    share a warp between several rows so fewer lanes idle.
    """
    team = 4
    while team < mean_nnz and team < block:
        team *= 2
    return min(team, block)


KERNELS = {
    "cd_pass": cd_pass,
    "cd_pass_hot": cd_pass_hot,
    "column_counts": column_counts,
    "cold_curvature": cold_curvature,
    "chunk_objective": chunk_objective,
    "lag_terms": lag_terms,
    "warm_start": warm_start,
    "decision_function": decision_function,
    "row_sqnorms": row_sqnorms,
    "set_entries": set_entries,
    "get_entries": get_entries,
    "class_labels": class_labels,
}


def ptx_signatures():
    """Argument types each kernel is compiled for (``numba.cuda.compile_ptx``), by name.

    Chunks as ``snapfit.data.chunk.Chunk`` holds them (int64 indptr, int32 indices, float32
    values / labels / weights, float32 sqnorm) and float64 values for CuPy / scipy input.
    """
    from numba import types as t

    f32 = t.float32[::1]
    f64 = t.float64[::1]
    i64 = t.int64[::1]
    i32 = t.int32[::1]
    sigs = {}
    for vals in (f32, f64):
        chunk = (i64, i32, vals, t.boolean, f32, f32, t.boolean)
        sigs.setdefault("cd_pass", []).append(
            chunk
            + (t.float64, t.float64, t.float64, f32, i32, f64, f64, i32, t.float64, t.int64, f64)
            + (t.int64,)
        )
        sigs.setdefault("cd_pass_hot", []).append(
            chunk + (t.float64,) * 3 + (f64, i64, f64, f64, f64, i32, t.float64, t.int64, f64)
            + (t.int64,)
        )  # fmt: skip
        sigs.setdefault("cold_curvature", []).append(
            (i64, i32, vals, t.boolean, t.float64, f32, i64, i32, i32, t.float64, t.int64, f64)
        )
        sigs.setdefault("chunk_objective", []).append(
            chunk + (t.float64,) * 3 + (f64, f64, t.int64, t.int64, t.int64, f64, t.int64)
        )
        sigs.setdefault("lag_terms", []).append(
            chunk + (t.float64,) * 3 + (f64, i64, f64, f64, f64, t.int64, t.int64, t.int64)
            + (f64, f64, f64)
        )  # fmt: skip
        sigs.setdefault("warm_start", []).append(
            chunk + (t.float64,) * 3 + (f64, t.boolean, f64, f64, t.int64, t.int64)
        )
        sigs.setdefault("decision_function", []).append(
            (i64, i32, vals, t.boolean, f64, t.float64, t.int64, f64)
        )
        sigs.setdefault("row_sqnorms", []).append((i64, i32, vals, t.boolean, t.int64, f32))
    sigs["column_counts"] = [(i64, i32, i32, t.int64, i32)]
    sigs["set_entries"] = [(f64, i64, f64)]
    sigs["get_entries"] = [(f64, i64, f64)]
    sigs["class_labels"] = [(f32, t.int64, f32)]
    return sigs
