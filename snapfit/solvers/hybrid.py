"""Hot columns as a primal block: rows in flight that share only sparse columns (emulator).

Why: on Criteo-like rows the intercept, the integer fields and the frequent categorical values
are held by most rows, so any per-row step that is safe for ``tau`` rows in flight damps them by
about ``tau`` (``emulate``: the epochs grow like ``tau / 2.7``). Here those *hot* columns ``H``
leave the rows' dual steps. Rows run THE scalar update (``dual.row_update``, as ``cpu`` compiles
it) with the full margin but a curvature from their cold columns only (ESO over cold columns,
where a column is held by at most ``p n`` rows); they write only cold columns of ``w`` and add
their hot moves into an accumulator ``v_H(alpha) = sum_i alpha_i y_i x_iH``. Between segments of
the pass (cut on wave boundaries) ``w_H`` takes the ``alag`` step, a primal Newton step from
``alpha`` alone with a first-order correction for rows that answered an older ``w_H``::

    w_H <- w_H - (I + f M)^-1 [w_H - v_H(alpha) + f M (w_H - wbar)],

``M = sum_i alpha_i (C_i - alpha_i) / C_i x_iH x_iH^T`` once per epoch (``(C_i / 4)`` in epoch
0, where ``alpha = 0``), ``wbar`` the mean ``w_H`` the epoch's segments read, ``f`` the share of
rows visited so far. The certificate stays exact: with ``w_S = v_S(alpha)`` (the rows' axpys)::

    P(w_S, w_H) - D(alpha) = sum_i g_i + 1/2 ||w_H - v_H(alpha)||^2,

``D`` the project's full dual and ``g_i`` the per-row gap ``dual.row_gap`` at the margin.
Its hot term lags the primal (the step keeps ``w_H - v_H = -f M (w_H - wbar)``, ``M`` large);
``hybrid_certify`` adds, by default, a dual point corrected for that lag, which closes it.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import numpy as np
from numba import njit
from threadpoolctl import threadpool_limits

from snapfit.solvers import cpu, emulate

HOT_CAP = 2048  # |H| at most (intercept included): M is |H|^2 and factored once per epoch
# Columns held by more than this share of the rows are always hot, whatever ``tau``: the hot
# step is a Newton step on the most coupled coordinates, and one row in flight gains from it
# too, the more the wider the block. The block is as wide as ``HOT_CAP`` allows on Criteo-like
# rows: on 1M rows (2^20, C = 0.1, no intercept) the 731 columns held by more than 0.3 % of
# the rows took 34 epochs to a gap of 1e-4 where sequential dual CD took 22, and the ~2,000
# held by more than 0.1 % took 18; on 200k rows with the intercept (2^18, the capped 2,048
# columns) 6-7 epochs at tau 1-4,096 against 21 (docs/gpu-performance-model.md).
P_DENSE = 0.001
HOT_STEPS = 128  # hot steps per epoch (fewer when a segment would be shorter than a wave)


def hot_share(tau: int) -> float:
    """Default ``p``: a column held by more than ``p n`` rows is hot. ``10 / tau`` keeps the
    cold ESO excess near 1-2 (a cold column is then in ~10 rows of a wave at most on average);
    never above ``P_DENSE``, so the dense fields are hot at every ``tau`` (one row in flight
    gains from a hot block too: it is a Newton step on the most coupled coordinates)."""
    return min(10.0 / max(1, int(tau)), P_DENSE)


def hot_columns(indptr, indices, n_features, rows, p, cap=HOT_CAP, intercept=True):
    """Ids of the hot columns over the pass ``rows``, most held first: the intercept (id
    ``n_features``) when ``intercept``, then every column stored in more than ``p n`` rows,
    at most ``cap`` in all."""
    counts = emulate.column_counts(indptr, indices, rows, n_features)
    hot = np.flatnonzero(counts > p * len(rows))
    hot = hot[np.argsort(-counts[hot], kind="stable")]
    ids = np.concatenate([[n_features], hot]) if intercept else hot
    return ids[:cap].astype(np.int64)


def split(indptr, indices, values, has_values, hot_pos, bias):
    """The rows' cold entries as CSR (``indptr, indices, values``) and hot entries as CSR over
    hot positions (float64 values, the intercept's ``bias`` included when it is hot)."""
    n = len(indptr) - 1
    is_hot = hot_pos[indices] >= 0
    row = np.repeat(np.arange(n), np.diff(indptr))
    vals = values.astype(np.float64) if has_values else np.ones(len(indices))
    cold = ~is_hot
    c_indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(row[cold], minlength=n), out=c_indptr[1:])
    c_values = values[cold] if has_values else values
    cold_csr = (c_indptr, indices[cold], c_values)
    ib = hot_pos[len(hot_pos) - 1]
    h_count = np.bincount(row[is_hot], minlength=n) + (1 if ib >= 0 else 0)
    h_indptr = np.zeros(n + 1, np.int64)
    np.cumsum(h_count, out=h_indptr[1:])
    h_pos = np.empty(h_indptr[-1], np.int64)
    h_val = np.empty(h_indptr[-1])
    first = h_indptr[:-1]
    if ib >= 0:  # the intercept first in every row
        h_pos[first] = ib
        h_val[first] = bias
    at = np.flatnonzero(is_hot)
    slot = (first + (1 if ib >= 0 else 0))[row[at]] + _rank_in_row(row[at])
    h_pos[slot] = hot_pos[indices[at]]
    h_val[slot] = vals[at]
    return cold_csr, (h_indptr, h_pos, h_val)


