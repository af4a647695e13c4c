"""Raw rows scored by a model trained on converted data: featurized exactly as `convert` did."""

import gzip
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import snapfit
from snapfit.cli import cli
from snapfit.data import Dataset
from snapfit.datasets import convert, featurize, make_criteo_like_tsv
from snapfit.errors import DataError


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """One click log as CSV and as typed Parquet, each converted with a cross into 2^14, and a
    model trained on each conversion."""
    d = tmp_path_factory.mktemp("featurize")
    rng = np.random.default_rng(0)
    n = 3000
    df = pd.DataFrame({
        "id": np.arange(n) * 3 + 100,
        "site": rng.choice(["news", "shop", "blog"], n).astype(object),
        "ad": rng.choice(["a1", "a2", "a3", "a4"], n),
        "price": np.round(rng.random(n) * 10, 3),
        "clicked": (rng.random(n) < 0.3).astype(int),
    })  # fmt: skip
    df.loc[3, "site"] = None  # a missing value: no feature
    df.loc[5, "price"] = np.nan
    df.to_csv(d / "events.csv", index=False)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), d / "events_raw.parquet")
    kw = dict(format="table", label="clicked", categorical=["site", "ad"], numeric=["price"],
              crosses=[("site", "ad")], hash_bits=14)  # fmt: skip
    convert(d / "events.csv", d / "from_csv.parquet", **kw)
    convert(d / "events_raw.parquet", d / "from_parquet.parquet", **kw)
    models = {k: snapfit.LogisticRegression(C=1.0, random_state=0).fit(d / f"from_{k}.parquet")
              for k in ("csv", "parquet")}  # fmt: skip
    for k, m in models.items():
        m.save(d / f"{k}.npz")
    return d, df, models


def _same_csr(X, chunk):
    np.testing.assert_array_equal(X.indptr, chunk.indptr)
    np.testing.assert_array_equal(X.indices, chunk.indices)
    np.testing.assert_array_equal(X.data, chunk.values)


def test_a_table_model_scores_raw_rows_as_it_scores_their_conversion(table):
    d, df, models = table
    m = models["parquet"]
    want = m.predict_proba(d / "from_parquet.parquet")
    raw = pq.read_table(d / "events_raw.parquet")
    path = d / "events_raw.parquet"
    kinds = (df, df.drop(columns=["clicked", "id"]), raw, raw.to_batches()[0], raw.to_pylist())
    for X in (*kinds, path, str(path)):
        got = m.predict_proba(X)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # a CSV is read as convert reads it (text): its model scores the CSV as its conversion
    m = models["csv"]
    want = m.predict_proba(d / "from_csv.parquet")
    np.testing.assert_allclose(m.predict_proba(d / "events.csv"), want, rtol=0, atol=1e-12)


def test_table_hasher_gives_the_converted_features_bit_for_bit(table):
    d, df, models = table
    chunk = Dataset(d / "from_parquet.parquet").read_chunk(0)
    from_model = snapfit.TableHasher.from_model(models["parquet"])
    _same_csr(from_model.transform(df), chunk)
    fitted = snapfit.TableHasher(categorical=["site", "ad"], numeric=["price"],
                                 crosses=[["site", "ad"]], hash_bits=14).fit(df)  # fmt: skip
    _same_csr(fitted.transform(pq.read_table(d / "events_raw.parquet")), chunk)
    assert fitted.transform(df).shape == (len(df), 1 << 14)
    from sklearn.base import clone

    assert clone(fitted).get_params() == fitted.get_params()
    with pytest.raises(ValueError, match="not a converted table"):
        snapfit.TableHasher.from_model(snapfit.LogisticRegression().fit(np.eye(2), [0, 1]))


def test_raw_rows_stream_in_batches_with_the_same_result(table, monkeypatch):
    """Memory is one batch of rows whatever the input's size (Parquet: ``rows`` rows; CSV:
    pyarrow's blocks): the same features and scores in one batch or in many small ones."""
    from snapfit.datasets import table_io

    d, df, models = table
    fmap = featurize.table_map(models["parquet"].feature_map_)
    raw = d / "events_raw.parquet"
    one = list(featurize.table_batches(fmap, raw))
    many = list(featurize.table_batches(fmap, raw, rows=97))
    assert len(one) == 1 and len(many) > 10 and sum(b.n_rows for b in many) == len(df)
    np.testing.assert_array_equal(np.concatenate([b.indices for b in many]), one[0].indices)
    monkeypatch.setattr(table_io, "CSV_BLOCK_BYTES", 4096)
    fmap = featurize.table_map(models["csv"].feature_map_)
    blocks = list(featurize.table_batches(fmap, d / "events.csv"))
    assert len(blocks) > 10
    chunk = Dataset(d / "from_csv.parquet").read_chunk(0)
    np.testing.assert_array_equal(np.concatenate([b.indices for b in blocks]), chunk.indices)
    monkeypatch.setattr(featurize, "ROWS", 97)
    m = models["parquet"]
    want = m.predict_proba(d / "from_parquet.parquet")
    np.testing.assert_allclose(m.predict_proba(raw), want, rtol=0, atol=1e-12)


def test_raw_rows_missing_a_column_are_refused_naming_the_columns(table):
    d, df, models = table
    with pytest.raises(DataError, match=r"no column named 'ad'; its columns are: id, site"):
        models["parquet"].predict_proba(df.drop(columns=["ad"]))


