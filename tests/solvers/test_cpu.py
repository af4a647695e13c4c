"""CPU kernels against a slow, obvious NumPy reference fed the kernel's exact row order."""

import re

import numpy as np
import pytest
import scipy.sparse as sp
from numba import njit

from snapfit.engine.shared import HotSlots
from snapfit.solvers import cpu, dual

E = cpu.EMPTY_F32


def reference_pass(X, y, c, bias, alpha, w, rows, sigma):
    """One dual CD pass in plain Python over rows ``rows`` (what cd_pass must do)."""
    X = sp.csr_matrix(X)
    for i in rows:
        lo, hi = X.indptr[i], X.indptr[i + 1]
        idx, v = X.indices[lo:hi], X.data[lo:hi].astype(np.float64)
        xi = np.zeros(len(w) - 1)
        np.add.at(xi, idx, v)
        q = sigma * (xi @ xi + bias * bias)
        b = y[i] * (w[:-1] @ xi + w[-1] * bias)
        alpha[i], delta, _, _ = dual.row_update(q, b, alpha[i], c[i])
        w[:-1] += sigma * delta * y[i] * xi
        w[-1] += sigma * delta * y[i] * bias


@pytest.fixture
def problem():
    rng = np.random.default_rng(3)
    X = sp.random(300, 40, density=0.15, random_state=4, format="csr", dtype=np.float32)
    # duplicated indices inside rows add: make some on purpose
    X = sp.csr_matrix(
        (np.r_[X.data, np.ones(50, np.float32)],
         (np.r_[X.nonzero()[0], rng.integers(0, 300, 50)],
          np.r_[X.nonzero()[1], rng.integers(0, 40, 50)])), shape=X.shape)  # fmt: skip
    X.has_canonical_format = False
    y = np.where(rng.random(300) < 0.4, 1.0, -1.0).astype(np.float32)
    weight = rng.uniform(0.0, 2.0, 300).astype(np.float32)
    weight[:10] = 0.0
    return X, y, weight


def chunk_args(X, weight, y):
    X = sp.csr_matrix(X)
    return (X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data, True, y,
            E if weight is None else weight, weight is not None)  # fmt: skip


def test_row_sqnorms_sum_duplicates_first(problem):
    X, y, _ = problem
    csr = sp.csr_matrix(X)
    out = np.zeros(X.shape[0], dtype=np.float32)
    cpu.row_sqnorms(csr.indptr.astype(np.int64), csr.indices, csr.data, True, out)
    canon = csr.copy()
    canon.sum_duplicates()
    expected = np.asarray(canon.multiply(canon).sum(axis=1)).ravel()
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("has_values", [True, False])
def test_row_sqnorms_long_rows_and_many_duplicates_exactly(has_values):
    # Rows up to 300 entries over 40 (or 2^30) distinct features: the table grows past its
    # 16 slots, probes collide, and every duplicate must still be added before squaring.
    rng = np.random.default_rng(0)
    indptr = np.r_[0, np.cumsum(rng.integers(0, 300, 400))].astype(np.int64)
    for high in (40, 2**30):
        indices = rng.integers(0, high, indptr[-1]).astype(np.int32)
        values = rng.standard_normal(indptr[-1]).astype(np.float32)
        got = np.empty(400)
        cpu.row_sqnorms(indptr, indices, values, has_values, got)
        for r in range(400):
            acc = {}  # same arithmetic: per-index float64 sums in order of first appearance
            for k in range(indptr[r], indptr[r + 1]):
                v = float(values[k]) if has_values else 1.0
                acc[indices[k]] = acc[indices[k]] + v if indices[k] in acc else v
            assert got[r] == sum(a * a for a in acc.values())


