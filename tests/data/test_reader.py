import os
import pickle
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from data_helpers import dense_of
from hypothesis import given, settings
from hypothesis import strategies as st

from snapfit.data import ArrayDataset, Dataset, check_two_classes, write_parquet
from snapfit.errors import DataError


def _matrix(rng, n=200, d=30, density=0.2):
    X = sp.random(n, d, density=density, format="csr", random_state=1, dtype=np.float32)
    y = rng.integers(0, 2, n)
    return X, y


def test_round_trip_chunks_match_input(tmp_path, rng):
    X, y = _matrix(rng)
    w = rng.random(200).astype(np.float32)
    path = write_parquet(tmp_path / "a.parquet", X, y, w, row_group_rows=64)
    ds = Dataset(path)
    assert [c.n_rows for c in ds.chunks] == [64, 64, 64, 8]
    assert ds.n_rows == 200 and ds.nnz == X.nnz and ds.n_features == 30
    chunks = list(ds.iter_chunks())
    dense, ys = dense_of(chunks, 30)
    np.testing.assert_array_equal(dense, X.toarray())
    np.testing.assert_array_equal(ys, np.where(y == 1, 1, -1))
    np.testing.assert_array_equal(np.concatenate([c.weight for c in chunks]), w)
    for c in chunks:
        assert c.indptr.dtype == np.int64 and c.indptr[0] == 0
        assert c.indices.dtype == np.int32 and c.values.dtype == np.float32
        assert c.y.dtype == np.float32


def test_chunk_refs_come_from_metadata_and_match_data(tmp_path, rng):
    X, y = _matrix(rng)
    path = write_parquet(tmp_path / "a.parquet", X, y, row_group_rows=50)
    ds = Dataset(path)
    for k, ref in enumerate(ds.chunks):
        c = ds.read_chunk(k)
        assert (ref.n_rows, ref.nnz) == (c.n_rows, c.nnz)
        assert ref.nnz == X.indptr[50 * k + 50] - X.indptr[50 * k]


def test_nnz_from_statistics_for_foreign_files(tmp_path):
    """A file written by plain pyarrow (no snapfit metadata) plans from column statistics."""
    idx = pa.array([[1, 2], [], [3], [4, 5, 6]], type=pa.list_(pa.int32()))
    pq.write_table(
        pa.table({"label": pa.array([1, 0, 1, 0], pa.int8()), "indices": idx}),
        tmp_path / "f.parquet",
        row_group_size=2,
    )
    ds = Dataset(tmp_path / "f.parquet")
    assert [c.nnz for c in ds.chunks] == [2, 4]
    assert ds.n_features == 7  # max index + 1 from statistics
    assert ds.read_chunk(1).values is None
    np.testing.assert_array_equal(ds.read_chunk(1).indptr, [0, 1, 4])


def test_subset_of_chunks_and_order(tmp_path, rng):
    X, y = _matrix(rng)
    ds = Dataset(write_parquet(tmp_path / "a.parquet", X, y, row_group_rows=40))
    picked = list(ds.iter_chunks(ids=[3, 1]))
    np.testing.assert_array_equal(picked[0].indices, ds.read_chunk(3).indices)
    np.testing.assert_array_equal(picked[1].indices, X.indices[X.indptr[40] : X.indptr[80]])


def test_directory_glob_and_list_form_one_ordered_chunk_list(tmp_path, rng):
    X, y = _matrix(rng)
    d = tmp_path / "parts"
    d.mkdir()
    write_parquet(d / "p1.parquet", X[100:], y[100:], row_group_rows=60)
    write_parquet(d / "p0.parquet", X[:100], y[:100], row_group_rows=60)
    (d / "_SUCCESS").write_text("")
    for source in (d, str(d / "p*.parquet"), [d / "p0.parquet", d / "p1.parquet"]):
        ds = Dataset(source)
        assert [(c.row_group, c.n_rows) for c in ds.chunks] == [(0, 60), (1, 40), (0, 60), (1, 40)]
        dense, _ = dense_of(list(ds.iter_chunks()), 30)
        np.testing.assert_array_equal(dense, X.toarray())


def test_files_with_different_n_features_are_refused(tmp_path, rng):
    X, y = _matrix(rng)
    write_parquet(tmp_path / "a.parquet", X, y)
    write_parquet(tmp_path / "b.parquet", X, y, n_features=64)
    with pytest.raises(DataError, match="b.parquet: n_features is 64 but .*a.parquet has 30"):
        Dataset(tmp_path)


