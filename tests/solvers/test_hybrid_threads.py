"""The hybrid on CPU threads sharing ``w`` (``hybrid_threads.ThreadPass``): one thread is the
emulator's pass at one row in flight bit for bit (relabeled ids change addresses, not sums);
two threads write hot columns only through their accumulators, and certify the same optimum."""

import numpy as np
import pytest

from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.solvers import cpu, emulate, hybrid
from snapfit.solvers.hybrid_threads import ThreadPass, relabeling


@pytest.fixture(scope="module")
def data():
    X, y = make_criteo_like(4000, seed=3, hash_bits=12)
    args, sq = emulate.csr_args(X, y)
    return args, sq, X.shape[1]


def _threads(n):
    made = []

    def factory(*state):
        made.append(ThreadPass(*state, n_threads=n))
        return made[-1]

    return factory, made


def test_relabeling_is_a_permutation_with_hot_columns_on_top():
    d = 50
    hot = np.array([3, 49, 17, 46, 0])
    code = relabeling(hot, d)
    assert sorted(code) == list(range(d))
    np.testing.assert_array_equal(code[hot], np.arange(d - len(hot), d))


@pytest.mark.parametrize("bias", [1.0, 0.0])
def test_one_thread_is_the_emulators_pass(data, bias):
    """Same permutations, hot steps and certificate as ``hybrid.HostPass`` at one row in
    flight: ``alpha``, ``w`` and every certified dual bit for bit."""
    args, sq, d = data
    kw = {"tol": 0.0, "max_epochs": 3, "seed": 5, "hot_steps": 8, "p": 0.02}
    host = hybrid.run(args, sq, d, 0.1, 0.1, bias, 1, **kw)
    factory, made = _threads(1)
    mine = hybrid.run(args, sq, d, 0.1, 0.1, bias, 1, device=factory, **kw)
    made[0].close()
    assert host.n_hot == mine.n_hot > 10
    assert np.array_equal(host.alpha, mine.alpha) and np.array_equal(host.w, mine.w)
    assert host.duals == mine.duals and host.primals == mine.primals


def test_two_threads_certify_the_sequential_optimum(data):
    """Two threads sharing ``w``: the certificate identity holds after ``sync`` rebuilds
    ``w_S`` (lost cold updates), and the fit reaches the optimum of sequential dual CD."""
    args, sq, d = data
    seq = emulate.run(args, sq, d, 0.1, 0.1, 1.0, 1, "plain", tol=1e-11, max_epochs=400)
    assert seq.converged
    factory, made = _threads(2)
    r = hybrid.run(args, sq, d, 0.1, 0.1, 1.0, 2, tol=1e-7, max_epochs=100, device=factory)
    made[0].close()
    assert r.converged and max(r.identity) < 1e-10
    assert abs(r.primal - seq.primal) <= 1e-6 * seq.primal
    assert max(r.duals) <= seq.primal * (1 + 1e-12)  # weak duality: the gap is a bound
    assert len(r.seconds) == r.epochs and min(r.seconds) > 0


def test_a_threads_rows_never_write_a_hot_column(data):
    """One segment on two threads: hot entries of ``w`` unchanged, their moves all in
    ``acc`` (``v_H(alpha)`` from zero), and the cold part is ``v_S(alpha)`` after ``sync``."""
    args, sq, d = data
    n = len(args[4])
    hot = hybrid.hot_columns(args[0], args[1], d, np.arange(n), 0.02)
    hot_pos = np.full(d + 1, -1, np.int64)
    hot_pos[hot] = np.arange(len(hot))
    curv = np.full(n, 40.0)
    tp = ThreadPass(args, 0.1, 0.1, 1.0, curv, hot, hot_pos, d, n_threads=2)
    w0 = np.random.default_rng(0).normal(size=len(hot))
    tp.set_hot_w(w0)
    tp.epoch_rows(np.random.default_rng(1).permutation(n))
    tp.segment(0, n)
    w_h, acc = tp.hot_w()
    np.testing.assert_array_equal(w_h, w0)
    alpha, w, acc = tp.sync()
    tp.close()
    a, _ = hybrid.unpacked(alpha, args[4], args[5], False, 0.1, 0.1)
    _, hcsr = hybrid.split(*args[:4], hot_pos, 1.0)
    np.testing.assert_allclose(acc, hybrid.hot_vector(*hcsr, a * args[4], len(hot)), atol=1e-12)
    v = np.zeros(d + 1)
    cpu.accumulate_w(*args, 0.1, 0.1, 1.0, alpha, v)
    cold = hot_pos < 0
    np.testing.assert_allclose(w[cold], v[cold], atol=1e-12)
    np.testing.assert_array_equal(w[hot], w0)