@pytest.mark.parametrize("sigma", [1.0, 2.0])
@pytest.mark.parametrize("use_weight", [False, True])
def test_cd_pass_matches_reference(problem, sigma, use_weight):
    X, y, weight = problem
    wt = weight if use_weight else None
    c_pos, c_neg, bias = 2.0, 0.5, 1.5
    c = np.where(y > 0, c_pos, c_neg) * (weight if use_weight else 1.0)
    csr = sp.csr_matrix(X)
    sq = np.zeros(X.shape[0], dtype=np.float32)
    cpu.row_sqnorms(csr.indptr.astype(np.int64), csr.indices, csr.data, True, sq)
    alpha, w = np.zeros(300), np.zeros(41)
    ref_alpha, ref_w = np.zeros(300), np.zeros(41)
    rng = np.random.default_rng(0)
    for _ in range(3):
        rows = rng.permutation(300)
        cpu.cd_pass(*chunk_args(X, wt, y), c_pos, c_neg, bias, sq, alpha, w, rows, sigma)
        reference_pass(X, y, c, bias, ref_alpha, ref_w, rows, sigma)
    np.testing.assert_allclose(alpha, ref_alpha, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(w, ref_w, rtol=1e-5, atol=1e-9)
    assert np.all(alpha[c == 0] == 0.0)


def _shared_pass(X, y, wt, c_pos, c_neg, bias, sq, alpha, slots, parts, code):
    """``cd_pass_views`` over ``parts`` (thread ``t`` runs ``parts[t]`` on its view, one after
    another), between the slots' tag and fold, on ``X`` relabeled by ``code``; ``slots.w`` is
    the result (in the slots' feature order)."""
    Xr = sp.csr_matrix(X)
    Xr.indices = Xr.indices.astype(np.int32)
    cpu.relabel(Xr.indices, code, Xr.indices)
    slots.tag()
    for t, rows in enumerate(parts):
        cpu.cd_pass_views(*chunk_args(Xr, wt, y), c_pos, c_neg, bias, sq, alpha, slots.views[t],
                          rows, 1.0, slots.h0, slots.pub, slots.seen, t, 0.0, slots.ends,
                          7)  # fmt: skip
    slots.fold()


def test_a_thread_sees_the_others_hot_moves_as_of_its_last_sync():
    """Cold coordinates are one memory in every view; a hot coordinate holds the thread's own
    moves plus the others' *published* ones, pulled at its syncs (here every row): a move thread
    0 has not published is invisible to thread 1, a published one is not, and thread 1
    publishes its own moves at the end of its call."""
    X = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 0.0]], dtype=np.float32))
    y = np.array([1.0, -1.0], dtype=np.float32)
    sq = np.zeros(2, np.float32)
    cpu.row_sqnorms(X.indptr.astype(np.int64), X.indices, X.data, True, sq)

    def thread1_alpha(unpublished: float, published: float) -> float:
        slots = HotSlots(2, 2)
        code = slots.set_hot([0])  # feature 0 (id h0 from now on); feature 1 stays cold
        Xr = X.copy()
        cpu.relabel(Xr.indices, code, Xr.indices)
        slots.tag()
        v0, v1 = slots.views
        v0[1] = 0.5  # a cold coordinate: thread 1 sees it at once
        assert v1[1] == 0.5
        v0[slots.h0] += unpublished  # thread 0's own copy of feature 0
        slots.pub[0, 0] += published  # thread 0's published moves on feature 0
        alpha = np.zeros(2)
        cpu.cd_pass_views(*chunk_args(Xr, None, y), 1.0, 1.0, 0.0, sq, alpha, v1,
                          np.array([0]), 1.0, slots.h0, slots.pub, slots.seen, 1, 0.0,
                          slots.ends, 1)  # fmt: skip
        moved = v1[slots.h0] - slots.pub[0, 0]  # thread 1's own move on feature 0
        assert moved != 0.0 and slots.pub[1, 0] == moved  # published at the end
        assert v0[slots.h0] == unpublished  # a view's hot copy is its own
        return alpha[0]

    assert thread1_alpha(5.0, 0.0) == thread1_alpha(0.0, 0.0)
    assert thread1_alpha(0.0, 5.0) != thread1_alpha(0.0, 0.0)


def test_syncs_cover_tier_t_every_4_to_the_t_rounds():
    ends = np.array([2, 5, 9, 9, 20], np.int64)
    got = [int(cpu.tier_end(ends, r)) for r in range(1, 257)]
    assert got[:16] == [2, 2, 2, 5, 2, 2, 2, 5, 2, 2, 2, 5, 2, 2, 2, 9]
    assert got[63] == 9 and got[255] == 20 and got.count(20) == 1
    assert got.count(9) == 15 and got.count(5) == 48  # multiples of 16 (not 256), of 4 (not 16)
    assert cpu.tier_end(np.array([7], np.int64), 64) == 7


