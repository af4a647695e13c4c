import json
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from sklearn.metrics import log_loss, roc_auc_score

import snapfit
from snapfit.cli import cli
from snapfit.cli.args import parse_bytes
from snapfit.data import write_parquet
from snapfit.metrics import EXACT_BYTES_PER_ROW

N_FEATURES = 300


def _make(rng, n, w, *, labels=True):
    X = sp.random(n, N_FEATURES, density=0.03, random_state=rng, format="csr")
    X.data[:] = 1.0
    p = 1 / (1 + np.exp(-(X @ w - 0.5)))
    y = (rng.random(n) < p).astype(np.int8)
    return X, (y if labels else None)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_train")
    rng = np.random.default_rng(0)
    w = rng.normal(0, 1.5, N_FEATURES)
    paths = {}
    for name, n, labels in (("train", 3000, True), ("test", 20000, True), ("unlab", 500, False)):
        X, y = _make(rng, n, w, labels=labels)
        paths[name] = d / f"{name}.parquet"
        write_parquet(paths[name], X, y, row_group_rows=1000, n_features=N_FEATURES)
        paths[name + "_X"], paths[name + "_y"] = X, y
    wide, y = _make(rng, 50, w)
    paths["wide"] = d / "wide.parquet"
    write_parquet(paths["wide"], wide, y, n_features=N_FEATURES * 2)
    paths["junk"] = d / "junk.parquet"
    paths["junk"].write_text("not parquet\n")
    res = CliRunner().invoke(
        cli,
        ["train", str(paths["train"]), "--test", str(paths["test"]), "--out", str(d / "m.npz"),
         "--json", str(d / "train.json"), "--C", "0.5", "--max-iter", "30", "--tol", "1e-3"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    paths["model"], paths["json"], paths["train_output"] = d / "m.npz", d / "train.json", res
    return paths


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args])


def _no_traceback(res):
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


