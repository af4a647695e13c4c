"""A CPU model of the GPU kernel's rows in flight: dual CD in waves of ``tau`` stale rows.

Why: an H100 runs ``gpu.cd_pass`` with about 1,600 rows in flight, the CUDA simulator with 8,
and no CI machine has a GPU. What staleness does to convergence must still be tested, so this
module runs THE scalar update (``cpu.row_update``, i.e. ``dual.row_update`` compiled by numba)
the way the kernel's teams do: the rows of a wave of ``tau`` consecutive entries of ``rows`` all
read one snapshot of ``w``, take their Newton steps, and only then add their updates into ``w``
(in wave order, or in a seeded shuffled order, as atomics land). That is exactly one block of
the kernel launched alone (``max_blocks=1``: a barrier-separated read phase, then an add phase),
and ``tau = 1`` is ``cpu.cd_pass`` bit for bit; the simulator test ties the two together.

Each row's curvature is an argument (``curv``: ``q_i / sigma``) so that step rules can be
compared: ``plain`` is today's ``||x_i||^2 + bias^2``, the one the kernel used whatever the
rows in flight; ``eso`` is the rule the kernel now derives from its launch (``eso_curvature``;
docs/gpu-performance-model.md has the reasoning and the measurements).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from snapfit.solvers import cpu

RULES = ("plain", "eso", "bound", "cocoa")


def csr_args(X, y01) -> tuple[tuple, np.ndarray]:
    """The kernels' arguments (``cpu.chunk_args`` order) of a scipy CSR matrix with 0/1 (or
    -1/+1) labels, and its rows' squared norms: the emulator's, benches' and tests' input."""
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int32)
    values = X.data.astype(np.float32)
    sq = np.zeros(X.shape[0], np.float32)
    cpu.row_sqnorms(indptr, indices, values, True, sq)
    labels = np.where(np.asarray(y01) > 0, 1.0, -1.0).astype(np.float32)
    return (indptr, indices, values, True, labels, cpu.EMPTY_F32, False), sq


@njit(nogil=True, cache=True)
def read_wave(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, curv, alpha, w, wave, sigma, steps, gap, ent,
):  # fmt: skip
    """The read phase of one wave: every row of ``wave`` takes THE scalar update against the
    same ``w`` and leaves its step ``sigma delta y_i`` in ``steps`` (0 for a row that does not
    move); ``(gap, ent)`` come back with the wave's terms added, row by row."""
    for u in range(len(wave)):
        i = wave[u]
        yi = y[i]
        c = cpu.row_bound(i, y, weight, has_weight, c_pos, c_neg)
        steps[u] = 0.0
        if c <= 0.0:
            continue
        dot = cpu.row_dot(indptr[i], indptr[i + 1], indices, values, has_values, w, bias)
        s_new, delta, g, e = cpu.row_update(sigma * curv[i], yi * dot, alpha[i], c)
        alpha[i] = s_new
        gap += g
        ent += e
        steps[u] = sigma * delta * yi
    return gap, ent


@njit(nogil=True, cache=True)
def wave_pass(
    indptr, indices, values, has_values, y, weight, has_weight,
    c_pos, c_neg, bias, curv, alpha, w, rows, sigma, tau, seed,
):  # fmt: skip
    """One pass of dual CD over ``rows`` in waves of ``tau`` rows; returns ``(gap, entropy)``.

    As ``cpu.cd_pass`` (same arguments, same sums), except that ``curv[i]`` (float64) replaces
    ``sqnorm[i] + bias^2`` and that the rows ``rows[t : t + tau]`` all read ``w`` as it was at
    the wave's start. ``seed < 0`` adds the wave's updates in wave order, otherwise in an order
    shuffled with that seed (rows of one wave commute up to rounding).
    """
    if seed >= 0:
        np.random.seed(seed)
    gap = 0.0
    ent = 0.0
    n = len(rows)
    tau = max(1, min(tau, n))
    steps = np.zeros(tau)
    order = np.arange(tau)
    for start in range(0, n, tau):
        m = min(tau, n - start)
        gap, ent = read_wave(
            indptr, indices, values, has_values, y, weight, has_weight, c_pos, c_neg, bias,
            curv, alpha, w, rows[start : start + m], sigma, steps, gap, ent,
        )  # fmt: skip
        if seed >= 0:
            np.random.shuffle(order[:m])
        for u in range(m):  # add phase
            v = order[u] if seed >= 0 else u
            step = steps[v]
            if step != 0.0:
                i = rows[start + v]
                cpu.row_axpy(indptr[i], indptr[i + 1], indices, values, has_values, w, bias, step)
        if seed >= 0:
            for u in range(m):
                order[u] = u
    return gap, ent


@njit(nogil=True, cache=True)
def column_counts(indptr, indices, rows, d):
    """Stored entries of each of the ``d`` columns over the rows ``rows`` (the kernel's
    ``column_counts``): a row holding a column twice counts twice, which only overstates it."""
    out = np.zeros(d, np.int64)
    for i in rows:
        for k in range(indptr[i], indptr[i + 1]):
            out[indices[k]] += 1
    return out


@njit(nogil=True, cache=True)
def row_overlap(indptr, indices, values, has_values, rows, weights, out):
    """``out[i] = sum_k weights[indices[k]] * values[k]^2`` over the entries of each row of
    ``rows`` (entries in stored order; the kernel's lanes sum the same terms)."""
    for i in rows:
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            v = np.float64(values[k]) if has_values else 1.0
            s += weights[indices[k]] * v * v
        out[i] = s


