import gzip
import json

import pytest
from click.testing import CliRunner

from snapfit.cli import cli


@pytest.fixture
def run():
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args])


def test_make_data_then_info(tmp_path, run):
    out = tmp_path / "d.parquet"
    res = run(
        "make-data",
        "criteo-like",
        out,
        "--rows",
        5000,
        "--seed",
        1,
        "--hash-bits",
        16,
        "--row-group-rows",
        2000,
    )
    assert res.exit_code == 0, res.output
    assert "5000 rows" in res.output and "3 row groups" in res.output
    res = run("info", out, "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert (info["rows"], info["row_groups"], info["n_features"]) == (5000, 3, 1 << 16)
    assert 0.03 < info["positive_rate"] < 0.25 and info["bytes"] == out.stat().st_size
    assert info["provenance"]["hash_bits"] == 16
    res = run("info", out)
    assert res.exit_code == 0 and "positive rate:" in res.output and "hash_bits:" in res.output


def test_convert_tsv_made_by_make_data(tmp_path, run):
    tsv, out = tmp_path / "d.tsv", tmp_path / "d.parquet"
    assert run("make-data", "criteo-like", tsv, "--rows", 3000, "--tsv").exit_code == 0
    res = run("convert", tsv, out, "--hash-bits", 12)
    assert res.exit_code == 0, res.output
    assert f"Wrote {out}: 3000 rows" in res.output
    res = run("convert", tsv, out)
    assert res.exit_code == 3 and "already exists; pass --force" in res.output
    assert run("convert", tsv, out, "--force", "--format", "criteo").exit_code == 0


def test_convert_svmlight_and_skip_bad_rows(tmp_path, run):
    svm = tmp_path / "d.svm"
    svm.write_text("1 1:1\n0 2:3\n")
    assert run("convert", svm, tmp_path / "s.parquet").exit_code == 0
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("1" + "\t" * 39 + "\nbroken\n0" + "\t" * 39 + "\n")
    res = run("convert", tsv, tmp_path / "b.parquet")
    assert res.exit_code == 3
    assert res.output.strip().count("\n") == 0 and "Traceback" not in res.output
    assert "bad.tsv, line 2: expected 40 tab-separated fields, found 1" in res.output
    res = run("convert", tsv, tmp_path / "b.parquet", "--skip-bad-rows", 1)
    assert res.exit_code == 0 and "Skipped 1 bad rows" in res.output and "line 2" in res.output


def test_bad_files_exit_3_with_one_line(tmp_path, run):
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    for args in (("info", junk), ("convert", junk, tmp_path / "o.parquet")):
        res = run(*args)
        assert res.exit_code == 3, res.output
        assert res.output.startswith("Error: ") and res.output.count("\n") == 1
        assert "junk.parquet: not a Parquet file or truncated" in res.output
    assert run("info", tmp_path / "missing.parquet").exit_code == 3


@pytest.mark.parametrize(
    "args",
    [
        ("convert", "--format", "csv", "a", "b"),
        ("make-data", "criteo-like", "x.parquet"),  # --rows missing
        ("make-data", "criteo-like", "x.parquet", "--rows", 0),
        ("make-data", "other", "x.parquet", "--rows", 5),
        ("convert", "--hash-bits", 40, "a", "b"),
        ("info",),
    ],
)
def test_bad_flags_exit_2(run, args):
    assert run(*args).exit_code == 2


def test_truncated_gzip_and_missing_directory_are_one_line_errors(tmp_path, run):
    src = tmp_path / "day.tsv.gz"
    assert run("make-data", "criteo-like", src, "--rows", 3000, "--tsv").exit_code == 0
    cut = tmp_path / "cut.tsv.gz"
    cut.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    out = tmp_path / "o.parquet"
    res = run("convert", cut, out)
    assert res.exit_code == 3 and res.output.count("\n") == 1, res.output
    assert res.output.startswith("Error: ") and "cut.tsv.gz" in res.output
    missing = tmp_path / "no" / "such" / "o.parquet"
    res = run("convert", src, missing)
    assert res.exit_code == 3 and res.output.count("\n") == 1, res.output
    assert "does not exist; create it first" in res.output
    svm = tmp_path / "s.svm.gz"
    with gzip.open(svm, "wt") as f:
        f.writelines(f"{i % 2} {i % 97 + 1}:0.5 {i % 89 + 100}:1.5\n" for i in range(50_000))
    svm.write_bytes(svm.read_bytes()[: svm.stat().st_size // 2])
    res = run("convert", svm, out)
    assert res.exit_code == 3 and res.output.count("\n") == 1, res.output
    assert "s.svm.gz: cannot be read" in res.output
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["cut.tsv.gz", "day.tsv.gz", "s.svm.gz"]


def test_info_describes_a_model_file(tmp_path, run):
    data = tmp_path / "d.parquet"
    assert run("make-data", "criteo-like", data, "--rows", 2000, "--hash-bits", 12).exit_code == 0
    model = tmp_path / "m.npz"
    res = run("train", data, "--out", model, "--C", 0.1, "--max-iter", 100, "--tol", "1e-3", "-q")
    assert res.exit_code == 0, res.output
    res = run("info", model, "--top", 3)
    assert res.exit_code == 0, res.output
    text = res.output
    assert "features     4096" in text and "converged" in text and "data         in memory" in text
    assert "format criteo-like, hash_bits 12" in text and "top 3 weights" in text
    doc = json.loads(run("info", model, "--json").output)
    assert doc["n_features"] == 4096 and doc["converged"] is True and doc["streamed"] is False
    assert len(doc["top_weights"]) == 10
    weights = [abs(t["weight"]) for t in doc["top_weights"]]
    assert weights == sorted(weights, reverse=True)
    import snapfit

    coef = snapfit.load(model).coef_.ravel()
    top = doc["top_weights"][0]
    assert coef[top["index"]] == top["weight"] and abs(top["weight"]) == abs(coef).max()
    # Criteo's integer fields have names without a dictionary: I1..I13 at indices 0..12
    assert all(t["name"] == f"I{t['index'] + 1}" for t in doc["top_weights"] if t["index"] < 13)
    # a damaged model file is still a model file: one line, exit 3
    raw = bytearray(model.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "bad.npz").write_bytes(bytes(raw))
    res = run("info", tmp_path / "bad.npz")
    assert res.exit_code == 3 and res.output.startswith("Error:"), res.output


def test_info_names_a_table_models_largest_weights(tmp_path, run):
    rows = [f"{s},{a},{p},{c}\n" for s, a, p, c in zip(
        ["news", "shop", "blog"] * 100, ["a1", "a2", "a3", "a4"] * 75, range(300),
        [1, 0, 0, 1, 0] * 60, strict=True)]  # fmt: skip
    (tmp_path / "e.csv").write_text("site,ad,price,clicked\n" + "".join(rows))
    res = run("convert", tmp_path / "e.csv", tmp_path / "e.parquet", "--format", "table",
              "--label", "clicked", "--cross", "site,ad", "--hash-bits", 16)  # fmt: skip
    assert res.exit_code == 0, res.output
    res = run("train", tmp_path / "e.parquet", "--out", tmp_path / "m.npz", "-q")
    assert res.exit_code == 0, res.output
    res = run("info", tmp_path / "m.npz", "--top", 5)
    assert res.exit_code == 0, res.output
    tops = res.output.split("weights (by magnitude; names recorded at convert):\n")[1]
    lines = tops.strip().splitlines()
    assert len(lines) == 5
    import snapfit
    from snapfit.datasets import key_index

    for line in lines:  # "  -0.23  [7154] site=blog^ad=a4"
        index, name = int(line.split("[")[1].split("]")[0]), line.split("] ")[1]
        assert key_index(name, 16) == index
    assert snapfit.load(tmp_path / "m.npz").top_features(1)[0]["name"] in tops
    doc = json.loads(run("info", tmp_path / "e.parquet", "--json").output)
    assert "names" not in doc["provenance"]  # recorded, but not printed with the data's facts
