"""The hybrid (hot columns as a primal block) on CPU threads that share one ``w``.

Why: two threads sharing ``w`` lose twice on Criteo-like rows (docs/threads.md): the cache
lines of the dense columns move between the cores at nearly every row, and two rows updated at
once that share those columns make a Jacobi step that gains less than two steps in turn. Under
the hybrid (``snapfit.solvers.hybrid``) rows write only cold columns, which two rows seldom
share, and add their hot moves into an accumulator; ``w_H`` is read-only within a segment. So
here each thread runs its share of a segment's rows against the one ``w`` (cold columns
Hogwild-style) with its own accumulator, and the segment's join is the one barrier where the
accumulators are summed and ``w_H`` takes the hot step. ``ThreadPass`` keeps ``hybrid.run``'s
pass contract (as ``hybrid.HostPass`` and ``snapfit.gpu.hybrid.DevicePass`` do), so the epochs,
the hot step and the exact certificate are ``hybrid.run``'s own.

The pass runs in relabeled ids: the hot columns become ids ``hlo .. d - 1`` (the others keep
theirs or take a freed one), so a store's target is one compare, no lookup per entry.
Lost cold updates (two threads on one cold column at once) leave ``w_S != v_S(alpha)``, so
``sync`` (before every exact check) rebuilds ``w_S = v_S(alpha)``, as the trainer's ``settle``
does for today's shared threads; that rebuild is the check's cost, not the epoch's.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from snapfit.solvers import cpu


@njit(nogil=True, cache=True)
def cd_pass_block(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, curv, alpha, w, hlo, apos, ib, acc, rows,
):  # fmt: skip
    """``hybrid.wave_pass`` at one row in flight with ``cpu.cd_pass``'s prefetch pipeline:
    every row of ``rows`` takes THE scalar update against all of ``w`` with curvature
    ``curv[i]`` (its cold columns'), writes ids below ``hlo`` into ``w`` and adds the moves on
    ids ``j >= hlo`` (hot columns; ``j < len(w) - 1``) into ``acc[apos[j - hlo]]``, the
    intercept's into ``acc[ib]`` (into ``w[-1]`` when ``ib < 0``). Returns ``(gap, entropy)``."""
    gap = 0.0
    ent = 0.0
    d = len(w) - 1
    n = len(rows)
    for t in range(n):
        if t + 3 < n:
            cpu.prefetch(indptr, rows[t + 3])
        if t + 2 < n:
            r = rows[t + 2]
            lo = indptr[r]
            hi = indptr[r + 1]
            if hi > lo:
                for k in range(lo, hi, 16):
                    cpu.prefetch(indices, k)
                    if has_values:
                        cpu.prefetch(values, k)
            cpu.prefetch(curv, r)
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
        if has_values:
            for k in range(lo, hi):
                dot += w[indices[k]] * values[k]
        else:
            for k in range(lo, hi):
                dot += w[indices[k]]
        s_new, delta, g, e = cpu.row_update(curv[i], yi * dot, alpha[i], c)
        alpha[i] = s_new
        gap += g
        ent += e
        if delta != 0.0:
            step = delta * yi
            if ib >= 0:
                acc[ib] += step * bias
            else:
                w[d] += step * bias
            for k in range(lo, hi):
                j = indices[k]
                x = step * values[k] if has_values else step
                if j >= hlo:
                    acc[apos[j - hlo]] += x
                else:
                    w[j] += x
    return gap, ent


def relabeling(hot_cols: np.ndarray, d: int) -> np.ndarray:
    """A permutation ``code`` of ``0 .. d - 1`` that makes hot column ``hot_cols[k]`` id
    ``d - len(hot_cols) + k``; a column displaced from those ids takes a freed one."""
    hot_cols = np.asarray(hot_cols, np.int64)
    m = len(hot_cols)
    hlo = d - m
    code = np.arange(d, dtype=np.int64)
    code[hot_cols] = hlo + np.arange(m)
    is_hot = np.zeros(d, bool)
    is_hot[hot_cols] = True
    displaced = np.arange(hlo, d)[~is_hot[hlo:]]  # cold columns in the hot ids' range
    freed = hot_cols[hot_cols < hlo]  # ids below hlo that hot columns left
    code[displaced] = freed
    return code


class ThreadPass:
    """``hybrid.run``'s pass contract on ``n_threads`` CPU threads sharing one ``w``.

    A segment's rows are cut into ``n_threads`` contiguous parts, one per thread (the calling
    thread runs the first), each through ``cd_pass_block`` with its own accumulator (the first
    thread's is ``acc``, ``v_H(alpha)``, itself: one thread is ``hybrid.HostPass`` at one row in
    flight bit for bit); when all are back the others' are added into ``acc``. ``alpha`` is in the
    chunk's row order; ``w`` lives relabeled (``relabeling``) and crosses ``sync``/``push``
    in the data's order. ``pass_s`` sums the seconds of the segments (the threads' passes),
    ``rebuild_s`` those ``sync`` spent rebuilding ``w_S``.
    """

    def __init__(self, args, c_pos, c_neg, bias, curv, hot, hot_pos, n_features, n_threads=2):
        indptr, indices, values, has_values, y, weight, has_weight = args
        d = int(n_features)
        hot = np.asarray(hot, np.int64)
        cols = hot[hot < d]
        self.code = relabeling(cols, d)
        self.hlo = d - len(cols)
        self.apos = np.asarray(hot_pos, np.int64)[cols]
        self.ib = int(hot_pos[d])
        self.hot_r = np.where(hot < d, self.code[np.minimum(hot, d - 1)], d)
        self.args = (indptr, self.code[indices].astype(np.int32), values, has_values, y,
                     weight, has_weight)  # fmt: skip
        self.coef = (float(c_pos), float(c_neg), float(bias))
        self.curv = np.ascontiguousarray(curv, np.float64)
        self.n_threads = max(1, int(n_threads))
        self.alpha = np.zeros(len(y))
        self.w_r = np.zeros(d + 1)  # relabeled; the intercept last
        self.w = np.zeros(d + 1)  # the data's order, filled by ``sync``
        self.acc = np.zeros(len(hot))
        self.parts = np.zeros((self.n_threads, len(hot)))
        self.rows = None
        self.pass_s = 0.0
        self.rebuild_s = 0.0
        self._pool = ThreadPoolExecutor(self.n_threads - 1) if self.n_threads > 1 else None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def epoch_rows(self, rows):
        self.rows = np.ascontiguousarray(rows, np.int64)

    def _part(self, t, rows):
        acc = self.acc if t == 0 else self.parts[t]  # the first thread adds into acc itself
        return cd_pass_block(
            *self.args, *self.coef, self.curv, self.alpha, self.w_r, self.hlo, self.apos,
            self.ib, acc, rows,
        )  # fmt: skip

    def segment(self, lo, hi, seed=-1):
        """Rows ``[lo, hi)`` of the epoch's order on the threads; ``seed`` is unused (the
        threads' timing, not a seed, orders their updates)."""
        t0 = time.perf_counter()
        rows = self.rows[lo:hi]
        cuts = np.linspace(0, len(rows), self.n_threads + 1).astype(np.int64)
        self.parts[:] = 0.0
        futures = [
            self._pool.submit(self._part, t, rows[cuts[t] : cuts[t + 1]])
            for t in range(1, self.n_threads)
        ]
        gap, ent = self._part(0, rows[cuts[0] : cuts[1]])
        for f in futures:
            g, e = f.result()
            gap += g
            ent += e
        for t in range(1, self.n_threads):
            self.acc += self.parts[t]
        self.pass_s += time.perf_counter() - t0
        return gap, ent

    def hot_w(self):
        return self.w_r[self.hot_r], self.acc

    def set_hot_w(self, values):
        self.w_r[self.hot_r] = values

    def sync(self):
        """``alpha``, ``w`` (the data's order) and ``acc``; with several threads ``w_S`` is
        rebuilt as ``v_S(alpha)`` first (their lost cold updates), ``w_H`` kept."""
        if self.n_threads > 1:
            t0 = time.perf_counter()
            w_h = self.w_r[self.hot_r].copy()
            self.w_r[:] = 0.0
            indptr, indices, values, has_values, y, weight, has_weight = self.args
            c_pos, c_neg, bias = self.coef
            cpu.accumulate_w(indptr, indices, values, has_values, y, weight, has_weight,
                             c_pos, c_neg, bias, self.alpha, self.w_r)  # fmt: skip
            self.w_r[self.hot_r] = w_h
            self.rebuild_s += time.perf_counter() - t0
        d = len(self.w) - 1
        self.w[:d] = self.w_r[self.code]
        self.w[d] = self.w_r[d]
        return self.alpha, self.w, self.acc

    def push(self, alpha=None, w=None, acc=None):
        if alpha is not None and alpha is not self.alpha:
            self.alpha[:] = alpha
        if w is not None:
            d = len(self.w) - 1
            self.w_r[self.code] = w[:d]
            self.w_r[d] = w[d]
        if acc is not None and acc is not self.acc:
            self.acc[:] = acc
