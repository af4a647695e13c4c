"""``cd_pass_hot``, the hybrid's pass on the device (hot columns as a primal block), against
the hybrid emulator (``snapfit.solvers.hybrid``): with one block, an epoch of segments and hot
steps gives the emulator's ``alpha``, ``w`` and ``v_H`` increments to 1e-12."""

import numpy as np
import pytest
from numba import cuda

from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.gpu.hybrid import DevicePass
from snapfit.solvers import cpu, emulate, hybrid
from snapfit.solvers import gpu as kernels

BLOCK, TEAM = 8, 2  # one block: a wave of 4 rows, as the emulator's tau = 4
TAU = BLOCK // TEAM


def _problem(n=96, seed=0):
    X, y = make_criteo_like(n, seed=seed, hash_bits=8)
    X = X.tocsr()
    args = (X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data.astype(np.float32),
            True, np.where(y > 0, 1.0, -1.0).astype(np.float32), cpu.EMPTY_F32, False)  # fmt: skip
    return args, X.shape[1]


def _hot_setup(args, d, bias, p):
    """Hot ids, their positions, the hot CSR and every row's cold ESO curvature, as
    ``hybrid.run`` makes them."""
    indptr, indices, values, has_values = args[:4]
    n = len(args[4])
    every = np.arange(n)
    hot = hybrid.hot_columns(indptr, indices, d, every, p, intercept=bias != 0.0)
    hot_pos = np.full(d + 1, -1, np.int64)
    hot_pos[hot] = np.arange(len(hot))
    cold, hcsr = hybrid.split(indptr, indices, values, has_values, hot_pos, bias)
    cold_sq = np.zeros(n, np.float32)
    cpu.row_sqnorms(cold[0], cold[1], cold[2], has_values, cold_sq)
    cold_bias = bias if hot_pos[d] < 0 else 0.0
    curv = emulate.curvature("eso", *cold, has_values, cold_sq, every, cold_bias, TAU, d)
    return hot, hot_pos, hcsr, curv


@pytest.mark.parametrize("bias", [1.0, 0.0])
def test_one_block_equals_the_hybrid_emulator(bias):
    args, d = _problem()
    n = len(args[4])
    c = 0.5
    hot, hot_pos, hcsr, curv = _hot_setup(args, d, bias, p=0.1)
    assert len(hot) >= 4  # the intercept (when fitted) and the dense fields are hot
    seg = 6 * TAU
    nseg = -(-n // seg)
    step = hybrid.HotStep(hcsr, len(hot), nseg)
    step.refresh(np.full(n, 0.25 * c))  # epoch 0: M from alpha = 0
    rows = np.random.default_rng(3).permutation(n)

    alpha, w, acc = np.zeros(n), np.zeros(d + 1), np.zeros(len(hot))
    dev = DevicePass(args, c, c, bias, curv, hot, hot_pos, d, (1, BLOCK, TEAM))
    assert dev.tau == TAU
    dev.epoch_rows(rows)
    sums = np.zeros(2)
    for s in range(nseg):
        lo, hi = s * seg, min(n, (s + 1) * seg)
        want = hybrid.wave_pass(
            *args, c, c, bias, curv, alpha, w, hot_pos, acc, rows[lo:hi], TAU, -1
        )  # fmt: skip
        got = dev.segment(lo, hi)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        sums += got
        # the hot step between segments, on the host, from the device's accumulator
        w_h, acc_dev = dev.hot_w()
        np.testing.assert_allclose(acc_dev, acc, rtol=1e-12, atol=1e-15)
        assert np.array_equal(w_h, w[hot])  # rows never write the hot block
        w[hot] = step(w[hot], acc, s, hi / n, True)
        dev.set_hot_w(w[hot])
    d_alpha, d_w, d_acc = dev.sync()
    np.testing.assert_allclose(d_alpha, alpha, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(d_w, w, rtol=1e-12, atol=1e-15)
    assert np.isfinite(sums).all() and sums[0] > 0  # the pass moved rows
    # the accumulator is v_H(alpha) of the moves made: the hybrid's exact sum
    a, cs = hybrid.unpacked(alpha, args[4], args[5], False, c, c)
    np.testing.assert_allclose(d_acc, hybrid.hot_vector(*hcsr, a * args[4], len(hot)), rtol=1e-10)
    dev.push(acc=np.zeros(len(hot)))
    assert not dev.sync()[2].any()


def test_without_hot_columns_it_is_cd_pass_with_the_same_curvature():
    """No hot column: ``cd_pass_hot`` is ``cd_pass`` (the intercept in ``w``), given the ESO
    curvature ``cd_pass`` derives from the column counts itself."""
    args, d = _problem(n=40, seed=1)
    n = len(args[4])
    sq = np.zeros(n, np.float32)
    cpu.row_sqnorms(*args[:4], sq)
    every = np.arange(n)
    curv = emulate.curvature("eso", *args[:4], sq, every, 1.0, TAU, d)
    rows = np.random.default_rng(0).permutation(n).astype(np.int32)
    d_args = tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args)
    results = []
    for hot in (True, False):
        d_alpha, d_w, out = (cuda.to_device(np.zeros(k)) for k in (n, d + 1, 2))
        if hot:  # through DevicePass, with an empty hot set
            no_hot = np.full(d + 1, -1, np.int64)
            dev = DevicePass(args, 0.5, 0.5, 1.0, curv, [], no_hot, d, (1, BLOCK, TEAM))
            dev.epoch_rows(rows)
            out = cuda.to_device(np.array(dev.segment(0, n)))
            assert [len(v) for v in dev.hot_w()] == [0, 0]
            dev.set_hot_w(np.zeros(0))
            d_alpha, d_w = dev.alpha, dev.w
        else:
            counts = emulate.column_counts(args[0], args[1], every, d).astype(np.int32)
            counts = cuda.to_device(counts)
            kernels.cd_pass[1, BLOCK](
                *d_args, 0.5, 0.5, 1.0, cuda.to_device(sq), counts, d_alpha, d_w,
                cuda.to_device(rows), 1.0, TEAM, out, 0,
            )  # fmt: skip
        results.append([a.copy_to_host() for a in (d_alpha, d_w, out)])
    for got, want in zip(*results, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_hybrid_run_on_the_device_follows_the_emulator():
    """``hybrid.run`` with its passes on the device (one block: a wave of ``TAU`` rows) takes
    the emulator's epochs: the same certified gaps, primal and duals up to the order in which
    a wave's updates are added."""
    from functools import partial

    args, d = _problem(n=96, seed=2)
    sq = np.zeros(len(args[4]), np.float32)
    cpu.row_sqnorms(*args[:4], sq)
    common = dict(tol=1e-6, max_epochs=3, p=0.1, hot_steps=4)
    want = hybrid.run(args, sq, d, 0.5, 0.5, 1.0, TAU, **common)
    device = partial(DevicePass, launch=(1, BLOCK, TEAM))
    got = hybrid.run(args, sq, d, 0.5, 0.5, 1.0, TAU, device=device, **common)
    assert got.n_hot == want.n_hot >= 4 and got.segments == want.segments > 1
    for key in ("primals", "duals", "gaps"):
        np.testing.assert_allclose(getattr(got, key), getattr(want, key), rtol=1e-9)
    np.testing.assert_allclose(got.w, want.w, rtol=1e-9, atol=1e-12)
