"""Inputs from URLs (object stores through pyarrow.fs / fsspec), tested with fsspec's in-memory
filesystem and file:// URLs: no network."""

import fsspec
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import snapfit
from snapfit.cli import cli
from snapfit.data import Dataset
from snapfit.datasets import convert, make_criteo_like_parquet, make_criteo_like_tsv
from snapfit.errors import DataError
from snapfit.train import stream_dataset


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A local day of data and the same bytes under memory://bucket/ (a fake object store)."""
    d = tmp_path_factory.mktemp("remote")
    make_criteo_like_parquet(d / "part-0.parquet", 1200, seed=0, hash_bits=10,
                             row_group_rows=300)  # fmt: skip
    make_criteo_like_parquet(d / "part-1.parquet", 800, seed=1, hash_bits=10,
                             row_group_rows=300)  # fmt: skip
    make_criteo_like_tsv(d / "day.tsv.gz", 700, seed=2)
    mem = fsspec.filesystem("memory")
    for name in ("part-0.parquet", "part-1.parquet", "day.tsv.gz"):
        mem.pipe(f"/bucket/day/{name}", (d / name).read_bytes())
    mem.pipe("/bucket/day/_SUCCESS", b"")
    yield d, "memory://bucket/day"
    mem.rm("/bucket", recursive=True)


def test_urls_list_like_paths(store):
    d, url = store
    parts = [f"{url}/part-0.parquet", f"{url}/part-1.parquet"]
    assert Dataset(url).files == parts  # directory: its .parquet files, markers skipped
    assert Dataset(f"{url}/part-*.parquet").files == parts
    assert Dataset("memory://bucket/*/part-1.parquet").files == parts[1:]
    assert Dataset(f"file://{d}").files == [
        f"file://{d}/part-0.parquet",
        f"file://{d}/part-1.parquet",
    ]
    assert Dataset(url).n_rows == 2000
    with pytest.raises(DataError, match="memory://bucket/nothing: no such file or directory"):
        Dataset("memory://bucket/nothing")


@pytest.mark.parametrize("budget", [None, "600kB"])  # resident; streamed through the cache
def test_a_remote_fit_is_the_local_fit(store, budget):
    d, url = store
    chosen = stream_dataset(Dataset(url), 600_000, allow_resident=True)
    assert type(chosen).__name__ == "StreamSource"
    kw = dict(C=0.1, tol=1e-8, random_state=0, memory_budget=budget)
    local = snapfit.LogisticRegression(**kw).fit([d / "part-0.parquet", d / "part-1.parquet"])
    remote = snapfit.LogisticRegression(**kw).fit(url)
    np.testing.assert_array_equal(remote.coef_, local.coef_)
    assert remote.history_[-1]["primal"] == local.history_[-1]["primal"]
    np.testing.assert_array_equal(remote.predict_proba(url), local.predict_proba(d))


def test_cli_reads_urls(store, tmp_path):
    d, url = store
    run = lambda *a: CliRunner().invoke(cli, [str(x) for x in a])  # noqa: E731
    res = run("convert", f"{url}/day.tsv.gz", tmp_path / "remote.parquet", "--hash-bits", 10)
    assert res.exit_code == 0, res.output
    convert(d / "day.tsv.gz", tmp_path / "local.parquet", hash_bits=10)
    assert pq.read_table(tmp_path / "remote.parquet").equals(
        pq.read_table(tmp_path / "local.parquet")
    )
    res = run("train", url, "--out", tmp_path / "m.npz", "--test", f"{url}/part-1.parquet",
              "--tol", 1e-6)  # fmt: skip
    assert res.exit_code == 0, res.output
    res = run("evaluate", tmp_path / "m.npz", f"file://{d}/part-1.parquet")
    assert res.exit_code == 0 and "logloss" in res.output, res.output
    res = run("info", url)
    assert res.exit_code == 0 and "rows:          2000" in res.output, res.output
    res = run("train", "memory://bucket/none.parquet", "--out", tmp_path / "n.npz")
    assert res.exit_code == 3 and res.output.count("\n") == 1, res.output
    assert "memory://bucket/none.parquet: no such file" in res.output


def test_truncated_remote_gzip_is_a_one_line_error(store, tmp_path):
    d, _ = store
    data = (d / "day.tsv.gz").read_bytes()
    fsspec.filesystem("memory").pipe("/bucket/cut.tsv.gz", data[: len(data) // 2])
    res = CliRunner().invoke(
        cli, ["convert", "memory://bucket/cut.tsv.gz", str(tmp_path / "o.parquet")]
    )
    assert res.exit_code == 3 and res.output.count("\n") == 1, res.output
    assert not list(tmp_path.iterdir())
