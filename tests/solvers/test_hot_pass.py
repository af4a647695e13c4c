"""``hot_pass.cd_pass_hot``, a CPU unit's pass under the hot block: ``cpu.cd_pass`` when no
column is hot, the cold curvature from norms with duplicated columns summed first, and
``HotLabels``' relabeling (kept per chunk where the chunks stay, made again for new arrays)."""

import numpy as np
import scipy.sparse as sp

from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.solvers import cpu, hot_pass, hybrid
from snapfit.solvers.dual import LOGISTIC


def _args(n=400, seed=0, bits=8):
    X, y = make_criteo_like(n, seed=seed, hash_bits=bits)
    X = X.tocsr()
    args = (X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data.astype(np.float32),
            True, np.where(y > 0, 1.0, -1.0).astype(np.float32), cpu.EMPTY_F32, False)  # fmt: skip
    sq = np.zeros(n, np.float32)
    cpu.row_sqnorms(*args[:4], sq)
    return args, X.shape[1], sq


def hot_pass_on(args, sq, hot_pos, nh, alpha, w, acc, rows, sigma, c=0.3, bias=1.0):
    """``cd_pass_hot`` as a CPU unit runs it, on ``w`` and ``acc`` in place (``acc`` added to)."""
    lab = hot_pass.HotLabels(hot_pos, nh, keep=False)
    ids, cold = lab.of(args, sq)
    wx = lab.extend(w)
    got = hot_pass.cd_pass_hot(args[0], ids, *args[2:], c, c, bias, cold, lab.ib, alpha, wx,
                               lab.nh, rows, sigma, LOGISTIC)  # fmt: skip
    w[:] = wx[: len(w)]
    acc += lab.moves(wx)
    return got


def test_no_hot_column_is_cpu_cd_pass_bit_for_bit():
    args, d, sq = _args()
    n = len(sq)
    rows = np.random.default_rng(0).permutation(n)
    for sigma in (1.0, 2.0):
        a1, w1 = np.zeros(n), np.zeros(d + 1)
        a2, w2 = np.zeros(n), np.zeros(d + 1)
        none = np.full(d + 1, -1, np.int64)
        for _ in range(3):
            r1 = cpu.cd_pass(*args, 0.3, 0.3, 1.0, sq, a1, w1, rows, sigma, LOGISTIC)
            r2 = hot_pass_on(args, sq, none, 0, a2, w2, np.zeros(0), rows, sigma)
            assert r1 == r2
        assert np.array_equal(a1, a2) and np.array_equal(w1, w2)


def test_the_hot_part_sums_duplicated_columns_first():
    args, d, sq = _args(bits=6)  # 64 columns: rows hold frequent values twice
    indptr, indices, values = args[:3]
    hot = hybrid.hot_columns(indptr, indices, d, np.arange(len(sq)), 0.2, intercept=False)
    hot_pos = np.full(d + 1, -1, np.int64)
    hot_pos[hot] = np.arange(len(hot))
    twice = 0
    for i in range(len(sq)):
        lo, hi = indptr[i], indptr[i + 1]
        merged = np.zeros(d)
        np.add.at(merged, indices[lo:hi], values[lo:hi].astype(np.float64))
        want = float(np.sum(merged[hot] ** 2))
        got = hot_pass.hot_sq(lo, hi, indices, values, True, hot_pos)
        assert abs(got - want) <= 1e-12 * max(want, 1.0)
        twice += len(set(indices[lo:hi]) & set(hot)) < np.sum(hot_pos[indices[lo:hi]] >= 0)
    assert twice > 10  # the data holds hot columns twice in a row


def test_the_pass_curvature_is_the_cold_norm():
    """One row, its hot columns frozen: the step is the one a row of its cold entries alone
    (the stored norm less the merged hot part) takes at the same margin."""
    args, d, sq = _args(bits=6)
    indptr, indices, values = args[:3]
    hot = hybrid.hot_columns(indptr, indices, d, np.arange(len(sq)), 0.2)
    hot_pos = np.full(d + 1, -1, np.int64)
    hot_pos[hot] = np.arange(len(hot))
    cold, _ = hybrid.split(*args[:4], hot_pos, 1.0)
    cold_sq = np.zeros(len(sq), np.float32)
    cpu.row_sqnorms(*cold, True, cold_sq)
    for i in range(40):
        a, w, acc = np.zeros(len(sq)), np.full(d + 1, 0.01), np.zeros(len(hot))
        hot_pass_on(args, sq, hot_pos, len(hot), a, w, acc, np.array([i]), 1.0)
        dot = float(np.sum(values[indptr[i] : indptr[i + 1]]) * 0.01 + 0.01)
        want = cpu.row_step(float(cold_sq[i]), dot, args[4][i], 0.0, 0.3, LOGISTIC)[0]
        np.testing.assert_allclose(a[i], want, rtol=1e-5)


def test_hot_moves_go_to_the_accumulator_and_labels_are_kept_per_chunk():
    """A pass leaves ``w``'s hot columns as they were and adds their moves into ``acc``, which
    are the moves ``sigma delta y_i x_iH`` of the rows (``alpha``'s change); a kept relabeling
    is reused for the same indices array and made again for another one."""
    args, d, sq = _args(bits=8)
    indptr, indices, values = args[:3]
    hot = hybrid.hot_columns(indptr, indices, d, np.arange(len(sq)), 0.05, intercept=False)
    hot_pos = np.full(d + 1, -1, np.int64)
    hot_pos[hot] = np.arange(len(hot))
    hot_pos[d] = len(hot)  # the intercept hot too
    nh = len(hot) + 1
    n = len(sq)
    w0 = np.random.default_rng(1).normal(size=d + 1) * 0.01
    alpha, w, acc = np.zeros(n), w0.copy(), np.zeros(nh)
    hot_pass_on(args, sq, hot_pos, nh, alpha, w, acc, np.arange(n), 2.0)
    ids = np.flatnonzero(hot_pos >= 0)
    assert np.array_equal(w[ids], w0[ids])
    X = sp.csr_matrix((values, indices, indptr), shape=(n, d))
    ya = hybrid.unpacked(alpha, *args[4:], 0.3, 0.3)[0] * args[4]
    want = np.zeros(nh)
    want[: len(hot)] = 2.0 * (X.T @ ya)[hot]
    want[-1] = 2.0 * ya.sum()
    np.testing.assert_allclose(acc, want, rtol=1e-10, atol=1e-12)

    lab = hot_pass.HotLabels(hot_pos, nh, keep=True)
    first = lab.of(args, sq, key=0)
    assert lab.of(args, sq, key=0)[0] is first[0]
    other = (args[0], indices.copy(), *args[2:])
    again = lab.of(other, sq, key=0)
    assert again[0] is not first[0] and np.array_equal(again[0], first[0])
    assert np.all(first[0][np.isin(indices, hot)] > d)
    assert np.array_equal(first[0][~np.isin(indices, hot)], indices[~np.isin(indices, hot)])
