"""Models record their feature map and refuse data built another way (issue: 2^18 data scored
silently by a 2^20 model)."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

import snapfit
from snapfit.cli import cli
from snapfit.data import Dataset
from snapfit.datasets import convert, make_criteo_like_parquet, make_criteo_like_tsv
from snapfit.errors import DataError


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fmap")
    f = {bits: d / f"b{bits}.parquet" for bits in (12, 10)}
    for bits, path in f.items():
        make_criteo_like_parquet(path, 1500, seed=bits, hash_bits=bits, row_group_rows=500)
    make_criteo_like_tsv(d / "day.tsv", 600, seed=3)
    convert(d / "day.tsv", d / "day.parquet", hash_bits=12)
    est = snapfit.LogisticRegression(C=0.1, tol=1e-4, random_state=0).fit(f[12])
    est.save(d / "m.npz")
    return d, f, est


def test_the_fitted_map_is_the_data_s_and_survives_save_and_load(files):
    d, f, est = files
    assert est.feature_map_["format"] == "criteo-like"
    assert est.feature_map_["hash_bits"] == 12 and est.feature_map_["n_features"] == 4096
    assert "transform" in est.feature_map_ and "source" not in est.feature_map_
    assert snapfit.load(d / "m.npz").feature_map_ == est.feature_map_
    arrays = snapfit.LogisticRegression().fit(np.eye(3), [0, 1, 1])
    assert arrays.feature_map_ == {"n_features": 3}


def test_predict_proba_takes_what_fit_takes(files):
    d, f, est = files
    data = Dataset(f[12])
    chunks = list(data.iter_chunks())
    X = sp.vstack([sp.csr_matrix((c.values, c.indices, c.indptr), shape=(c.n_rows, 4096))
                   for c in chunks])  # fmt: skip
    expected = est.predict_proba(X)
    np.testing.assert_allclose(est.predict_proba(f[12]), expected, rtol=1e-12)
    np.testing.assert_allclose(est.predict_proba([str(f[12])]), expected, rtol=1e-12)
    np.testing.assert_allclose(est.predict_proba(pq.read_table(f[12])), expected, rtol=1e-12)
    np.testing.assert_array_equal(est.predict(f[12]), est.predict(X))
    # a converted Criteo TSV is hashed as make-data hashes: the same map, accepted
    assert est.predict_proba(d / "day.parquet").shape == (600, 2)


def test_data_hashed_to_fewer_bits_is_refused_everywhere(files):
    d, f, est = files
    with pytest.raises(
        DataError,
        match=r"b10.parquet: converted another way .*: hash_bits 10 here but 12 in the model;",
    ):
        est.predict_proba(f[10])
    runner = CliRunner()
    for args in (["predict", d / "m.npz", f[10], "--out", d / "p.parquet"],
                 ["evaluate", d / "m.npz", f[10]]):  # fmt: skip
        res = runner.invoke(cli, [str(a) for a in args])
        assert res.exit_code == 3 and res.output.count("\n") == 1, res.output
        assert "hash_bits 10 here but 12 in the model" in res.output
    assert not (d / "p.parquet").exists()


def test_a_different_transform_or_format_is_refused(files, tmp_path):
    _, f, est = files
    table = pq.read_table(f[12])  # key-value metadata is the file's, not the table schema's
    meta = {k: v for k, v in pq.ParquetFile(f[12]).metadata.metadata.items()
            if k.startswith(b"snapfit.") and k != b"snapfit.row_group_nnz"}  # fmt: skip
    meta[b"snapfit.transform"] = json.dumps("something else").encode()
    other = tmp_path / "t.parquet"
    pq.write_table(table.replace_schema_metadata(meta), other)
    with pytest.raises(DataError, match="transform 'something else' here but"):
        est.predict(other)
    meta[b"snapfit.format"] = b"svmlight"
    pq.write_table(table.replace_schema_metadata(meta), other)
    with pytest.raises(DataError, match="format 'svmlight' here but 'criteo-like' in the model"):
        est.predict(other)


def test_svmlight_test_files_may_use_fewer_features(tmp_path):
    train, test = tmp_path / "a.svm", tmp_path / "b.svm"
    train.write_text("1 1:1 2:0.5 9:1\n0 2:1 3:2\n1 1:2 5:1\n0 3:1 9:2\n")
    test.write_text("1 1:1 2:0.5\n0 2:1 3:2\n")
    for p in (train, test):
        convert(p, p.with_suffix(".parquet"))
    est = snapfit.LogisticRegression().fit(train.with_suffix(".parquet"))
    assert est.predict_proba(test.with_suffix(".parquet")).shape == (2, 2)
    convert(train, tmp_path / "zero.parquet", zero_based=True)  # indices not shifted
    with pytest.raises(DataError, match="transform 'none' here but"):
        est.predict(tmp_path / "zero.parquet")


def test_table_models_refuse_tables_hashed_with_other_columns(tmp_path):
    rng = np.random.default_rng(0)
    n = 400
    site = rng.choice(["news", "shop", "blog"], n)
    ad = rng.choice(["a1", "a2", "a3", "a4"], n)
    price = rng.random(n) * 10
    clicked = (rng.random(n) < 0.3).astype(int)
    csv = tmp_path / "events.csv"
    rows = zip(site, ad, price, clicked, strict=True)
    csv.write_text(
        "site,ad,price,clicked\n" + "".join(f"{s},{a},{p:.3f},{c}\n" for s, a, p, c in rows)
    )
    convert(csv, tmp_path / "crossed.parquet", format="table", label="clicked",
            crosses=[("site", "ad")], hash_bits=12)  # fmt: skip
    convert(csv, tmp_path / "plain.parquet", format="table", label="clicked", hash_bits=12)
    est = snapfit.LogisticRegression(C=0.5).fit(tmp_path / "crossed.parquet")
    assert est.feature_map_["crosses"] == [["site", "ad"]]
    assert est.predict_proba(tmp_path / "crossed.parquet").shape == (n, 2)
    with pytest.raises(
        DataError, match=r"plain.parquet: converted another way .*: crosses \[\] here but"
    ):
        est.predict_proba(tmp_path / "plain.parquet")