def eso_curvature(indptr, indices, values, has_values, sqnorm, rows, bias, tau, d):
    """The kernel's safe curvature ``q_i / sigma`` for ``tau`` rows in flight (float64).

    The ESO of Richtarik & Takac (2016, Theorem 14, per column as in Takac, Richtarik & Srebro
    2015) for a random ``tau``-subset of the ``n`` rows of the pass: a column held by ``w_j``
    of them lies in ``1 + (w_j - 1)(tau - 1)/(n - 1)`` rows of such a wave on average, so::

        q_i / sigma = ||x_i||^2 + bias^2 + (tau - 1) (u_i / (n - 1) + bias^2),
        u_i = sum_j (w_j - 1) x_ij^2

    (the intercept column is in every row). ``w_j`` is counted as stored entries
    (``column_counts``), as the kernel counts it. ``tau = 1`` gives the plain curvature;
    ``tau`` is capped at ``n``, as in the kernel.
    """
    n = len(rows)
    tau = max(1, min(int(tau), n))
    u = np.zeros(len(indptr) - 1)
    if tau > 1:
        weights = (column_counts(indptr, indices, rows, d) - 1).astype(np.float64)
        row_overlap(indptr, indices, values, has_values, rows, weights, u)
    b2 = bias * bias
    return sqnorm.astype(np.float64) + b2 + (tau - 1) * (u * (1.0 / max(1, n - 1)) + b2)


def curvature(rule, indptr, indices, values, has_values, sqnorm, rows, bias, tau, d):
    """``q_i / sigma`` of every row under step ``rule`` (one of ``RULES``) for ``tau`` rows in
    flight over the pass ``rows``:

    - ``plain``: ``||x_i||^2 + bias^2`` whatever ``tau`` (the kernel before this rule);
    - ``eso``: ``eso_curvature`` (safe in expectation over random waves);
    - ``bound``: ``sum_j min(w_j, tau) x_ij^2 + tau bias^2``, safe for every wave (a column
      is in at most ``min(w_j, tau)`` rows of one; Cauchy-Schwarz), so the dual never falls
      (for rows without duplicated columns);
    - ``cocoa``: ``tau (||x_i||^2 + bias^2)``, CoCoA+'s ``sigma' = tau`` with each row a unit.
    """
    n = len(rows)
    tau = max(1, min(int(tau), n))
    b2 = bias * bias
    plain = sqnorm.astype(np.float64) + b2
    if rule == "plain" or tau == 1:
        return plain
    if rule == "eso":
        return eso_curvature(indptr, indices, values, has_values, sqnorm, rows, bias, tau, d)
    if rule == "cocoa":
        return tau * plain
    if rule == "bound":
        out = np.zeros(len(indptr) - 1)
        weights = np.minimum(column_counts(indptr, indices, rows, d), tau).astype(np.float64)
        row_overlap(indptr, indices, values, has_values, rows, weights, out)
        return out + tau * b2
    raise ValueError(f"rule must be one of {RULES}; got {rule!r}.")


@dataclass
class Run:
    """What ``run`` saw: the exact dual after every epoch, the last primal, and whether the
    duality gap met ``tol`` (relative to the primal) within the epochs allowed; ``primals``:
    the primal after every epoch (epochs to a target are read from the two lists)."""

    duals: list[float]
    primal: float
    converged: bool
    primals: list[float] = field(default_factory=list)

    @property
    def epochs(self) -> int:
        return len(self.duals)

    def epochs_to(self, rtol: float, optimum: float | None = None) -> int | None:
        """First epoch (1-based) whose relative gap, or with ``optimum`` whose relative primal
        error ``(P - P*) / P*``, is at most ``rtol``; None if none was."""
        p = np.asarray(self.primals)
        err = p - (np.asarray(self.duals) if optimum is None else optimum)
        hit = np.flatnonzero(err <= rtol * np.abs(p if optimum is None else optimum))
        return int(hit[0]) + 1 if len(hit) else None

    def dual_drops(self, rtol: float = 1e-12) -> int:
        """Epochs whose dual fell below the previous one's (beyond ``rtol`` of it)."""
        d = np.asarray(self.duals)
        return int(np.sum(d[1:] < d[:-1] - rtol * np.abs(d[:-1])))


def run(args, sqnorm, n_features, c_pos, c_neg, bias, tau, rule, *, tol, max_epochs, seed=0):
    """Epochs of ``wave_pass`` (``sigma = 1``) over one chunk (``args`` as ``cpu.chunk_args``
    gives them), each in a fresh random order, from ``alpha = 0`` until the relative duality
    gap is at most ``tol``. The dual is exact every epoch at no cost: a pass visits every row,
    so its entropy sum is the dual's. The curvature is computed once: it depends on the rows
    of the pass, not their order."""
    n = len(args[4])
    rng = np.random.default_rng(seed)
    alpha, w = np.zeros(n), np.zeros(n_features + 1)
    curv = curvature(rule, *args[:4], sqnorm, np.arange(n), bias, tau, n_features)
    out = Run([], np.inf, False)
    for epoch in range(max_epochs):
        rows = rng.permutation(n)
        _, ent = wave_pass(*args, c_pos, c_neg, bias, curv, alpha, w, rows, 1.0, tau, epoch)
        ww = cpu.squared_norm(w)
        out.duals.append(-0.5 * ww - ent)
        if not np.isfinite(out.duals[-1]):
            break
        out.primal = 0.5 * ww + cpu.chunk_objective(*args, c_pos, c_neg, bias, alpha, w)[0]
        out.primals.append(out.primal)
        if out.primal - out.duals[-1] <= tol * abs(out.primal):
            out.converged = True
            break
    return out
