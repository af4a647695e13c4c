"""`snapfit convert --format table`: named columns of a Parquet or CSV table, hashed.

The expected features are computed here in plain Python (the key strings, their hash with
Python integers), independently of the converter's vectorized numpy/Arrow code.
"""

import gzip
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

import snapfit
from snapfit.cli import cli
from snapfit.data import Dataset
from snapfit.data.schema import decode_metadata
from snapfit.datasets import convert, convert_table, key_index, table_io, tabular
from snapfit.datasets.keyhash import hash_keys
from snapfit.errors import DataError
from tests.helpers import liblinear, primal

M64 = 2**64 - 1
GAMMA = 0x9E3779B97F4A7C15  # the documented seed of the key hash


def splitmix64(z: int) -> int:
    z ^= z >> 30
    z = z * 0xBF58476D1CE4E5B9 & M64
    z ^= z >> 27
    z = z * 0x94D049BB133111EB & M64
    return z ^ (z >> 31)


def ref_hash(key: str) -> int:
    data = key.encode()
    h = splitmix64(len(data) ^ GAMMA)
    for i in range(0, len(data), 8):
        h = splitmix64(h ^ int.from_bytes(data[i : i + 8], "little"))
    return h


def text(v) -> str | None:
    """A cell as the converter's key text (None: no feature), in plain Python."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) or v == "":
        return None
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return str(v)


def ref_rows(df, categorical, numeric, crosses, bits, transform="log1p"):
    """(indices, values) of each row, in the converter's order, by plain Python."""
    rows = []
    for rec in df.to_dict("records"):
        ind, val = [], []
        for c in categorical:
            if (t := text(rec[c])) is not None:
                ind.append(ref_hash(f"{c}={t}") % 2**bits)
                val.append(1.0)
        for x in numeric:
            v = rec[x]
            if v is None or v is pd.NA or math.isnan(float(v)):
                continue
            v = float(v)
            ind.append(ref_hash(x) % 2**bits)
            val.append(math.copysign(math.log1p(abs(v)), v) if transform == "log1p" else v)
        for cross in crosses:
            parts = [text(rec[c]) for c in cross]
            if None not in parts:
                key = "^".join(f"{c}={t}" for c, t in zip(cross, parts, strict=True))
                ind.append(ref_hash(key) % 2**bits)
                val.append(1.0)
        rows.append((ind, val))
    return rows


def ref_matrix(rows, bits):
    indptr = np.cumsum([0] + [len(i) for i, _ in rows])
    indices = np.array([j for i, _ in rows for j in i], dtype=np.int64)
    values = np.array([v for _, v in rows for v in v], dtype=np.float64)
    return sp.csr_matrix((values, indices, indptr), shape=(len(rows), 2**bits))


def small_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "site": ["news", "shop", None, "news", "blog", "", "shop", "news"],
            "ad": pd.array([1, 2, 3, None, 2, 1, 7, 3], dtype="Int64"),
            "price": [0.5, None, 12.0, 3.0, -2.0, 0.0, 1e6, 2.5],
            "mobile": [True, False, True, None, False, True, True, False],
            "clicked": [1, 0, 0, 1, 0, 1, 1, 0],
        }
    )


@pytest.fixture
def inputs(tmp_path):
    """The small frame as Parquet (pandas' writer) and as CSV (pandas' writer)."""
    df = small_frame()
    df.to_parquet(tmp_path / "t.parquet")
    df.to_csv(tmp_path / "t.csv", index=False)
    return df, tmp_path / "t.parquet", tmp_path / "t.csv"


def rows_of(path):
    t = pq.read_table(path)
    values = t.column("values").to_pylist() if "values" in t.column_names else None
    return t.column("indices").to_pylist(), values, t


def meta(path):
    return decode_metadata(pq.read_metadata(path).metadata)


def no_output(directory, name="o.parquet"):
    return not (directory / name).exists() and not [
        p for p in directory.iterdir() if p.name.endswith(".tmp")
    ]


