"""Model files (snapfit/model.py): npz + JSON header, checksummed, loaded without pickle."""

import zipfile

import numpy as np
import pytest
from sklearn.datasets import make_classification

import snapfit
from snapfit.errors import DataError


@pytest.fixture(scope="module")
def fitted():
    X, y = make_classification(200, 6, random_state=0)
    labels = np.array(["no", "yes"])[y]
    est = snapfit.LogisticRegression(C=0.5, class_weight={"no": 1.0, "yes": 2.0},
                                     random_state=0).fit(X, labels)  # fmt: skip
    return est, X


def test_round_trip_and_sklearn_export(fitted, tmp_path):
    est, X = fitted
    path = tmp_path / "m.npz"
    est.save(path)
    back = snapfit.load(path)
    np.testing.assert_array_equal(back.coef_, est.coef_)
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    assert back.get_params()["class_weight"] == {"no": 1.0, "yes": 2.0}
    assert back.history_ == est.history_
    sk = back.to_sklearn()
    np.testing.assert_allclose(sk.predict_proba(X), est.predict_proba(X), rtol=1e-12)
    assert list(sk.classes_) == ["no", "yes"]
    with np.load(path, allow_pickle=False) as z:  # loads without pickle
        assert set(z.files) == {"__header__", "coef", "intercept", "classes"}
    assert not list(tmp_path.glob(".snapfit-model-*"))  # no temp file left


def test_truncated_file_is_a_clear_error(fitted, tmp_path):
    est, _ = fitted
    path = tmp_path / "m.npz"
    est.save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="truncated"):
        snapfit.load(path)


def test_tampered_array_fails_its_checksum(fitted, tmp_path):
    est, _ = fitted
    path = tmp_path / "m.npz"
    est.save(path)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["coef"] = arrays["coef"] * 1.01
    with zipfile.ZipFile(path, "w") as zf:  # rewrite with the same header, changed coef
        for k, a in arrays.items():
            with zf.open(k + ".npy", "w") as f:
                np.lib.format.write_array(f, a)
    with pytest.raises(DataError, match="'coef' fails its checksum"):
        snapfit.load(path)


def test_foreign_npz_and_missing_file(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, coef=np.zeros(3))
    with pytest.raises(DataError, match="not written by snapfit.save"):
        snapfit.load(path)
    with pytest.raises(FileNotFoundError):
        snapfit.load(tmp_path / "missing.npz")
