"""``snapfit train --loss hinge|squared_hinge|squared`` with ``--test``, ``--validation``, early
stopping on the loss's metric, checkpoints and resume; ``evaluate`` and ``predict`` with each
loss's outputs; model files that record the loss; usage and data errors in one line."""

import json
import zipfile

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from sklearn.metrics import mean_absolute_error, r2_score, roc_auc_score

from snapfit import ridge, svm
from snapfit.cli import cli
from snapfit.data import write_parquet

N_FEATURES = 400


def _rows(rng, n):
    X = sp.random(n, N_FEATURES, density=0.03, random_state=rng, format="csr", dtype=np.float32)
    X.data[:] = np.where(rng.random(X.nnz) < 0.3, rng.uniform(0.5, 2.0, X.nnz), 1.0)
    return X


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_losses")
    rng = np.random.default_rng(1)
    w = rng.normal(0, 1.0, N_FEATURES)
    paths = {}
    for name, n in (("train", 4000), ("test", 3000), ("valid", 2000)):
        X = _rows(rng, n)
        real = (X @ w + rng.normal(0, 0.5, n) + 3.0).astype(np.float32)
        cls = (X @ w + rng.normal(0, 0.5, n) > 0).astype(np.int8)
        paths[f"{name}_reg"], paths[f"{name}_cls"] = (
            d / f"{name}_reg.parquet",
            d / f"{name}.parquet",
        )
        write_parquet(paths[f"{name}_reg"], X, real, targets="real", row_group_rows=1000,
                      n_features=N_FEATURES)  # fmt: skip
        write_parquet(paths[f"{name}_cls"], X, cls, row_group_rows=1000, n_features=N_FEATURES)
        paths[name] = (X, real, cls)
    return paths


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args])


def _header(path) -> dict:
    with zipfile.ZipFile(path) as z, z.open("__header__.npy") as f:
        return json.loads(np.lib.format.read_array(f).tobytes().decode())