@pytest.mark.parametrize("use_weight", [False, True])
@pytest.mark.parametrize("n_hot", [0, 5, 40])
def test_cd_pass_views_is_cd_pass_whatever_is_hot(problem, use_weight, n_hot):
    """One thread: bit for bit ``cd_pass``, whichever features are hot. Two and three threads
    run one after the other (three pull from two others at each sync): each pulls the others'
    moves when its call starts, so the pass is the sequential one over all parts (to rounding:
    sums in another order). The loop that damps hot coordinates is tested below."""
    X, y, weight = problem
    wt = weight if use_weight else None
    c_pos, c_neg, bias = 2.0, 0.5, 1.5
    csr = sp.csr_matrix(X)
    sq = np.zeros(X.shape[0], dtype=np.float32)
    cpu.row_sqnorms(csr.indptr.astype(np.int64), csr.indices, csr.data, True, sq)
    rng = np.random.default_rng(n_hot)
    alpha, w = np.zeros(300), np.zeros(41)
    one, two, three = HotSlots(40, 1), HotSlots(40, 2), HotSlots(40, 3)
    hot = np.sort(rng.choice(40, n_hot, replace=False))
    code = [s.set_hot(hot) for s in (one, two, three)][0]
    a1, a2, a3 = np.zeros(300), np.zeros(300), np.zeros(300)
    for _ in range(3):
        rows = rng.permutation(300)
        cpu.cd_pass(*chunk_args(X, wt, y), c_pos, c_neg, bias, sq, alpha, w, rows, 1.0)
        _shared_pass(X, y, wt, c_pos, c_neg, bias, sq, a1, one, [rows], code)
        _shared_pass(X, y, wt, c_pos, c_neg, bias, sq, a2, two, [rows[:120], rows[120:]], code)
        _shared_pass(X, y, wt, c_pos, c_neg, bias, sq, a3, three, np.split(rows, [90, 200]),
                     code)  # fmt: skip
        np.testing.assert_array_equal(a1, alpha)
        np.testing.assert_array_equal(one.to_real(one.w), w)
        for a, slots in ((a2, two), (a3, three)):
            np.testing.assert_allclose(a, alpha, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(slots.to_real(slots.w), w, rtol=1e-12, atol=1e-14)
    assert np.all(np.isfinite(one.w))


def test_more_than_two_threads_damp_the_hot_part_of_the_curvature(problem):
    """``hot_damp`` adds ``hot_damp * ||x_hot||^2`` (intercept included) to a row's
    curvature: the same step as ``cd_pass`` on norms grown by that much."""
    X, y, _ = problem
    csr = sp.csr_matrix(X)
    sq = np.zeros(300, np.float32)
    args = (csr.indptr.astype(np.int64), csr.indices, csr.data, True)
    cpu.row_sqnorms(*args, sq)
    slots = HotSlots(40, 1)
    hot = np.arange(0, 40, 3)
    code = slots.set_hot(hot)
    Xr = csr.copy()
    Xr.indices = Xr.indices.astype(np.int32)
    cpu.relabel(Xr.indices, code, Xr.indices)
    hot_sq = np.asarray(csr[:, hot].multiply(csr[:, hot]).sum(axis=1)).ravel() + 1.0
    grown = (sq + 0.5 * hot_sq).astype(np.float32)
    rows = np.random.default_rng(3).permutation(300)
    a_views, a_ref = np.zeros(300), np.zeros(300)
    slots.tag()
    cpu.cd_pass_views(*chunk_args(Xr, None, y), 1.0, 1.0, 1.0, sq, a_views, slots.views[0], rows,
                      1.0, slots.h0, slots.pub, slots.seen, 0, 0.5, slots.ends, 7)  # fmt: skip
    slots.fold()
    w = np.zeros(41)
    cpu.cd_pass(*chunk_args(X, None, y), 1.0, 1.0, 1.0, grown, a_ref, w, rows, 1.0)
    np.testing.assert_allclose(a_views, a_ref, rtol=1e-5)
    assert not np.array_equal(a_views, np.zeros(300))


@pytest.mark.parametrize("step", [1, 3])
def test_count_columns_counts_entries_of_every_step_th_row_given(problem, step):
    X, _, _ = problem
    csr = sp.csr_matrix(X)
    out = np.zeros(40, dtype=np.int64)
    counted = cpu.count_columns(csr.indptr[100:201].astype(np.int64), csr.indices, out, step)
    sample = csr[100:200:step]
    assert counted == sample.shape[0] == len(range(0, 100, step))
    np.testing.assert_array_equal(out, np.bincount(sample.indices, minlength=40))


def test_objective_and_w_of_alpha_agree_with_numpy(problem):
    X, y, weight = problem
    c_pos, c_neg, bias = 1.0, 3.0, 1.0
    c = np.where(y > 0, c_pos, c_neg) * weight
    rng = np.random.default_rng(1)
    frac = rng.uniform(0.01, 0.99, 300)
    alpha = np.where(frac <= 0.5, frac * c, -(1 - frac) * c)
    alpha[c == 0] = 0.0
    w = np.zeros(41)
    cpu.accumulate_w(*chunk_args(X, weight, y), c_pos, c_neg, bias, alpha, w)
    a = frac * c
    Xd = sp.csr_matrix(X).toarray().astype(np.float64)
    np.testing.assert_allclose(w[:-1], Xd.T @ (a * y), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(w[-1], bias * np.sum(a * y), rtol=1e-9)
    loss, ent, gap = cpu.chunk_objective(*chunk_args(X, weight, y), c_pos, c_neg, bias, alpha, w)
    m = y * (Xd @ w[:-1] + bias * w[-1])
    ok = c > 0
    np.testing.assert_allclose(loss, np.sum(c * np.logaddexp(0, -m)), rtol=1e-9)
    e = np.where(
        ok, a * np.log(np.where(ok, frac, 1)) + (c - a) * np.log(np.where(ok, 1 - frac, 1)), 0
    )
    np.testing.assert_allclose(ent, e.sum(), rtol=1e-6)
    # the sum of per-row gaps is P - D when w = w(alpha)
    np.testing.assert_allclose(gap, w @ w + loss + ent, rtol=1e-6)


def test_alpha_from_margins_inverts_the_optimality_condition(problem):
    X, y, weight = problem
    rng = np.random.default_rng(2)
    w = rng.normal(size=41)
    alpha = np.zeros(300)
    cpu.alpha_from_margins(*chunk_args(X, weight, y), 1.0, 1.0, 1.0, w, alpha)
    Xd = sp.csr_matrix(X).toarray()
    m = y * (Xd @ w[:-1] + w[-1])
    c = weight.astype(np.float64)
    a = np.array([dual.unpack_alpha(s, ci)[0] for s, ci in zip(alpha, c, strict=True)])
    np.testing.assert_allclose(a, c / (1 + np.exp(m)), rtol=1e-5)


def test_decision_function_matches_scipy(problem):
    X, _, _ = problem
    csr = sp.csr_matrix(X)
    coef = np.linspace(-1, 1, 40)
    out = np.empty(300)
    cpu.decision_function(csr.indptr.astype(np.int64), csr.indices, csr.data, True, coef, 0.25, out)
    np.testing.assert_allclose(out, csr @ coef + 0.25, rtol=1e-6)


def _loop_blocks(llvm_ir: str, name: str) -> list[str]:
    """The basic blocks of function ``name`` that lie on a cycle of its control-flow graph."""
    funcs = llvm_ir.split("\ndefine ")
    body = max((f for f in funcs if name in f.split("\n")[0] and "cpython" not in f.split("\n")[0]
                and "cfunc" not in f.split("\n")[0]), key=len)  # fmt: skip
    blocks: dict[str, list[str]] = {}
    label = "entry"
    for line in body.split("\n")[1:]:
        head = line.split(":")[0]
        if line and not line[0].isspace() and ":" in line and " " not in head:
            label = head
        blocks.setdefault(label, []).append(line)
    succ = {b: set(re.findall(r"label %([\w.\"$-]+)", "\n".join(ls))) for b, ls in blocks.items()}

    def reach(b):
        seen, todo = set(), list(succ[b])
        while todo:
            x = todo.pop()
            if x not in seen and x in succ:
                seen.add(x)
                todo.extend(succ[x])
        return seen

    return ["\n".join(ls) for b, ls in blocks.items() if b in reach(b)]


def test_cd_pass_row_loop_makes_no_refcount_calls():
    """The hot loop spells out its array helpers (see ``cd_pass``): an inlined helper taking
    arrays left NRT incref/decref calls in it, every row, ~20 % of a pass. Compiled afresh (a
    cached function has no IR to inspect). ``cd_pass`` is this loop with no syncs."""
    fresh = njit(nogil=True)(cpu.cd_pass_views.py_func)
    slots = HotSlots(2, 2)
    slots.tag()
    args = (np.array([0, 2, 3], np.int64), np.array([0, 1, 1], np.int32), np.ones(3, np.float32),
            True, np.array([1, -1], np.float32), E, False, 1.0, 1.0, 1.0, np.ones(2),
            np.zeros(2), slots.views[1], np.arange(2), 1.0, slots.h0, slots.pub, slots.seen, 1,
            0.0, slots.ends, 1)  # fmt: skip
    fresh(*args)
    loop = "\n".join(_loop_blocks(fresh.inspect_llvm(fresh.signatures[0]), "cd_pass_views"))
    assert "@log" in loop  # the row loop was found (row_update's logarithms are inlined in it)
    assert "@NRT_incref" not in loop and "@NRT_decref" not in loop
