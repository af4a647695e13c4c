"""Early stopping on validation data: scored every epoch, stops, keeps the best epoch's model."""

import json
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from sklearn.metrics import log_loss, roc_auc_score

import snapfit
from snapfit.cli import cli
from snapfit.data import Dataset
from snapfit.datasets import make_criteo_like_parquet


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Criteo-like train and validation sets; with C=0.05 the validation log loss is best
    after the first epochs and then rises (measured), so early stopping has work to do."""
    d = tmp_path_factory.mktemp("early")
    make_criteo_like_parquet(d / "train.parquet", 4000, seed=0, hash_bits=14)
    make_criteo_like_parquet(d / "valid.parquet", 2000, seed=1, hash_bits=14)
    return d


def _arrays(path):
    chunks = list(Dataset(path).iter_chunks())
    X = sp.vstack([sp.csr_matrix((c.values, c.indices, c.indptr), shape=(c.n_rows, 2**14))
                   for c in chunks]).tocsr()  # fmt: skip
    y = (np.concatenate([c.y for c in chunks]) > 0).astype(int)
    return X, y


def test_stops_and_keeps_the_best_epoch(files):
    """Every epoch eligible (``early_stopping_gap=inf``): the rule other libraries use."""
    kw = dict(C=0.05, tol=1e-8, max_iter=60, random_state=0, early_stopping_gap=float("inf"))
    full = snapfit.LogisticRegression(**kw).fit(files / "train.parquet",
                                                validation=files / "valid.parquet")  # fmt: skip
    scores = [h["validation_logloss"] for h in full.history_]
    assert len(scores) == full.n_iter_[0] and full.best_score_ == min(scores)
    assert full.best_iteration_ == 1 + int(np.argmin(scores))
    # where patience 3 stops, walking the full run's scores: the same rule, written plainly
    best, stop = 1, None
    for epoch in range(2, len(scores) + 1):
        if scores[epoch - 1] < scores[best - 1]:
            best = epoch
        elif epoch - best >= 3:
            stop = epoch
            break
    assert stop is not None and stop < len(scores)  # the data makes early stopping matter
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # stopping early is not a convergence failure
        est = snapfit.LogisticRegression(**kw, early_stopping_rounds=3).fit(
            files / "train.parquet", validation=files / "valid.parquet"
        )
    assert est.n_iter_[0] == stop and est.best_iteration_ == best
    assert est.stopped_early_ and not est.converged_ and not full.stopped_early_
    assert [h["validation_logloss"] for h in est.history_] == scores[:stop]
    # the model kept is the best epoch's: its validation log loss, computed independently
    Xv, yv = _arrays(files / "valid.parquet")
    assert log_loss(yv, est.predict_proba(Xv)[:, 1]) == pytest.approx(est.best_score_, rel=1e-10)
    # the same with arrays as validation data, and with AUC as the metric
    est2 = snapfit.LogisticRegression(**kw, early_stopping_rounds=3).fit(
        files / "train.parquet", validation=(Xv, yv)
    )
    np.testing.assert_array_equal(est2.coef_, est.coef_)
    auc = snapfit.LogisticRegression(**kw, early_stopping_rounds=3, validation_metric="auc")
    auc.fit(files / "train.parquet", validation=(Xv, yv))
    aucs = [h["validation_auc"] for h in auc.history_]
    assert auc.best_score_ == max(aucs) and len(aucs) - auc.best_iteration_ <= 3
    assert roc_auc_score(yv, auc.decision_function(Xv)) == pytest.approx(max(aucs), rel=1e-12)


def test_by_default_only_epochs_near_the_optimum_are_kept_or_stop_the_fit(files):
    """Here an early epoch (relative gap 0.06) scores better than the optimum by luck of the
    dual path; by default (``early_stopping_gap=1e-2``) the kept model is one whose gap is at
    most 1e-2, and the fit stops only after 3 such epochs without progress."""
    kw = dict(C=0.05, tol=1e-8, max_iter=60, random_state=0)
    full = snapfit.LogisticRegression(**kw).fit(files / "train.parquet",
                                                validation=files / "valid.parquet")  # fmt: skip
    gaps = [h["rel_gap"] for h in full.history_]
    scores = [h["validation_logloss"] for h in full.history_]
    eligible = [e for e in range(1, len(scores) + 1) if gaps[e - 1] <= 1e-2]
    best, stop, since = None, None, 0
    for epoch in eligible:  # the rule, written plainly
        if best is None or scores[epoch - 1] < scores[best - 1]:
            best, since = epoch, 0
        else:
            since += 1
            if since >= 3:
                stop = epoch
                break
    assert full.best_iteration_ == min(eligible, key=lambda e: scores[e - 1])
    assert int(np.argmin(scores)) + 1 < eligible[0]  # the data makes the gate matter
    est = snapfit.LogisticRegression(**kw, early_stopping_rounds=3)
    est.fit(files / "train.parquet", validation=files / "valid.parquet")
    assert (est.n_iter_[0], est.best_iteration_) == (stop, best) and est.stopped_early_
    assert est.history_[best - 1]["rel_gap"] <= 1e-2
    # the kept model scores within 1 % of the converged fit's, where the ungated one does not
    last = scores[-1]
    assert abs(est.best_score_ - last) <= 0.01 * last < abs(min(scores) - last)


def test_the_gate_is_never_below_tol_and_records_without_a_small_gap_are_skipped():
    from snapfit.validation import EarlyStopping

    X = sp.csr_matrix(np.eye(4))
    data = (X, np.array([1.0, -1.0, 1.0, -1.0]), None)
    stopper = EarlyStopping(data, metric="logloss", rounds=1, n_features=4, bias=0.0,
                            gap=1e-3, tol=0.1)  # fmt: skip
    assert stopper.gap == 0.1
    good, bad = np.array([1.0, -1.0, 1.0, -1.0, 0]), np.zeros(5)
    assert not stopper({"epoch": 1, "rel_gap": 0.5}, good)  # best score, but too far off
    assert stopper.best_w is None
    assert not stopper({"epoch": 2, "rel_gap": 0.05}, bad)  # eligible: the first best
    assert stopper({"epoch": 3, "rel_gap": 0.01}, bad)  # no better: patience 1 is spent
    assert stopper.best_epoch == 2 and stopper.scores[0] < stopper.best_score


def test_saved_model_reports_the_best_epoch(files, tmp_path):
    est = snapfit.LogisticRegression(C=0.05, random_state=0, early_stopping_rounds=2)
    est.fit(files / "train.parquet", validation=files / "valid.parquet")
    est.save(tmp_path / "m.npz")
    back = snapfit.load(tmp_path / "m.npz")
    assert (back.best_iteration_, back.best_score_) == (est.best_iteration_, est.best_score_)
    assert (back.converged_, back.stopped_early_) == (est.converged_, est.stopped_early_)


def test_bad_validation_arguments(files):
    X, y = _arrays(files / "valid.parquet")
    with pytest.raises(ValueError, match="early_stopping_rounds needs validation data"):
        snapfit.LogisticRegression(early_stopping_rounds=2).fit(X, y)
    with pytest.raises(ValueError, match="must have 16384 features"):
        snapfit.LogisticRegression().fit(X, y, validation=(X[:, :10], y))
    with pytest.raises(ValueError, match=r"labels \[7\]"):
        snapfit.LogisticRegression().fit(X, y, validation=(X, np.where(y == 1, 7, 0)))
    with pytest.raises(TypeError, match="validation must be"):
        snapfit.LogisticRegression().fit(X, y, validation=X)


def test_cli_validation_and_early_stopping(files, tmp_path):
    run = lambda *a: CliRunner().invoke(cli, [str(x) for x in a])  # noqa: E731
    res = run("train", files / "train.parquet", "--out", tmp_path / "m.npz", "--C", 0.05,
              "--validation", files / "valid.parquet", "--early-stopping-rounds", 2,
              "--json", tmp_path / "r.json", "--quiet")  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["best_iteration"] == doc["n_iter"] - 2 and doc["best_score"] > 0
    assert all("validation_logloss" in h for h in doc["history"])
    # stopping on the validation metric is not convergence, and is said so
    assert doc["converged"] is False and doc["stopped_early"] is True
    assert doc["kept_epoch"] == doc["best_iteration"]
    res = run("train", files / "train.parquet", "--out", tmp_path / "m2.npz", "--C", 0.05,
              "--validation", files / "valid.parquet", "--early-stopping-rounds", 2)  # fmt: skip
    assert res.exit_code == 0 and "best epoch" in res.output and "kept" in res.output
    assert "converged" not in res.output
    assert (
        f"stopped early: validation logloss not improved for 2 epochs after epoch "
        f"{doc['best_iteration']}" in res.output
    )
    # the primal and dual shown are the kept epoch's, not the last one's
    kept = doc["history"][doc["kept_epoch"] - 1]
    assert f"{kept['primal']:.8g} (epoch {doc['kept_epoch']}, relative gap" in res.output
    assert f"{kept['dual']:.8g} (epoch {doc['kept_epoch']}" in res.output
    res = run("train", files / "train.parquet", "--out", tmp_path / "m3.npz",
              "--early-stopping-rounds", 2)  # fmt: skip
    assert res.exit_code == 2 and "--early-stopping-rounds needs --validation" in res.output