# ---- the key hash ---------------------------------------------------------------------------


def test_key_hash_matches_plain_python():
    rng = np.random.default_rng(0)
    alphabet = list("ab=^ _9é✓")
    keys = ["", "a", "site=news", "x" * 8, "y" * 9, "price", "site=news^ad=42"]
    keys += ["".join(rng.choice(alphabet, rng.integers(0, 40))) for _ in range(500)]
    got = hash_keys(keys)
    assert got.dtype == np.uint64
    assert [int(h) for h in got] == [ref_hash(k) for k in keys]
    # an Arrow array (sliced: offsets not from 0) hashes the same
    arr = pa.array(keys, pa.string()).slice(3)
    assert [int(h) for h in hash_keys(arr)] == [ref_hash(k) for k in keys[3:]]
    assert key_index("site=news", 20) == ref_hash("site=news") % 2**20
    np.testing.assert_array_equal(key_index(keys, 12), [ref_hash(k) % 4096 for k in keys])


# ---- conversion -----------------------------------------------------------------------------


def test_parquet_and_csv_give_the_reference_features(inputs, tmp_path):
    df, parquet, csv = inputs
    outs = {}
    for src in (parquet, csv):
        out = tmp_path / f"{src.suffix[1:]}.out.parquet"
        report = convert_table(src, out, label="clicked", crosses=[["site", "ad"]], hash_bits=12)
        assert (report.rows, report.row_groups, report.bad_rows) == (8, 1, 0)
        outs[src.suffix] = out
    # defaults by type: text and booleans categorical, numbers numeric
    expected = ref_rows(df, ["site", "mobile"], ["ad", "price"], [("site", "ad")], 12)
    for out in outs.values():
        indices, values, table = rows_of(out)
        assert indices == [i for i, _ in expected]
        for got, (_, want) in zip(values, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6)
        assert table.column("label").to_pylist() == df["clicked"].tolist()
        assert table.schema.field("label").type == pa.int8()
        md = meta(out)
        assert md["format"] == "table" and md["hash_bits"] == 12 and md["n_features"] == 4096
        assert (md["categorical"], md["numeric"]) == (["site", "mobile"], ["ad", "price"])
        assert (md["crosses"], md["label"], md["weight"]) == ([["site", "ad"]], "clicked", None)
        assert md["numeric_transform"] == "log1p" and "sign(v)*log1p(|v|)" in md["transform"]
    a, b = (pq.read_table(p) for p in outs.values())
    assert a.equals(b)  # the data and the feature map; only 'source' differs
    meta_a, meta_b = (meta(p) for p in outs.values())
    assert meta_a.pop("source") == "t.parquet" and meta_b.pop("source") == "t.csv"
    assert meta_a == meta_b


def test_named_columns_identity_transform_weight_and_three_way_cross(inputs, tmp_path):
    df, parquet, csv = inputs
    df["w"] = [1.0, 2.0, 0.5, 1.0, 0.0, 3.0, 1.0, 1.0]
    df.to_parquet(parquet)
    df.to_csv(csv, index=False)
    kw = dict(label="clicked", weight="w", categorical=["site"], numeric=["price"],
              crosses=[["site", "mobile", "ad"]], numeric_transform="identity",
              hash_bits=10)  # fmt: skip
    expected = ref_rows(df, ["site"], ["price"], [("site", "mobile", "ad")], 10, "identity")
    for src in (parquet, csv):
        out = tmp_path / f"{src.suffix[1:]}.out.parquet"
        convert_table(src, out, **kw)
        indices, values, table = rows_of(out)
        assert indices == [i for i, _ in expected]
        flat = [v for row in values for v in row]
        assert flat == pytest.approx([v for _, row in expected for v in row], rel=1e-6)
        assert table.column("weight").to_pylist() == df["w"].tolist()
        md = meta(out)
        assert (md["categorical"], md["numeric"]) == (["site"], ["price"])


