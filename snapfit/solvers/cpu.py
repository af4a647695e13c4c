"""CPU kernels: one pass of dual coordinate descent over one CSR chunk, and its exact gap.

Kernels take arrays and scalars and return numbers; Python (the engine) owns epochs, threads and
errors. They are ``njit(nogil=True)`` so several threads run them truly in parallel, each on its
own view of ``w`` (see ``snapfit.engine``). The scalar math is ``snapfit.solvers.dual``, compiled
here with ``inline="always"`` so the inner loop pays no call.

Every kernel takes a chunk in the one order ``indptr, indices, values, y, weight``; ``values`` and
``weight`` are passed as zero-length arrays when absent (``has_values`` / ``has_weight`` False),
so one compiled specialization serves one-hot and valued data alike.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from snapfit.solvers import dual

_inline = njit(inline="always", nogil=True)

_math = dual.compile_with(_inline)
row_update = _math.row_update
unpack_alpha = _math.unpack_alpha
row_terms = _math.row_terms
alpha_at_margin = _math.alpha_at_margin
row_step = _math.row_step
row_terms_of = _math.row_terms_of
row_coef = _math.row_coef
alpha_at = _math.alpha_at
lag_entropy = _math.lag_entropy
row_loss = _math.row_loss


@intrinsic
def _prefetch(typingctx, arr, idx):
    """``llvm.prefetch`` of ``arr[idx]`` (read, high locality, data cache).

    Used by ``cd_pass`` and ``prefetch_row`` to hide the cache misses of random accesses
    (and by ``snapfit.engine.workers``' shuffle, as ``prefetch``).
    """
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(
            fn,
            [
                builder.bitcast(ptr, i8p),
                ir.Constant(i32, 0),
                ir.Constant(i32, 3),
                ir.Constant(i32, 1),
            ],
        )
        return context.get_dummy_value()

    return sig, codegen


prefetch = _prefetch


@_inline
def row_bound(i, y, weight, has_weight, c_pos, c_neg):
    """``C_i = C * class_weight[y_i] * sample_weight_i``."""
    c = c_pos if y[i] > 0 else c_neg
    if has_weight:
        c *= weight[i]
    return c


@_inline
def row_dot(lo, hi, indices, values, has_values, w, bias):
    """``w . x_i`` for the entries ``[lo, hi)`` of a row, plus the intercept weight ``w[-1]``
    times its feature value ``bias``: the margin every kernel starts from."""
    dot = w[len(w) - 1] * bias
    if has_values:
        for k in range(lo, hi):
            dot += w[indices[k]] * values[k]
    else:
        for k in range(lo, hi):
            dot += w[indices[k]]
    return dot


@_inline
def row_axpy(lo, hi, indices, values, has_values, w, bias, step):
    """``w += step * x_i`` for the entries ``[lo, hi)`` of a row, the intercept weight ``w[-1]``
    included (by ``step * bias``): how every kernel moves ``w`` along a row."""
    w[len(w) - 1] += step * bias
    if has_values:
        for k in range(lo, hi):
            w[indices[k]] += step * values[k]
    else:
        for k in range(lo, hi):
            w[indices[k]] += step


@_inline
def prefetch_row(indptr, indices, w, r):
    """Request the entries of ``w`` that row ``r`` names. The kernels that walk rows in order
    call it for the row two ahead: the rows' data streams in by itself, the ``w`` entries (random
    in 8 MB at 2^20 features) do not. It made an exact-objective pass over 4M Criteo-like rows
    2.3x faster (1.15 s -> 0.49 s)."""
    for k in range(indptr[r], indptr[r + 1]):
        _prefetch(w, indices[k])


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_FILTER_WORDS = 256  # a 16384-bit filter of the indices seen in a row (2 KB, in L1)
_FILTER_SHIFT = np.uint64(64 - 14)


@njit(inline="always", nogil=True)
def _filter_bit(j):
    """The bit of feature ``j`` in ``row_sqnorms``'s filter, as ``(word, bit number)``."""
    h = (np.uint64(j) * _GOLDEN) >> _FILTER_SHIFT
    return h >> np.uint64(6), h & np.uint64(63)


