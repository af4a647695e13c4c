"""A trainer's hot block: hot columns as a primal block over all its units (``hot_columns``).

Why: on Criteo-like rows the intercept, the integer fields and the frequent categorical values
are held by most rows, so rows updated at once (a GPU's rows in flight, CoCoA+ units) couple
through them and any safe step damps them (``snapfit.solvers.hybrid``, docs/gpu-performance-
model.md). In this mode every unit's rows take THE scalar update with the full margin and a
curvature from their cold columns only, write only cold columns of ``w`` and add their hot
moves into the unit's accumulator (``hot_pass.cd_pass_hot`` on a CPU thread,
``gpu.cd_pass_hot`` on a GPU); ``w_H`` is read-only for the round. After the round the
trainer adds the units' moves into ``v_H(alpha) = sum_i a_i y_i x_iH`` and takes one hot step,
``hybrid``'s ``alag`` step with its segment the whole round::

    w_H <- w_H - (I + M)^-1 (w_H - v_H(alpha)),

accelerated by Anderson's method over the last steps (``accelerate``), where ``M`` is the hot
block's loss curvature ``sum_i C_i s(m_i) s(-m_i) x_iH x_iH^T`` at the current margins ``m_i``
(``alpha (C - alpha) / C`` at the dual point the margins pair with; ``C / 4`` at ``w = 0``),
summed over a fixed sample of rows drawn when the fit starts and scaled to all rows. So ``M``
needs neither a pass nor any row's ``alpha``: it is the same for resident, streamed and
re-dealt data, for any mix of units. The certificate stays exact (the full dual ``D(alpha)``
with ``v(alpha) = (w_S, v_H)``)::

    P(w) - D(alpha) = sum_i g_i + 1/2 ||w_H - v_H(alpha)||^2.

Measured in the trainer (``bench.bench_hot_tau``: an emulated GPU unit, 200k Criteo-like
rows, C = 0.1): a relative gap of 1e-4 in 9-10 epochs at 1 to 4,096 rows in flight (11-13 with
Aitken's one-direction extrapolation before, 20 with the plain step), where sequential dual CD
took 23; on one CPU thread 16 epochs at 1M rows and 36 at 4M (sequential: 22-23 and 24);
docs/gpu-performance-model.md.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit
from scipy.linalg import cho_factor, cho_solve
from scipy.special import expit

from snapfit.engine.workers import item_span
from snapfit.solvers import cpu, hybrid

SAMPLE_ROWS = 65_536  # rows the hot set is counted over and M summed over, at most
P_DENSE = hybrid.P_DENSE  # a column held by more than this share of the rows is hot
HISTORY = 6  # hot steps Anderson's method combines, the newest among them (``accelerate``)
STEP_CAP = 5.0  # an accelerated hot step's length at most, in Newton steps (``accelerate``)
STALL_EPOCHS = 4  # epochs in a row with no new lowest estimate that force an exact check
HOLD_EPOCHS = 2  # epochs in a row a check may be put off after a damped hot step (``hold``)
GRAM_THREADS = 2  # threads summing M at most (each its own |H|^2 square: 32 MB at 2,000)


def hot_cap(n_rows: int) -> int:
    """Hot columns at most: ``hybrid.HOT_CAP`` (the block measured on Criteo-like rows), fewer
    on small data, where ``M``'s factorization (``|H|^3 / 3`` flops a round) would outweigh
    the pass: one per 100 rows, at least 32."""
    return int(min(hybrid.HOT_CAP, max(32, n_rows // 100)))


@dataclass
class Sample:
    """Rows of the data kept whole (CSR, float64 values, the intercept not stored) with their
    labels and bounds ``C_i``: what the hot set is counted over and ``M`` summed over."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    y: np.ndarray
    c: np.ndarray

    @classmethod
    def of(cls, parts) -> Sample:
        """One sample from the parts ``take`` returned, in a fixed order."""
        if not parts:
            e = np.zeros(0)
            return cls(np.zeros(1, np.int64), np.zeros(0, np.int64), e, e, e)
        counts = np.concatenate([np.diff(p[0]) for p in parts])
        indptr = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        return cls(indptr, *(np.concatenate([p[i] for p in parts]) for i in range(1, 5)))

    @property
    def n_rows(self) -> int:
        return len(self.y)