def _rank_in_row(row_of):
    """Rank of each entry among the entries of its row (``row_of`` sorted)."""
    if len(row_of) == 0:
        return row_of
    starts = np.r_[0, np.flatnonzero(np.diff(row_of)) + 1]
    first = np.repeat(starts, np.diff(np.r_[starts, len(row_of)]))
    return np.arange(len(row_of)) - first


@njit(nogil=True, cache=True)
def wave_pass(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, curv, alpha, w, hot_pos, acc, rows, tau, seed,
):  # fmt: skip
    """``emulate.wave_pass`` (``sigma = 1``) whose rows write only cold columns of ``w``: the
    hot part of each move (``hot_pos[j] >= 0``; the intercept is ``hot_pos[-1]``) goes into
    ``acc`` at that position. The margin reads all of ``w``, hot entries included (the
    current ``w_H``). With no hot column this is ``emulate.wave_pass`` bit for bit."""
    if seed >= 0:
        np.random.seed(seed)
    gap = 0.0
    ent = 0.0
    n = len(rows)
    d = len(w) - 1
    ib = hot_pos[d]
    tau = max(1, min(tau, n))
    steps = np.zeros(tau)
    order = np.arange(tau)
    for start in range(0, n, tau):
        m = min(tau, n - start)
        gap, ent = emulate.read_wave(
            indptr, indices, values, has_values, y, weight, has_weight, c_pos, c_neg, bias,
            curv, alpha, w, rows[start : start + m], 1.0, steps, gap, ent,
        )  # fmt: skip
        if seed >= 0:
            np.random.shuffle(order[:m])
        for u in range(m):
            v = order[u] if seed >= 0 else u
            step = steps[v]
            if step == 0.0:
                continue
            i = rows[start + v]
            if ib >= 0:
                acc[ib] += step * bias
            else:
                w[d] += step * bias
            for k in range(indptr[i], indptr[i + 1]):
                j = indices[k]
                h = hot_pos[j]
                x = step * values[k] if has_values else step
                if h >= 0:
                    acc[h] += x
                else:
                    w[j] += x
        if seed >= 0:
            for u in range(m):
                order[u] = u
    return gap, ent


@njit(nogil=True, cache=True)
def hot_gram(h_indptr, h_pos, h_val, coef, nh):
    """``sum_i coef_i x_iH x_iH^T`` (``nh x nh``) from the hot CSR."""
    out = np.zeros((nh, nh))
    for i in range(len(h_indptr) - 1):
        c = coef[i]
        if c == 0.0:
            continue
        for k in range(h_indptr[i], h_indptr[i + 1]):
            a = c * h_val[k]
            for q in range(h_indptr[i], h_indptr[i + 1]):
                out[h_pos[k], h_pos[q]] += a * h_val[q]
    return out


def sub_rows(h_indptr, h_pos, h_val, rows):
    """The hot CSR of ``rows`` only (in that order)."""
    counts = h_indptr[rows + 1] - h_indptr[rows]
    indptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    take = np.repeat(h_indptr[rows] - indptr[:-1], counts) + np.arange(indptr[-1])
    return indptr, h_pos[take], h_val[take]


@njit(nogil=True, cache=True)
def hot_vector(h_indptr, h_pos, h_val, coef, nh):
    """``sum_i coef_i x_iH``: ``v_H(alpha)`` exactly with ``coef = alpha * y``."""
    out = np.zeros(nh)
    for i in range(len(h_indptr) - 1):
        c = coef[i]
        if c == 0.0:
            continue
        for k in range(h_indptr[i], h_indptr[i + 1]):
            out[h_pos[k]] += c * h_val[k]
    return out