@njit(nogil=True, cache=True)
def row_sqnorms(indptr, indices, values, has_values, out):
    """Exact ``||x_i||^2`` of each row into ``out``, duplicates summed first.

    Duplicated indices inside a row add, so ``||x_i||^2`` is not ``sum v^2``; an underestimate
    would make the Newton step overshoot. Entries are merged in a small open-addressing table of
    twice the longest row (a float64 accumulator per distinct index, in order of first
    appearance, then their squares summed in that order), so no thread needs scratch of
    ``n_features`` entries (16 bytes/feature before: 268 MB per thread at 2^24 features) and the
    scratch stays in L1: ~4x faster than stamping per-feature arrays on 2^20 random features.
    Most rows have no duplicate, and a 16384-bit filter of hashed indices says so (a false
    alarm for ~5 % of 40-entry rows, which then take the table too): their plain sum of squares
    in entry order is what the table gives, bit for bit. 4M Criteo-40 rows: 0.50 s, was 0.87-0.95 s.
    """
    n = len(indptr) - 1
    longest = 1
    for r in range(n):
        longest = max(longest, indptr[r + 1] - indptr[r])
    size = 16
    while size < 2 * longest:
        size *= 2
    mask = size - 1
    keys = np.full(size, -1, np.int64)
    acc = np.zeros(size)
    slots = np.empty(longest, np.int64)
    seen = np.zeros(_FILTER_WORDS, np.uint64)
    for r in range(n):
        lo = indptr[r]
        hi = indptr[r + 1]
        s = 0.0
        clash = False
        for k in range(lo, hi):
            word, b = _filter_bit(indices[k])
            bit = np.uint64(1) << b
            clash |= (seen[word] & bit) != 0
            seen[word] |= bit
            v = np.float64(values[k]) if has_values else 1.0
            s += v * v
        for k in range(lo, hi):
            seen[_filter_bit(indices[k])[0]] = 0
        if not clash:  # no index twice: the plain sum, what the table would give bit for bit
            out[r] = s
            continue
        m = 0
        for k in range(lo, hi):
            j = np.int64(indices[k])
            v = values[k] if has_values else 1.0
            h = (j * 0x9E3779B1) & mask
            while keys[h] != -1 and keys[h] != j:
                h = (h + 1) & mask
            if keys[h] == -1:
                keys[h] = j
                acc[h] = v
                slots[m] = h
                m += 1
            else:
                acc[h] += v
        s = 0.0
        for i in range(m):
            h = slots[i]
            s += acc[h] * acc[h]
            keys[h] = -1
        out[r] = s


@njit(nogil=True, cache=True)
def cd_pass(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, sqnorm, alpha, w, rows, sigma, loss=0,
):  # fmt: skip
    """One pass of dual CD over ``rows`` (in that order) of a chunk, updating ``alpha`` and ``w``.

    ``w`` is this worker's view (length n_features + 1; the last entry is the intercept weight,
    whose feature value is ``bias``, 0 when there is no intercept). ``sigma`` is CoCoA+'s sigma':
    the subproblem's curvature is ``sigma ||x_i||^2`` and the view moves by ``sigma * delta``, so
    K views started from the same ``w`` can be averaged safely (``sigma = K``). ``loss`` is a
    ``dual`` loss code (logistic by default).

    Returns ``(gap, entropy)``. ``gap`` sums each row's gap term just before its own update (an
    estimate of the chunk's gap that is exact at a fixed point; it ranks chunks for residency and
    tells when an exact check is worth it). ``entropy`` sums the rows' dual entropy after their
    update: since an epoch visits every row once, the epoch's sum over all chunks is the exact
    entropy term of the dual objective, which therefore needs no extra pass.

    Every row of a random order is a cache miss three levels deep: its pointer, then its indices
    and values (and its label, weight, norm and alpha), then the ``w`` entries they name. A
    three-stage software pipeline requests row t+3's pointer, row t+2's data and row t+1's ``w``
    entries while row t computes: on 1M Criteo-like rows a fully shuffled pass became 2.3x faster
    (1.13 s -> 0.49 s), as fast as visiting buckets of 8 consecutive rows (which converged far
    slower: rows grouped the same way every epoch). Prefetching the label too took another ~20 %
    off a pass over 500k rows. Deeper pipelines (4/3/2) were slower.

    This loop spells out ``row_bound``, ``row_dot``, ``row_axpy`` and ``prefetch_row`` instead
    of calling them: numba inlines an ``inline="always"`` helper with its array arguments
    increfed and decrefed around it (16 increfs and 29 decrefs were left inside this loop, atomic
    calls every row), and a pass over 4M Criteo-like rows took 1.65-1.82 s with them against
    1.32-1.47 s without (single thread, same results bit for bit). Plain-``njit`` helpers were
    slower still (calls), and ``forceinline=True`` ones kept the refcount calls. The in-order
    kernels below keep the helpers: they run once per fit or round, and spelling them out in
    ``chunk_objective`` measured 0.67 s against 0.78 s per 4M rows (medians of 5).
    The scalar math, ``row_update``, has no arrays and stays shared with the GPU. The loop
    itself is ``cd_pass_views``'s, called here with no syncs: threads sharing ``w`` run the same
    loop on their views (one source for both; the loop with ``every = 0`` ran two-thread passes
    at 1.01-1.04x the speed of the loop without the sync code).
    """
    return cd_pass_views(
        indptr, indices, values, has_values, y, weight, has_weight, c_pos, c_neg, bias, sqnorm,
        alpha, w, rows, sigma, len(w) - 1, np.zeros((1, 1)), np.zeros((1, 1, 1)), 0, 0.0,
        np.zeros(1, np.int64), 0, loss,
    )  # fmt: skip


