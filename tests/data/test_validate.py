"""Each malformed input fails with one line naming the place, and leaves no output behind."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from data_helpers import leftovers

from snapfit.data import Dataset, write_parquet
from snapfit.datasets import convert
from snapfit.errors import DataError

LIST_I32 = pa.list_(pa.int32())
LIST_F32 = pa.list_(pa.float32())


def _file(tmp_path, columns, n_features=10, name="bad.parquet"):
    """Write ``columns`` (6 rows) as a foreign file in row groups of 3 rows."""
    table = pa.table(columns)
    if n_features is not None:
        table = table.replace_schema_metadata({"snapfit.n_features": str(n_features)})
    path = tmp_path / name
    pq.write_table(table, path, row_group_size=3)
    return path


def _good(label=None, indices=None, values=None):
    cols = {
        "label": label if label is not None else pa.array([1, 0, 1, 0, 1, 0], pa.int8()),
        "indices": indices
        if indices is not None
        else pa.array([[0, 1], [2], [], [3, 4], [5], [6]], LIST_I32),
    }
    cols["values"] = (
        values
        if values is not None
        else pa.array([[1.0, 2.0], [3.0], [], [4.0, 5.0], [6.0], [7.0]], LIST_F32)
    )
    return cols


def _fails_everywhere(path, match):
    """Reading all chunks and converting both fail with ``match``; no output, no temp file."""
    with pytest.raises(DataError, match=match) as info:
        list(Dataset(path).iter_chunks())
    assert "\n" not in str(info.value)
    out = path.parent / "out.parquet"
    with pytest.raises(DataError, match=match):
        convert(path, out)
    assert not out.exists()
    assert leftovers(path.parent) == []


def test_good_file_passes(tmp_path):
    path = _file(tmp_path, _good())
    assert Dataset(path).n_rows == 6
    convert(path, tmp_path / "out.parquet")
    assert Dataset(tmp_path / "out.parquet").nnz == 7


def test_index_beyond_n_features(tmp_path):
    idx = pa.array([[0, 1], [2], [], [3, 4], [5], [6, 16777300]], LIST_I32)
    vals = pa.array([[1.0, 2.0], [3.0], [], [4.0, 5.0], [6.0], [7.0, 8.0]], LIST_F32)
    path = _file(tmp_path, _good(indices=idx, values=vals), n_features=16777216)
    _fails_everywhere(
        path,
        r"bad.parquet, row group 1, row 2: column 'indices' holds 16777300 but n_features is "
        r"16777216; re-convert with more hash bits or fix the writer\.",
    )


def test_negative_index(tmp_path):
    idx = pa.array([[0, 1], [2], [], [3, -4], [5], [6]], LIST_I32)
    _fails_everywhere(
        _file(tmp_path, _good(indices=idx)),
        "bad.parquet, row group 1, row 0: column 'indices' holds -4, a negative index",
    )


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values(tmp_path, bad):
    vals = pa.array([[1.0, 2.0], [3.0], [], [4.0, 5.0], [bad], [7.0]], LIST_F32)
    _fails_everywhere(
        _file(tmp_path, _good(values=vals)),
        "bad.parquet, row group 1, row 1: column 'values' holds (nan|inf|-inf); values must be",
    )


def test_lists_of_different_lengths(tmp_path):
    vals = pa.array([[1.0, 2.0], [3.0, 9.0], [], [4.0, 5.0], [6.0], [7.0]], LIST_F32)
    _fails_everywhere(
        _file(tmp_path, _good(values=vals)),
        "bad.parquet, row group 0, row 1: 'indices' has 1 entries but 'values' has 2",
    )


@pytest.mark.parametrize(
    "labels, row_group, row, shown",
    [
        (pa.array([1, 0, 1, 0, 2, 0], pa.int8()), 1, 1, "2"),
        (pa.array([1, 0, 1, 0.5, 1, 0], pa.float32()), 1, 0, "0.5"),
        (pa.array([1, 0, -1, 0, 1, 0], pa.int8()), 0, 2, "-1"),
    ],
)
def test_labels_outside_both_encodings(tmp_path, labels, row_group, row, shown):
    _fails_everywhere(
        _file(tmp_path, _good(label=labels)),
        f"bad.parquet, row group {row_group}, row {row}: column 'label' (holds|mixes).*{shown}",
    )


def test_string_labels_are_a_wrong_typed_column(tmp_path):
    path = _file(tmp_path, _good(label=pa.array(["yes", "no"] * 3)))
    _fails_everywhere(path, "bad.parquet: column 'label' has type string but snapfit needs")


def test_wrong_typed_indices(tmp_path):
    idx = pa.array([[0, 1], [2], [], [3, 4], [5], [6]], pa.list_(pa.int64()))
    _fails_everywhere(
        _file(tmp_path, _good(indices=idx)),
        "bad.parquet: column 'indices' has type list<element: int64> but snapfit needs list<int32>",
    )


def test_missing_indices_column(tmp_path):
    path = _file(tmp_path, {"label": pa.array([1, 0], pa.int8()), "x": pa.array([1, 2])})
    _fails_everywhere(path, "bad.parquet: has no 'indices' column \\(columns: label, x\\)")


def test_not_a_parquet_file(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_text("label,indices\n1,2\n")
    _fails_everywhere(path, "bad.parquet: not a Parquet file or truncated")


def test_truncated_file(tmp_path):
    path = _file(tmp_path, _good())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _fails_everywhere(path, "bad.parquet: not a Parquet file or truncated")


def test_empty_dataset(tmp_path):
    path = _file(tmp_path, {k: v[:0] for k, v in _good().items()})
    _fails_everywhere(path, "bad.parquet: the dataset holds no rows")
    empty = tmp_path / "none"
    empty.mkdir()
    with pytest.raises(DataError, match="none: matches no files"):
        Dataset(empty)


def test_null_list(tmp_path):
    idx = pa.array([[0, 1], [2], None, [3, 4], [5], [6]], LIST_I32)
    _fails_everywhere(
        _file(tmp_path, _good(indices=idx)),
        "bad.parquet, row group 0, row 2: column 'indices' is null",
    )


def test_validation_can_be_turned_off(tmp_path):
    idx = pa.array([[0, 1], [2], [], [3, 4], [5], [6, 99]], LIST_I32)
    vals = pa.array([[1.0, 2.0], [3.0], [], [4.0, 5.0], [6.0], [7.0, 8.0]], LIST_F32)
    ds = Dataset(_file(tmp_path, _good(indices=idx, values=vals)), validate=False)
    assert ds.read_chunk(1).indices.max() == 99


def test_write_parquet_refuses_bad_arrays_and_leaves_nothing(tmp_path):
    X = np.array([[1.0, 0.0], [np.nan, 2.0]])
    with pytest.raises(DataError, match="X, row 1: column 'values' holds nan"):
        write_parquet(tmp_path / "x.parquet", X, [0, 1])
    with pytest.raises(DataError, match="y, row 1: column 'y' holds 3"):
        write_parquet(tmp_path / "x.parquet", np.eye(2), [0, 3])
    with pytest.raises(DataError, match="weight, row 0: column 'weight' holds -1.0"):
        write_parquet(tmp_path / "x.parquet", np.eye(2), [0, 1], [-1, 1])
    assert os.listdir(tmp_path) == []


def test_existing_output_and_output_equal_to_input_are_refused(tmp_path):
    path = _file(tmp_path, _good())
    with pytest.raises(DataError, match="is the input file"):
        convert(path, path, force=True)
    out = tmp_path / "out.parquet"
    out.write_text("keep me")
    with pytest.raises(DataError, match="out.parquet: already exists; pass --force"):
        convert(path, out)
    assert out.read_text() == "keep me"
    convert(path, out, force=True)
    assert Dataset(out).n_rows == 6