@njit(nogil=True, cache=True)
def unpacked(alpha, y, weight, has_weight, c_pos, c_neg):
    """``(a_i, C_i)`` of every row, from the packed ``alpha``."""
    n = len(alpha)
    a = np.zeros(n)
    cs = np.zeros(n)
    for i in range(n):
        c = cpu.row_bound(i, y, weight, has_weight, c_pos, c_neg)
        cs[i] = c
        if c > 0.0:
            a[i] = cpu.unpack_alpha(alpha[i], c)[0]
    return a, cs


@dataclass
class Trace(emulate.Run):
    """``emulate.Run`` with what the hybrid's exact check sees every epoch: the primal, the
    certified gap ``P - D`` (after ``line``/``dual`` when asked), the hot term
    ``1/2 ||w_H - v_H(alpha)||^2``, and the identity's residual relative to ``P``."""

    gaps: list[float] = field(default_factory=list)
    hot: list[float] = field(default_factory=list)
    identity: list[float] = field(default_factory=list)
    n_hot: int = 0
    segments: int = 1
    seconds: list[float] = field(default_factory=list)  # each epoch's pass and hot steps
    alpha: np.ndarray | None = None
    w: np.ndarray | None = None

    def worst_rebound(self, after: int = 3) -> float:
        """Largest ratio of the relative gap to its running minimum after epoch ``after``."""
        g = np.asarray(self.gaps) / np.abs(np.asarray(self.primals))
        if len(g) <= after:
            return 1.0
        run_min = np.minimum.accumulate(g)
        return float(np.max(g[after:] / np.maximum(run_min[after:], 1e-300)))


class HostPass:
    """The emulator's side of a pass's contract with ``run`` (``snapfit.gpu.hybrid.DevicePass``
    is a GPU's): ``alpha``, ``w`` and ``v_H``'s accumulator as host arrays; a segment is
    ``wave_pass`` waves of ``tau`` rows, their updates added in a seeded order (as atomics
    land); ``hot_w``/``set_hot_w`` give and take ``w_H``; ``sync`` and ``push`` are the arrays
    themselves here."""

    def __init__(self, args, c_pos, c_neg, bias, curv, hot, hot_pos, n_features, tau):
        self.args, self.coef, self.tau = args, (c_pos, c_neg, bias), tau
        self.curv, self.hot, self.hot_pos = curv, hot, hot_pos
        self.alpha, self.w = np.zeros(len(args[4])), np.zeros(n_features + 1)
        self.acc = np.zeros(len(hot))
        self.rows = None

    def epoch_rows(self, rows):
        self.rows = rows

    def segment(self, lo, hi, seed=-1):
        return wave_pass(
            *self.args, *self.coef, self.curv, self.alpha, self.w, self.hot_pos, self.acc,
            self.rows[lo:hi], self.tau, seed,
        )  # fmt: skip

    def hot_w(self):
        return self.w[self.hot], self.acc

    def set_hot_w(self, values):
        self.w[self.hot] = values

    def sync(self):
        return self.alpha, self.w, self.acc

    def push(self, alpha=None, w=None, acc=None):
        for own, new in ((self.alpha, alpha), (self.w, w), (self.acc, acc)):
            if new is not None and new is not own:
                own[:] = new


class HotStep:
    """The ``alag`` step's state: ``M`` (once per epoch) and the ``w_H`` that each segment of
    the last epoch read (for ``wbar``). ``M`` is kept as eigenpairs where the steps take
    several ``f`` (epoch 0: ``f`` is the share of rows visited), as the Cholesky factor of
    ``I + M`` where every step has ``f = 1`` (every later epoch): a factorization some ten
    times cheaper than ``eigh`` at ``|H| = 2,048`` and half the flops per step."""

    def __init__(self, hcsr, nh, nseg):
        self.hcsr, self.nh = hcsr, nh
        self.ring = np.zeros((nseg, nh))
        self.lam = self.q = None
        self.m = self.chol = None

    def refresh(self, coef, any_f=True):
        """``M = sum_i coef_i x_iH x_iH^T``: as eigenpairs, ``(I + f M)^-1`` for any ``f``;
        with ``any_f=False``, ``(I + M)^-1`` only, through the Cholesky factor of ``I + M``."""
        m = hot_gram(*self.hcsr, coef, self.nh)
        if any_f:
            self.lam, self.q = np.linalg.eigh(m)
            self.lam = np.maximum(self.lam, 0.0)
            self.m = self.chol = None
        else:
            self.m = m
            m_plus = m.copy()
            m_plus[np.diag_indices(self.nh)] += 1.0
            self.chol = np.linalg.cholesky(m_plus)
            self.lam = self.q = None

    def __call__(self, w_h, v_h, s, f, first_epoch):
        """The new ``w_H`` after segment ``s`` read ``w_H``; ``v_H = v_H(alpha)``."""
        self.ring[s] = w_h
        wbar = self.ring[: s + 1].mean(axis=0) if first_epoch else self.ring.mean(axis=0)
        w_h = np.ascontiguousarray(w_h)
        if self.chol is not None:
            if f != 1.0:
                raise ValueError("M was factored for f = 1 only (refresh with any_f=True)")
            return alag_unit(self.m, self.chol, w_h, v_h, wbar)
        return alag(self.q, self.lam, w_h, v_h, wbar, f)