@njit(inline="always", nogil=True)
def tier_end(ends, rounds):
    """How many hot coordinates the ``rounds``-th sync covers (``cd_pass_views``): tier
    ``t``'s end ``ends[t]`` when ``rounds`` is a multiple of ``4**t`` (the largest such ``t``)."""
    m = ends[0]
    tier = 1
    period = 4
    while tier < len(ends) and rounds % period == 0:
        m = ends[tier]
        tier += 1
        period *= 4
    return m


@njit(nogil=True, cache=True)
def cd_pass_views(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, sqnorm, alpha, w, rows, sigma, h0, pub, seen, me, hot_damp, ends, every,
    loss=0,
):  # fmt: skip
    """``cd_pass`` on thread ``me``'s view of a ``w`` shared by threads, syncing its hot part.

    ``w`` is an aliased view (``snapfit.engine.alias``): its ids below ``h0`` are the same
    memory in every thread's view (the cold coordinates, read and written Hogwild-style), ids
    ``h0 .. len(w) - 1`` this thread's own copy of the hot coordinates, the intercept last
    (``snapfit.engine.shared`` sets it up and explains the scheme). The row loop is
    ``cd_pass``'s, one load per entry; every ``every`` rows the thread *syncs* its hot copy:
    it publishes its own moves, ``pub[me] = w_hot - sum_u seen[me, u]``, and adds the moves
    the others have published since its last sync, ``w_hot += pub[u] - seen[me, u]``,
    ``seen[me, u] = pub[u]`` (thread 0's own moves start from the hot values, so
    ``sum_u pub[u]`` is the hot part of ``w`` after the pass). Syncs are tiered like the hot
    ids, which are numbered most frequent first: the intercept and slots ``0 .. ends[0] - 1``
    every ``every`` rows, slots ``0 .. ends[t] - 1`` every ``every * 4**t`` rows (``tier_end``),
    all of them at the start and at the end of the call. ``every = 0``: no syncs, plain ``cd_pass``.

    With ``hot_damp > 0`` (more than two threads) the curvature is ``sigma (||x_i||^2 +
    hot_damp * ||x_i,hot||^2)``, intercept included, for the rows other threads have in flight
    on hot coordinates (``snapfit.engine.shared``, step rule); the margin loop then also sums
    the hot entries' squares. Returns ``(gap, entropy)`` as ``cd_pass`` does.
    """
    bias2 = bias * bias
    gap = 0.0
    ent = 0.0
    d = len(w) - 1
    n = len(rows)
    n_threads = pub.shape[0]
    n_hot = ends[len(ends) - 1]
    since = 0
    rounds = 0
    for t in range(n + 1):
        if every > 0:
            since += 1
            m = -1
            if t == 0 or t == n:
                m = n_hot
            elif since == every:
                rounds += 1
                m = tier_end(ends, rounds)
            if m >= 0:
                since = 0
                for h in range(m + 1):
                    slot = h if h < m else d - h0  # slots 0 .. m - 1, then the intercept's
                    x = w[h0 + slot]
                    own = x
                    for u in range(n_threads):
                        if u != me:
                            own -= seen[me, u, slot]
                    pub[me, slot] = own
                    for u in range(n_threads):
                        if u != me:
                            o = pub[u, slot]
                            x += o - seen[me, u, slot]
                            seen[me, u, slot] = o
                    w[h0 + slot] = x
        if t == n:
            break
        if t + 3 < n:
            _prefetch(indptr, rows[t + 3])
        if t + 2 < n:
            r = rows[t + 2]
            lo = indptr[r]
            hi = indptr[r + 1]
            if hi > lo:
                for k in range(lo, hi, 16):  # 16 4-byte entries per 64-byte line
                    _prefetch(indices, k)
                    if has_values:
                        _prefetch(values, k)
                _prefetch(indices, hi - 1)
                if has_values:
                    _prefetch(values, hi - 1)
            _prefetch(sqnorm, r)
            _prefetch(alpha, r)
            _prefetch(y, r)
            if has_weight:
                _prefetch(weight, r)
        if t + 1 < n:
            r = rows[t + 1]
            for k in range(indptr[r], indptr[r + 1]):
                _prefetch(w, indices[k])
        i = rows[t]
        yi = y[i]
        c = c_pos if yi > 0 else c_neg  # row_bound
        if has_weight:
            c *= weight[i]
        if c <= 0.0:
            continue
        lo = indptr[i]
        hi = indptr[i + 1]
        dot = w[d] * bias  # row_dot
        hot_sq = bias2
        if hot_damp > 0.0:
            for k in range(lo, hi):
                j = indices[k]
                x = values[k] if has_values else 1.0
                dot += w[j] * x
                hot_sq += x * x if j >= h0 else 0.0
        elif has_values:
            for k in range(lo, hi):
                dot += w[indices[k]] * values[k]
        else:
            for k in range(lo, hi):
                dot += w[indices[k]]
        q = sigma * (sqnorm[i] + bias2 + hot_damp * hot_sq)
        # The row's gap term is taken before its update: after an exact coordinate minimization
        # it is zero by construction and would say nothing about the chunk.
        s_new, move, g, e = row_step(q, dot, yi, alpha[i], c, loss)
        alpha[i] = s_new
        gap += g
        ent += e
        if move != 0.0:
            step = sigma * move  # row_axpy
            w[d] += step * bias
            if has_values:
                for k in range(lo, hi):
                    w[indices[k]] += step * values[k]
            else:
                for k in range(lo, hi):
                    w[indices[k]] += step
    return gap, ent


