"""Data-layer benchmarks: reader throughput per Parquet variant, converter and maker speed.

Run: ``python bench/bench_data.py [--rows N] [--tsv-rows N] [--dir DIR]``. Not collected by
pytest. Every timing is the median of 3 runs; the reader numbers are one thread decoding row
groups into CSR arrays (``read_row_group(use_threads=False)`` + the reader's decode and checks).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from snapfit.data import Dataset
from snapfit.data.schema import DEFAULT_ROW_GROUP_ROWS
from snapfit.data.writer import ChunkWriter
from snapfit.datasets import convert_criteo, make_criteo_like_parquet, make_criteo_like_tsv
from snapfit.datasets.criteo_hash import N_CAT, N_INT, rows_to_csr


def median_time(fn, repeat=3):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def read_all(path, validate=True):
    """Decode every row group of ``path`` to CSR on this thread; returns nnz."""
    ds = Dataset(path, validate=validate)
    return sum(ds.read_chunk(k).nnz for k in range(len(ds.chunks)))


def read_flat(path):
    """Decode the 'flat' layout: per row group, flat indices/values columns (nnz rows)."""
    pf = pq.ParquetFile(path)
    nnz = 0
    for g in range(pf.metadata.num_row_groups):
        t = pf.read_row_group(g, use_threads=False)
        idx = t.column("indices").chunk(0).to_numpy()
        val = t.column("values").chunk(0).to_numpy()
        nnz += len(idx) + 0 * len(val)
    return nnz


def write_variant(src: Dataset, path, **opts):
    layout = opts.pop("layout", "list")
    if layout == "flat":
        with pq.ParquetWriter(
            path, pa.schema([("indices", pa.int32()), ("values", pa.float32())]), **opts
        ) as w:
            for c in src.iter_chunks():
                w.write_table(
                    pa.table({"indices": c.indices, "values": c.values}),
                    row_group_size=len(c.indices),
                )
        return
    writer = ChunkWriter(
        path, n_features=src.n_features, row_group_rows=src.chunks[0].n_rows, parquet_options=opts
    )
    for c in src.iter_chunks():
        writer.append(c.indptr, c.indices, c.values, (c.y > 0).astype(np.int8))
    writer.close()


def bench_reader(base: str, work: str) -> None:
    src = Dataset(base)
    print(
        f"\nreader: {src.n_rows} rows, {src.nnz / 1e6:.1f} M nnz, {len(src.chunks)} row groups "
        f"(1 thread, median of 3)"
    )
    print(f"{'variant':38s} {'MB':>7s} {'M nnz/s':>8s}")
    variants = [
        (f"list {codec} dict={d}", dict(compression=codec, use_dictionary=d))
        for codec in ("none", "snappy", "lz4", "zstd")
        for d in (False, True)
    ]
    variants.append(
        (
            "flat columns lz4 (no row structure)",
            dict(layout="flat", compression="lz4", use_dictionary=False),
        )
    )
    for name, opts in variants:
        path = os.path.join(work, "variant.parquet")
        flat = opts.get("layout") == "flat"
        write_variant(src, path, **dict(opts))
        read_all(path) if not flat else read_flat(path)  # warm the page cache
        t = median_time(lambda p=path, f=flat: read_flat(p) if f else read_all(p))
        mb = os.path.getsize(path) / 1e6
        print(f"{name:38s} {mb:7.0f} {src.nnz / t / 1e6:8.1f}")
        if name == "list lz4 dict=False":
            t_off = median_time(lambda p=path: read_all(p, validate=False))
            print(f"{'  (same, validate=False)':38s} {'':7s} {src.nnz / t_off / 1e6:8.1f}")
        os.remove(path)


#: Hex digit -> nibble (255: not a hex digit), for the baseline's tokens.
_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16)
_HEX[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16)


def parse_hex8(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Tokens (uint32) of the 8-digit hex strings starting at ``starts`` in buffer ``data``: the
    baseline's numpy parsing (the converter itself parses in Arrow)."""
    chars = data[starts[:, None] + np.arange(8)]
    packed = (_HEX[chars][:, 0::2] << np.uint8(4)) | _HEX[chars][:, 1::2]
    return np.ascontiguousarray(packed).view(">u4").ravel().astype(np.uint32)


