"""Each kernel of ``snapfit.solvers.gpu`` against its CPU twin in ``snapfit.solvers.cpu``."""

import numpy as np
import pytest
from numba import cuda

from snapfit.solvers import cpu
from snapfit.solvers import gpu as kernels
from tests.gpu.sim.conftest import make_problem_data


def _host_args(X, y, w):
    values = X.data
    weight = w if w is not None else cpu.EMPTY_F32
    return (
        X.indptr.astype(np.int64), X.indices.astype(np.int32), values, True, y, weight,
        w is not None,
    )  # fmt: skip


def _dev(args):
    return tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args)


def _sqnorms(X):
    out = np.zeros(X.shape[0], np.float32)
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int32)
    cpu.row_sqnorms(indptr, indices, X.data, True, out)
    return out


@pytest.mark.parametrize("loss", [0, 1, 2, 3])
@pytest.mark.parametrize("team", [1, 2, 8])
def test_one_row_at_a_time_equals_cpu_pass(team, loss):
    """With one row in flight the GPU pass is the CPU pass: same rows, same order, same math,
    for every loss (``dual.LOSSES``)."""
    X, y, w = make_problem_data(n=24, d=8, weights=True)
    args = _host_args(X, y, w)
    sq = _sqnorms(X)
    rows = np.random.default_rng(0).permutation(24)
    a_cpu, w_cpu = np.zeros(24), np.zeros(9)
    gap_ent = cpu.cd_pass(*args, 1.5, 0.7, 1.0, sq, a_cpu, w_cpu, rows, 2.0, loss)
    d_alpha, d_w, out = cuda.to_device(np.zeros(24)), cuda.to_device(np.zeros(9)), np.zeros(2)
    d_out = cuda.to_device(out)
    counts = cuda.to_device(np.full(8, -7, np.int32))  # one row in flight: never read
    kernels.cd_pass[1, team](
        *_dev(args), 1.5, 0.7, 1.0, cuda.to_device(sq), counts, d_alpha, d_w,
        cuda.to_device(rows.astype(np.int32)), 2.0, team, d_out, loss,
    )  # fmt: skip
    np.testing.assert_allclose(d_w.copy_to_host(), w_cpu, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(d_alpha.copy_to_host(), a_cpu, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(d_out.copy_to_host(), gap_ent, rtol=1e-12)


@pytest.mark.parametrize("loss", [0, 1, 2, 3])
def test_objective_decision_and_sqnorms_equal_cpu(loss):
    X, y, w = make_problem_data(n=30, d=7, weights=True)
    X = X.tolil()
    X[2, 1] = 0.5  # duplicates below: rows whose norms need summing first
    X = X.tocsr()
    X.indices = np.concatenate([X.indices, [1, 1]])[: len(X.indices)]
    args = _host_args(X, y, w)
    rng = np.random.default_rng(2)
    alpha = rng.uniform(-0.3, 0.3, 30)
    wv = rng.normal(size=8)
    ref = cpu.chunk_objective(*args, 1.0, 2.0, 0.5, alpha, wv, loss)
    out = cuda.to_device(np.zeros(3))
    kernels.chunk_objective[2, 8](
        *_dev(args), 1.0, 2.0, 0.5, cuda.to_device(alpha), cuda.to_device(wv), 0, 30, 4, out, loss
    )
    np.testing.assert_allclose(out.copy_to_host(), ref, rtol=1e-12)
    # A row range sums only those rows.
    part = cuda.to_device(np.zeros(3))
    kernels.chunk_objective[1, 8](
        *_dev(args), 1.0, 2.0, 0.5, cuda.to_device(alpha), cuda.to_device(wv), 5, 30, 8, part, loss
    )
    assert part.copy_to_host()[0] < ref[0]

    dec = np.empty(30)
    cpu.decision_function(args[0], args[1], X.data, True, wv[:7], 0.25, dec)
    d_dec = cuda.to_device(np.zeros(30))
    kernels.decision_function[1, 16](
        cuda.to_device(args[0]), cuda.to_device(args[1]), cuda.to_device(X.data), True,
        cuda.to_device(wv[:7]), 0.25, 4, d_dec,
    )  # fmt: skip
    np.testing.assert_allclose(d_dec.copy_to_host(), dec, rtol=1e-12)


def test_sqnorms_sum_duplicates_first():
    indptr = np.array([0, 3, 5, 5], np.int64)
    indices = np.array([2, 4, 2, 1, 0], np.int32)
    values = np.array([1.0, 2.0, 3.0, 0.5, 1.0], np.float32)
    expect = np.array([(1 + 3) ** 2 + 4, 1.25, 0.0], np.float32)
    for has_values, vals, exp in ((True, values, expect), (False, values[:0], [5, 2, 0])):
        out = cuda.to_device(np.zeros(3, np.float32))
        kernels.row_sqnorms[1, 4](
            cuda.to_device(indptr), cuda.to_device(indices), cuda.to_device(vals), has_values,
            2, out,
        )  # fmt: skip
        np.testing.assert_allclose(out.copy_to_host(), exp)


def test_choose_team():
    assert kernels.choose_team(1.0, 128) == 4
    assert kernels.choose_team(39.0, 128) == 64
    assert kernels.choose_team(30.0, 128) == 32
    assert kernels.choose_team(5000.0, 128) == 128


@pytest.mark.parametrize("loss", [0, 1, 2, 3])
@pytest.mark.parametrize("has_values", [True, False])
@pytest.mark.parametrize("from_margins", [True, False])
def test_warm_start_equals_cpu(has_values, from_margins, loss):
    """The ``warm_start`` kernel is ``cpu.alpha_from_margins`` then ``cpu.accumulate_w``; rows
    with implicit 1.0 values (``has_values`` False) take the other scatter loop."""
    X, y, wt = make_problem_data(n=20, d=6, weights=True)
    if not has_values:
        X.data[:] = 1.0
    args = list(_host_args(X, y, wt))
    args[3] = has_values
    rng = np.random.default_rng(5)
    w0 = rng.normal(size=7)
    alpha = rng.uniform(0.05, 0.5, 20)
    alpha[wt == 0] = 0.0  # a row of bound 0 has alpha 0 from the start (neither pass writes it)
    a_cpu, w_cpu = alpha.copy(), np.zeros(7)
    if from_margins:
        cpu.alpha_from_margins(*args, 1.5, 0.7, 1.0, w0, a_cpu, loss)
    cpu.accumulate_w(*args, 1.5, 0.7, 1.0, a_cpu, w_cpu, loss)
    d_alpha, d_w = cuda.to_device(alpha.copy()), cuda.to_device(np.zeros(7))
    kernels.warm_start[2, 4](
        *_dev(tuple(args)), 1.5, 0.7, 1.0, cuda.to_device(w0), from_margins, d_alpha, d_w, 4, loss,
    )  # fmt: skip
    np.testing.assert_allclose(d_alpha.copy_to_host(), a_cpu, rtol=1e-12)
    np.testing.assert_allclose(d_w.copy_to_host(), w_cpu, rtol=1e-12, atol=1e-14)
