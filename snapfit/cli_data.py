"""CLI commands of the data layer: convert, make-data, info. Thin: parse, call, print."""

from __future__ import annotations

import json
import time

import click

from snapfit.cli_args import FORCE, JSON, PathOrURL
from snapfit.data.schema import DEFAULT_ROW_GROUP_ROWS

_ROW_GROUP_ROWS = click.option(
    "--row-group-rows",
    type=click.IntRange(min=1),
    default=DEFAULT_ROW_GROUP_ROWS,
    show_default=True,
    metavar="N",
    help="Rows per Parquet row group (= per chunk when training).",
)
_HASH_BITS = click.option(
    "--hash-bits",
    type=click.IntRange(5, 31),
    default=20,
    show_default=True,
    help="Criteo: n_features = 2**bits; categorical tokens are hashed into it.",
)


def _report_json(json_path, command: str, report, seconds: float, **extra) -> None:
    from snapfit.cli_format import write_json

    write_json(json_path, dict(command=command, output=report.output, rows=report.rows,
                               nnz=report.nnz, row_groups=report.row_groups, seconds=seconds,
                               **extra))  # fmt: skip


def _summary(report, seconds: float) -> str:
    return (
        f"Wrote {report.output}: {report.rows} rows, {report.nnz} nnz, "
        f"{report.row_groups} row groups in {seconds:.1f} s."
    )


@click.command()
@click.argument("input", type=PathOrURL(exists=True), metavar="INPUT")
@click.argument("output", type=click.Path(dir_okay=False), metavar="OUTPUT")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["criteo", "svmlight", "parquet"]),
    default=None,
    help="Input format (default: detected from the content).",
)
@_HASH_BITS
@_ROW_GROUP_ROWS
@FORCE
@click.option(
    "--skip-bad-rows",
    type=click.IntRange(min=0),
    default=0,
    metavar="N",
    help="Criteo: drop up to N malformed rows (and list them) instead of failing.",
)
@click.option(
    "--zero-based",
    type=click.Choice(["auto", "yes", "no"]),
    default="auto",
    show_default=True,
    help="svmlight: index base ('auto' as scikit-learn: one-based unless an index is 0).",
)
@JSON
def convert(
    input, output, fmt, hash_bits, row_group_rows, force, skip_bad_rows, zero_based, json_path
):
    """Convert INPUT (Criteo TSV plain or .gz, svmlight, or Parquet to re-check and re-chunk)
    to a snapfit Parquet file OUTPUT."""
    from snapfit.datasets import convert as run

    start = time.perf_counter()
    report = run(
        input,
        output,
        format=fmt,
        hash_bits=hash_bits,
        row_group_rows=row_group_rows,
        force=force,
        skip_bad_rows=skip_bad_rows,
        zero_based={"auto": "auto", "yes": True, "no": False}[zero_based],
    )
    seconds = time.perf_counter() - start
    if json_path:
        bad = [{"line": line, "problem": problem} for line, problem in report.bad_lines]
        _report_json(json_path, "convert", report, seconds, input=input, bad_rows=report.bad_rows,
                     bad_lines=bad)  # fmt: skip
    if json_path != "-":
        click.echo(_summary(report, seconds))
    if report.bad_rows:
        click.echo(f"Skipped {report.bad_rows} bad rows:", err=True)
        for line, problem in report.bad_lines:
            click.echo(f"  line {line}: {problem}", err=True)


@click.command("make-data")
@click.argument("kind", type=click.Choice(["criteo-like"]), metavar="KIND")
@click.argument("output", type=click.Path(dir_okay=False), metavar="OUTPUT")
@click.option("--rows", type=click.IntRange(min=1), required=True, help="Rows to make.")
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same rows.")
@click.option("--tsv", is_flag=True, help="Write raw Criteo TSV (gzip if OUTPUT ends in .gz).")
@_HASH_BITS
@_ROW_GROUP_ROWS
@FORCE
@JSON
def make_data(kind, output, rows, seed, tsv, hash_bits, row_group_rows, force, json_path):
    """Make a synthetic data set of KIND (criteo-like) in OUTPUT, streaming to disk."""
    from snapfit.datasets import make_criteo_like_parquet, make_criteo_like_tsv

    start = time.perf_counter()
    if tsv:
        make_criteo_like_tsv(output, rows, seed, force=force)
        seconds = time.perf_counter() - start
        if json_path:
            from snapfit.cli_format import write_json

            write_json(json_path, {"command": "make-data", "output": output, "rows": rows,
                                   "format": "tsv", "seed": seed, "seconds": seconds})  # fmt: skip
        if json_path != "-":
            click.echo(f"Wrote {output}: {rows} rows in {seconds:.1f} s.")
        return
    report = make_criteo_like_parquet(
        output, rows, seed, hash_bits=hash_bits, row_group_rows=row_group_rows, force=force
    )
    seconds = time.perf_counter() - start
    if json_path:
        _report_json(json_path, "make-data", report, seconds, format="parquet", seed=seed,
                     hash_bits=hash_bits)  # fmt: skip
    if json_path != "-":
        click.echo(_summary(report, seconds))


@click.command()
@click.argument("path", metavar="PATH")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def info(path, as_json):
    """Summarize a snapfit Parquet dataset (file, directory or glob) from its metadata."""
    from snapfit.data.info import dataset_info

    summary = dataset_info(path)
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    rate = summary["positive_rate"]
    lines = [
        f"source:        {summary['source']} ({summary['files']} files)",
        f"rows:          {summary['rows']}",
        f"nnz:           {summary['nnz']} ({summary['nnz'] / max(summary['rows'], 1):.1f} per row)",
        f"n_features:    {summary['n_features']}",
        f"row groups:    {summary['row_groups']}",
        f"positive rate: {'unlabelled' if rate is None else f'{rate:.4f}'}",
        f"bytes on disk: {summary['bytes']}",
        f"snapfit format: {summary['format_version']}",
    ]
    lines += [f"{k + ':':<15}{v}" for k, v in sorted(summary["provenance"].items())]
    click.echo("\n".join(lines))


commands = [convert, make_data, info]
