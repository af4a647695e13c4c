import gzip

import numpy as np
import pytest
from data_helpers import leftovers

from snapfit.data import Dataset
from snapfit.datasets import (
    convert_criteo,
    make_criteo_like,
    make_criteo_like_parquet,
    make_criteo_like_tsv,
)
from snapfit.datasets.criteo import hex8_words
from snapfit.datasets.criteo_hash import cat_index, format_hex8, splitmix64
from snapfit.errors import DataError

BITS = 10


def _row(label, ints, cats):
    """A Criteo line: ints and cats are dicts {field: text}; missing fields are empty."""
    fields = [] if label is None else [str(label)]
    fields += [ints.get(j, "") for j in range(13)] + [cats.get(c, "") for c in range(26)]
    return "\t".join(fields)


ROWS = [
    _row(1, {0: "5", 1: "-3", 12: "0"}, {0: "68fd1e64", 25: "ABCDEF01"}),
    _row(0, {}, {}),  # every field empty, trailing empties included
    _row(0, {2: "1000"}, {3: "00000000"}),
]


def _expected_row(ints, cats):
    idx = [j for j in sorted(ints)] + [
        int(cat_index(c, np.array([int(cats[c], 16)], np.uint32), BITS)[0]) for c in sorted(cats)
    ]
    val = [np.log1p(max(int(ints[j]), 0)) for j in sorted(ints)] + [1.0] * len(cats)
    return idx, np.array(val, np.float32)


def _write(path, lines, gz=False):
    data = ("\n".join(lines) + "\n").encode()
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def test_splitmix64_known_values():
    # Reference outputs of splitmix64's finalizer (mix of 0 is 0; value for 1 from the C code).
    got = splitmix64(np.array([0, 1], np.uint64))
    assert got[0] == 0 and got[1] == 0x5692161D100B05E5


def test_hex8_words_decodes_any_case_and_flags_every_non_hex_byte():
    rng = np.random.default_rng(0)
    tokens = np.concatenate([[0, 0xFFFFFFFF, 0x0123ABCD], rng.integers(0, 2**32, 5000)])
    chars = np.ascontiguousarray(format_hex8(tokens.astype(np.uint32)))
    upper = np.where((chars >= ord("a")), chars - 32, chars).astype(np.uint8)
    for text in (chars, upper):
        got, bad = hex8_words(text.view("<u8").ravel())
        np.testing.assert_array_equal(got, tokens)
        assert not bad.any()
    hexdigits = set(b"0123456789abcdefABCDEF")
    for pos in range(8):
        text = np.repeat(chars[:1], 256, axis=0)
        text[:, pos] = np.arange(256)
        _, bad = hex8_words(text.view("<u8").ravel())
        np.testing.assert_array_equal(bad, [b not in hexdigits for b in range(256)])


@pytest.mark.parametrize("bits", [5, 20, 31])
def test_categorical_indices_are_cat_index(tmp_path, bits):
    """The converter's in-place hashing gives criteo_hash.cat_index's indices (what the maker
    uses) for every field, with the largest tokens and the smallest and largest hash spaces."""
    rng = np.random.default_rng(bits)
    tokens = rng.integers(0, 2**32, (300, 26)).astype(np.uint32)
    tokens[0] = 0xFFFFFFFF
    lines = ["1\t" + "\t" * 13 + "\t".join(f"{t:08x}" for t in row) for row in tokens]
    path = _write(tmp_path / "d.tsv", lines)
    convert_criteo(path, tmp_path / "out.parquet", hash_bits=bits)
    chunk = Dataset(tmp_path / "out.parquet").read_chunk(0)
    np.testing.assert_array_equal(
        chunk.indices.reshape(300, 26), cat_index(np.arange(26), tokens, bits)
    )