def test_only_categorical_writes_no_values_column_and_unlabelled(inputs, tmp_path):
    df, parquet, _ = inputs
    convert_table(parquet, tmp_path / "o.parquet", label="clicked", categorical=["site", "ad"])
    indices, values, table = rows_of(tmp_path / "o.parquet")
    assert values is None  # one-hot only: every value is 1
    assert indices == [i for i, _ in ref_rows(df, ["site", "ad"], [], [], 20)]
    df.drop(columns="clicked").to_parquet(tmp_path / "score.parquet")
    convert_table(tmp_path / "score.parquet", tmp_path / "s.parquet", label=None)
    ds = Dataset(tmp_path / "s.parquet", require_labels=False)
    assert not ds.has_labels and ds.n_rows == 8 and ds.n_features == 2**20
    assert meta(tmp_path / "s.parquet")["label"] is None


def test_labels_as_pm1_bools_and_text(tmp_path):
    base = {"site": ["a", "b", "c", "d"]}
    for labels in ([-1, 1, 1, -1], [False, True, True, False], ["-1", "+1", "1", "-1.0"],
                   ["FALSE", "true", "True", "false"], [0.0, 1.0, 1.0, 0.0]):  # fmt: skip
        out = tmp_path / "o.parquet"
        pd.DataFrame({**base, "y": labels}).to_parquet(tmp_path / "t.parquet")
        convert_table(tmp_path / "t.parquet", out, label="y")
        assert pq.read_table(out).column("label").to_pylist() == [0, 1, 1, 0], labels
        out.unlink()


def test_keys_colliding_in_a_row_are_both_kept_and_add(tmp_path):
    cols = [f"c{j}" for j in range(12)]
    df = pd.DataFrame({c: [f"v{(r * 7 + j) % 5}" for r in range(8)] for j, c in enumerate(cols)})
    df["x"] = np.linspace(-3, 3, 8)
    df["y"] = [0, 1] * 4
    df.to_parquet(tmp_path / "t.parquet")
    convert_table(tmp_path / "t.parquet", tmp_path / "o.parquet", label="y", hash_bits=5)
    expected = ref_rows(df, cols, ["x"], [], 5)
    assert any(len(set(i)) < len(i) for i, _ in expected)  # 13 keys in 32 slots collide
    assert pq.read_table(tmp_path / "o.parquet").column("indices").to_pylist() == [
        i for i, _ in expected
    ]
    ds = Dataset(tmp_path / "o.parquet")  # the reader's checks accept repeated indices
    (chunk,) = list(ds.iter_chunks())
    got = sp.csr_matrix((chunk.values, chunk.indices, chunk.indptr), shape=(8, 32)).toarray()
    np.testing.assert_allclose(got, ref_matrix(expected, 5).toarray(), rtol=1e-6)


def test_pandas_category_columns_equal_plain_ones(inputs, tmp_path):
    df, parquet, _ = inputs
    cat = df.astype({"site": "category", "clicked": str, "price": str})  # '0.5', 'nan', ...
    cat = cat.astype({"clicked": "category", "price": "category"})
    cat.to_parquet(tmp_path / "c.parquet")
    schema = pq.read_schema(tmp_path / "c.parquet")
    assert all(pa.types.is_dictionary(schema.field(c).type) for c in ("site", "clicked", "price"))
    kw = dict(label="clicked", categorical=["site", "mobile"], numeric=["ad", "price"],
              crosses=[["site", "ad"]])  # fmt: skip
    convert_table(parquet, tmp_path / "a.parquet", **kw)
    convert_table(tmp_path / "c.parquet", tmp_path / "b.parquet", **kw)
    assert pq.read_table(tmp_path / "a.parquet").equals(pq.read_table(tmp_path / "b.parquet"))


