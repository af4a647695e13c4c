"""Progress bars (stderr, on a terminal only), --json for convert/make-data/predict, exit codes
in --help."""

import io
import json
import sys

import pytest
from click.testing import CliRunner

import snapfit
from snapfit import progress
from snapfit.cli import cli
from snapfit.data import Dataset
from snapfit.datasets import convert, make_criteo_like_parquet, make_criteo_like_tsv
from snapfit.scoring import evaluate, predict_to_parquet


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_bars_show_on_a_terminal_when_enabled(tmp_path, monkeypatch):
    terminal = _Terminal()  # set here, not in a fixture: pytest re-sets sys.stderr after setup
    monkeypatch.setattr(sys, "stderr", terminal)
    make_criteo_like_tsv(tmp_path / "d.tsv", 6000, seed=0)
    convert(tmp_path / "d.tsv", tmp_path / "quiet.parquet", hash_bits=10)
    assert terminal.getvalue() == ""  # library calls stay silent
    with progress.enabled():
        convert(tmp_path / "d.tsv", tmp_path / "d.parquet", hash_bits=10, row_group_rows=1000)
        assert "write" in terminal.getvalue() and "rows" in terminal.getvalue()
        est = snapfit.LogisticRegression(C=0.1, memory_budget="2MB", random_state=0)
        monkeypatch.setattr(progress, "MININTERVAL", 0.0)  # every update drawn
        est.fit(tmp_path / "d.parquet")  # streamed: the first pass has a bar, with MB/s
        assert "first pass" in terminal.getvalue() and "MB/s" in terminal.getvalue()
        predict_to_parquet(est, Dataset(tmp_path / "d.parquet"), tmp_path / "p.parquet")
        evaluate(est, Dataset(tmp_path / "d.parquet"), memory_budget=10**8)
        assert "score" in terminal.getvalue()
    with progress.enabled(False):
        before = terminal.getvalue()
        convert(tmp_path / "d.tsv", tmp_path / "e.parquet", hash_bits=10)
        assert terminal.getvalue() == before


def test_bars_stay_off_when_stderr_is_not_a_terminal(tmp_path, monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with progress.enabled():
        make_criteo_like_parquet(tmp_path / "x.parquet", 2000, seed=0, hash_bits=10)
    assert err.getvalue() == ""


def test_json_documents_of_convert_make_data_and_predict(tmp_path):
    run = lambda *a: CliRunner().invoke(cli, [str(x) for x in a])  # noqa: E731
    res = run("make-data", "criteo-like", tmp_path / "d.tsv", "--rows", 500, "--tsv",
              "--json", "-")  # fmt: skip
    assert res.exit_code == 0 and json.loads(res.output)["rows"] == 500, res.output
    res = run("make-data", "criteo-like", tmp_path / "m.parquet", "--rows", 500,
              "--json", tmp_path / "m.json")  # fmt: skip
    assert res.exit_code == 0 and res.output.startswith("Wrote")
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["command"] == "make-data" and doc["rows"] == 500 and doc["nnz"] > 0
    res = run("convert", tmp_path / "d.tsv", tmp_path / "d.parquet", "--json", "-")
    doc = json.loads(res.output)
    assert doc["command"] == "convert" and doc["rows"] == 500 and doc["bad_rows"] == 0
    assert (
        run("train", tmp_path / "d.parquet", "--out", tmp_path / "model.npz", "-q").exit_code == 0
    )
    res = run("predict", tmp_path / "model.npz", tmp_path / "m.parquet", "--out",
              tmp_path / "p.parquet", "--json", "-")  # fmt: skip
    doc = json.loads(res.output)
    assert doc["command"] == "predict" and doc["rows"] == 500 and doc["seconds"] >= 0


@pytest.mark.parametrize("args", [["--help"], ["train", "--help"], ["convert", "--help"]])
def test_exit_codes_are_listed_in_help(args):
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert "3 bad input data" in text and "4 resources" in text and "2 usage errors" in text
