"""The hot block (``hot_columns=True``) on GPU units: the kernels against the CPU unit's pass,
and the trainer's GPU cells (the GPU alone, with a CPU thread on the residue, two GPU units;
arrays and streamed Parquet) against liblinear's optimum."""

import numpy as np
import pytest
from numba import cuda

import snapfit
from snapfit.data import write_parquet
from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.engine import InMemorySource, Problem
from snapfit.engine import hot as hot_mod
from snapfit.solvers import cpu, dual, emulate, hot_pass, hybrid
from snapfit.solvers import gpu as kernels
from snapfit.solvers.dual import LOGISTIC
from snapfit.train import make_trainer
from tests.gpu.sim.conftest import gpu_devices, split_chunks
from tests.helpers import liblinear, primal

pytestmark = pytest.mark.usefixtures("cell_alarm")


def _problem(n=96, seed=0):
    X, y = make_criteo_like(n, seed=seed, hash_bits=8)
    X = X.tocsr()
    args = (X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data.astype(np.float32),
            True, np.where(y > 0, 1.0, -1.0).astype(np.float32), cpu.EMPTY_F32, False)  # fmt: skip
    hot = hybrid.hot_columns(args[0], args[1], X.shape[1], np.arange(n), 0.1)
    hot_pos = np.full(X.shape[1] + 1, -1, np.int64)
    hot_pos[hot] = np.arange(len(hot))
    return args, X.shape[1], hot, hot_pos


def _sqnorm(args):
    out = np.zeros(len(args[4]), np.float32)
    cpu.row_sqnorms(*args[:4], out)
    return out


def _curvatures(args, hot_pos, rows, sigma, block, team):
    """``cold_curvature`` on one block of ``block`` threads, ``team`` per row."""
    counts = cuda.to_device(np.zeros(len(hot_pos) - 1, np.int32))
    d_rows = cuda.to_device(rows.astype(np.int32))
    kernels.column_counts[1, block](args[0], args[1], d_rows, team, counts)
    out = cuda.to_device(np.zeros(len(args[4])))
    kernels.cold_curvature[1, block](*args[:4], 1.0, _sqnorm(args), hot_pos, counts, d_rows,
                                     sigma, team, out)  # fmt: skip
    return out.copy_to_host()