def test_many_batches_blocks_files_and_gzip_agree(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    n = 5000
    df = pd.DataFrame(
        {
            "site": rng.choice(["news", "shop", "blog", "", "video"], n),
            "ad": rng.integers(0, 300, n),
            "price": np.round(rng.lognormal(1, 2, n), 3),
            "y": rng.integers(0, 2, n),
        }
    )
    df.to_parquet(tmp_path / "one.parquet")
    (tmp_path / "parts").mkdir()
    df[:1800].to_parquet(tmp_path / "parts" / "a.parquet")
    df[1800:].to_parquet(tmp_path / "parts" / "b.parquet")
    df.to_csv(tmp_path / "t.csv", index=False)
    with gzip.open(tmp_path / "t.csv.gz", "wt") as f:
        df.to_csv(f, index=False)
    monkeypatch.setattr(tabular, "_CELLS_PER_BATCH", 1)  # 1024-row Parquet batches
    monkeypatch.setattr(table_io, "CSV_BLOCK_BYTES", 4096)  # ~200-row CSV blocks
    kw = dict(label="y", crosses=[["site", "ad"]], hash_bits=14, row_group_rows=1500)
    tables = []
    for src in ("one.parquet", "parts", "t.csv", "t.csv.gz"):
        out = tmp_path / f"{src}.out.parquet"
        report = convert_table(tmp_path / src, out, **kw)
        assert (report.rows, report.row_groups) == (n, 4)
        tables.append(pq.read_table(out))
    assert all(t.equals(tables[0]) for t in tables)
    expected = ref_rows(df, ["site"], ["ad", "price"], [("site", "ad")], 14)
    assert tables[0].column("indices").to_pylist() == [i for i, _ in expected]


def test_training_reaches_liblinear_on_the_hashed_matrix(tmp_path):
    rng = np.random.default_rng(2)
    n, bits, C = 3000, 12, 0.5
    df = pd.DataFrame(
        {
            "site": rng.choice([f"s{k}" for k in range(30)], n),
            "ad": rng.integers(0, 80, n).astype(str),
            "mobile": rng.random(n) < 0.4,
            "price": np.where(rng.random(n) < 0.1, np.nan, rng.lognormal(0, 1.5, n)),
        }
    )
    rows = ref_rows(df, ["site", "ad", "mobile"], ["price"], [("site", "mobile")], bits)
    X = ref_matrix(rows, bits)
    w_true = rng.normal(0, 1, 2**bits)
    y = (X @ w_true + rng.logistic(size=n) > 0).astype(int)
    df["clicked"] = y
    df.to_parquet(tmp_path / "t.parquet")
    convert_table(tmp_path / "t.parquet", tmp_path / "o.parquet", label="clicked",
                  crosses=[["site", "mobile"]], hash_bits=bits, row_group_rows=700)  # fmt: skip
    est = snapfit.LogisticRegression(C=C, fit_intercept=False, tol=1e-9, max_iter=20000,
                                     random_state=0).fit(str(tmp_path / "o.parquet"))  # fmt: skip
    ref = liblinear(X, y, C, fit_intercept=False)
    p = primal(X, y, est.coef_, 0.0, C, bias=0)
    p_ref = primal(X, y, ref.coef_, 0.0, C, bias=0)
    assert abs(p - p_ref) / abs(p_ref) <= 1e-6
    assert est.coef_.shape == (1, 2**bits)
    # the converted file holds X: the file's model scores X as the model itself does
    np.testing.assert_allclose(est.decision_function(X), X @ est.coef_.ravel(), rtol=1e-10)


# ---- one-line errors, no output left --------------------------------------------------------


def test_missing_columns_are_named_with_the_columns_there_are(inputs, tmp_path):
    _, parquet, csv = inputs
    for src in (parquet, csv):
        with pytest.raises(DataError) as e:
            convert_table(src, tmp_path / "o.parquet", label="clicked", categorical=["sitee"])
        msg = str(e.value)
        assert msg.startswith(f"{src}: has no column named 'sitee'; its columns are: site, ad")
        assert "\n" not in msg and no_output(tmp_path)
    with pytest.raises(DataError, match="has no columns named 'nope', 'zz'"):
        convert_table(csv, tmp_path / "o.parquet", label="nope", crosses=[["zz", "site"]])
    # a later file of a Parquet directory without the column
    (tmp_path / "d").mkdir()
    small_frame().to_parquet(tmp_path / "d" / "a.parquet")
    small_frame().drop(columns="price").to_parquet(tmp_path / "d" / "b.parquet")
    with pytest.raises(DataError, match=r"b.parquet: has no column named 'price'"):
        convert_table(tmp_path / "d", tmp_path / "o.parquet", label="clicked")
    assert no_output(tmp_path)


CSV_HEAD = "site,price,clicked\n"


@pytest.mark.parametrize(
    "body, message",
    [
        ("a,1,1\nb,2,0\nc,3,yes\n", "line 4: label column 'clicked' holds 'yes'; labels must be"),
        ("a,1,1\nb,2,\n", "line 3: label column 'clicked' holds nothing (empty)"),
        ("a,1,0\nb,2,1\nc,3,-1\n", "line 4: label column 'clicked' holds -1 but "),
        ("a,1,1\n\nb,x1,0\n", "line 4: numeric column 'price' holds 'x1', not a number"),
        ("a,1,1\nb,2,0,9\n", "line 3: has 4 fields, the header 3"),
        ("", "t.csv: is empty"),
        ("a,inf,1\n", "line 2: numeric column 'price' holds inf; values must be finite"),
    ],
)
def test_bad_csv_is_a_one_line_error_naming_the_line(tmp_path, body, message):
    (tmp_path / "t.csv").write_text(CSV_HEAD + body if body else "")
    with pytest.raises(DataError) as e:
        convert_table(tmp_path / "t.csv", tmp_path / "o.parquet", label="clicked",
                      categorical=["site"], numeric=["price"])  # fmt: skip
    assert message in str(e.value) and "\n" not in str(e.value)
    assert no_output(tmp_path)


def test_a_bad_value_deep_in_a_file_is_named_by_its_line(tmp_path, monkeypatch):
    lines = [f"s{i % 7},{i},{i % 2}" for i in range(3000)]
    lines[2500] = "s1,12abc,1"
    lines.insert(100, "")  # blank lines are skipped and counted
    lines.insert(200, "  ")
    (tmp_path / "t.csv").write_text(CSV_HEAD + "\n".join(lines) + "\n")
    monkeypatch.setattr(table_io, "CSV_BLOCK_BYTES", 4096)
    with pytest.raises(DataError, match=r"t.csv, line 2504: numeric column 'price' holds '12abc'"):
        convert_table(tmp_path / "t.csv", tmp_path / "o.parquet", label="clicked")
    assert (tmp_path / "t.csv").read_text().splitlines()[2503] == "s1,12abc,1"
    assert no_output(tmp_path)


def test_bad_parquet_values_name_the_row(tmp_path):
    df = small_frame()
    df.loc[5, "clicked"] = 2
    df.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(DataError, match=r"t.parquet, row 5: label column 'clicked' holds 2"):
        convert_table(tmp_path / "t.parquet", tmp_path / "o.parquet", label="clicked")
    df = small_frame().astype({"price": str})
    df.loc[3, "price"] = "cheap"
    df.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(DataError, match=r"row 3: numeric column 'price' holds 'cheap'"):
        convert_table(tmp_path / "t.parquet", tmp_path / "o.parquet", label="clicked",
                      numeric=["price"])  # fmt: skip
    assert no_output(tmp_path)


def test_empty_inputs(tmp_path):
    (tmp_path / "h.csv").write_text(CSV_HEAD)
    small_frame()[:0].to_parquet(tmp_path / "e.parquet")
    for name in ("h.csv", "e.parquet"):
        with pytest.raises(DataError, match=f"{name}: holds no rows"):
            convert_table(tmp_path / name, tmp_path / "o.parquet", label="clicked")
    assert no_output(tmp_path)


def test_options_that_cannot_go_together(inputs, tmp_path):
    _, parquet, _ = inputs
    for kw, match in [
        ({"categorical": ["clicked"]}, "is the label; it cannot also be a feature"),
        ({"crosses": [["site"]]}, "a cross needs two or more columns"),
        ({"numeric": ["price", "price"]}, "names a column twice"),
        ({"numeric_transform": "sqrt"}, "choose one of log1p, identity"),
        ({"weight": "clicked"}, "both the label and the weight"),
    ]:
        with pytest.raises(ValueError, match=match):
            convert_table(parquet, tmp_path / "o.parquet", label="clicked", **kw)
    with pytest.raises(ValueError, match="apply to format 'table' only"):
        convert(parquet, tmp_path / "o.parquet", format="parquet", label="clicked")
    with pytest.raises(ValueError, match="needs label="):
        convert(parquet, tmp_path / "o.parquet", format="table")
    report = convert(parquet, tmp_path / "o.parquet", format="table", label="clicked")
    assert report.rows == 8
    # a table given as snapfit Parquet, or a CSV with no format: pointed to --format table
    with pytest.raises(DataError, match="convert with --format table --label NAME"):
        convert(parquet, tmp_path / "p.parquet")
    with pytest.raises(DataError, match="or --format table --label NAME"):
        convert(tmp_path / "t.csv", tmp_path / "p.parquet")


# ---- the command line -----------------------------------------------------------------------


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args])


