"""Real-valued targets in the data layer: float32 labels in snapfit Parquet, ``snapfit.Ridge`` on
Parquet (in memory and streamed, checkpoints, early stopping) against arrays and scikit-learn,
and one-line errors for a classifier given real targets or a regressor given text labels."""

import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Ridge as SkRidge

import snapfit
from snapfit.data import Dataset, write_parquet
from snapfit.data.table import TableDataset
from snapfit.errors import DataError


def regression_rows(n=60_000, d=1 << 14, per_row=30, seed=0):
    """Criteo-shaped rows (hashed one-hot columns and a few valued ones) and real targets."""
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, d, size=n * per_row).astype(np.int32)
    values = np.where(rng.random(n * per_row) < 0.3, rng.uniform(0.5, 2.0, n * per_row), 1.0)
    indptr = np.arange(0, n * per_row + 1, per_row)
    X = sp.csr_matrix((values.astype(np.float32), indices, indptr), shape=(n, d))
    X.sum_duplicates()
    w = rng.normal(0, 0.3, d)
    y = (X @ w + rng.normal(0, 0.5, n) + 2.0).astype(np.float32)
    return X, y


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    X, y = regression_rows()
    path = tmp_path_factory.mktemp("targets") / "reg.parquet"
    write_parquet(path, X, y, targets="real", row_group_rows=2000)
    return {"X": X, "y": y, "path": str(path)}


def ridge_objective(X, y, coef, alpha):
    """scikit-learn's ``||y - Xw||^2 + alpha ||w||^2``."""
    r = y.astype(np.float64) - X @ coef
    return float(r @ r + alpha * coef @ coef)


def test_real_targets_are_stored_as_float32_and_known_from_the_footer(reg, tmp_path):
    ds = Dataset(reg["path"])
    assert ds.target_kind == "real" and ds.targets == "real"
    assert pq.read_schema(reg["path"]).field("label").type == pa.float32()
    np.testing.assert_array_equal(np.concatenate([c.y for c in ds.iter_chunks()]), reg["y"])
    # a foreign file without snapfit.target: the label column's statistics tell
    table = pq.read_table(reg["path"]).replace_schema_metadata({b"snapfit.n_features": b"16384"})
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(table, foreign)
    other = Dataset(foreign)
    assert other.target_kind == "real" and "label values from" in other.target_note
    # a class file stays a class file; a Table in memory is read the same way
    cls = tmp_path / "cls.parquet"
    write_parquet(cls, reg["X"][:50], (reg["y"][:50] > 2).astype(int))
    assert Dataset(cls).target_kind == "class" and Dataset(cls).targets == "class"
    assert TableDataset(table).target_kind == "real"
    assert TableDataset(pq.read_table(cls)).target_kind == "class"
    # a regressor reads class labels as the numbers they are
    np.testing.assert_array_equal(
        Dataset(cls, targets="real").read_chunk(0).y, (reg["y"][:50] > 2).astype(np.float32)
    )


def test_a_classifier_given_real_targets_fails_in_one_line_naming_the_file(reg, tmp_path):
    for est in (snapfit.LogisticRegression(), snapfit.LinearSVC()):
        with pytest.raises(DataError) as e:
            est.fit(reg["path"])
        msg = str(e.value)
        assert "\n" not in msg and reg["path"] in msg
        assert "real-valued targets" in msg and "snapfit.Ridge" in msg
    # validation data too, before the first epoch
    cls = tmp_path / "cls.parquet"
    write_parquet(cls, reg["X"][:200], (reg["y"][:200] > 2).astype(int))
    with pytest.raises(DataError, match=r"reg.parquet \(validation\): holds real-valued"):
        snapfit.LogisticRegression(max_iter=2).fit(cls, validation=reg["path"])


def test_a_regressor_given_text_labels_fails_in_one_line(reg, tmp_path):
    table = pq.read_table(reg["path"]).slice(0, 10)
    text = table.set_column(0, "label", pa.array([f"c{i}" for i in range(10)]))
    with pytest.raises(DataError, match="a regressor needs numeric targets") as e:
        snapfit.Ridge().fit(text)
    assert "\n" not in str(e.value)
    path = tmp_path / "text.parquet"
    pq.write_table(text, path)
    with pytest.raises(DataError, match=rf"{path}: column 'label' has type string but a regr"):
        snapfit.Ridge().fit(str(path))
    with pytest.raises(ValueError):
        snapfit.Ridge().fit(reg["X"][:10], [f"c{i}" for i in range(10)])
    with pytest.raises(DataError, match="has no 'label' column"):
        unlabelled = tmp_path / "unlab.parquet"
        write_parquet(unlabelled, reg["X"][:10])
        snapfit.Ridge().fit(str(unlabelled))
    with pytest.raises(ValueError, match="without y and sample_weight"):
        snapfit.Ridge().fit(reg["path"], reg["y"])


