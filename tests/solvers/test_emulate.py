"""The staleness emulator: one row per wave is ``cpu.cd_pass`` bit for bit; a wave reads one
``w``; the step rules' curvatures."""

import numpy as np
import pytest
import scipy.sparse as sp

from snapfit.solvers import cpu, emulate


@pytest.fixture
def data():
    rng = np.random.default_rng(5)
    X = sp.random(60, 9, density=0.4, random_state=6, format="csr", dtype=np.float32)
    X.data += 0.25
    y = np.where(rng.random(60) < 0.4, 1.0, -1.0).astype(np.float32)
    weight = rng.uniform(0.0, 2.0, 60).astype(np.float32)
    weight[:4] = 0.0  # rows that never move
    args = (X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data, True, y, weight, True)
    sq = np.zeros(60, np.float32)
    cpu.row_sqnorms(args[0], args[1], X.data, True, sq)
    return X, args, sq


@pytest.mark.parametrize("seed", [-1, 3])
def test_one_row_per_wave_is_cpu_cd_pass(data, seed):
    _, args, sq = data
    rows = np.random.default_rng(1).permutation(60)
    a_cpu, w_cpu, a_emu, w_emu = np.zeros(60), np.zeros(10), np.zeros(60), np.zeros(10)
    for _ in range(3):
        ref = cpu.cd_pass(*args, 2.0, 1.5, 0.5, sq, a_cpu, w_cpu, rows, 1.5)
        curv = emulate.curvature("eso", *args[:4], sq, rows, 0.5, 1, 9)
        got = emulate.wave_pass(*args, 2.0, 1.5, 0.5, curv, a_emu, w_emu, rows, 1.5, 1, seed)
        assert got == ref
    assert np.array_equal(w_emu, w_cpu) and np.array_equal(a_emu, a_cpu)


def test_a_wave_reads_one_w(data):
    """``tau`` at least the rows: every row steps from the starting ``w`` (a NumPy Jacobi
    reference), whatever order the updates land in."""
    X, args, sq = data
    rows = np.random.default_rng(2).permutation(60)
    y, weight = args[4], args[5]
    w0 = np.random.default_rng(3).normal(size=10) * 0.1
    alpha0 = np.zeros(60)
    bias, sigma = 0.5, 2.0
    curv = sq.astype(np.float64) + bias * bias
    Xd = X.toarray().astype(np.float64)
    w_ref, a_ref = w0.copy(), alpha0.copy()
    for i in rows:
        c = (2.0 if y[i] > 0 else 1.5) * float(weight[i])
        lo, hi = X.indptr[i], X.indptr[i + 1]
        dot = w0[9] * bias  # in the kernels' order: a Newton stop near its tolerance is sharp
        for j, v in zip(X.indices[lo:hi], X.data[lo:hi], strict=True):
            dot += w0[j] * np.float64(v)
        b = y[i] * dot
        a_ref[i], delta, _, _ = cpu.row_update(sigma * curv[i], b, 0.0, c)  # numba math
        w_ref += sigma * delta * float(y[i]) * np.r_[Xd[i], bias]
    for seed in (-1, 0, 1):
        w, alpha = w0.copy(), alpha0.copy()
        emulate.wave_pass(*args, 2.0, 1.5, bias, curv, alpha, w, rows, sigma, 100, seed)
        np.testing.assert_allclose(w, w_ref, rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(alpha, a_ref)


def test_eso_curvature_counts_the_other_rows(data):
    """``q / sigma = ||x||^2 + b^2 + (tau - 1)(sum_j (w_j - 1) x_j^2 / (n - 1) + b^2)`` over
    the rows of the pass; one row in flight is the plain curvature."""
    X, args, sq = data
    rows = np.arange(10, 40)
    Xp = X[rows].toarray().astype(np.float64)
    w_j = (Xp != 0).sum(axis=0)
    u = ((Xp**2) * (w_j - 1)).sum(axis=1)
    got = emulate.eso_curvature(*args[:4], sq, rows, 0.5, 8, 9)[rows]
    expect = sq[rows].astype(np.float64) + 0.25 + 7 * (u / 29 + 0.25)
    np.testing.assert_allclose(got, expect, rtol=1e-12)
    plain = emulate.curvature("plain", *args[:4], sq, rows, 0.5, 8, 9)
    np.testing.assert_array_equal(emulate.eso_curvature(*args[:4], sq, rows, 0.5, 1, 9), plain)
    # tau is capped at the pass's rows; CoCoA+ and the per-wave bound sit above ESO.
    capped = emulate.eso_curvature(*args[:4], sq, rows, 0.5, 10**6, 9)
    np.testing.assert_array_equal(capped, emulate.eso_curvature(*args[:4], sq, rows, 0.5, 30, 9))
    for rule in ("cocoa", "bound"):
        assert np.all(emulate.curvature(rule, *args[:4], sq, rows, 0.5, 8, 9)[rows] >= got)
    with pytest.raises(ValueError, match="rule must be one of"):
        emulate.curvature("atomic", *args[:4], sq, rows, 0.5, 8, 9)