def test_cli_converts_a_csv_table(inputs, tmp_path, run):
    _, parquet, csv = inputs
    out = tmp_path / "o.parquet"
    res = run("convert", csv, out, "--format", "table", "--label", "clicked", "--cross",
              "site,ad", "--cross", "site,mobile", "--hash-bits", 12)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert f"Wrote {out}: 8 rows" in res.output
    assert (
        "Features: categorical site, mobile; numeric ad, price (log1p); crosses site^ad, "
        "site^mobile; hashed into 2^12." in res.output
    )
    convert_table(parquet, tmp_path / "api.parquet", label="clicked", hash_bits=12,
                  crosses=[["site", "ad"], ["site", "mobile"]])  # fmt: skip
    assert pq.read_table(out).equals(pq.read_table(tmp_path / "api.parquet"))
    res = run("convert", csv, tmp_path / "n.parquet", "--format", "table", "--label", "clicked",
              "--numeric", "price", "--numeric-transform", "identity")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "Features: numeric price (identity); hashed into 2^20." in res.output


@pytest.mark.parametrize(
    "args",
    [
        ("--label", "clicked"),  # table options need --format table
        ("--format", "criteo", "--cross", "site,ad"),
        ("--format", "table"),  # no --label
        ("--format", "table", "--label", "clicked", "--unlabelled"),
        ("--format", "table", "--label", "clicked", "--numeric", "clicked"),
        ("--format", "table", "--label", "clicked", "--cross", "site"),
        ("--format", "table", "--label", "clicked", "--cross", "site,,ad"),
        ("--format", "table", "--label", "clicked", "--skip-bad-rows", 1),
        ("--format", "table", "--label", "clicked", "--numeric-transform", "sqrt"),
    ],
)
def test_cli_usage_errors_exit_2(inputs, tmp_path, run, args):
    _, _, csv = inputs
    res = run("convert", csv, tmp_path / "o.parquet", *args)
    assert res.exit_code == 2, res.output
    assert no_output(tmp_path)


