"""The CPU staleness emulator is a faithful model of the kernel: one block of ``block / team``
teams launched alone is a synchronous wave of that many rows, and ``emulate.wave_pass`` with
``tau = block / team`` and the kernel's own curvature gives the same ``w``, ``alpha`` and sums."""

import numpy as np
import pytest
from numba import cuda

from snapfit.solvers import cpu, emulate
from snapfit.solvers import gpu as kernels
from tests.gpu.sim.conftest import make_problem_data


def _setup(n, d, seed, ones):
    X, y, weight = make_problem_data(n=n, d=d, weights=True, seed=seed)
    X.data += 0.5  # values away from 0: every row pushes its shared columns hard
    values = X.data if not ones else X.data[:0]  # one-hot: implicit 1.0 values
    args = (
        X.indptr.astype(np.int64), X.indices.astype(np.int32), values, not ones, y, weight,
        True,
    )  # fmt: skip
    sq = np.zeros(n, np.float32)
    cpu.row_sqnorms(args[0], args[1], values, not ones, sq)
    return args, sq


def _kernel_passes(args, sq, orders, block, team, bias, c, sigma, d):
    """Passes of ``cd_pass`` on one block (``max_blocks=1``), counts from ``column_counts``."""
    dev = tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args)
    n = len(sq)
    alpha, w = cuda.to_device(np.zeros(n)), cuda.to_device(np.zeros(d + 1))
    sums = []
    for rows in orders:
        d_rows = cuda.to_device(rows.astype(np.int32))
        counts = cuda.to_device(np.zeros(d, np.int32))
        kernels.column_counts[1, block](dev[0], dev[1], d_rows, team, counts)
        out = cuda.to_device(np.zeros(2))
        kernels.cd_pass[1, block](
            *dev, c, 0.7 * c, bias, cuda.to_device(sq), counts, alpha, w, d_rows, sigma, team,
            out, 0,
        )  # fmt: skip
        sums.append(out.copy_to_host())
    return alpha.copy_to_host(), w.copy_to_host(), np.array(sums)


def _emulated_passes(args, sq, orders, tau, bias, c, sigma, d, seed):
    n = len(sq)
    alpha, w = np.zeros(n), np.zeros(d + 1)
    sums = []
    for e, rows in enumerate(orders):
        curv = emulate.eso_curvature(*args[:4], sq, rows, bias, tau, d)
        sums.append(
            emulate.wave_pass(*args, c, 0.7 * c, bias, curv, alpha, w, rows, sigma, tau, seed + e)
        )
    return alpha, w, np.array(sums)


@pytest.mark.parametrize(
    ("block", "team", "n_rows", "ones"),
    # tau 8, 4, 16, 8 capped at 5 rows, and 8 on one-hot rows
    [(16, 2, 40, False), (16, 4, 40, False), (16, 1, 40, False), (16, 2, 5, False),
     (16, 2, 40, True)],
)  # fmt: skip
def test_one_block_is_an_emulated_wave(block, team, n_rows, ones):
    n, d, c, bias, sigma = 40, 10, 4.0, 1.0, 1.5
    args, sq = _setup(n, d, seed=block + team, ones=ones)
    rng = np.random.default_rng(team)
    orders = [rng.permutation(n)[:n_rows] for _ in range(3)]
    ref = _kernel_passes(args, sq, orders, block, team, bias, c, sigma, d)
    got = _emulated_passes(args, sq, orders, block // team, bias, c, sigma, d, seed=7)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    # Not a trivial agreement: the wave's rows read a w that the CPU pass would have moved.
    a_cpu, w_cpu = np.zeros(n), np.zeros(d + 1)
    for rows in orders:
        plain = sq.astype(np.float64) + bias * bias
        emulate.wave_pass(*args, c, 0.7 * c, bias, plain, a_cpu, w_cpu, rows, sigma, 1, -1)
    assert np.abs(w_cpu - ref[1]).max() > 1e-3
