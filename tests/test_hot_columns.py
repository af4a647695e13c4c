"""``hot_columns=True``: the dense columns as a primal block (``snapfit.engine.hot``) on CPU units.

The same optimum as liblinear's, a certificate that is a real bound, fewer epochs than CoCoA+
units without it, resumable, and clear refusals where it does not apply.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from sklearn.exceptions import ConvergenceWarning

import snapfit
from snapfit.data import write_parquet
from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.engine import hot
from tests.helpers import liblinear, primal
from tests.test_estimator import reference


@pytest.mark.parametrize("n_jobs", [1, 2])
@pytest.mark.parametrize("config", ["plain", "no-intercept", "class-and-sample-weight"])
@pytest.mark.parametrize("name", ["criteo", "onehot"])
def test_hot_columns_reach_liblinears_optimum(name, config, n_jobs):
    X, y, C, kw, sw, cw, bias, p_ref = reference(name, config)
    est = snapfit.LogisticRegression(C=C, tol=1e-8, max_iter=5000, n_jobs=n_jobs,
                                     random_state=0, hot_columns=True, **kw)  # fmt: skip
    est.fit(X, y, sample_weight=sw)
    p = primal(X, y, est.coef_, est.intercept_[0], C, sample_weight=sw, class_weight=cw, bias=bias)
    assert abs(p - p_ref) / abs(p_ref) <= 1e-6
    last = est.history_[-1]
    assert last["exact"] and last["rel_gap"] <= 1e-8
    # every exact check's dual is a lower bound of the optimum: the certificate is real
    for h in est.history_:
        if h["exact"]:
            assert h["dual"] <= p_ref * (1 + 1e-9) and h["gap"] >= 0


def test_the_hot_set_is_the_intercept_and_the_dense_columns():
    X, y = make_criteo_like(3000, seed=0, hash_bits=14)
    X = X.tocsr()
    c = hot.take(_chunk(X, y), 0, X.shape[0], 1, 1.0, 1.0)
    sample = hot.Sample.of([c])
    ids = hot.choose_hot(sample, X.shape[1], 1.0, 0.001, hot.hot_cap(3000))
    assert ids[0] == X.shape[1]  # the intercept first
    held = np.diff(X.tocsc().indptr)
    assert set(np.flatnonzero(held > 0.5 * X.shape[0])) <= set(ids)  # the dense fields
    assert len(ids) == hot.hot_cap(3000) == 32  # capped on small data
    assert held[ids[1:]].min() >= np.sort(held)[-31]  # the most held
    none = hot.choose_hot(sample, X.shape[1], 0.0, 0.001, 5)
    assert X.shape[1] not in none and len(none) == 5  # no intercept, no intercept id


def _chunk(X, y):
    from snapfit.data.chunk import Chunk

    labels = np.where(y > 0, 1, -1).astype(np.float32)
    return Chunk(X.indptr.astype(np.int64), X.indices.astype(np.int32),
                 X.data.astype(np.float32), labels, None)  # fmt: skip


def test_two_units_need_fewer_epochs_with_the_hot_block():
    """CoCoA+ units (``sigma' = 2``) damp every step; the hot block's rows step on sparse
    columns, which the two units seldom share: fewer epochs than one thread without it, not
    twice them."""
    X, y = make_criteo_like(6000, seed=1, hash_bits=14)
    epochs = {}
    for on in (False, True):
        for n_jobs in (1, 2):
            est = snapfit.LogisticRegression(C=0.1, tol=1e-6, max_iter=2000, n_jobs=n_jobs,
                                             random_state=0, hot_columns=on).fit(X, y)  # fmt: skip
            epochs[on, n_jobs] = est.n_iter_[0]
    # measured: 30 / 56 epochs for one thread / two units without it, 17 / 24 with it (27 / 27
    # with Aitken's step before Anderson's: on this small case the accelerated step gains
    # more for one thread; over 8 seeds two units took 1.41x one thread's epochs, 189 / 134)
    assert epochs[True, 2] <= epochs[False, 1], epochs
    assert epochs[True, 2] <= 0.5 * epochs[False, 2], epochs
    assert epochs[True, 1] <= 0.75 * epochs[False, 1], epochs


def test_a_hot_fits_estimated_primal_counts_the_blocks_lag():
    """An estimated epoch's primal under the block is the dual plus the rows' terms plus the
    block's lag ``1/2 ||w_H - v_H||^2``: ``D(alpha)`` alone lags far below (it read -6.9e7
    at the first epoch of a 200k-row fit whose primal was 1e4), so without the lag the
    records and ``verbose`` showed a negative primal for a logistic loss."""
    X, y = make_criteo_like(6000, seed=1, hash_bits=14)
    est = snapfit.LogisticRegression(C=0.1, tol=1e-6, max_iter=2000, random_state=0,
                                     hot_columns=True).fit(X, y)  # fmt: skip
    h = est.history_
    p_end = h[-1]["primal"]
    assert h[-1]["exact"] and h[0]["dual"] < -10 * p_end  # the dual alone is no primal
    assert all(r["primal"] >= p_end * (1 - 1e-9) for r in h)
    assert all(abs(r["primal"] / p_end - 1) <= 0.05 for r in h[3:])
    assert all(abs(r["primal"] / p_end - 1) <= 1e-3 for r in h[-4:])


def test_a_hot_fit_resumes_from_its_checkpoint(tmp_path):
    X, y, C, kw, sw, cw, bias, p_ref = reference("criteo", "plain")
    make = lambda it: snapfit.LogisticRegression(  # noqa: E731
        C=C, tol=1e-8, max_iter=it, random_state=0, hot_columns=True, checkpoint_dir=tmp_path
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        first = make(4).fit(X, y)
    assert first.n_iter_[0] == 4
    est = make(5000).fit(X, y, resume=True)
    assert est.history_[0]["epoch"] == 1 and est.n_iter_[0] > 4
    p = primal(X, y, est.coef_, est.intercept_[0], C, bias=bias)
    assert abs(p - p_ref) / abs(p_ref) <= 1e-6
    # a checkpoint of a fit without the hot block is refused, naming the parameter
    with pytest.raises(Exception, match="hot_columns"):
        snapfit.LogisticRegression(C=C, max_iter=5000, random_state=0,
                                   checkpoint_dir=tmp_path).fit(X, y, resume=True)  # fmt: skip


def test_a_warm_start_under_the_hot_block():
    X, y, C, kw, sw, cw, bias, p_ref = reference("criteo", "plain")
    est = snapfit.LogisticRegression(C=C, tol=1e-3, random_state=0, hot_columns=True).fit(X, y)
    est.set_params(warm_start=True, tol=1e-8, max_iter=5000).fit(X, y)
    p = primal(X, y, est.coef_, est.intercept_[0], C, bias=bias)
    assert abs(p - p_ref) / abs(p_ref) <= 1e-6


@pytest.mark.parametrize("c0, tol0", [(0.1, 1e-4), (1.0, 1e-2)], ids=["C x10", "same C"])
def test_a_warm_start_under_the_hot_block_beats_a_cold_one(c0, tol0):
    """A warm start from ``coef_``: ``alpha`` paired with it, the cold columns ``w(alpha)``'s,
    the hot block ``coef_``'s own (its ``v_H(alpha)`` apart, as during a fit). It takes fewer
    epochs than a cold start. With ``w_H = v_H(alpha)``, the dual point's primal (far from
    ``coef_`` where the dense columns are stiff), these fits took more (166 and 37 epochs
    against 111 and 31), and on 200k Criteo-like rows C = 0.1 -> 1 did not converge in 200."""
    X, y = make_criteo_like(5000, seed=3, hash_bits=14)
    c1 = 1.0
    kw = dict(random_state=0, hot_columns=True, max_iter=300)
    warm = snapfit.LogisticRegression(C=c0, tol=tol0, **kw).fit(X, y)
    warm.set_params(warm_start=True, C=c1, tol=1e-6).fit(X, y)
    cold = snapfit.LogisticRegression(C=c1, tol=1e-6, **kw).fit(X, y)
    assert warm.converged_ and cold.converged_
    assert warm.n_iter_[0] < cold.n_iter_[0]
    p_warm = primal(X, y, warm.coef_, warm.intercept_[0], c1)
    p_cold = primal(X, y, cold.coef_, cold.intercept_[0], c1)
    assert abs(p_warm - p_cold) <= 2e-6 * abs(p_cold)


@pytest.mark.parametrize("budget", [None, 500_000], ids=["resident", "streamed"])
def test_parquet_under_the_hot_block(tmp_path, budget):
    X, y = make_criteo_like(4000, seed=2, hash_bits=12)
    path = str(tmp_path / "d.parquet")
    write_parquet(path, X, y, row_group_rows=250)
    ref = liblinear(X, y, 0.1)
    p_ref = primal(X, y, ref.coef_, ref.intercept_[0], 0.1)
    est = snapfit.LogisticRegression(C=0.1, tol=1e-8, max_iter=5000, random_state=0, n_jobs=2,
                                     hot_columns=True, memory_budget=budget).fit(path)  # fmt: skip
    assert est.streamed_ is (budget is not None)
    p = primal(X, y, est.coef_, est.intercept_[0], 0.1)
    assert abs(p - p_ref) / abs(p_ref) <= 1e-6


def test_the_hot_block_refuses_what_it_does_not_fit():
    X, y = make_criteo_like(300, seed=0, hash_bits=10)
    three = np.arange(300) % 3
    with pytest.raises(ValueError, match="binary logistic regression only"):
        snapfit.LogisticRegression(hot_columns=True).fit(X, three)
    assert "hot_columns" not in snapfit.LinearSVC().get_params()
    from snapfit.dask import DaskLogisticRegression

    with pytest.raises(ValueError, match="hot_columns=True fits on one machine"):
        DaskLogisticRegression(hot_columns=True).fit("no-such.parquet")


def test_the_cli_refuses_hot_columns_for_other_losses(tmp_path):
    from snapfit.cli import cli

    X, y = make_criteo_like(300, seed=0, hash_bits=10)
    path = str(tmp_path / "d.parquet")
    write_parquet(path, X, y)
    out = str(tmp_path / "m.snapfit")
    r = CliRunner().invoke(cli, ["train", path, "--out", out, "--hot-columns", "--loss", "hinge"])
    assert r.exit_code == 2 and "--hot-columns fits logistic regression" in r.output
    r = CliRunner().invoke(
        cli, ["train", path, "--out", out, "--hot-columns", "-q", "--tol", "1e-6"]
    )
    assert r.exit_code == 0, r.output


def test_the_accelerated_hot_step_solves_a_linear_iteration():
    """Anderson: on a linear iteration ``x -> x + f``, ``f = B (x* - x)``, the move from the
    last steps lands on ``x*`` once their differences span the space; with one step it is the
    step itself; a move longer than ``STEP_CAP`` Newton steps is cut to that along itself."""
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    b = q @ np.diag([0.1, 0.5, 0.9]) @ q.T  # slow on one direction, as the rows' answer
    x_star = rng.normal(size=3)
    x, hist = np.zeros(3), []
    for _ in range(hot.HISTORY):
        f = b @ (x_star - x)
        hist.append((x.copy(), f))
        x = x + f  # plain steps
    assert len(hist) == hot.HISTORY >= 4
    np.testing.assert_array_equal(hot.accelerate(hist[:1]), hist[0][1])
    for k in (4, hot.HISTORY):  # 3 differences span the space
        w_k, f = hist[k - 1]
        move = hot.accelerate(hist[:k])
        np.testing.assert_allclose(w_k + move, x_star, rtol=0, atol=1e-10)
    # a slow iteration (each step 1/20 of the way): the way to x* is 20 Newton steps, cut to 5
    slow = [(np.zeros(3), 0.05 * x_star), (0.05 * x_star, 0.05 * 0.95 * x_star)]
    np.testing.assert_allclose(hot.accelerate(slow), hot.STEP_CAP * slow[1][1], rtol=1e-12)


def test_the_curvature_factor_is_the_same_on_any_machine(monkeypatch):
    """``I + scale sum_i c_i x_i x_i^T``'s Cholesky factor, its sum cut into parts by rows:
    the dense product's, and bit for bit the same whether the parts run on one thread or two."""
    rng = np.random.default_rng(0)
    n, nh = 40_000, 30
    rows = [np.sort(rng.choice(nh, size=rng.integers(1, 8), replace=False)) for _ in range(n)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    x = sp.csr_matrix((rng.normal(size=indptr[-1]), np.concatenate(rows), indptr), (n, nh))
    coef = rng.uniform(0.0, 0.25, n)
    coef[::7] = 0.0
    c, lower = hot.curvature_factor(x, coef, 3.0)
    low = np.tril(c)
    dense = np.eye(nh) + 3.0 * (x.T @ sp.diags(coef) @ x).toarray()
    assert lower
    np.testing.assert_allclose(low @ low.T, dense, rtol=1e-10, atol=1e-9)
    monkeypatch.setattr(hot.os, "cpu_count", lambda: 1)
    assert np.array_equal(np.tril(hot.curvature_factor(x, coef, 3.0)[0]), low)


def test_the_sample_and_its_hot_part_are_scipys_matrices():
    """``sample_matrix`` adds the intercept's column and keeps a column stored twice in a
    row (its products are the summed matrix's); ``hot_part`` is scipy's column selection of
    the summed matrix, stored zeros out, each row's positions ascending and unique, as
    ``weighted_gram`` needs."""
    rng = np.random.default_rng(3)
    n, d = 500, 60
    counts = rng.integers(0, 12, n)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = rng.integers(0, d, indptr[-1]).astype(np.int64)  # duplicates within rows
    values = rng.normal(size=indptr[-1])
    values[::9] = 0.0
    sample = hot.Sample(indptr, indices, values, np.ones(n), np.ones(n))
    x = hot.sample_matrix(sample, d, 2.5)
    ref = sp.csr_matrix((values, indices, indptr), shape=(n, d + 1)).toarray()
    ref[:, d] = 2.5
    w = rng.normal(size=d + 1)
    np.testing.assert_allclose(x @ w, ref @ w, rtol=1e-12, atol=1e-12)
    hot_ids = np.array([d, 5, 17, 3, 40])
    hot_pos = np.full(d + 1, -1, np.int64)
    hot_pos[hot_ids] = np.arange(len(hot_ids))
    ptr, pos, val = hot.hot_part(x.indptr, x.indices, x.data, hot_pos)
    want = sp.csr_matrix(ref[:, hot_ids])
    assert np.array_equal(ptr, want.indptr) and np.array_equal(pos, want.indices)
    np.testing.assert_allclose(val, want.data, rtol=1e-12)