@pytest.fixture(scope="module")
def criteo(tmp_path_factory):
    d = tmp_path_factory.mktemp("criteo_raw")
    make_criteo_like_tsv(d / "day.tsv", 5000, seed=3)
    with open(d / "day.tsv", "rb") as f, gzip.open(d / "day.tsv.gz", "wb") as g:
        shutil.copyfileobj(f, g)
    convert(d / "day.tsv", d / "day.parquet", hash_bits=14)
    model = snapfit.LogisticRegression(C=0.1, random_state=0).fit(d / "day.parquet")
    model.save(d / "criteo.npz")
    return d, model


def test_a_criteo_model_scores_raw_tsv_as_it_scores_its_conversion(criteo, monkeypatch):
    d, model = criteo
    want = model.predict_proba(d / "day.parquet")
    for raw in ("day.tsv", "day.tsv.gz"):
        np.testing.assert_allclose(model.predict_proba(d / raw), want, rtol=0, atol=1e-12)
    chunk = Dataset(d / "day.parquet").read_chunk(0)
    batches = list(featurize.criteo_batches(d / "day.tsv", 14, rows=333))
    assert len(batches) > 10
    np.testing.assert_array_equal(np.concatenate([b.indices for b in batches]), chunk.indices)
    np.testing.assert_array_equal(np.concatenate([b.values for b in batches]), chunk.values)


def test_a_bad_criteo_row_is_refused_naming_its_line(criteo, tmp_path):
    d, model = criteo
    lines = (d / "day.tsv").read_text().splitlines(keepends=True)
    fields = lines[6].split("\t")
    fields[20] = "zz"  # not an 8-digit hex token
    lines[6] = "\t".join(fields)
    (tmp_path / "bad.tsv").write_text("".join(lines))
    with pytest.raises(DataError, match=r"bad.tsv, line 7: .*fix or drop the line"):
        model.predict_proba(tmp_path / "bad.tsv")


def test_cli_predict_scores_raw_rows_and_passes_ids(table, criteo, tmp_path):
    d, df, models = table
    res = run("predict", d / "csv.npz", d / "events.csv", "--out", tmp_path / "p.parquet",
              "--id-column", "id", "--labels")  # fmt: skip
    assert res.exit_code == 0, res.output
    out = pq.read_table(tmp_path / "p.parquet")
    assert out.column_names == ["id", "probability", "predicted_label"]
    assert out.column("id").to_pylist() == [str(i) for i in df["id"]]  # a CSV is text
    want = models["csv"].predict_proba(d / "from_csv.parquet")[:, 1]
    np.testing.assert_allclose(out.column("probability").to_numpy(), want, rtol=0, atol=1e-12)
    res = run("predict", d / "parquet.npz", d / "events_raw.parquet", "--out",
              tmp_path / "q.parquet", "--id-column", "id")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert pq.read_table(tmp_path / "q.parquet").column("id").to_pylist() == list(df["id"])
    cd, model = criteo
    res = run("predict", cd / "criteo.npz", cd / "day.tsv.gz", "--out", tmp_path / "c.parquet")
    assert res.exit_code == 0, res.output
    np.testing.assert_allclose(pq.read_table(tmp_path / "c.parquet").column(0).to_numpy(),
                               model.predict_proba(cd / "day.parquet")[:, 1], rtol=0,
                               atol=1e-12)  # fmt: skip
    res = run("predict", cd / "criteo.npz", cd / "day.tsv", "--out", tmp_path / "e.parquet",
              "--id-column", "id")  # fmt: skip
    assert res.exit_code == 3 and "Criteo TSV has no named columns" in res.output
    assert not (tmp_path / "e.parquet").exists()


def test_raw_scoring_memory_does_not_grow_with_the_file(table, tmp_path, monkeypatch):
    """Scoring a CSV to Parquet holds one block of rows: the peak of Python and numpy memory
    (tracemalloc; Arrow's reader is a streaming one, a block at a time) is the same for a file
    eight times longer, and far below the file's size."""
    import tracemalloc

    from snapfit.datasets import table_io
    from snapfit.scoring import predict_raw_to_parquet

    d, df, models = table
    monkeypatch.setattr(table_io, "CSV_BLOCK_BYTES", 1 << 16)
    body = (d / "events.csv").read_text().split("\n", 1)[1]
    header = "id,site,ad,price,clicked\n"
    peaks = {}
    for copies in (8, 64):
        path = tmp_path / f"x{copies}.csv"
        path.write_text(header + body * copies)
        predict_raw_to_parquet(models["csv"], path, tmp_path / "warm.parquet")  # imports
        tracemalloc.start()
        rows = predict_raw_to_parquet(models["csv"], path, tmp_path / f"p{copies}.parquet")
        peaks[copies] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        (tmp_path / "warm.parquet").unlink()
        assert rows == copies * len(df)
    size = (tmp_path / "x64.csv").stat().st_size
    assert peaks[64] < 1.5 * peaks[8] + (1 << 20) and peaks[64] < size / 4, (peaks, size)


def test_table_hasher_in_a_pipeline_equals_convert_then_fit(table):
    from sklearn.pipeline import make_pipeline

    d, df, models = table
    X, y = df.drop(columns=["clicked"]), df["clicked"]
    pipe = make_pipeline(
        snapfit.TableHasher(categorical=["site", "ad"], numeric=["price"],
                            crosses=[["site", "ad"]], hash_bits=14),
        snapfit.LogisticRegression(C=1.0, random_state=0),
    )  # fmt: skip
    pipe.fit(X, y)
    np.testing.assert_allclose(pipe[-1].coef_, models["parquet"].coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(pipe.predict_proba(X), models["parquet"].predict_proba(df),
                               rtol=0, atol=1e-9)  # fmt: skip
