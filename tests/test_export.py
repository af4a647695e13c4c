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