def test_write_parquet_refuses_targets_that_are_not_finite(tmp_path):
    with pytest.raises(DataError, match=r"y, row 2: column 'y' holds nan"):
        write_parquet(tmp_path / "x.parquet", np.eye(3), [1.5, 2.0, np.nan], targets="real")
    assert list(tmp_path.iterdir()) == []


def test_ridge_streamed_from_parquet_equals_ridge_on_arrays_and_sklearn(reg):
    X, y, alpha = reg["X"], reg["y"], 30.0
    decoded = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes + y.nbytes
    budget = decoded // 3 - 1
    kw = dict(alpha=alpha, fit_intercept=False, tol=1e-9, max_iter=500, random_state=0)
    streamed = snapfit.Ridge(memory_budget=budget, **kw).fit(reg["path"])
    assert streamed.streamed_ is True
    arrays = snapfit.Ridge(**kw).fit(X, y)
    sk = SkRidge(alpha=alpha, fit_intercept=False, solver="sparse_cg", tol=1e-12)
    sk.fit(X.astype(np.float64), y.astype(np.float64))
    p_stream = ridge_objective(X, y, streamed.coef_, alpha)
    p_arrays = ridge_objective(X, y, arrays.coef_, alpha)
    p_sk = ridge_objective(X, y, sk.coef_, alpha)
    assert abs(p_stream - p_arrays) <= 1e-6 * p_arrays
    assert abs(p_stream - p_sk) <= 1e-6 * p_sk
    np.testing.assert_allclose(streamed.predict(reg["path"]), streamed.predict(X), rtol=1e-5,
                               atol=1e-5)  # fmt: skip


def test_compact_and_lz4_caches_keep_real_targets(reg, monkeypatch):
    kw = dict(alpha=30.0, tol=1e-6, max_iter=200, random_state=0, memory_budget="3MB")
    fits = {}
    for fmt in ("raw", "compact", "lz4"):
        monkeypatch.setenv("SNAPFIT_CACHE_FORMAT", fmt)
        fits[fmt] = snapfit.Ridge(**kw).fit(reg["path"])
        assert fits[fmt].cache_format_ == fmt
    for fmt in ("compact", "lz4"):
        np.testing.assert_array_equal(fits["raw"].coef_, fits[fmt].coef_)


def test_ridge_resumes_from_its_checkpoint_exactly(reg, tmp_path):
    kw = dict(alpha=30.0, tol=1e-7, random_state=0, memory_budget="3MB")
    straight = snapfit.Ridge(max_iter=300, **kw).fit(reg["path"])
    ck = str(tmp_path / "ck")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        snapfit.Ridge(max_iter=3, checkpoint_dir=ck, **kw).fit(reg["path"])
    resumed = snapfit.Ridge(max_iter=300, checkpoint_dir=ck, **kw).fit(reg["path"], resume=True)
    assert resumed.n_iter_ == straight.n_iter_
    np.testing.assert_array_equal(resumed.coef_, straight.coef_)


@pytest.mark.parametrize("metric", ["rmse", "r2"])
def test_ridge_early_stopping_watches_rmse_or_r2(reg, metric, tmp_path):
    X, y = reg["X"], reg["y"]
    train, valid = slice(0, 40_000), slice(40_000, None)
    est = snapfit.Ridge(alpha=30.0, tol=1e-8, max_iter=300, random_state=0,
                        validation_metric=metric, early_stopping_rounds=2)  # fmt: skip
    est.fit(X[train], y[train], validation=(X[valid], y[valid]))
    scored = [h[f"validation_{metric}"] for h in est.history_]
    assert len(scored) == len(est.history_)
    pred = est.predict(X[valid])
    err = y[valid] - pred
    rmse = float(np.sqrt(np.mean(err**2)))
    r2 = 1.0 - float(err @ err) / float(((y[valid] - y[valid].mean()) ** 2).sum())
    assert est.best_score_ == pytest.approx(rmse if metric == "rmse" else r2, rel=1e-6)
    assert est.stopped_early_ == (est.n_iter_ > est.best_iteration_)
    # the same from Parquet validation data, its targets read as real
    path = tmp_path / "valid.parquet"
    write_parquet(path, X[valid], y[valid], targets="real", n_features=X.shape[1])
    again = snapfit.Ridge(**est.get_params()).fit(X[train], y[train], validation=str(path))
    assert again.best_score_ == pytest.approx(est.best_score_, rel=1e-6)
    with pytest.raises(ValueError, match="early_stopping_rounds needs validation data"):
        snapfit.Ridge(early_stopping_rounds=2).fit(X[:100], y[:100])