@njit(nogil=True, cache=True)
def relabel(indices, code, out):
    """``out[k] = code[indices[k]]`` for every id below ``len(code)``, the id itself otherwise
    (it is relabeled already: relabeling twice is relabeling once). ``out`` may be
    ``indices`` (in place, a streamed chunk's buffer) or a copy (an in-memory source's)."""
    d = len(code)
    for k in range(len(indices)):
        j = indices[k]
        out[k] = code[j] if j < d else j


@njit(nogil=True, cache=True)
def count_columns(indptr, indices, out, step):
    """``out[j] += `` the number of rows holding feature ``j`` among rows ``0, step, 2 step, ...``
    of a CSR chunk (duplicates inside a row count once per entry: the hot-feature choice needs
    no more precision). Returns how many rows were counted."""
    d = len(out)
    n = len(indptr) - 1
    counted = 0
    for i in range(0, n, step):
        counted += 1
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            if j < d:  # a relabeled id (``relabel``) is not a feature of the data
                out[j] += 1
    return counted


@njit(nogil=True, cache=True)
def chunk_objective(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, alpha, w, loss=0,
):  # fmt: skip
    """Exact ``(loss, entropy, gap)`` sums of a chunk at ``w`` and ``alpha``.

    ``P = 1/2||w||^2 + loss``, ``D = -1/2||w||^2 - entropy``; ``gap`` sums the per-row terms
    ``g_i >= 0`` (equal to ``P - D`` over the whole data set when ``w = w(alpha)``).
    """
    total = 0.0
    ent = 0.0
    gap = 0.0
    n = len(indptr) - 1
    for i in range(n):
        if i + 2 < n:
            prefetch_row(indptr, indices, w, i + 2)
        c = row_bound(i, y, weight, has_weight, c_pos, c_neg)
        if c <= 0.0:
            continue
        dot = row_dot(indptr[i], indptr[i + 1], indices, values, has_values, w, bias)
        li, ei, gi = row_terms_of(dot, y[i], alpha[i], c, loss)
        total += li
        ent += ei
        gap += gi
    return total, ent, gap