def test_cold_curvature_is_the_safe_step_over_the_cold_columns():
    args, d, hot, hot_pos = _problem()
    n = len(args[4])
    rows = np.random.default_rng(1).permutation(n)
    cold, _ = hybrid.split(*args[:4], hot_pos, 1.0)
    cold_sq = np.zeros(n, np.float32)
    cpu.row_sqnorms(*cold, True, cold_sq)
    # four rows in flight: ESO over the cold columns (the emulator's; the stored norm is
    # float32, so the cold part is to ~1e-6 of the whole)
    want = emulate.curvature("eso", *cold, True, cold_sq, rows, 0.0, 4, d)
    np.testing.assert_allclose(_curvatures(args, hot_pos, rows, 1.0, 8, 2), want, rtol=1e-5)
    # one row in flight: sigma times the cold part of the norm (duplicated indices summed)
    np.testing.assert_allclose(_curvatures(args, hot_pos, rows, 3.0, 2, 2), 3.0 * cold_sq,
                               rtol=1e-5, atol=1e-4)  # fmt: skip
    # a cold intercept adds bias^2 to every row
    cold_b = hot_pos.copy()
    cold_b[d] = -1
    got = _curvatures(args, cold_b, rows, 1.0, 2, 2)
    np.testing.assert_allclose(got, cold_sq + 1.0, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("sigma", [1.0, 2.0])
def test_one_row_in_flight_is_the_cpu_units_pass(sigma):
    """With one row in flight the device pass is the CPU unit's (``hot_pass.cd_pass_hot``),
    rows in the same order: the same ``alpha``, cold ``w`` and hot moves."""
    args, d, hot, hot_pos = _problem()
    n = len(args[4])
    rows = np.random.default_rng(2).permutation(n).astype(np.int32)
    c = 0.5
    w0 = np.random.default_rng(3).normal(size=d + 1) * 0.1
    alpha, w, acc = np.zeros(n), w0.copy(), np.zeros(len(hot))
    sq = _sqnorm(args)
    lab = hot_pass.HotLabels(hot_pos, len(hot), keep=False)
    ids, cold = lab.of(args, sq)
    wx = lab.extend(w)
    want = hot_pass.cd_pass_hot(args[0], ids, *args[2:], c, c, 1.0, cold, lab.ib, alpha, wx,
                                lab.nh, rows, sigma, LOGISTIC)  # fmt: skip
    w, acc = wx[: d + 1], lab.moves(wx)

    curv = _curvatures(args, hot_pos, rows, sigma, 2, 2)
    d_alpha, d_w = cuda.to_device(np.zeros(n)), cuda.to_device(w0)
    d_acc, out = cuda.to_device(np.zeros(len(hot))), cuda.to_device(np.zeros(2))
    kernels.cd_pass_hot[1, 2](*args, c, c, 1.0, cuda.to_device(curv), hot_pos, d_alpha, d_w,
                              d_acc, cuda.to_device(rows), sigma, 2, out, LOGISTIC)  # fmt: skip
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=1e-12)
    np.testing.assert_allclose(d_alpha.copy_to_host(), alpha, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(d_w.copy_to_host(), w, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(d_acc.copy_to_host(), acc, rtol=1e-12, atol=1e-15)
    assert np.array_equal(d_w.copy_to_host()[hot], w0[hot])  # the hot block is read-only


DEVICES = {
    "gpu": dict(device="gpu", n_jobs=1),
    "gpu + cpu": dict(device="gpu", n_jobs=2),
    "2 gpus": dict(device="gpu", device_ids=[0, 0], n_jobs=2),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    X, y = make_criteo_like(300, seed=4, hash_bits=10)
    ref = liblinear(X, y, 0.1)
    path = str(tmp_path_factory.mktemp("hot") / "d.parquet")
    write_parquet(path, X, y, row_group_rows=50)
    return X, y, path, primal(X, y, ref.coef_, ref.intercept_[0], 0.1)


def _fit(source, y=None, **kw):
    est = snapfit.LogisticRegression(C=0.1, tol=1e-7, max_iter=400, random_state=0,
                                     hot_columns=True, chunk_rows=100, **kw)  # fmt: skip
    return est.fit(source, y)


@pytest.mark.parametrize("devices", list(DEVICES))
def test_gpu_cells_reach_liblinears_optimum(data, devices):
    X, y, path, p_ref = data
    est = _fit(X, y, **DEVICES[devices])
    p = primal(X, y, est.coef_, est.intercept_[0], 0.1)
    assert abs(p - p_ref) <= 1e-6 * abs(p_ref), (devices, p, p_ref)
    assert est.history_[-1]["exact"]


@pytest.mark.parametrize(
    "cell", [("streamed", "gpu"), ("resident", "2 gpus")], ids=lambda c: " ".join(c)
)
def test_parquet_gpu_cells_reach_liblinears_optimum(data, cell):
    """Streamed: the GPU alone, every chunk staged through the unit's slots; resident: the
    row groups as chunks on two GPU units."""
    X, y, path, p_ref = data
    where, devices = cell
    budget = 120_000 if where == "streamed" else None
    est = _fit(path, memory_budget=budget, **DEVICES[devices])
    assert est.streamed_ is (where == "streamed")
    p = primal(X, y, est.coef_, est.intercept_[0], 0.1)
    assert abs(p - p_ref) <= 1e-6 * abs(p_ref), (p, p_ref)


@pytest.mark.parametrize("bias", [1.0, 0.0])
def test_the_lag_kernel_is_the_exact_checks_host_sums(bias):
    """``lag_terms`` on the device (the data's ids) equals the host's ``hot.lag_terms`` (the
    relabeled ids of the CPU units) over a row range, with rows at a bound (``a = 0``,
    ``a = C``), a row of zero weight, steps where some row leaves its bounds (``inf``) and
    several teams and blocks: ``v``, ``dv`` and the entropy sums to 1e-12. With the
    intercept cold (``bias = 0``) its sums stay 0."""
    args, d, hot, hot_pos = _problem()
    n = len(args[4])
    rng = np.random.default_rng(5)
    c = 0.5
    weight = rng.uniform(0.5, 2.0, n).astype(np.float32)
    weight[7] = 0.0
    args = args[:5] + (weight, True)
    bound = c * weight.astype(np.float64)
    a = rng.uniform(0.0, 1.0, n) * bound
    a[3], a[11] = 0.0, bound[11]
    alpha = np.array([dual.pack_alpha(x, b - x) for x, b in zip(a, bound, strict=True)])
    if bias == 0.0:
        hot_pos = hot_pos.copy()
        hot_pos[d] = -1
        hot = hot[hot < d]
        hot_pos[hot] = np.arange(len(hot))
    delta = rng.normal(size=len(hot)) * 0.1
    lo, hi = 5, n - 4
    g = len(hot_mod.GRID)

    w = rng.normal(size=d + 1) * 0.3
    lab = hot_pass.HotLabels(hot_pos, len(hot), keep=False)
    vd = np.zeros((d + 1 + len(hot), 2))
    sums = (np.zeros(g), np.zeros(g), np.zeros(g - 1))
    sl = slice(lo, hi)
    sub = (args[0][lo : hi + 1], lab.ids(args), args[2], True, args[4][sl], weight[sl], True)
    loss = hot_mod.lag_terms(*sub, c, c, bias, alpha[sl], lab.ib, delta, hot_mod.GRID,
                             lab.extend(w), vd, *sums)  # fmt: skip

    v, dv = cuda.to_device(np.zeros(d + 1)), cuda.to_device(np.zeros(d + 1))
    out = cuda.to_device(np.zeros(3 * g))
    kernels.lag_terms[3, 4](*args, c, c, bias, cuda.to_device(alpha), hot_pos,
                            cuda.to_device(delta), cuda.to_device(hot_mod.GRID),
                            cuda.to_device(w), lo, hi, 2, v, dv, out)  # fmt: skip
    got = np.stack([v.copy_to_host(), dv.copy_to_host()], axis=1)
    want = vd[: d + 1].copy()
    want[lab.hot] += vd[d + 1 :]  # the hot columns' sums at their own ids
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    if bias == 0.0:
        assert not got[d].any()
    out = out.copy_to_host()
    for part, h in zip((out[:g], out[g : 2 * g], out[2 * g : 3 * g - 1]), sums, strict=True):
        assert np.array_equal(np.isinf(part), np.isinf(h))
        np.testing.assert_allclose(part[np.isfinite(h)], h[np.isfinite(h)], rtol=1e-12)
    np.testing.assert_allclose(out[3 * g - 1], loss, rtol=1e-12)  # the primal's loss at w


@pytest.mark.parametrize("n_cpu", [0, 1], ids=["gpu", "gpu + cpu"])
def test_the_exact_check_on_the_device_is_the_hosts(n_cpu):
    """Under the hot block a GPU unit runs its share of the exact check's pass on the device
    (``GpuUnit.lag``): the certificate's primal and dual and ``v_H`` equal those of the same
    pass on the host (the unit told it reads no device), beside a CPU unit or alone, and the
    primal is that of the objective's own pass."""
    X, y = make_criteo_like(160, seed=6, hash_bits=8)
    X = X.tocsr()
    y = np.where(y > 0, 1.0, -1.0).astype(np.float32)
    problem = Problem(n_features=X.shape[1], c_pos=0.1, c_neg=0.1, bias=1.0, tol=1e-9,
                      max_iter=50, seed=1, hot_columns=True)  # fmt: skip
    tr = make_trainer(InMemorySource(split_chunks(X, y, None, 40), X.shape[1]), problem,
                      gpu_devices(n_cpu=n_cpu))  # fmt: skip
    try:
        for _ in range(3):
            tr.run_epoch()
        gpu = tr.units[0]
        assert gpu.reads_device and tr.hot.seen is not None
        tr.meter.rates[:] = 1.0  # the simulator's measured rates would leave the CPU none
        shares = [sum(it.hi - it.lo for it in items) for items in tr.exact_plan()[1]]
        assert min(shares) > 0, shares
        got = (*hot_mod.certify(tr), tr.hot.v_h.copy())
        primal = tr._objective()[0]
        gpu.reads_device = False  # the same pass on the host chunks, as before
        want = (*hot_mod.certify(tr), tr.hot.v_h.copy())
        with pytest.raises(ValueError, match="at most 16 steps"):  # the kernel's own sums
            gpu.begin_lag(np.zeros(gpu.nh), np.zeros(kernels.LAG_STEPS + 1))
    finally:
        tr.close()
    assert np.isfinite(want[:2]).all()
    np.testing.assert_allclose(got[:2], want[:2], rtol=1e-12)
    np.testing.assert_allclose(got[0], primal, rtol=1e-12)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12, atol=1e-14)