def test_one_parquet_file_per_thread_and_equal_results(tmp_path, rng):
    X, y = _matrix(rng, n=2000)
    ds = Dataset(write_parquet(tmp_path / "a.parquet", X, y, row_group_rows=100))
    expected = [ds.read_chunk(k).indices.sum() for k in range(len(ds.chunks))]
    got, opened = {}, []

    def work(ids):
        for k in ids:
            got[k] = ds.read_chunk(k).indices.sum()
        opened.append(ds._local.files[ds.files[0]])  # kept alive: a freed one's id is reused

    threads = [threading.Thread(target=work, args=(range(i, 20, 4),)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[k] for k in range(20)] == expected
    assert len({id(f) for f in opened}) == 4


def test_pickles_without_open_files(tmp_path, rng):
    X, y = _matrix(rng)
    ds = Dataset(write_parquet(tmp_path / "a.parquet", X, y, row_group_rows=64))
    ds.read_chunk(0)
    again = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(again.read_chunk(2).indices, ds.read_chunk(2).indices)


def test_one_hot_data_stores_no_values(tmp_path, rng):
    X, y = _matrix(rng)
    X.data[:] = 1
    ds = Dataset(write_parquet(tmp_path / "a.parquet", X, y))
    assert "values" not in pq.ParquetFile(ds.files[0]).schema_arrow.names
    assert ds.read_chunk(0).values is None


def test_duplicates_and_unsorted_indices_are_kept_and_add(tmp_path):
    X = sp.csr_array((np.array([1.0, 2.0, 3.0], np.float32), [4, 1, 4], [0, 3]), shape=(1, 5))
    ds = Dataset(write_parquet(tmp_path / "a.parquet", X, [1]))
    c = ds.read_chunk(0)
    np.testing.assert_array_equal(c.indices, [4, 1, 4])
    assert dense_of([c], 5)[0][0, 4] == 4.0


def test_unlabelled_files_need_require_labels_false(tmp_path, rng):
    X, _ = _matrix(rng)
    path = write_parquet(tmp_path / "u.parquet", X)
    with pytest.raises(DataError, match="u.parquet: has no 'label' column.*require_labels=False"):
        Dataset(path)
    ds = Dataset(path, require_labels=False)
    assert not ds.has_labels
    assert not ds.read_chunk(0).y.any()
    with pytest.raises(DataError, match="training needs labels"):
        check_two_classes(ds)


def test_check_two_classes(tmp_path, rng):
    X, _ = _matrix(rng)
    ds = Dataset(write_parquet(tmp_path / "one.parquet", X, np.ones(200), row_group_rows=64))
    with pytest.raises(DataError, match=r"one.parquet: every one of the 200 labels is \+1"):
        check_two_classes(ds)
    check_two_classes(ArrayDataset(X, np.arange(200) % 2))
    with pytest.raises(DataError, match="every one of the 3 labels is -1/0"):
        check_two_classes(np.zeros(3))


def test_array_dataset_has_the_same_interface_and_chunks(tmp_path, rng):
    X, y = _matrix(rng)
    mem = ArrayDataset(X, y, chunk_rows=64)
    disk = Dataset(write_parquet(tmp_path / "a.parquet", X, y, row_group_rows=64))
    assert isinstance(mem, ArrayDataset)
    assert [(c.n_rows, c.nnz) for c in mem.chunks] == [(c.n_rows, c.nnz) for c in disk.chunks]
    assert (mem.n_rows, mem.nnz, mem.n_features) == (disk.n_rows, disk.nnz, disk.n_features)
    assert mem.label_counts() == disk.label_counts()
    for a, b in zip(mem.iter_chunks([2, 0]), disk.iter_chunks([2, 0]), strict=True):
        for p, q in zip(a, b, strict=True):
            np.testing.assert_array_equal(p, q)


def test_from_dense_numpy(rng):
    X = np.array([[0, 2.5, 0], [1, 0, 0], [0, 0, 0]])
    ds = ArrayDataset(X, [-1, 1, 1], chunk_rows=2)
    dense, ys = dense_of(list(ds.iter_chunks()), 3)
    np.testing.assert_array_equal(dense, X)
    np.testing.assert_array_equal(ys, [-1, 1, 1])


@st.composite
def sparse_problems(draw):
    n = draw(st.integers(1, 40))
    d = draw(st.integers(1, 50))
    density = draw(st.floats(0, 1))
    seed = draw(st.integers(0, 2**32 - 1))
    X = sp.random(n, d, density=density, format="csr", random_state=seed, dtype=np.float32)
    X.data = np.random.default_rng(seed).normal(size=X.nnz).astype(np.float32)
    y = np.random.default_rng(seed + 1).choice(draw(st.sampled_from([(0, 1), (-1, 1)])), n)
    rows = draw(st.integers(1, 50))
    return X, y, rows


@settings(max_examples=40, deadline=None)
@given(sparse_problems())
def test_property_write_then_read_gives_the_matrix_back(tmp_path_factory, problem):
    X, y, rows = problem
    path = write_parquet(tmp_path_factory.mktemp("p") / "x.parquet", X, y, row_group_rows=rows)
    ds = Dataset(path)
    chunks = list(ds.iter_chunks())
    assert len(chunks) == -(-X.shape[0] // rows)
    indptr = np.concatenate([[0]] + [c.indptr[1:] for c in chunks])
    indptr[1:] += np.repeat(
        np.cumsum([0] + [c.nnz for c in chunks[:-1]]), [c.n_rows for c in chunks]
    )
    np.testing.assert_array_equal(indptr, X.indptr)
    np.testing.assert_array_equal(np.concatenate([c.indices for c in chunks]), X.indices)
    values = np.concatenate(
        [np.ones(c.nnz, np.float32) if c.values is None else c.values for c in chunks]
    )
    np.testing.assert_array_equal(values, X.data)
    np.testing.assert_array_equal(np.concatenate([c.y for c in chunks]), np.where(y == 1, 1, -1))


def test_subset_is_the_share_of_row_groups_in_the_order_asked(tmp_path, rng):
    X, y = _matrix(rng)
    write_parquet(tmp_path / "a.parquet", X[:128], y[:128], row_group_rows=64)
    write_parquet(tmp_path / "b.parquet", X[128:], y[128:], row_group_rows=64)
    ds = Dataset(str(tmp_path))
    share = ds.subset([3, 0])
    assert [c.row_group for c in share.chunks] == [1, 0]
    assert [os.path.basename(f) for f in share.files] == ["a.parquet", "b.parquet"]
    assert len(ds.chunks) == 4 and ds.files == share.files  # the whole set is unchanged
    np.testing.assert_array_equal(share.read_chunk(0).indices, ds.read_chunk(3).indices)
    assert share.n_rows == ds.chunks[3].n_rows + ds.chunks[0].n_rows
    only_b = ds.subset([2])
    assert [os.path.basename(f) for f in only_b.files] == ["b.parquet"]
    assert pickle.loads(pickle.dumps(only_b)).chunks == only_b.chunks