@njit(nogil=True, cache=True)
def accumulate_w(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, alpha, w, loss=0,
):  # fmt: skip
    """Add ``sum_i a_i y_i x_i`` of a chunk into ``w``: rebuilds ``w(alpha)`` exactly.

    Used when alpha comes from elsewhere (a checkpoint, a warm start) and ``w`` must agree with
    it; the bound of each row is needed to unpack its alpha.
    """
    n = len(indptr) - 1
    for i in range(n):
        if i + 2 < n:
            prefetch_row(indptr, indices, w, i + 2)
        c = row_bound(i, y, weight, has_weight, c_pos, c_neg)
        if c <= 0.0:
            continue
        coef = row_coef(alpha[i], c, y[i], loss)
        row_axpy(indptr[i], indptr[i + 1], indices, values, has_values, w, bias, coef)


@njit(nogil=True, cache=True)
def alpha_from_margins(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, w, alpha, loss=0,
):  # fmt: skip
    """Warm start: ``a_i = C_i / (1 + exp(m_i))`` (``dual.alpha_at_margin``), the dual point
    that the optimality conditions pair with ``w`` (``m_i = y_i w.x_i``). If ``w`` is the
    optimum of this data, so is ``w(a)``."""
    n = len(indptr) - 1
    for i in range(n):
        if i + 2 < n:
            prefetch_row(indptr, indices, w, i + 2)
        c = row_bound(i, y, weight, has_weight, c_pos, c_neg)
        dot = 0.0
        if c > 0.0:
            dot = row_dot(indptr[i], indptr[i + 1], indices, values, has_values, w, bias)
        alpha[i] = alpha_at(dot, y[i], c, loss)


@njit(nogil=True, cache=True)
def squared_norm(w):
    """``w . w`` in one plain loop. NumPy's ``w @ w`` goes through a multi-threaded BLAS whose
    threads spin after the call: 20 ms of wall time for 2^20 entries on a loaded 2-core machine
    (0.6 ms here), taken from the solver threads every epoch."""
    s = 0.0
    for x in w:
        s += x * x
    return s


@njit(nogil=True, cache=True)
def decision_function(indptr, indices, values, has_values, coef, intercept, out):
    """``out[i] = coef . x_i + intercept`` for a CSR block (prediction)."""
    n = len(indptr) - 1
    for i in range(n):
        if i + 2 < n:
            prefetch_row(indptr, indices, coef, i + 2)
        s = intercept
        for k in range(indptr[i], indptr[i + 1]):
            s += coef[indices[k]] * (values[k] if has_values else 1.0)
        out[i] = s


EMPTY_F32 = np.zeros(0, dtype=np.float32)


def chunk_args(chunk, lo: int = 0, hi: int | None = None) -> tuple:
    """A chunk's rows ``[lo, hi)`` as every kernel takes them: ``indptr, indices, values,
    has_values, y, weight, has_weight`` (views, no copy; absent arrays as empty ones)."""
    hi = chunk.n_rows if hi is None else hi
    values = chunk.values if chunk.values is not None else EMPTY_F32
    weight = chunk.weight[lo:hi] if chunk.weight is not None else EMPTY_F32
    return (
        chunk.indptr[lo : hi + 1],
        chunk.indices,
        values,
        chunk.values is not None,
        chunk.y[lo:hi],
        weight,
        chunk.weight is not None,
    )
