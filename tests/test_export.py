"""snapfit export: JSON (readable weights + feature map) and ONNX (through to_sklearn)."""

import json
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

import snapfit
from snapfit.cli import cli
from snapfit.datasets import make_criteo_like_parquet


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    data = d / "train.parquet"
    make_criteo_like_parquet(data, 800, seed=0, hash_bits=8, row_group_rows=400)
    est = snapfit.LogisticRegression(C=0.5, random_state=0).fit(data)
    est.save(d / "m.npz")
    return d, data, est


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_json_scores_as_the_model_does(model, tmp_path):
    d, data, est = model
    res = _run("export", d / "m.npz", tmp_path / "m.json")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["format"] == "snapfit.model.json" and doc["classes"] == [0, 1]
    assert doc["feature_map"]["hash_bits"] == 8 and doc["n_features"] == 256
    w = np.zeros(doc["n_features"])
    w[doc["weights"]["indices"]] = doc["weights"]["values"]
    X = sp.random(50, 256, density=0.1, random_state=0, format="csr")
    p = 1.0 / (1.0 + np.exp(-(X @ w + doc["intercept"])))
    np.testing.assert_allclose(p, est.predict_proba(X)[:, 1], rtol=1e-12)
    assert len(doc["weights"]["indices"]) == np.count_nonzero(est.coef_)


def test_onnx_runs_in_onnxruntime(model, tmp_path):
    ort = pytest.importorskip("onnxruntime")  # in the test extras: runs in CI
    d, _, est = model
    res = _run("export", d / "m.npz", tmp_path / "m.onnx")
    assert res.exit_code == 0, res.output
    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    X = np.random.default_rng(0).random((20, 256)).astype(np.float32)
    label, proba = session.run(None, {"input": X})
    np.testing.assert_allclose(proba, est.predict_proba(X.astype(np.float64)), atol=1e-5)
    np.testing.assert_array_equal(label, est.predict(X.astype(np.float64)))


def test_export_errors(model, tmp_path, monkeypatch):
    d, _, _ = model
    res = _run("export", d / "m.npz", tmp_path / "m.txt")
    assert res.exit_code == 2 and "--format json|onnx" in res.output
    (tmp_path / "m.json").write_text("{}")
    res = _run("export", d / "m.npz", tmp_path / "m.json")
    assert res.exit_code == 3 and "already exists" in res.output
    monkeypatch.setitem(sys.modules, "skl2onnx", None)
    res = _run("export", d / "m.npz", tmp_path / "x.onnx")
    assert res.exit_code == 1 and "pip install 'snapfit[onnx]'" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


@pytest.fixture(scope="module")
def other_models(model):
    """A linear SVM per loss on the module's data, and ridge on arrays, saved as model files."""
    d, data, _ = model
    out = {}
    for loss in ("hinge", "squared_hinge"):
        est = snapfit.LinearSVC(C=0.02, loss=loss, tol=1e-3, random_state=0).fit(data)
        est.save(d / f"{loss}.npz")
        out[loss] = est
    rng = np.random.default_rng(1)
    X = sp.random(300, 40, density=0.2, random_state=1, format="csr")
    reg = snapfit.Ridge(alpha=2.0, random_state=0).fit(X, X @ rng.normal(size=40) + 0.5)
    reg.save(d / "squared.npz")
    out["squared"] = reg
    return d, out