@pytest.mark.parametrize(
    "args, message",
    [
        (("--label", "clicked", "--categorical", "sitee"), "has no column named 'sitee'"),
        (("--label", "site"), "line 2: label column 'site' holds 'news'"),
        (("--label", "clicked", "--numeric", "site"), "line 2: numeric column 'site' holds"),
    ],
)
def test_cli_bad_data_exit_3_with_one_line(inputs, tmp_path, run, args, message):
    _, _, csv = inputs
    res = run("convert", csv, tmp_path / "o.parquet", "--format", "table", *args)
    assert res.exit_code == 3, res.output
    assert res.output.startswith("Error: ") and res.output.count("\n") == 1
    assert message in res.output
    assert no_output(tmp_path)


def test_cli_truncated_gzip_csv_is_one_line(tmp_path, run):
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"site": rng.choice(["a", "b"], 50_000), "y": rng.integers(0, 2, 50_000)})
    with gzip.open(tmp_path / "t.csv.gz", "wt") as f:
        df.to_csv(f, index=False)
    data = (tmp_path / "t.csv.gz").read_bytes()
    (tmp_path / "t.csv.gz").write_bytes(data[: len(data) // 2])
    res = run("convert", tmp_path / "t.csv.gz", tmp_path / "o.parquet", "--format", "table",
              "--label", "y")  # fmt: skip
    assert res.exit_code == 3 and res.output.count("\n") == 1, res.output
    assert "t.csv.gz: cannot be read" in res.output
    assert no_output(tmp_path)


def test_conversion_records_a_bounded_dictionary_of_keys_and_flags_collisions(
    tmp_path, monkeypatch
):
    """The first NAMES_PER_FIELD distinct keys of each column and cross, by index (what makes
    a model's weights readable), and the indices where recorded keys collide."""
    monkeypatch.setattr(tabular, "NAMES_PER_FIELD", 50)
    rng = np.random.default_rng(0)
    n = 600
    df = pd.DataFrame({"user": [f"u{i}" for i in rng.integers(0, 400, n)],
                       "site": rng.choice(["news", "shop"], n), "price": rng.random(n),
                       "clicked": rng.integers(0, 2, n)})  # fmt: skip
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp_path / "t.parquet")
    convert_table(tmp_path / "t.parquet", tmp_path / "h.parquet", label="clicked",
                  crosses=[("site", "user")], hash_bits=20)  # fmt: skip
    names = decode_metadata(pq.ParquetFile(tmp_path / "h.parquet").metadata.metadata)["names"]
    keys = {int(i): k for i, k in names["keys"].items()}
    for key in ("site=news", "site=shop", "price"):
        assert keys[key_index(key, 20)] == key
    users = [k for k in keys.values() if k.startswith("user=")]
    crossed = [k for k in keys.values() if k.startswith("site=") and "^user=" in k]
    assert len(users) == 50 and len(crossed) == 50  # bounded per field
    assert all(keys[key_index(k, 20)] == k for k in users + crossed)
    assert names["collisions"] == [] and names["per_field"] == 50
    # 2^5 features: recorded keys collide, and say so
    convert_table(tmp_path / "t.parquet", tmp_path / "s.parquet", label="clicked", hash_bits=5)
    small = decode_metadata(pq.ParquetFile(tmp_path / "s.parquet").metadata.metadata)["names"]
    assert small["collisions"] and all(0 <= i < 32 for i in small["collisions"])
    # the model reads its largest weights by name, saved with it
    est = snapfit.LogisticRegression(C=1.0).fit(tmp_path / "h.parquet")
    top = est.top_features(5)
    assert len(top) == 5 and [abs(t["weight"]) for t in top] == sorted(
        (abs(t["weight"]) for t in top), reverse=True
    )
    for t in top:
        assert t["name"] is None or keys[t["index"]] == t["name"]
    assert any(t["name"] for t in est.top_features(50))
    est.save(tmp_path / "m.npz")
    assert snapfit.load(tmp_path / "m.npz").top_features(5) == top
    flagged = snapfit.LogisticRegression(C=1.0).fit(tmp_path / "s.parquet").top_features(32)
    assert any(t["name"] and t["name"].endswith("(collision)") for t in flagged)