@pytest.mark.parametrize("gz", [False, True])
def test_fields_become_the_documented_features(tmp_path, gz):
    path = _write(tmp_path / "day.tsv", ROWS, gz=gz)
    report = convert_criteo(path, tmp_path / "out.parquet", hash_bits=BITS, row_group_rows=2)
    assert (report.rows, report.row_groups, report.bad_rows) == (3, 2, 0)
    ds = Dataset(tmp_path / "out.parquet")
    assert ds.n_features == 1 << BITS and ds.metadata["hash_bits"] == BITS
    chunks = list(ds.iter_chunks())
    np.testing.assert_array_equal(np.concatenate([c.y for c in chunks]), [1, -1, -1])
    first = chunks[0]
    idx, val = _expected_row({0: "5", 1: "-3", 12: "0"}, {0: "68fd1e64", 25: "ABCDEF01"})
    np.testing.assert_array_equal(first.indices[: first.indptr[1]], idx)
    np.testing.assert_array_equal(first.values[: first.indptr[1]], val)
    assert first.indptr[2] - first.indptr[1] == 0  # the all-empty row has no entries
    idx, val = _expected_row({2: "1000"}, {3: "00000000"})
    np.testing.assert_array_equal(chunks[1].indices, idx)
    assert all(13 <= i < 1 << BITS for i in idx[1:])


@pytest.mark.parametrize("block_bytes", [50, 1000])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_blocks_of_lines_of_any_size_give_the_same_file(tmp_path, block_bytes, newline):
    """Blocks are cut at line ends whatever their size (50 bytes: shorter than a line) and
    line-end style, and a last line without its line end is read."""
    rows = [
        _row(i % 2, {0: str(i)}, {c: f"{i * 7919 + c:08x}" for c in range(0, 26, 3)})
        for i in range(40)
    ]
    path = tmp_path / "d.tsv"
    path.write_bytes(newline.join(rows).encode())  # no final line end
    convert_criteo(path, tmp_path / "a.parquet", hash_bits=BITS, block_bytes=block_bytes)
    convert_criteo(path, tmp_path / "b.parquet", hash_bits=BITS, row_group_rows=7)
    a, b = Dataset(tmp_path / "a.parquet"), Dataset(tmp_path / "b.parquet")
    assert a.n_rows == b.n_rows == 40
    first = np.concatenate([c.indices for c in a.iter_chunks()])
    second = np.concatenate([c.indices for c in b.iter_chunks()])
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(a.read_chunk(0).values[:2], [np.log1p(0), 1])


def test_unlabelled_files_have_no_label_column(tmp_path):
    lines = [_row(None, {0: "7"}, {1: "0000abcd"}), _row(None, {}, {})]
    path = _write(tmp_path / "test.tsv", lines)
    convert_criteo(path, tmp_path / "out.parquet", hash_bits=BITS)
    with pytest.raises(DataError, match="has no 'label' column"):
        Dataset(tmp_path / "out.parquet")
    ds = Dataset(tmp_path / "out.parquet", require_labels=False)
    assert not ds.has_labels and ds.nnz == 2


@pytest.mark.parametrize(
    "bad, problem",
    [
        ("1\t2\t3", "expected 40 tab-separated fields, found 3"),
        (_row(1, {4: "12x"}, {}), "integer field I5 holds '12x'"),
        (_row(1, {}, {7: "xyz"}), "categorical field C8 holds 'xyz', not 8 hex digits"),
        (_row(1, {}, {7: "0000zzzz"}), "categorical field C8 holds '0000zzzz'"),
        (_row(2, {}, {}), "label is '2', expected 0 or 1"),
    ],
)
def test_a_bad_row_is_named_by_line_and_nothing_is_left(tmp_path, bad, problem):
    path = _write(tmp_path / "day.tsv", ROWS + [bad] + ROWS)
    out = tmp_path / "out.parquet"
    with pytest.raises(DataError, match=f"day.tsv, line 4: {problem}.*--skip-bad-rows"):
        convert_criteo(path, out, hash_bits=BITS)
    assert not out.exists() and leftovers(tmp_path) == []
    report = convert_criteo(path, out, hash_bits=BITS, skip_bad_rows=1)
    assert (report.rows, report.bad_rows) == (6, 1)
    assert [ln for ln, _ in report.bad_lines] == [4]


def test_skip_budget_is_a_limit(tmp_path):
    path = _write(tmp_path / "day.tsv", ROWS + ["x"] + ROWS + ["y\tz"])
    with pytest.raises(DataError, match="line 4: expected 40"):
        convert_criteo(path, tmp_path / "out.parquet", skip_bad_rows=1)
    assert leftovers(tmp_path) == []
    report = convert_criteo(path, tmp_path / "out.parquet", skip_bad_rows=2)
    assert report.bad_rows == 2 and [ln for ln, _ in report.bad_lines] == [4, 8]