def _scores(doc, X):
    w = np.zeros(doc["n_features"])
    w[doc["weights"]["indices"]] = doc["weights"]["values"]
    return X @ w + doc["intercept"]


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "squared"])
def test_json_of_the_other_losses_scores_as_the_model_does(other_models, tmp_path, loss):
    d, models = other_models
    est = models[loss]
    res = _run("export", d / f"{loss}.npz", tmp_path / "m.json")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["loss"] == loss and doc["model"].startswith(
        "ridge" if loss == "squared" else "linear SVM"
    )
    X = sp.random(50, doc["n_features"], density=0.1, random_state=0, format="csr")
    s = _scores(doc, X)
    if loss == "squared":
        assert "classes" not in doc and doc["n_features"] == 40
        np.testing.assert_allclose(s, est.predict(X), rtol=1e-12)
    else:
        assert doc["classes"] == [0, 1] and doc["feature_map"]["hash_bits"] == 8
        np.testing.assert_allclose(s, est.decision_function(X), rtol=1e-12)
        np.testing.assert_array_equal(np.asarray(doc["classes"])[(s > 0).astype(int)],
                                      est.predict(X))  # fmt: skip


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "squared"])
def test_onnx_of_the_other_losses_runs_in_onnxruntime(other_models, tmp_path, loss):
    """A linear SVM converts as scikit-learn's LinearSVC does (a LinearClassifier without post
    transform: labels by the score's sign), ridge as Ridge does (a LinearRegressor)."""
    ort = pytest.importorskip("onnxruntime")  # in the test extras: runs in CI
    onnx = pytest.importorskip("onnx")
    d, models = other_models
    est = models[loss]
    res = _run("export", d / f"{loss}.npz", tmp_path / "m.onnx")
    assert res.exit_code == 0, res.output
    graph = onnx.load(str(tmp_path / "m.onnx")).graph
    nodes = {n.op_type: n for n in graph.node}
    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    d_in = est.n_features_in_
    X = np.random.default_rng(0).random((20, d_in)).astype(np.float32)
    if loss == "squared":
        assert "LinearRegressor" in nodes
        assert [o.name for o in session.get_outputs()] == ["prediction"]
        (pred,) = session.run(None, {"input": X})
        np.testing.assert_allclose(pred.ravel(), est.predict(X.astype(np.float64)), atol=1e-4)
        return
    post = {a.name: a.s for a in nodes["LinearClassifier"].attribute}["post_transform"]
    assert post == b"NONE"
    assert [o.name for o in session.get_outputs()] == ["label", "scores"]
    label, scores = session.run(None, {"input": X})
    np.testing.assert_allclose(scores.ravel(), est.decision_function(X.astype(np.float64)),
                               atol=1e-5)  # fmt: skip
    np.testing.assert_array_equal(label, est.predict(X.astype(np.float64)))


def test_export_of_a_model_of_an_unknown_loss_says_so(tmp_path):
    from snapfit.model import save_arrays

    arrays = {"coef": np.zeros((1, 3)), "intercept": np.zeros(1), "classes": np.arange(2)}
    save_arrays(tmp_path / "m.npz", arrays, {"params": {}, "loss": "cubic"})
    res = _run("export", tmp_path / "m.npz", tmp_path / "m.json")
    assert res.exit_code == 3
    assert "the model's loss 'cubic' is not one this snapfit knows" in res.output
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("make", [snapfit.LogisticRegression, snapfit.LinearSVC])
def test_one_vs_rest_exports_k_weight_vectors_and_runs_in_onnxruntime(tmp_path, make):
    """Three classes: the JSON's weights and intercepts are one per class, scored as its
    "model" says; ONNX converts the scikit-learn twin (``OneVsRestClassifier`` of logistic
    regressions, normalized probabilities; a multiclass ``LinearSVC``)."""
    rng = np.random.default_rng(0)
    X = rng.random((90, 6))
    y = np.array(["a", "b", "c"])[np.argmax(X[:, :3] + 0.3 * rng.random((90, 3)), axis=1)]
    est = make(C=1.0, random_state=0).fit(X, y)
    est.save(tmp_path / "m.npz")
    res = _run("export", tmp_path / "m.npz", tmp_path / "m.json")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["classes"] == ["a", "b", "c"] and doc["model"].startswith("one-vs-rest")
    W = np.zeros((3, doc["n_features"]))
    for k, part in enumerate(doc["weights"]):
        W[k, part["indices"]] = part["values"]
    s = X @ W.T + np.asarray(doc["intercept"])
    np.testing.assert_allclose(s, est.decision_function(X), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(doc["classes"])[s.argmax(axis=1)], est.predict(X))
    ort = pytest.importorskip("onnxruntime")  # in the test extras: runs in CI
    res = _run("export", tmp_path / "m.npz", tmp_path / "m.onnx")
    assert res.exit_code == 0, res.output
    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    label, out = session.run(None, {"input": X.astype(np.float32)})
    np.testing.assert_array_equal(label, est.predict(X))
    want = est.predict_proba(X) if hasattr(est, "predict_proba") else est.decision_function(X)
    np.testing.assert_allclose(out, want, atol=1e-5)
