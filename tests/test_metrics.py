import numpy as np
import pytest
from sklearn.metrics import accuracy_score, log_loss, roc_auc_score

from snapfit.metrics import (
    EXACT_BYTES_PER_ROW,
    BudgetError,
    PointMetrics,
    evaluate_batches,
    exact_auc,
    streaming_auc,
)


def _batches(s, y, w=None, size=7000):
    def gen():
        for i in range(0, len(s), size):
            yield s[i : i + size], y[i : i + size], None if w is None else w[i : i + size]

    return gen


def _scores(kind, n, rng):
    y = (rng.random(n) < 0.25).astype(int)
    s = rng.normal(size=n) + 0.8 * y
    if kind == "ties":
        s = np.round(s, 2)
    elif kind == "atom":
        s = np.where(rng.random(n) < 0.3, 0.0, s)
    elif kind == "narrow":
        s = 3.0 + 1e-9 * s
    return s, y


@pytest.mark.parametrize("kind", ["normal", "ties", "atom", "narrow"])
def test_bounded_auc_within_its_bound_and_1e4(kind):
    rng = np.random.default_rng(0)
    n = 60000
    s, y = _scores(kind, n, rng)
    budget = n * EXACT_BYTES_PER_ROW // 4  # a quarter of what the exact AUC needs
    res = streaming_auc(_batches(s, y), n_rows=n, memory_budget=budget)
    ref = roc_auc_score(y, s)
    assert res.method == "bounded"
    assert abs(res.auc - ref) <= res.error_bound + 1e-12
    assert res.error_bound <= 1e-4


def test_weighted_bounded_auc_and_exact_auc():
    rng = np.random.default_rng(1)
    n = 40000
    s, y = _scores("normal", n, rng)
    w = rng.random(n) + 0.1
    ref = roc_auc_score(y, s, sample_weight=w)
    assert exact_auc(s, y, w) == pytest.approx(ref, abs=1e-12)
    res = streaming_auc(_batches(s, y, w), n_rows=n, memory_budget=n * EXACT_BYTES_PER_ROW // 3)
    assert abs(res.auc - ref) <= min(res.error_bound + 1e-12, 1e-4)


def test_exact_when_it_fits_and_tiny_budget_refused():
    rng = np.random.default_rng(2)
    s, y = _scores("ties", 5000, rng)
    res = streaming_auc(_batches(s, y), n_rows=5000, memory_budget=10**7)
    assert (res.method, res.error_bound) == ("exact", 0.0)
    assert res.auc == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    with pytest.raises(BudgetError, match="give at least"):
        streaming_auc(_batches(s, y), n_rows=5000, memory_budget=1000)


def test_point_metrics_match_sklearn():
    rng = np.random.default_rng(3)
    n = 20000
    s, y = _scores("normal", n, rng)
    y_pm = np.where(y > 0, 1, -1)  # both label encodings are accepted
    out = evaluate_batches(_batches(s, y_pm), n_rows=n, memory_budget=10**7)
    p = 1 / (1 + np.exp(-s))
    assert out["logloss"] == pytest.approx(log_loss(y, p), rel=1e-12)
    assert out["accuracy"] == pytest.approx(accuracy_score(y, s > 0))
    assert out["auc"] == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    cal = out["calibration"]
    assert cal["observed_rate"] == pytest.approx(y.mean())
    assert cal["mean_predicted"] == pytest.approx(p.mean())
    assert sum(b["weight"] for b in cal["bins"]) == pytest.approx(n)


def test_calibration_of_a_calibrated_model_is_small():
    rng = np.random.default_rng(4)
    s = rng.normal(size=200000)
    y = (rng.random(len(s)) < 1 / (1 + np.exp(-s))).astype(int)
    m = PointMetrics()
    m.update(s, y)
    assert m.result()["calibration"]["ece"] < 0.01


def test_one_class_gives_no_auc():
    s = np.linspace(-1, 1, 100)
    out = evaluate_batches(_batches(s, np.ones(100)), n_rows=100, memory_budget=10**6)
    assert out["auc"] is None and out["accuracy"] == pytest.approx(0.5)