def take(chunk, lo: int, hi: int, step: int, c_pos: float, c_neg: float) -> tuple:
    """Every ``step``-th row of rows ``[lo, hi)`` of a host chunk: ``(indptr, indices,
    values, y, C_i)`` (``Sample``'s arrays, for ``Sample.of``)."""
    rows = np.arange(lo, hi, step)
    # ``hybrid.sub_rows`` gathers any CSR's rows; without values it gathers the indices twice
    vals = chunk.indices if chunk.values is None else chunk.values
    indptr, indices, values = hybrid.sub_rows(chunk.indptr, chunk.indices, vals, rows)
    indices = indices.astype(np.int64)
    values = np.ones(len(indices)) if chunk.values is None else values.astype(np.float64)
    y = chunk.y[rows].astype(np.float64)
    c = np.where(y > 0, c_pos, c_neg)
    if chunk.weight is not None:
        c = c * chunk.weight[rows]
    return indptr, indices, values, y, c


def choose_hot(sample: Sample, n_features: int, bias: float, p: float, cap: int) -> np.ndarray:
    """The hot ids over the sample, most held first: the intercept (id ``n_features``) when
    there is one, then every column stored in more than ``p`` of the rows; ``cap`` in all."""
    counts = np.bincount(sample.indices, minlength=n_features)[:n_features]
    hot = np.flatnonzero(counts > p * max(sample.n_rows, 1))
    hot = hot[np.argsort(-counts[hot], kind="stable")]
    ids = np.concatenate([[n_features], hot]) if bias != 0.0 else hot
    return ids[:cap].astype(np.int64)


def sample_matrix(sample: Sample, n_features: int, bias: float):
    """The sample as a CSR of ``n_features + 1`` float64 columns (the intercept last, its
    value ``bias``): what the step's margins are a product with. Only products are taken of
    it, so a column stored twice in a row stays twice (``hot_part`` sums them)."""
    n, d = sample.n_rows, n_features
    indptr, indices, values = sample.indptr, sample.indices, sample.values
    if bias != 0.0:  # one more entry at the end of every row
        indices = np.insert(indices, indptr[1:], d)
        values = np.insert(values, indptr[1:], bias)
        indptr = indptr + np.arange(n + 1)
    return sp.csr_matrix((values, indices, indptr), shape=(n, d + 1))


@njit(cache=True)
def hot_part(indptr, indices, values, hot_pos):
    """The hot part of CSR rows as ``(indptr, positions, values)``: the columns ``hot_pos``
    maps to a position (``>= 0``), stored zeros left out, each row's positions ascending, a
    column stored twice in a row summed (``weighted_gram`` reads it so), each row's few hot
    entries sorted in place. Why not scipy: its column selection with the intercept's column
    added and ``sum_duplicates`` took 0.3 s of the hot block's set-up at 50k sampled rows and
    2,000 hot columns; this, with ``sample_matrix``, 0.1 s (criteo-like, 200k rows)."""
    n = len(indptr) - 1
    ptr = np.zeros(n + 1, np.int64)
    pos = np.empty(len(indices), np.int64)
    val = np.empty(len(indices))
    k = 0
    for i in range(n):
        m = k
        for a in range(indptr[i], indptr[i + 1]):
            p = hot_pos[indices[a]]
            if p >= 0 and values[a] != 0.0:
                pos[m] = p
                val[m] = values[a]
                m += 1
        for r in range(k + 1, m):  # insertion sort, stable: duplicates sum in stored order
            p, v = pos[r], val[r]
            j = r
            while j > k and pos[j - 1] > p:
                pos[j] = pos[j - 1]
                val[j] = val[j - 1]
                j -= 1
            pos[j] = p
            val[j] = v
        j = k
        for r in range(k, m):
            if j > k and pos[j - 1] == pos[r]:
                val[j - 1] += val[r]
            else:
                pos[j] = pos[r]
                val[j] = val[r]
                j += 1
        k = j
        ptr[i + 1] = k
    return ptr, pos[:k].copy(), val[:k].copy()