@njit(nogil=True, cache=True)
def alag_unit(m, chol, w_h, v_h, wbar):
    """``alag`` at ``f = 1``: ``w_H - (I + M)^-1 [w_H - v_H + M (w_H - wbar)]`` with
    ``I + M = L L^T`` (``chol``), a product with ``M`` and two triangular solves."""
    nh = len(w_h)
    g = w_h - v_h
    u = w_h - wbar
    for j in range(nh):  # g += M u; M's rows are contiguous
        acc = 0.0
        for k in range(nh):
            acc += m[j, k] * u[k]
        g[j] += acc
    for j in range(nh):  # L z = g
        acc = g[j]
        for k in range(j):
            acc -= chol[j, k] * g[k]
        g[j] = acc / chol[j, j]
    for j in range(nh - 1, -1, -1):  # L^T x = z, walking L by rows (its columns are L^T's rows)
        g[j] /= chol[j, j]
        x = g[j]
        for k in range(j):
            g[k] -= chol[j, k] * x
    return w_h - g


@njit(nogil=True, cache=True)
def alag(q, lam, w_h, v_h, wbar, f):
    """``w_H - (I + f M)^-1 [w_H - v_H + f M (w_H - wbar)]`` with ``M = Q diag(lam) Q^T``, in
    plain loops: NumPy's ``@`` goes to a multi-threaded BLAS whose threads spin after each of
    these small products, which made a 20k-row fit 40x slower on a loaded 2-core machine."""
    nh = len(lam)
    u = w_h - wbar
    t = np.zeros(nh)
    for j in range(nh):  # t = f diag(lam) Q^T (w_H - wbar); rows of Q in the inner loop
        for k in range(nh):
            t[k] += q[j, k] * u[j]
    for k in range(nh):
        t[k] *= f * lam[k]
    g = w_h - v_h
    for j in range(nh):  # g += Q t
        acc = 0.0
        for k in range(nh):
            acc += q[j, k] * t[k]
        g[j] += acc
    t[:] = 0.0
    for j in range(nh):  # t = Q^T g / (1 + f lam)
        for k in range(nh):
            t[k] += q[j, k] * g[j]
    for k in range(nh):
        t[k] /= 1.0 + f * lam[k]
    out = w_h.copy()
    for j in range(nh):
        acc = 0.0
        for k in range(nh):
            acc += q[j, k] * t[k]
        out[j] -= acc
    return out