def test_train_squared_on_real_targets_writes_a_ridge_model_and_evaluate_prints_rmse_r2(
    files, tmp_path, run
):
    out, js = tmp_path / "ridge.npz", tmp_path / "ridge.json"
    res = run("train", files["train_reg"], "--loss", "squared", "--alpha", 2.0, "--tol", 1e-8,
              "--max-iter", 300, "--test", files["test_reg"], "--out", out, "--json", js,
              "-q")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert _header(out)["loss"] == "squared"
    model = ridge.load(out)
    assert model.alpha == 2.0 and model.converged_
    doc = json.loads(js.read_text())
    X, y, _ = files["test"]
    pred = model.predict(X)
    rmse = float(np.sqrt(np.mean((pred - y) ** 2)))
    assert doc["loss"] == "squared" and doc["history"][-1]["test_rmse"] == pytest.approx(rmse)
    from snapfit.report import held_out_curves

    assert held_out_curves(doc["history"]) == ["test_rmse"]  # what `snapfit report` draws
    m = doc["metrics"]["test"]
    assert m["rmse"] == pytest.approx(rmse, rel=1e-9)
    assert m["r2"] == pytest.approx(r2_score(y, pred), rel=1e-9) and m["r2"] > 0.5
    res = run("evaluate", out, files["test_reg"])
    assert res.exit_code == 0, res.output
    lines = dict(line.split(None, 1) for line in res.output.splitlines())
    assert float(lines["RMSE"]) == pytest.approx(rmse, rel=1e-5)
    assert float(lines["MAE"]) == pytest.approx(mean_absolute_error(y, pred), rel=1e-5)
    assert float(lines["R2"]) == pytest.approx(r2_score(y, pred), rel=1e-5)
    res = run("info", out)
    assert res.exit_code == 0 and "squared (ridge regression)" in res.output
    assert [line.split() for line in res.output.splitlines()][4] == ["alpha", "2.0"]
    res = run("info", files["test_reg"])
    assert res.exit_code == 0, res.output
    assert f"targets:       real, mean {np.mean(y, dtype=np.float64):.6g}" in res.output
    res = run("predict", out, files["test_reg"], "--out", tmp_path / "p.parquet")
    assert res.exit_code == 0, res.output
    got = pq.read_table(tmp_path / "p.parquet").column("prediction").to_numpy()
    np.testing.assert_allclose(got, pred, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_svm_test_metric_and_evaluate_print_accuracy_hinge_and_auc(files, tmp_path, run, loss):
    out, js = tmp_path / f"{loss}.npz", tmp_path / f"{loss}.json"
    res = run("train", files["train_cls"], "--loss", loss, "--C", 0.5, "--max-iter", 200,
              "--test", files["test_cls"], "--out", out, "--json", js, "-q")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert _header(out)["loss"] == loss
    model = svm.load(out)
    X, _, y = files["test"]
    s = model.decision_function(X)
    ypm = np.where(y == 1, 1.0, -1.0)
    hinge = float(np.mean(np.maximum(0.0, 1.0 - ypm * s)))
    doc = json.loads(js.read_text())
    assert doc["history"][-1]["test_hinge"] == pytest.approx(hinge)
    m = doc["metrics"]["test"]
    assert m["hinge"] == pytest.approx(hinge, rel=1e-9)
    assert m["accuracy"] == pytest.approx(np.mean((s > 0) == (y == 1)), rel=1e-12)
    assert m["auc"] == pytest.approx(roc_auc_score(y, s), abs=1e-9)
    res = run("evaluate", out, files["test_cls"])
    assert res.exit_code == 0, res.output
    assert "hinge loss" in res.output and "ROC AUC" in res.output and "logloss" not in res.output


@pytest.mark.parametrize(
    "loss, metric", [("squared", "rmse"), ("squared", "r2"), ("hinge", "accuracy"),
                     ("squared_hinge", "hinge")]
)  # fmt: skip
def test_validation_and_early_stopping_use_the_losses_metric(files, tmp_path, run, loss, metric):
    real = loss == "squared"
    train, valid = (files["train_reg"], files["valid_reg"]) if real else (
        files["train_cls"], files["valid_cls"])  # fmt: skip
    out, js = tmp_path / "m.npz", tmp_path / "m.json"
    res = run("train", train, "--loss", loss, "--validation", valid, "--validation-metric",
              metric, "--early-stopping-rounds", 2, "--max-iter", 300, "--tol", 1e-9,
              "--out", out, "--json", js, "-q")  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(js.read_text())
    scored = [h[f"validation_{metric}"] for h in doc["history"]]
    assert len(scored) == len(doc["history"]) and doc["best_score"] in scored
    model = (ridge if real else svm).load(out)
    X, y, cls = files["valid"]
    s = model.predict(X) if real else model.decision_function(X)
    want = {
        "rmse": lambda: float(np.sqrt(np.mean((s - y) ** 2))),
        "r2": lambda: r2_score(y, s),
        "accuracy": lambda: float(np.mean((s > 0) == (cls == 1))),
        "hinge": lambda: float(np.mean(np.maximum(0.0, 1.0 - np.where(cls == 1, 1, -1) * s))),
    }[metric]()
    # it stopped early, and the model written is the best epoch's, not the last one's
    assert doc["stopped_early"] and doc["kept_epoch"] == doc["best_iteration"] < doc["n_iter"]
    assert doc["best_score"] == pytest.approx(want, rel=1e-6)
    assert doc["params"]["validation_metric"] == metric


def test_ridge_checkpoint_and_resume_from_the_cli(files, tmp_path, run):
    ck = tmp_path / "ck"
    common = ("--loss", "squared", "--tol", 1e-9, "--seed", 3, "--memory-budget", "1MB", "-q")
    res = run("train", files["train_reg"], "--out", tmp_path / "a.npz", "--max-iter", 2,
              "--checkpoint-dir", ck, *common)  # fmt: skip
    assert res.exit_code == 0, res.output
    res = run("train", files["train_reg"], "--out", tmp_path / "b.npz", "--max-iter", 200,
              "--checkpoint-dir", ck, "--resume", *common)  # fmt: skip
    assert res.exit_code == 0, res.output
    res = run("train", files["train_reg"], "--out", tmp_path / "c.npz", "--max-iter", 200,
              *common)  # fmt: skip
    assert res.exit_code == 0, res.output
    resumed, straight = ridge.load(tmp_path / "b.npz"), ridge.load(tmp_path / "c.npz")
    assert resumed.n_iter_ == straight.n_iter_
    np.testing.assert_array_equal(resumed.coef_, straight.coef_)
    # the checkpoint is read: another alpha than its own is refused, one line, no model
    res = run("train", files["train_reg"], "--out", tmp_path / "d.npz", "--max-iter", 200,
              "--checkpoint-dir", ck, "--resume", "--alpha", 5, *common)  # fmt: skip
    assert res.exit_code == 3 and "c_pos was 1.0 in the checkpoint and is 0.2" in res.output
    assert not (tmp_path / "d.npz").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (("--loss", "squared", "--C", 2), "--C is the classifiers' regularization"),
        (("--loss", "hinge", "--alpha", 2), "--alpha is ridge's"),
        (("--loss", "squared", "--class-weight", "balanced"), "--class-weight is for the"),
        (("--loss", "squared", "--validation-metric", "auc"), "does not score --loss squared"),
        (("--loss", "hinge", "--validation-metric", "logloss"), "does not score --loss hinge"),
        (("--loss", "squared", "--workers", 2), "--loss squared trains on one machine"),
    ],
)
def test_options_that_do_not_fit_the_loss_are_usage_errors(files, tmp_path, run, args, message):
    res = run("train", files["train_reg"], "--out", tmp_path / "m.npz", *args)
    assert res.exit_code == 2 and message in res.output
    assert not (tmp_path / "m.npz").exists()


def test_wrong_targets_for_the_loss_exit_3_in_one_line(files, tmp_path, run):
    res = run("train", files["train_reg"], "--out", tmp_path / "m.npz", "--loss", "hinge")
    assert res.exit_code == 3
    line = res.output.strip()
    assert "\n" not in line and "train_reg.parquet: holds real-valued targets" in line
    res = run("train", files["train_cls"], "--out", tmp_path / "m.npz", "--loss", "logistic",
              "--test", files["test_reg"])  # fmt: skip
    assert res.exit_code == 3 and "test_reg.parquet: holds real-valued targets" in res.output
    assert not (tmp_path / "m.npz").exists()
    # a ridge model evaluated on class labels reads them as the numbers 0 and 1 (no error);
    # a classifier evaluated on real targets is refused
    res = run("train", files["train_cls"], "--out", tmp_path / "c.npz", "-q", "--max-iter", 5)
    assert res.exit_code == 0, res.output
    res = run("evaluate", tmp_path / "c.npz", files["test_reg"])
    assert res.exit_code == 3 and "holds real-valued targets" in res.output
    # predict needs no labels: it scores the rows whatever their targets
    res = run("predict", tmp_path / "c.npz", files["test_reg"], "--out", tmp_path / "p.parquet")
    assert res.exit_code == 0, res.output