@njit(nogil=True, cache=True)
def weighted_gram(indptr, indices, values, coef, out):
    """Add ``sum_i coef_i x_i x_i^T``'s lower triangle into ``out`` over a CSR of
    ``len(out)`` columns, each row's columns ascending and none twice (``hot_part``'s): all
    ``cho_factor(lower=True)`` reads, half the scattered adds of the full square (which were
    0.3 s a step at 2,000 hot columns over 65k rows) and no mirrored copy. A row's entry
    ``v`` adds into row ``v`` of ``out`` at the row's columns up to ``v``: one row of ``out``
    at a time."""
    for i in range(len(indptr) - 1):
        c = coef[i]
        if c == 0.0:
            continue
        for b in range(indptr[i], indptr[i + 1]):
            v = indices[b]
            cv = c * values[b]
            for a in range(indptr[i], b + 1):
                out[v, indices[a]] += cv * values[a]


def curvature_factor(x_h, coef: np.ndarray, scale: float, threads: int = GRAM_THREADS):
    """``cho_factor`` of ``I + scale sum_i coef_i x_i x_i^T`` over ``x_h``'s rows (a CSR of the
    hot columns). The sum is cut by rows into parts of 16,384 rows or more, ``threads`` at
    most, each into its own square, summed in order: the parts depend on the rows only, so
    the factor is the same on any machine; they run on up to that many threads
    (``weighted_gram`` releases the GIL; the units' threads wait during the step)."""
    nh, n = x_h.shape[1], x_h.shape[0]
    parts = max(1, min(int(threads), n // 16384))
    outs = [np.zeros((nh, nh)) for _ in range(parts)]
    cuts = np.linspace(0, n, parts + 1).astype(np.int64)

    def one(k):
        lo, hi = cuts[k], cuts[k + 1]
        weighted_gram(x_h.indptr[lo : hi + 1], x_h.indices, x_h.data, coef[lo:hi], outs[k])

    workers = min(parts, os.cpu_count() or 1)
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, range(parts)))
    else:
        for k in range(parts):
            one(k)
    g = outs[0]
    for o in outs[1:]:
        g += o
    g *= scale
    g[np.diag_indices(nh)] += 1.0
    return cho_factor(g, lower=True, overwrite_a=True, check_finite=False)