def _one_blas_thread(fn):
    """Run ``fn`` with one BLAS thread: its small products and dots (the hot step, the exact
    check's 1-D searches) made a multi-threaded OpenBLAS spin, a 20k-row fit 10-40x slower on
    a loaded 2-core machine."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return wrapped


@_one_blas_thread
def run(
    args, sqnorm, n_features, c_pos, c_neg, bias, tau, *, tol, max_epochs, seed=0, p=None,
    hot=None, hot_steps=HOT_STEPS, cap=HOT_CAP, line=False, dual=True, device=None,
    deadline=None, m_rows=None,
):  # fmt: skip
    """Epochs of the hybrid pass over one chunk from ``alpha = 0`` until the certified relative
    gap is at most ``tol`` (``emulate.run``'s conventions: a fresh permutation each epoch from
    ``seed``, waves of ``tau`` rows). ``hot``: the hot column ids (``n_features`` is the
    intercept); by default ``hot_columns`` at ``p`` (``hot_share(tau)``). ``line`` and ``dual``:
    ``hybrid_certify``'s primal line search and consistent dual point at the exact checks
    (``"keep"``: the iterate takes them too). With no hot column and ``tau = 1`` every epoch is
    ``cpu.cd_pass`` bit for bit. ``device``: makes the pass's state from ``(args, c_pos,
    c_neg, bias, curv, hot, hot_pos, n_features)`` (e.g. ``snapfit.gpu.hybrid.DevicePass``
    with a launch of ``tau`` rows in flight) instead of the emulator's ``HostPass``;
    ``deadline``: a ``time.perf_counter()`` after which no epoch starts. ``m_rows``: ``M``
    from that many rows drawn once (scaled by ``n / m_rows``) instead of all ``n``: its
    ``|H|^2``-per-row sum costs some ten passes otherwise. ``Trace.seconds``: each epoch's
    pass, hot steps and ``M``, the exact check left out."""
    from snapfit.solvers import hybrid_certify as cert

    indptr, indices, values, has_values, y, weight, has_weight = args
    n, d = len(y), n_features
    rng = np.random.default_rng(seed)
    every = np.arange(n)
    if hot is None:
        share = hot_share(tau) if p is None else p
        hot = hot_columns(indptr, indices, d, every, share, cap, intercept=bias != 0.0)
    hot = np.asarray(hot, np.int64)
    nh = len(hot)
    hot_pos = np.full(d + 1, -1, np.int64)
    hot_pos[hot] = np.arange(nh)
    cold, hcsr = split(indptr, indices, values, has_values, hot_pos, bias)
    cold_sq = np.zeros(n, np.float32)
    cpu.row_sqnorms(cold[0], cold[1], cold[2], has_values, cold_sq)
    cold_bias = bias if hot_pos[d] < 0 else 0.0
    curv = emulate.curvature("eso", *cold, has_values, cold_sq, every, cold_bias, tau, d)
    tau = max(1, min(int(tau), n))
    seg = n if nh == 0 else tau * max(1, round(n / (hot_steps * tau)))
    nseg = -(-n // seg)
    state = (args, c_pos, c_neg, bias, curv, hot, hot_pos, d)
    engine = HostPass(*state, tau) if device is None else device(*state)
    alpha, w, acc = engine.sync()
    m_hcsr, m_of, m_scale = hcsr, every, 1.0
    if m_rows is not None and 0 < int(m_rows) < n:
        m_of = np.sort(np.random.default_rng([seed, 1]).choice(n, int(m_rows), replace=False))
        m_hcsr, m_scale = sub_rows(*hcsr, m_of), n / int(m_rows)
    step = HotStep(m_hcsr, nh, nseg)
    out = Trace([], np.inf, False, n_hot=nh, segments=nseg, alpha=alpha, w=w)
    for epoch in range(max_epochs):
        if deadline is not None and time.perf_counter() > deadline:
            break
        t0 = time.perf_counter()
        rows = rng.permutation(n)
        engine.epoch_rows(rows)
        a, cs = unpacked(alpha, y, weight, has_weight, c_pos, c_neg)
        if nh:
            coef = 0.25 * cs if epoch == 0 else a * (cs - a) / np.where(cs > 0, cs, 1.0)
            step.refresh(m_scale * coef[m_of], any_f=epoch == 0)
        for s in range(nseg):
            lo, hi = s * seg, min(n, (s + 1) * seg)
            wave_seed = epoch if nseg == 1 else epoch * nseg + s
            engine.segment(lo, hi, wave_seed)
            if nh:
                f = hi / n if epoch == 0 else 1.0
                engine.set_hot_w(step(*engine.hot_w(), s, f, epoch == 0))
        out.seconds.append(time.perf_counter() - t0)
        alpha, w, acc = engine.sync()
        out.alpha, out.w = alpha, w
        a, cs = unpacked(alpha, y, weight, has_weight, c_pos, c_neg)
        acc[:] = hot_vector(*hcsr, a * y, nh)  # exact v_H: no rounding drift kept
        engine.push(acc=acc)
        check = cert.exact_check(args, c_pos, c_neg, bias, alpha, w, hot, acc)
        out.identity.append(check.identity)
        out.hot.append(check.hot)
        if line or dual:
            check = cert.improve(
                check, args, c_pos, c_neg, bias, alpha, w, hot, hot_pos, acc, hcsr, a, cs,
                rows, seg, step.ring, line, dual,
            )  # fmt: skip
            if "keep" in (line, dual):  # the iterate moved on the host
                engine.push(alpha=alpha, w=w, acc=acc)
        out.duals.append(check.dual)
        out.primals.append(check.primal)
        out.gaps.append(check.primal - check.dual)
        out.primal = check.primal
        if not np.isfinite(check.dual) or not np.isfinite(check.primal):
            break
        if out.gaps[-1] <= tol * abs(check.primal):
            out.converged = True
            break
    return out