def pandas_baseline(tsv: str, out: str, hash_bits: int, row_group_rows: int) -> None:
    """pandas.read_csv in chunks + the same numpy hashing and writer as the converter."""
    import pandas as pd

    names = ["label"] + [f"I{j}" for j in range(N_INT)] + [f"C{c}" for c in range(N_CAT)]
    dtypes = {n: "float64" for n in names[: N_INT + 1]} | {n: "object" for n in names[N_INT + 1 :]}
    writer = ChunkWriter(out, n_features=1 << hash_bits, row_group_rows=row_group_rows)
    for df in pd.read_csv(
        tsv, sep="\t", header=None, names=names, dtype=dtypes, chunksize=1 << 17, na_filter=True
    ):
        n = len(df)
        ints = df[names[1 : N_INT + 1]].to_numpy()
        int_present = ~np.isnan(ints)
        cats = df[names[N_INT + 1 :]]
        cat_present = cats.notna().to_numpy()
        tokens = np.zeros((n, N_CAT), np.uint32)
        for c in range(N_CAT):
            raw = cats.iloc[:, c].fillna("00000000").to_numpy(dtype="S8")
            tokens[:, c] = parse_hex8(np.frombuffer(raw.tobytes(), np.uint8), np.arange(n) * 8)
        csr = rows_to_csr(
            np.nan_to_num(ints).astype(np.int64), int_present, tokens, cat_present, hash_bits
        )
        writer.append(*csr, df["label"].to_numpy().astype(np.int8))
    writer.close()


def bench_converter(tsv_rows: int, work: str) -> None:
    """convert_criteo against the pandas baseline, runs interleaved (ours, baseline, ours, ...)
    so a change in the machine's load hits both; wall and process CPU seconds, medians of 3."""
    tsv = os.path.join(work, "criteo.tsv")
    make_criteo_like_tsv(tsv, tsv_rows, seed=1)
    mb = os.path.getsize(tsv) / 1e6
    out = os.path.join(work, "conv.parquet")
    runs = {
        "convert_criteo (pyarrow csv + numpy)": lambda: convert_criteo(
            tsv, out, row_group_rows=DEFAULT_ROW_GROUP_ROWS, force=True
        ),
        "pandas.read_csv + numpy hashing": lambda: pandas_baseline(
            tsv, out, 20, DEFAULT_ROW_GROUP_ROWS
        ),
    }
    times = {name: [] for name in runs}
    for _ in range(3):
        for name, fn in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    print(f"\nconverter: {tsv_rows} rows, {mb:.0f} MB of TSV (median of 3, interleaved)")
    med = {}
    for name, t in times.items():
        med[name] = (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
        print(f"  {name:37s} {mb / med[name][0]:7.1f} MB/s  ({med[name][1]:.1f} s CPU)")
    (ours_w, ours_c), (base_w, base_c) = med.values()
    print(f"  {'speed-up':37s} {base_w / ours_w:7.2f} x    ({base_c / ours_c:.2f} x less CPU)")


def bench_maker(rows: int, work: str) -> str:
    path = os.path.join(work, "made.parquet")
    repeat = 3 if rows <= 4_000_000 else 1
    t = median_time(lambda: make_criteo_like_parquet(path, rows, seed=1, force=True), repeat)
    tsv = os.path.join(work, "made.tsv")
    small = min(rows, 1_000_000)
    t_tsv = median_time(lambda: make_criteo_like_tsv(tsv, small, seed=1, force=True), repeat)
    os.remove(tsv)
    print(
        f"\nmake-data criteo-like: {rows / t:,.0f} rows/s to Parquet ({rows} rows), "
        f"{small / t_tsv:,.0f} rows/s to TSV ({small} rows)"
    )
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4_000_000, help="rows for maker and reader")
    p.add_argument("--tsv-rows", type=int, default=1_000_000, help="rows for the converter")
    p.add_argument("--dir", default=None, help="scratch directory, made if missing (default: temp)")
    args = p.parse_args()
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        base = bench_maker(args.rows, work)
        bench_reader(base, work)
        bench_converter(args.tsv_rows, work)


if __name__ == "__main__":
    main()