def test_first_line_decides_labelled_or_not(tmp_path):
    path = _write(tmp_path / "x.tsv", ["a\tb"])
    with pytest.raises(DataError, match="x.tsv, line 1: has 2 tab-separated fields"):
        convert_criteo(path, tmp_path / "out.parquet")


def test_maker_parquet_equals_converting_its_tsv(tmp_path):
    """The direct Parquet output and the converted TSV give the same chunks, row for row."""
    rows = 40_000  # two maker blocks, the second cut short
    make_criteo_like_tsv(tmp_path / "d.tsv.gz", rows, seed=7)
    convert_criteo(
        tmp_path / "d.tsv.gz", tmp_path / "conv.parquet", hash_bits=16, row_group_rows=15_000
    )
    make_criteo_like_parquet(
        tmp_path / "made.parquet", rows, seed=7, hash_bits=16, row_group_rows=15_000
    )
    a, b = Dataset(tmp_path / "conv.parquet"), Dataset(tmp_path / "made.parquet")
    assert a.chunks[0][1:] == b.chunks[0][1:] and len(a.chunks) == 3
    for ca, cb in zip(a.iter_chunks(), b.iter_chunks(), strict=True):
        for p, q in zip(ca, cb, strict=True):
            np.testing.assert_array_equal(p, q)


def test_maker_is_seeded_prefix_stable_and_criteo_shaped():
    X, y = make_criteo_like(50_000, seed=3, hash_bits=18)
    X2, y2 = make_criteo_like(20_000, seed=3, hash_bits=18)
    assert (X[:20_000] != X2).nnz == 0 and np.array_equal(y[:20_000], y2)
    X3, _ = make_criteo_like(20_000, seed=4, hash_bits=18)
    assert (X3 != X2).nnz > 0
    assert 0.03 <= y.mean() <= 0.25
    per_row = np.diff(X.indptr)
    assert 25 < per_row.mean() < 39 and per_row.max() <= 39
    assert X.shape == (50_000, 1 << 18) and X.indices.max() < 1 << 18
    assert (X[:, [1]].toarray() == 0).any()  # I2 negatives map to log1p(0) = 0 entries


def test_conversion_records_the_first_tokens_of_each_field_by_index(tmp_path, monkeypatch):
    """``names``: up to NAMES_PER_FIELD tokens per categorical field from the file's head, each
    at the index its rows carry, collisions flagged; a model names its weights with them."""
    import pyarrow.parquet as pq

    import snapfit
    from snapfit.data.schema import decode_metadata
    from snapfit.datasets import criteo, make_criteo_like_tsv

    monkeypatch.setattr(criteo, "NAMES_PER_FIELD", 20)
    make_criteo_like_tsv(tmp_path / "d.tsv", 400, seed=1)
    convert_criteo(tmp_path / "d.tsv", tmp_path / "d.parquet", hash_bits=16)
    names = decode_metadata(pq.ParquetFile(tmp_path / "d.parquet").metadata.metadata)["names"]
    keys = {k: int(i) for i, k in names["keys"].items()}
    per_field = {}
    for k in keys:
        per_field[k.split("=")[0]] = per_field.get(k.split("=")[0], 0) + 1
    assert max(per_field.values()) <= 20 and len(per_field) > 10
    chunk = Dataset(tmp_path / "d.parquet").read_chunk(0)
    lines = (tmp_path / "d.tsv").read_text().splitlines()
    checked = 0
    for r, line in enumerate(lines):
        fields = line.split("\t")[1:]
        row = set(chunk.indices[chunk.indptr[r] : chunk.indptr[r + 1]].tolist())
        for c in range(26):
            key = f"C{c + 1}={fields[13 + c]}"
            if fields[13 + c] and key in keys and keys[key] not in names["collisions"]:
                assert keys[key] in row
                checked += 1
    assert checked > 100
    est = snapfit.LogisticRegression(C=0.1).fit(tmp_path / "d.parquet")
    named = [t["name"] for t in est.top_features(200) if t["name"]]
    assert any(n.startswith("C") for n in named) and any(n.startswith("I") for n in named)