# -- train ------------------------------------------------------------------------------------
def test_train_writes_model_summary_and_json(files):
    out = files["train_output"].output
    for key in ("epochs", "primal", "fit time", "test logloss", "test ROC AUC", "model"):
        assert key in out
    model = snapfit.load(files["model"])
    doc = json.loads(files["json"].read_text())
    assert doc["params"]["C"] == 0.5 and doc["n_iter"] == len(doc["history"]) >= 1
    assert set(doc["timings"]) == {"fit", "save", "evaluate", "total"}
    assert {"primal", "dual", "rel_gap", "seconds", "rows_per_s"} <= set(doc["history"][0])
    X, y = files["test_X"], files["test_y"]
    p = model.predict_proba(X)[:, 1]
    m = doc["metrics"]["test"]
    assert m["logloss"] == pytest.approx(log_loss(y, p), rel=1e-9)
    assert m["auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-9) and m["auc"] > 0.7
    assert model.history_ == doc["history"]


def test_train_quiet_and_json_to_stdout(files, tmp_path, run):
    res = run("train", files["train"], "--out", tmp_path / "q.npz", "--max-iter", 3, "--json", "-",
              "--class-weight", "balanced", "--n-jobs", 2, "--seed", 3,
              "--shared-threads")  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["params"]["class_weight"] == "balanced" and doc["metrics"] == {}
    assert doc["params"]["n_jobs"] == 2 and doc["params"]["random_state"] == 3
    assert doc["params"]["deterministic"] is False
    assert json.loads(files["json"].read_text())["params"]["deterministic"] is True


@pytest.mark.parametrize(
    "args, message",
    [
        (["--C", "-1"], "Invalid value for '--C'"),
        (["--C", "abc"], "is not a valid float"),
        (["--device", "tpu"], "'tpu' is not one of"),
        (["--memory-budget", "2XB"], "is not a size"),
        (["--max-iter", "0"], "Invalid value for '--max-iter'"),
        (["--class-weight", "even"], "'even' is not"),
        (["--resume"], "--resume needs --checkpoint-dir"),
        (["--gpus", "0,x"], "is not a list of GPU numbers"),
        (["--gpus", "-1"], "give GPU numbers >= 0"),
        (["--gpus", "0", "--device", "cpu"], "--gpus names GPUs but --device is cpu"),
        (["--bogus"], "No such option"),
    ],
)
def test_train_usage_errors_exit_2(files, tmp_path, run, args, message):
    out = tmp_path / "m.npz"
    res = run("train", files["train"], "--out", out, *args)
    assert res.exit_code == 2 and message in res.output, res.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_train_missing_out_and_missing_data(files, tmp_path, run):
    res = run("train", files["train"])
    assert res.exit_code == 2 and "Missing option '--out'" in res.output
    res = run("train", tmp_path / "nope.parquet", "--out", tmp_path / "m.npz")
    assert res.exit_code == 2 and "does not exist" in res.output


@pytest.mark.parametrize("which", ["junk", "unlab", "test_junk", "test_wide"])
def test_train_bad_data_exit_3_one_line(files, tmp_path, run, which):
    out = tmp_path / "m.npz"
    if which.startswith("test_"):
        args = [files["train"], "--test", files[which[5:]]]
    else:
        args = [files[which]]
    res = run("train", *args, "--out", out)
    assert res.exit_code == 3, res.output
    _no_traceback(res)
    assert res.output.startswith("Error: ") and res.output.strip().count("\n") == 0
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_train_refuses_existing_output(files, tmp_path, run):
    out = tmp_path / "m.npz"
    out.write_text("keep me")
    res = run("train", files["train"], "--out", out, "--max-iter", 2)
    assert res.exit_code == 3 and "already exists; pass --force" in res.output
    assert out.read_text() == "keep me"
    assert run("train", files["train"], "--out", out, "--max-iter", 2, "--force").exit_code == 0
    assert snapfit.load(out).n_iter_[0] == 2


def test_train_gpu_unavailable_exit_4(files, tmp_path, run):
    numba_cuda = pytest.importorskip("numba.cuda")
    if numba_cuda.is_available():
        pytest.skip("a GPU is available here")
    out = tmp_path / "m.npz"
    res = run("train", files["train"], "--out", out, "--device", "gpu", "--max-iter", 2)
    assert res.exit_code == 4 and "GPU" in res.output, res.output
    _no_traceback(res)
    assert not out.exists()


def test_train_interrupted_exit_130(files, tmp_path, run, monkeypatch):
    def interrupted(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(snapfit.LogisticRegression, "fit", interrupted)
    out = tmp_path / "m.npz"
    res = run("train", files["train"], "--out", out)
    assert res.exit_code == 130 and "Interrupted." in res.output
    assert not out.exists()


def test_debug_shows_the_exception(files, tmp_path):
    res = CliRunner().invoke(cli, ["--debug", "train", str(files["junk"]), "--out",
                                   str(tmp_path / "m.npz")])  # fmt: skip
    assert isinstance(res.exception, snapfit.errors.DataError)


def test_parse_bytes():
    assert parse_bytes("2GB") == 2 * 10**9 and parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("1e6") == 10**6 and parse_bytes("100") == 100
    for bad in ("", "1ZB", "-1GB", "0"):
        with pytest.raises(ValueError):
            parse_bytes(bad)


# -- predict ----------------------------------------------------------------------------------
def test_predict_probabilities_and_labels(files, tmp_path, run):
    out = tmp_path / "p.parquet"
    res = run("predict", files["model"], files["unlab"], "--out", out, "--labels")
    assert res.exit_code == 0 and "500 rows" in res.output, res.output
    table = pq.read_table(out)
    assert table.column_names == ["probability", "predicted_label"]
    model = snapfit.load(files["model"])
    np.testing.assert_allclose(
        table["probability"].to_numpy(), model.predict_proba(files["unlab_X"])[:, 1], rtol=1e-12
    )
    np.testing.assert_array_equal(table["predicted_label"].to_numpy(),
                                  model.predict(files["unlab_X"]))  # fmt: skip
    assert pq.ParquetFile(out).metadata.num_row_groups == 1
    assert [p.name for p in tmp_path.iterdir()] == ["p.parquet"]
    res = run("predict", files["model"], files["unlab"], "--out", out)
    assert res.exit_code == 3 and "already exists" in res.output


@pytest.mark.parametrize(
    "model, data, code, message",
    [
        ("junk", "unlab", 3, "not a readable snapfit model"),
        ("model", "junk", 3, "not a Parquet file"),
        ("model", "wide", 3, "n_features 600 but the model was trained with 300"),
        ("model", "missing", 2, "does not exist"),
    ],
)
def test_predict_errors_leave_no_output(files, tmp_path, run, model, data, code, message):
    out = tmp_path / "p.parquet"
    data_path = files.get(data, tmp_path / "missing.parquet")
    res = run("predict", files[model], data_path, "--out", out)
    assert res.exit_code == code and message in res.output, res.output
    _no_traceback(res)
    assert list(tmp_path.iterdir()) == []


# -- evaluate ---------------------------------------------------------------------------------
@pytest.mark.parametrize("budget, method", [("1GB", "exact"), ("200KB", "bounded")])
def test_evaluate_auc_matches_sklearn(files, tmp_path, run, budget, method):
    n = files["test_y"].shape[0]
    if method == "bounded":
        assert n * EXACT_BYTES_PER_ROW > parse_bytes(budget)  # the test set exceeds the budget
    res = run("evaluate", files["model"], files["test"], "--memory-budget", budget,
              "--json", tmp_path / "e.json")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "logloss" in res.output and "ROC AUC" in res.output and "calibration" in res.output
    doc = json.loads((tmp_path / "e.json").read_text())
    p = snapfit.load(files["model"]).predict_proba(files["test_X"])[:, 1]
    assert doc["auc_method"] == method
    assert abs(doc["auc"] - roc_auc_score(files["test_y"], p)) <= 1e-4
    assert doc["auc_error_bound"] <= 1e-4
    assert doc["logloss"] == pytest.approx(log_loss(files["test_y"], p), rel=1e-9)


def test_evaluate_errors(files, run):
    res = run("evaluate", files["model"], files["test"], "--memory-budget", "1KB")
    assert res.exit_code == 4 and "cannot hold the AUC state" in res.output, res.output
    _no_traceback(res)
    res = run("evaluate", files["model"], files["unlab"])
    assert res.exit_code == 3 and "has no 'label' column" in res.output
    res = run("evaluate", files["model"], files["test"], "--memory-budget", "lots")
    assert res.exit_code == 2 and "is not a size" in res.output


# -- report -----------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["model", "json"])
def test_report_png(files, tmp_path, run, source):
    out = tmp_path / "curve.png"
    res = run("report", files[source], "--out", out)
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size < 150_000
    assert [p.name for p in tmp_path.iterdir()] == ["curve.png"]


def test_report_errors_leave_no_output(files, tmp_path, run):
    bad = tmp_path / "bad.json"
    bad.write_text('{"no": "history"}')
    res = run("report", bad, "--out", tmp_path / "c.png")
    assert res.exit_code == 3 and "'history'" in res.output
    res = run("report", files["json"], "--out", tmp_path / "c.gif")
    assert res.exit_code == 2 and "must end in .png" in res.output
    res = run("report", files["junk"], "--out", tmp_path / "c.png")
    assert res.exit_code == 3 and "neither a snapfit model nor JSON" in res.output
    assert [p.name for p in tmp_path.iterdir()] == ["bad.json"]


def test_help_lists_the_commands(run):
    res = run("--help")
    for name in ("train", "predict", "evaluate", "report"):
        assert name in res.output


def test_checkpoint_dir_and_resume(files, tmp_path, run):
    ck = tmp_path / "ck"
    common = ("--C", "0.5", "--tol", "1e-9", "--seed", "1", "--checkpoint-dir", ck)
    first = run("train", files["train"], "--out", tmp_path / "a.npz", "--max-iter", 3, *common)
    assert first.exit_code == 0, first.output
    assert (ck / "checkpoint.snapfit").exists()
    more = run("train", files["train"], "--out", tmp_path / "b.npz", "--max-iter", 8, "--resume",
               *common)  # fmt: skip
    assert more.exit_code == 0, more.output
    whole = run("train", files["train"], "--out", tmp_path / "c.npz", "--max-iter", 8,
                "--C", "0.5", "--tol", "1e-9", "--seed", "1")  # fmt: skip
    assert whole.exit_code == 0, whole.output
    resumed, straight = snapfit.load(tmp_path / "b.npz"), snapfit.load(tmp_path / "c.npz")
    assert resumed.n_iter_[0] == 8
    np.testing.assert_array_equal(resumed.coef_, straight.coef_)
    # other parameters than the checkpoint's: refused, one line, no model written
    bad = run("train", files["train"], "--out", tmp_path / "d.npz", "--max-iter", 8, "--resume",
              "--C", "2", "--tol", "1e-9", "--seed", "1", "--checkpoint-dir", ck)  # fmt: skip
    assert bad.exit_code != 0 and "c_pos" in bad.output
    _no_traceback(bad)
    assert not (tmp_path / "d.npz").exists()


def test_test_logloss_is_recorded_every_epoch(files):
    doc = json.loads(files["json"].read_text())
    losses = [h["test_logloss"] for h in doc["history"]]
    assert len(losses) == len(doc["history"]) and all(0 < x < 1 for x in losses)
    model = snapfit.load(files["model"])
    p = model.predict_proba(files["test_X"])[:, 1]
    assert abs(losses[-1] - log_loss(files["test_y"], p)) < 1e-6


@pytest.mark.parametrize(
    "args, message",
    [
        (["--scheduler", "tcp://127.0.0.1:1", "--workers", "2"], "exclude each other"),
        (["--workers", "2", "--checkpoint-dir", "ck"], "single-machine"),
    ],
)
def test_dask_option_conflicts(files, tmp_path, run, args, message):
    res = run("train", files["train"], "--out", tmp_path / "m.npz", *args)
    assert res.exit_code == 2 and message in res.output
    assert not (tmp_path / "m.npz").exists()


def test_train_on_a_local_dask_cluster(files, tmp_path, run):
    out = tmp_path / "m.npz"
    res = run("train", files["train"], "--out", out, "--workers", 2, "--C", "0.5",
              "--tol", "1e-4", "--n-jobs", 1, "--quiet")  # fmt: skip
    assert res.exit_code == 0, res.output
    dask_model = snapfit.load(out)
    assert dask_model.history_[-1]["n_workers"] == 2
    local = snapfit.LogisticRegression(C=0.5, tol=1e-8, max_iter=500).fit(str(files["train"]))
    p = dask_model.predict_proba(files["test_X"])[:, 1]
    q = local.predict_proba(files["test_X"])[:, 1]
    assert abs(log_loss(files["test_y"], p) - log_loss(files["test_y"], q)) < 1e-3


def test_train_a_linear_svm_on_a_local_dask_cluster(files, tmp_path, run):
    """``--loss squared_hinge --workers 2``: a ``LinearSVC`` model whose last round's exact
    relative gap is within ``--tol``, at the local fit's primal."""
    from snapfit import svm

    out = tmp_path / "m.npz"
    res = run("train", files["train"], "--out", out, "--workers", 2, "--loss", "squared_hinge",
              "--C", "0.05", "--tol", "1e-6", "--n-jobs", 1, "--quiet")  # fmt: skip
    assert res.exit_code == 0, res.output
    model = svm.load(out)
    last = model.history_[-1]
    assert model.loss == "squared_hinge" and last["n_workers"] == 2 and last["rel_gap"] <= 1e-6
    local = snapfit.LinearSVC(C=0.05, tol=1e-10, max_iter=3000).fit(str(files["train"]))
    ref = local.history_[-1]["primal"]
    assert abs(last["primal"] - ref) <= 1e-6 * abs(ref)


def test_report_without_matplotlib_says_which_extra(files, tmp_path, run, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    res = run("report", files["json"], "--out", tmp_path / "c.png")
    assert res.exit_code == 1 and res.output.count("\n") == 1, res.output
    assert "pip install 'snapfit[plot]'" in res.output
    assert list(tmp_path.iterdir()) == []


# -- what a fit says about itself, ids through predict ----------------------------------------
def test_resume_with_an_empty_checkpoint_dir_says_it_starts_fresh(files, tmp_path, run):
    ck = tmp_path / "empty"
    ck.mkdir()
    res = run("train", files["train"], "--out", tmp_path / "m.npz", "--max-iter", 2,
              "--checkpoint-dir", ck, "--resume", "-q")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert f"No checkpoint in {ck}: --resume starts a fresh fit." in res.output
    with pytest.warns(UserWarning, match="holds no checkpoint; starting a fresh fit"):
        snapfit.LogisticRegression(max_iter=30, checkpoint_dir=str(tmp_path / "none")).fit(
            files["train_X"], files["train_y"], resume=True
        )
    # with a checkpoint there, nothing is said
    res = run("train", files["train"], "--out", tmp_path / "n.npz", "--max-iter", 3,
              "--checkpoint-dir", ck, "--resume", "-q")  # fmt: skip
    assert res.exit_code == 0 and "No checkpoint" not in res.output


def test_summary_and_json_say_whether_the_fit_streamed_and_from_which_cache(
    files, tmp_path, run, monkeypatch
):
    res = files["train_output"]
    assert any(line.split()[:3] == ["data", "in", "memory"] for line in res.output.splitlines())
    doc = json.loads(files["json"].read_text())
    assert doc["streamed"] is False and doc["cache_format"] is None
    from snapfit.datasets import make_criteo_like_parquet

    big = tmp_path / "big.parquet"
    make_criteo_like_parquet(big, 40000, seed=0, hash_bits=14, row_group_rows=2000)
    for fmt in ("compact", "lz4"):
        monkeypatch.setenv("SNAPFIT_CACHE_FORMAT", fmt)
        res = run("train", big, "--out", tmp_path / f"{fmt}.npz", "--max-iter", 2,
                  "--memory-budget", "8MB", "--json", tmp_path / f"{fmt}.json")  # fmt: skip
        assert res.exit_code == 0, res.output
        assert f"streamed under the memory budget (a {fmt} cache)" in res.output
        doc = json.loads((tmp_path / f"{fmt}.json").read_text())
        assert doc["streamed"] is True and doc["cache_format"] == fmt
        back = snapfit.load(tmp_path / f"{fmt}.npz")
        assert back.streamed_ is True and back.cache_format_ == fmt


def test_predict_passes_an_id_column_through(files, tmp_path, run):
    table = pq.read_table(files["unlab"])
    ids = np.arange(table.num_rows, dtype=np.int64) * 7 + 1000
    keyed = tmp_path / "keyed.parquet"
    pq.write_table(table.append_column("row_id", [ids]), keyed, row_group_size=200)
    res = run("predict", files["model"], keyed, "--out", tmp_path / "p.parquet", "--id-column",
              "row_id", "--labels")  # fmt: skip
    assert res.exit_code == 0, res.output
    out = pq.read_table(tmp_path / "p.parquet")
    assert out.column_names == ["row_id", "probability", "predicted_label"]
    np.testing.assert_array_equal(out.column("row_id").to_numpy(), ids)
    plain = run("predict", files["model"], files["unlab"], "--out", tmp_path / "q.parquet")
    assert plain.exit_code == 0
    again = pq.read_table(tmp_path / "q.parquet").column(0).to_numpy()
    np.testing.assert_array_equal(out.column("probability").to_numpy(), again)
    res = run("predict", files["model"], files["unlab"], "--out", tmp_path / "r.parquet",
              "--id-column", "row_id")  # fmt: skip
    assert res.exit_code == 3 and "has no column 'row_id' (columns: indices" in res.output
    assert not (tmp_path / "r.parquet").exists()


def test_train_loss_hinge_writes_a_linear_svm(files, tmp_path, run):
    """``--loss hinge`` fits ``snapfit.LinearSVC`` (the file records the loss)."""
    out = tmp_path / "svm.npz"
    res = run("train", files["train"], "--out", out, "--loss", "hinge", "--C", "0.5",
              "--max-iter", "30", "--tol", "1e-3", "--quiet")  # fmt: skip
    assert res.exit_code == 0, res.output
    from snapfit import svm

    model = svm.load(out)
    assert model.loss == "hinge" and model.C == 0.5
    assert model.score(files["test_X"], files["test_y"]) > 0.6