def accelerate(hist: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The hot step's move by Anderson's method from the last steps ``hist`` (oldest first, at
    most ``HISTORY``): each ``(w_H, f)``, ``f = (I + M)^-1 (v_H - w_H)`` the Newton step at
    that ``w_H``. The newest ``f`` is fitted (least squares) by the differences of the ``f``s,
    ``dF gamma``, and the move is ``f - (dW + dF) gamma``: where ``w_H -> w_H + f`` is a linear
    iteration, the step to its fixed point once the differences span the residual. At most
    ``STEP_CAP`` times the Newton step's length (scaled down along itself).

    Why: the plain step is a fixed-point iteration whose ratio nears 1 with the rows (the rows
    answer a move of ``w_H`` by less than ``M`` says, ``1 / (1 + D_i q_i)`` of it for a row of
    cold norm ``q_i``, least on the stiffest direction of ``M``, the integer fields): 0.76 an
    epoch on 200k Criteo-like rows, 0.90 on 4M. Aitken's length along the last residual (at
    most 2 Newton steps, the default until 2026-11-29) is this method on one direction; it
    took 11 / 26 / 64 epochs to a relative gap of 1e-4 on 200k / 1M / 4M rows (one thread,
    C = 0.1), where this one took 9 / 16 / 36 (docs/gpu-performance-model.md). Measured and
    left out (epochs on the 6,000-row test of two units, one thread / two units, against this
    one's 17 / 24): the last 2 steps (a secant step every epoch) 26 / 25; 4 steps 16 / 31,
    capped at 2 Newton steps 20 / 27, at 10 19 / 32; 6 steps capped at 7 or 10, 145 / 205
    over 8 data seeds against 134 / 189 (and 40 or 24 epochs at 4M rows against 36: that
    count is noisy in the cap); a restart when ``f`` grew after an accelerated step (never
    triggered at 200k-4M rows; 133 / 204 over the 8 seeds)."""
    f = hist[-1][1]
    if len(hist) < 2:
        return f
    w = np.stack([h[0] for h in hist], axis=1)
    fs = np.stack([h[1] for h in hist], axis=1)
    dw, df = np.diff(w, axis=1), np.diff(fs, axis=1)
    gamma = np.linalg.lstsq(df, f, rcond=None)[0]
    move = f - (dw + df) @ gamma
    size, cap = float(np.linalg.norm(move)), STEP_CAP * float(np.linalg.norm(f))
    return move * (cap / size) if size > cap else move


def _softplus(x):
    return np.logaddexp(0.0, x)


class HotBlock:
    """The hot ids and positions, ``v_H(alpha)``, and the sample ``M`` is summed over.

    ``fresh``: ``v_H`` is exact for the state's ``alpha`` (False after ``alpha`` was written
    from outside, a checkpoint or a warm start: the trainer rebuilds it with a pass)."""

    def __init__(self, hot: np.ndarray, n_features: int, sample: Sample, n_rows: int,
                 bias: float):  # fmt: skip
        self.hot = np.asarray(hot, np.int64)
        self.nh = len(self.hot)
        self.hot_pos = np.full(n_features + 1, -1, np.int64)
        self.hot_pos[self.hot] = np.arange(self.nh)
        self.labels = None  # the units' relabeling (``hot_pass.HotLabels``), the trainer's
        self.v_h = np.zeros(self.nh)
        self.fresh = True
        self.sample = sample
        # the sample's rows whole (margins) and their hot part, columns the hot positions (M)
        self.x = sample_matrix(sample, n_features, bias)
        ptr, pos, val = hot_part(self.x.indptr, self.x.indices, self.x.data, self.hot_pos)
        self.x_h = sp.csr_matrix((val, pos, ptr), shape=(sample.n_rows, self.nh))
        self.scale = n_rows / max(sample.n_rows, 1)
        self.steps = 0
        self.chol: tuple | None = None  # of I + M (``cho_factor``'s)
        self.seen: np.ndarray | None = None  # the w_H the last round's rows read
        self.hist: list[tuple[np.ndarray, np.ndarray]] = []  # the last steps (``accelerate``)
        self.length = 0.0  # the last step's damping (< 1: damped, ``_damping``; 0: no step)
        self.accelerated = False  # whether the last step was Anderson's move (``accelerate``)
        # The best dual of the exact checks so far: every one is a lower bound of P*, and under
        # the hot block they are not monotone (``best_dual``).
        self.dual_bound = -np.inf
        # The epoch's gap estimate is the rows' gap terms times ``calibration``: the terms
        # leave out the hot block's lag, which the exact check measures (``calibrate``).
        self.sum_g = 0.0
        self.calibration = 1.0
        # The primal the estimated gaps are relative to: the last exact check's, at first the
        # primal at w = 0, sum_i C_i log 2 (over the sample, scaled to all rows).
        self.p_scale = max(self.scale * float(np.sum(sample.c)) * np.log(2.0), 1e-300)
        # The lowest estimate since the last exact check and the epochs since that were no
        # lower (``stalled``).
        self.low = np.inf
        self.stale = 0
        self.holds = 0  # checks put off in a row (``hold``)

    def calibrate(self, exact_gap: float, primal: float) -> None:
        """Scale later estimates by what the exact gap was against the last epoch's rows'
        gap terms (never below 1: the estimate only waits longer for the next check), and
        take their scale from the exact primal."""
        if self.sum_g > 0.0:
            self.calibration = max(1.0, exact_gap / self.sum_g)
        self.p_scale = max(abs(primal), 1e-300)
        self.low, self.stale, self.holds = np.inf, 0, 0

    def stalled(self, estimate: float) -> bool:
        """Count an epoch's ``estimate``: True when it is the ``STALL_EPOCHS``-th in a row since
        the last exact check that is no new lowest one (the trainer then checks anyway). Why:
        the rows' gap terms can rise while the exact gap falls (after long hot steps they
        measure the rows' answer to the step more than the gap), and the ratio, never below 1,
        cannot bring such an estimate down: on 1M rows with steps of up to 3 Newton steps the
        trainer ran to epoch 57, its exact gap below its 1e-4 from epoch 30. A falling estimate
        makes a new low every epoch or two (plain and accelerated epochs read differently),
        so a fit that converges as it should is never forced."""
        if estimate < self.low:
            self.low, self.stale = estimate, 0
        else:
            self.stale += 1
        return self.due

    @property
    def due(self) -> bool:
        """Whether the last counted epoch must be checked exactly (``stalled``)."""
        return self.stale >= STALL_EPOCHS

    def hold(self) -> bool:
        """For an epoch the trainer would check: True (put the check off to the next epoch)
        when its hot step was damped (``_damping``: the full step raised the sampled primal),
        at most ``HOLD_EPOCHS`` epochs in a row. Why: right after such a step the rows have
        not answered it and the exact gap measures the overshoot, and the ratio that check
        sets holds the later estimates up. On 200k Criteo-like rows (C = 0.1, one row in
        flight) with steps of up to 3 Newton steps, two steps were halved at epochs 9-10; the
        check at 10 found 0.13 where the next epoch's exact gap was 7.5e-5, and its ratio
        (~300x) kept the estimates above 1e-4 to epoch 18."""
        damped = 0.0 < self.length < 1.0
        self.holds = self.holds + 1 if damped and self.holds < HOLD_EPOCHS else 0
        return self.holds > 0

    def best_dual(self, dual: float) -> float:
        """The best of ``dual`` and the earlier exact checks' duals, the certificate's: each is
        ``D(alpha)`` of some ``alpha`` (corrected for the lag, ``certify``), so each bounds
        ``P*`` from below. Under the hot block ``D`` swings where ``P`` falls steadily: on 200k
        Criteo-like rows (C = 0.1, 256 rows in flight) ``P* - D`` was 5-60x lower after an
        extrapolated (Aitken) hot step than after the plain step that followed it."""
        self.dual_bound = max(self.dual_bound, float(dual))
        return self.dual_bound

    def rel_gap(self, gap: float) -> float:
        """An epoch's estimated relative gap from its rows' gap terms ``gap``: scaled by what
        the last exact check found, relative to the last exact primal."""
        return gap * self.calibration / self.p_scale

    def step(self, w: np.ndarray, extrapolate: bool = True) -> None:
        """The hot step on ``w`` (in place): the Newton step ``f = (I + M)^-1 (v_H - w_H)``,
        damped where the sampled primal says so (``_damping``; the history then starts anew
        from it), else accelerated by the last steps (``accelerate``; not with
        ``extrapolate=False``, a plain step). ``M`` (at ``w``'s margins over the sample) and
        its Cholesky factor are made again after steps 0, 1, 2, 4, 8, ...: the factor is
        ``|H|^3 / 3`` flops (0.1-0.2 s at 2,000 columns on 2 cores) and ``M`` settles as the
        margins do; a stale ``M`` only preconditions the step, whose direction is
        ``v_H - w_H``. The damping is judged on ``f``, not on the accelerated move: judged on
        the move, it refused nearly every move on 1M Criteo-like rows (38 epochs against 16)."""
        if not self.nh:
            return
        s = self.sample
        m = s.y * (self.x @ w)  # the sample's margins
        if self.chol is None or self.steps & (self.steps - 1) == 0:
            p = expit(m)
            self.chol = curvature_factor(self.x_h, s.c * p * (1.0 - p), self.scale)
        w_h = np.ascontiguousarray(w[self.hot])
        self.seen = w_h  # what the round's rows answered (a copy: ``w`` is written below)
        f = cho_solve(self.chol, self.v_h - w_h, check_finite=False)
        self.hist = [*self.hist[1 - HISTORY :], (w_h, f)]
        t = self._damping(m, s.y * (self.x_h @ f), w_h, f)
        self.accelerated = t == 1.0 and extrapolate and len(self.hist) > 1
        if t < 1.0:
            self.hist = self.hist[-1:]
        move = accelerate(self.hist) if self.accelerated else t * f
        self.length = t
        w[self.hot] = w_h + move
        self.steps += 1

    def _damping(self, m, dm, w_h, d_h) -> float:
        """The step's length along ``d_h`` (``m``: the sample's margins, ``dm``: their move
        along it): 1 unless the primal over the sample (scaled to all rows) rises there;
        then halved until it falls enough (Armijo), as a Newton step on the logistic loss
        needs far from the optimum (a fit warm started from another fit's ``alpha``, whose
        ``v_H`` may be far from its ``w_H``: the full step then swung ``w_H`` between two
        points with every row's ``alpha`` at a bound)."""
        c = self.scale * self.sample.c

        def f(t):
            u = w_h + t * d_h
            return 0.5 * float(u @ u) + float(c @ _softplus(-(m + t * dm)))

        slope = float(w_h @ d_h) - float(c @ (dm * expit(-m)))
        f0, t = f(0.0), 1.0
        if slope >= 0.0:  # not a descent direction on the sample: its noise, take the step
            return t
        while t > 1e-3 and f(t) > f0 + 1e-4 * t * slope:
            t *= 0.5
        return t

    def lag(self, w: np.ndarray) -> float:
        """``1/2 ||w_H - v_H(alpha)||^2`` at ``w``'s ``w_H``: the block's term of the
        certificate's identity ``P - D = sum_i g_i + 1/2 ||w_H - v_H||^2``."""
        r = w[self.hot] - self.v_h
        return 0.5 * float(r @ r)

    def dual_sq(self, w: np.ndarray) -> float:
        """``||v(alpha)||^2 = ||w_S||^2 + ||v_H||^2`` (the dual's quadratic term)."""
        return cpu.squared_norm(w) - float(w[self.hot] @ w[self.hot]) + float(self.v_h @ self.v_h)


def sample_rows(tr, p: float = P_DENSE) -> HotBlock:
    """``HotBlock`` of a trainer, from one pass that keeps every ``step``-th row of each item
    (``SAMPLE_ROWS`` in all at most) on the units' threads."""
    n = tr.state.n_rows
    step = max(1, -(-n // SAMPLE_ROWS))
    prob = tr.problem
    order, plan = tr._whole_plan()
    tr._group.each(lambda t: tr.units[t].begin(tr.w, len(plan[t])), "begin")

    def keep(t, item, chunk):
        lo, hi = item_span(item, chunk.n_rows)
        return [(item, take(chunk, lo, hi, step, prob.c_pos, prob.c_neg))]

    results, _ = tr._run(order, plan, keep)
    sample = Sample.of([r for _, r in results])
    d = tr.source.n_features
    hot = choose_hot(sample, d, prob.bias, p, hot_cap(n))
    return HotBlock(hot, d, sample, n, prob.bias)


# Steps of the dual correction. Five (0, 0.25, 0.5, 1, 1.5) gave the same exact gaps at every
# epoch on 200k Criteo-like rows (C = 0.01, 0.1, 1) and a 10 % cheaper pass, but between two
# steps where some row leaves its bounds at the far one nothing is certified (``line_dual``),
# and the wider the steps, the more of the line that can cost.
GRID = np.array([0.0, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5])


@njit(nogil=True, cache=True)
def lag_terms(
    indptr, ids, values, has_values, y, weight, has_weight, c_pos, c_neg, bias, alpha, ib,
    delta, grid, wx, vd, ent, ent1, bend,
):  # fmt: skip
    """The dual's sums over a chunk's rows, at ``alpha`` and corrected for the last hot
    step's lag: each row's ``alpha`` answered ``w_H`` before the step moved it by ``delta``;
    to first order it would have moved by ``da_i = -a_i (C_i - a_i) / C_i y_i x_iH . delta``.
    On relabeled ``ids`` (``HotLabels``: hot position ``h`` is id ``d + 1 + h``; the
    intercept's position ``ib``, -1 when cold), adds ``v(alpha) = sum_i a_i y_i x_i`` into
    ``vd[:, 0]`` and ``sum_i da_i y_i x_i`` into ``vd[:, 1]`` (``d + 1 + nh`` rows in that
    order: the two side by side, one cache line per column, requested for the row two ahead:
    the table look-ups and separate arrays of the first version made this pass 5-7x a
    ``cd_pass``; without the requests it took 1.5-1.8x as long as with them, 0.22-0.25 s
    against 0.14-0.16 s on 200k Criteo-like rows and two units) and, for each step
    ``grid[j]``, the rows' dual entropy at ``a_i + grid[j] da_i`` into ``ent[j]`` (``inf``
    once a row leaves ``[0, C_i]``) and its slope in the step into ``ent1[j]``; into
    ``bend[j]`` the sum over rows of the larger of each row's entropy curvature at
    ``grid[j]`` and ``grid[j + 1]``, which bounds the sum's curvature between them
    (``line_dual``). Returns the rows' primal loss at ``wx`` (``HotLabels.extend``'s ``w``,
    the intercept's weight at ``d``): the check's primal from the same pass, which had been
    a pass of its own (``Trainer._objective``; the same sum to rounding)."""
    nh = len(delta)
    d = vd.shape[0] - 1 - nh
    jb = d + 1 + ib if ib >= 0 else d  # the intercept's row of vd
    e2 = np.empty(len(grid))
    flat = vd.reshape(-1)  # the same memory: a row's two sums are one entry's pair
    n = len(indptr) - 1
    loss = 0.0
    for i in range(n):
        if i + 2 < n:  # the row two ahead's scattered sums and weights (``cpu.prefetch_row``)
            for k in range(indptr[i + 2], indptr[i + 3]):
                cpu.prefetch(flat, 2 * ids[k])
                cpu.prefetch(wx, ids[k])
        yi = y[i]
        c = cpu.row_bound(i, y, weight, has_weight, c_pos, c_neg)
        if c <= 0.0:
            continue
        a, ca = cpu.unpack_alpha(alpha[i], c)
        lag = delta[ib] * bias if ib >= 0 else 0.0
        dot = wx[d] * bias
        for k in range(indptr[i], indptr[i + 1]):
            j = ids[k]
            x = values[k] if has_values else 1.0
            dot += wx[j] * x
            if j > d:
                lag += delta[j - d - 1] * x
        loss += cpu.row_loss(yi * dot, c)
        da = -(a * ca / c) * yi * lag
        ay = a * yi
        step = da * yi
        if a != 0.0 or da != 0.0:
            vd[jb, 0] += ay * bias
            vd[jb, 1] += step * bias
            for k in range(indptr[i], indptr[i + 1]):
                x = values[k] if has_values else 1.0
                j = ids[k]
                vd[j, 0] += ay * x
                vd[j, 1] += step * x
        for j in range(len(grid)):  # the row's entropy, its slope and curvature at the step
            e, e1, e2[j] = cpu.lag_entropy(a, ca, c, da, grid[j])
            ent[j] += e
            ent1[j] += e1
        for j in range(len(grid) - 1):
            bend[j] += max(e2[j], e2[j + 1])
    return loss


def line_dual(vv, vdv, dvdv, grid, ent, ent1, bend) -> float:
    """The best dual along the lag correction, ``D(s) = -1/2 ||v + s dv||^2 - E(s)``, that
    ``lag_terms``' sums certify: at each ``grid`` step exactly, and between two steps the
    maximum of ``-1/2 ||v + s dv||^2 - (E(s_j) + E'(s_j)(s - s_j) + 1/2 B_j (s - s_j)^2)``
    (from either end), which is below ``D(s)`` because ``B_j`` bounds ``E''`` there (Taylor
    with the remainder's curvature at most ``B_j``: each row's ``1 / (an cn)`` peaks at an
    end of the interval, ``an cn`` being concave in ``s``). Why: the correction's optimum is
    sharp, ``P* - D`` falling by up to ``1/2 ||w_H - v_H||^2`` (0.6 of ``P*`` on 200k rows,
    C = 0.01) over a fraction of the step, so a grid alone left 2.4e-3 of it where the
    maximum leaves 8e-6."""
    quad = -0.5 * (vv + 2.0 * grid * vdv + grid**2 * dvdv)
    best = float(np.max(quad - ent))
    for j in range(len(grid) - 1):
        lo, hi, b = grid[j], grid[j + 1], bend[j]
        if not (np.isfinite(b) and np.isfinite(ent[j]) and np.isfinite(ent[j + 1])):
            continue
        for s0, e0, e1 in ((lo, ent[j], ent1[j]), (hi, ent[j + 1], ent1[j + 1])):
            # maximize -1/2 (vv + 2 s vdv + s^2 dvdv) - e0 - e1 (s - s0) - b/2 (s - s0)^2
            s = min(hi, max(lo, (b * s0 - vdv - e1) / max(dvdv + b, 1e-300)))
            val = -0.5 * (vv + 2.0 * s * vdv + s * s * dvdv) - e0 - e1 * (s - s0)
            best = max(best, val - 0.5 * b * (s - s0) ** 2)
    return best


def certify(tr) -> tuple[float, float]:
    """A trainer's exact check under the hot block, ``(primal, dual)``, from one pass over
    the data: the primal at ``w``, and the best of ``D(alpha)`` and the dual at ``alpha``
    corrected for the last hot step's lag (``hybrid_certify``'s ``dual``), ``-1/2 ||v + s
    dv||^2 - ent(s)`` at its best along ``s`` (``line_dual``; ``s = 0``: ``D(alpha)``). The
    pass is ``lag_terms`` on CPU units (``alpha`` at home) and the device's own ``lag_terms``
    on GPU units (``GpuUnit.lag``, whose sums come in the data's ids and are folded into the
    CPU units' layout here); it also leaves ``v_H = v_H(alpha)`` exact. The primal had a pass
    of its own before (``Trainer._objective``): one pass of an epoch's cost less per check."""
    hb, p = tr.hot, tr.problem
    delta = tr.w[hb.hot] - hb.seen if hb.seen is not None else np.zeros(hb.nh)
    tr.sync_alpha()
    order, plan = tr.exact_plan()
    on_gpu = [bool(u.reads_device) for u in tr.units]

    def begin(t):
        unit = tr.units[t]
        unit.begin(tr.w, len(plan[t]))
        if on_gpu[t]:
            unit.begin_lag(delta, GRID)

    tr._group.each(begin, "begin")
    g, lab = len(GRID), hb.labels
    d = lab.d
    wx = lab.extend(tr.w)  # the CPU units' ids read it (read-only)
    sums = [(np.zeros((d + 1 + hb.nh, 2)), np.zeros(g), np.zeros(g), np.zeros(g - 1))
            for _ in range(tr.k)]  # fmt: skip
    loss = np.zeros(tr.k)

    def lag(t, item, chunk):
        alpha = tr.state.alpha_of(item.k)
        if on_gpu[t]:
            return tr.units[t].lag(item, chunk, alpha, tr._sqnorm(item, chunk),
                                   tr.source.layout(item.k))  # fmt: skip
        lo, hi = item_span(item, chunk.n_rows)
        args = cpu.chunk_args(chunk, lo, hi)  # its indices are the whole chunk's, as ids are
        ids = lab.ids(args, item.k)
        loss[t] += lag_terms(args[0], ids, *args[2:], p.c_pos, p.c_neg, p.bias, alpha[lo:hi],
                             lab.ib, delta, GRID, wx, *sums[t])  # fmt: skip
        return [(item, ())]

    tr._run(order, plan, lag)
    for t in np.flatnonzero(on_gpu):  # the data's ids -> [w | w_H]: hot sums to d + 1 + h
        *parts, out = tr.units[t].lag_sums()
        vd, ent, ent1, bend = sums[t]
        for col, part in enumerate(parts):
            vd[d + 1 :, col] = part[lab.hot]
            part[lab.hot] = 0.0
            vd[: d + 1, col] = part
        ent[:], ent1[:], bend[:] = out[:g], out[g : 2 * g], out[2 * g : 3 * g - 1]
        loss[t] = out[3 * g - 1]
    vd, ent, ent1, bend = (sum(s[i] for s in sums) for i in range(4))
    v, dv = vd[:, 0], vd[:, 1]  # over [w | w_H]: the hot columns' own places stay 0
    hb.v_h[:] = v[d + 1 :]
    hb.fresh = True
    primal = 0.5 * cpu.squared_norm(tr.w) + float(np.sum(loss))
    return primal, line_dual(float(v @ v), float(v @ dv), float(dv @ dv), GRID, ent, ent1, bend)
