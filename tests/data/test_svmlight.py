import numpy as np
import pytest
from data_helpers import dense_of, leftovers
from sklearn.datasets import load_svmlight_file

from snapfit.data import Dataset
from snapfit.datasets import convert, convert_svmlight, detect_format
from snapfit.errors import DataError

ONE_BASED = (
    "# a comment line\n"
    "1 qid:3 1:0.5 3:2.25   \n"  # trailing spaces
    "-1 2:1e-3 # trailing comment\n"
    "\n"
    "+1\n"
    "-1 1:1 2:2 7:3.14159265358979\n"
    "1 4:-0.1\n"
)
ZERO_BASED = "0 0:1.5 5:2\n1 3:0.25\n0\n1 qid:1 1:7 2:8\n"


def _same_as_sklearn(path, out, **kw):
    X, y = load_svmlight_file(str(path), **{k: v for k, v in kw.items() if k == "zero_based"})
    ds = Dataset(out)
    assert ds.n_features == X.shape[1]
    dense, ys = dense_of(list(ds.iter_chunks()), ds.n_features)
    np.testing.assert_array_equal(dense, X.toarray().astype(np.float32))
    np.testing.assert_array_equal(ys, np.where(y > 0, 1, -1))
    return ds


@pytest.mark.parametrize("text", [ONE_BASED, ZERO_BASED])
@pytest.mark.parametrize("block_bytes", [16, 1 << 20])
def test_equals_sklearn_exactly(tmp_path, text, block_bytes):
    path = tmp_path / "d.svm"
    path.write_text(text)
    out = tmp_path / "d.parquet"
    report = convert_svmlight(path, out, row_group_rows=2, block_bytes=block_bytes)
    ds = _same_as_sklearn(path, out)
    assert report.rows == ds.n_rows == (5 if text is ONE_BASED else 4)


def test_explicit_base_overrides_auto(tmp_path):
    path = tmp_path / "d.svm"
    path.write_text("1 1:1 2:2\n0 3:3\n")
    convert_svmlight(path, tmp_path / "z.parquet", zero_based=True)
    assert Dataset(tmp_path / "z.parquet").n_features == 4
    _same_as_sklearn(path, tmp_path / "z.parquet", zero_based=True)
    convert_svmlight(path, tmp_path / "o.parquet", zero_based=False)
    _same_as_sklearn(path, tmp_path / "o.parquet", zero_based=False)


def test_gzip_and_detection(tmp_path):
    import gzip

    path = tmp_path / "d.svm.gz"
    with gzip.open(path, "wt") as f:
        f.write(ONE_BASED)
    assert detect_format(path) == "svmlight"
    convert(path, tmp_path / "d.parquet")
    X, _ = load_svmlight_file(str(path))
    assert Dataset(tmp_path / "d.parquet").nnz == X.nnz


@pytest.mark.parametrize(
    "text, match",
    [
        ("1 1:1\n1 2:x\n", "d.svm, line 2: could not convert"),
        ("1 1:1\n-1 3:1 2:1\n", "d.svm, line 2: Feature indices .* should be sorted"),
        ("1 1:1\n\n# c\n2 1:1\n", "d.svm, line 4: label is 2; snapfit trains binary labels"),
        ("1 0:1\n0 1:1\n", "d.svm, line 1: index 0 in a one-based file"),
    ],
)
def test_bad_lines_are_named_and_nothing_is_left(tmp_path, text, match):
    path = tmp_path / "d.svm"
    path.write_text(text)
    kw = {"zero_based": False} if "one-based" in match else {}
    if "label is" in match:  # class labels asked for ("auto" would read 2 as a real target)
        kw["target"] = "class"
    with pytest.raises(DataError, match=match):
        convert_svmlight(path, tmp_path / "d.parquet", **kw)
    assert not (tmp_path / "d.parquet").exists() and leftovers(tmp_path) == []


def test_n_features_too_small_and_empty_file(tmp_path):
    path = tmp_path / "d.svm"
    path.write_text("1 1:1\n0 9:1\n")
    with pytest.raises(DataError, match="line 2: index 9 is beyond n_features=4"):
        convert_svmlight(path, tmp_path / "d.parquet", n_features=4)
    path.write_text("# only a comment\n\n")
    with pytest.raises(DataError, match="holds no rows"):
        convert_svmlight(path, tmp_path / "d.parquet")
    assert leftovers(tmp_path) == [] and not (tmp_path / "d.parquet").exists()
