"""CLI commands of the data layer: convert, make-data, info. Thin: parse, call, print."""

from __future__ import annotations

import json
import time

import click

from snapfit.cli.args import FORCE, JSON, PathOrURL
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
    help="Criteo and table: n_features = 2**bits; categorical tokens are hashed into it.",
)


def _report_json(json_path, command: str, report, seconds: float, **extra) -> None:
    from snapfit.cli.format import write_json

    write_json(json_path, dict(command=command, output=report.output, rows=report.rows,
                               nnz=report.nnz, row_groups=report.row_groups, seconds=seconds,
                               **extra))  # fmt: skip


def _split(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(","))
    if not all(names):
        raise click.BadParameter(f"{value!r}: give column names separated by commas, like a,b.")
    return names


def _columns(ctx, param, value):
    """``a,b,c`` -> ("a", "b", "c"); for --cross (given any number of times), one per use."""
    if value is None:
        return None
    return tuple(_split(v) for v in value) if param.multiple else _split(value)


_TABLE_OPTIONS = (
    "label",
    "unlabelled",
    "weight",
    "categorical",
    "numeric",
    "cross",
    "numeric_transform",
)
_OTHER_OPTIONS = ("skip_bad_rows", "zero_based", "n_features")


def _check_format_options(ctx: click.Context, fmt: str | None, table: dict) -> None:
    """Usage errors (exit 2): table options with another format, another format's options
    with a table, no --label (nor --unlabelled) for a table, options that clash."""
    from click.core import ParameterSource

    given = [
        p.name
        for p in ctx.command.params
        if ctx.get_parameter_source(p.name) not in (None, ParameterSource.DEFAULT)
    ]

    def flags(names):
        return ", ".join("--" + n.replace("_", "-") for n in given if n in names)

    if fmt != "table":
        if flags(_TABLE_OPTIONS):
            raise click.UsageError(f"{flags(_TABLE_OPTIONS)}: for --format table only.", ctx)
        return
    if flags(_OTHER_OPTIONS):
        raise click.UsageError(f"{flags(_OTHER_OPTIONS)}: not for --format table.", ctx)
    if (table["label"] is None) != table["unlabelled"]:
        raise click.UsageError(
            "--format table needs either --label NAME (the label column) or --unlabelled (a "
            "table without labels, to score).",
            ctx,
        )
    from snapfit.datasets.tabular import check_options

    try:
        check_options(
            label=table["label"],
            weight=table["weight"],
            categorical=table["categorical"],
            numeric=table["numeric"],
            crosses=table["cross"],
        )
    except ValueError as e:
        raise click.UsageError(str(e), ctx) from None


def _feature_map_line(path: str) -> str:
    """One line naming the feature map a table conversion wrote (from the file's metadata)."""
    import pyarrow.parquet as pq

    from snapfit.data.schema import decode_metadata

    md = decode_metadata(pq.read_metadata(path).metadata)
    parts = []
    if md["categorical"]:
        parts.append("categorical " + ", ".join(md["categorical"]))
    if md["numeric"]:
        parts.append(f"numeric {', '.join(md['numeric'])} ({md['numeric_transform']})")
    if md["crosses"]:
        parts.append("crosses " + ", ".join("^".join(c) for c in md["crosses"]))
    return f"Features: {'; '.join(parts)}; hashed into 2^{md['hash_bits']}."


def _summary(report, seconds: float) -> str:
    return (
        f"Wrote {report.output}: {report.rows} rows, {report.nnz} nnz, "
        f"{report.row_groups} row group{'' if report.row_groups == 1 else 's'} in {seconds:.1f} s."
    )


@click.command()
@click.argument("input", type=PathOrURL(exists=True), metavar="INPUT")
@click.argument("output", type=click.Path(dir_okay=False), metavar="OUTPUT")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["criteo", "svmlight", "parquet", "table"]),
    default=None,
    help="Input format (default: detected from the content; 'table' is never detected).",
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
@click.option(
    "--n-features",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="svmlight: the feature-space width (default: the largest index + 1); give a test "
    "file the training file's width (a9a.t's largest index is one short of a9a's).",
)
@click.option("--label", metavar="NAME", help="table: the label column (0/1, -1/+1 or true/false).")
@click.option("--unlabelled", is_flag=True, help="table: no label column (data to score).")
@click.option("--weight", metavar="NAME", help="table: a sample-weight column (numbers >= 0).")
@click.option(
    "--categorical",
    metavar="A,B",
    callback=_columns,
    help="table: columns hashed one-hot as 'a=value' (default: text and boolean columns).",
)
@click.option(
    "--numeric",
    metavar="X,Y",
    callback=_columns,
    help="table: columns hashed as one slot 'x' holding the transformed value (default: "
    "number columns). Naming either list leaves the other empty unless named too.",
)
@click.option(
    "--cross",
    metavar="A,B",
    multiple=True,
    callback=_columns,
    help="table: a crossed feature 'a=va^b=vb' (repeat for more crosses).",
)
@click.option(
    "--numeric-transform",
    type=click.Choice(["log1p", "identity"]),
    default="log1p",
    show_default=True,
    help="table: value of a numeric column: sign(v)*log1p(|v|), or v as is.",
)
@JSON
@click.pass_context
def convert(
    ctx, input, output, fmt, hash_bits, row_group_rows, force, skip_bad_rows, zero_based,
    n_features, json_path, **table,
):  # fmt: skip
    """Convert INPUT (Criteo TSV plain or .gz, svmlight, Parquet to re-check and re-chunk, or
    with --format table the named columns of a Parquet or CSV table) to a snapfit Parquet file
    OUTPUT.

    Table: categorical columns become one-hot features 'column=value', numeric columns one
    feature 'column' each, crosses 'a=va^b=vb'; all hashed into 2**hash-bits features. Empty
    values give no feature. The feature map is stored in OUTPUT's metadata.
    """
    from snapfit.datasets import convert as run

    _check_format_options(ctx, fmt, table)
    if n_features is not None:
        from snapfit.datasets.convert import detect_format

        if (fmt or detect_format(input)) != "svmlight":
            raise click.UsageError(
                "--n-features: for svmlight input only (Criteo and tables take --hash-bits).", ctx
            )
    options = {}
    if fmt == "table":
        options = dict(
            label=table["label"],
            weight=table["weight"],
            categorical=table["categorical"],
            numeric=table["numeric"],
            crosses=table["cross"],
            numeric_transform=table["numeric_transform"],
        )
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
        n_features=n_features,
        **options,
    )
    seconds = time.perf_counter() - start
    if json_path:
        bad = [{"line": line, "problem": problem} for line, problem in report.bad_lines]
        _report_json(json_path, "convert", report, seconds, input=input, bad_rows=report.bad_rows,
                     bad_lines=bad)  # fmt: skip
    if json_path != "-":
        click.echo(_summary(report, seconds))
    if fmt == "table" and json_path != "-":
        click.echo(_feature_map_line(report.output))
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
            from snapfit.cli.format import write_json

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
@click.argument("path", metavar="PATH", required=False)
@click.option(
    "--device",
    "devices",
    is_flag=True,
    help="Describe this machine's GPUs instead: properties, default launch, backend.",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    metavar="K",
    help="For a model: the K largest weights by magnitude (feature index and weight).",
)
def info(path, devices, as_json, top):
    """Summarize a snapfit Parquet dataset (file, directory or glob) from its metadata, a
    model file written by `snapfit train`, or with --device the GPUs snapfit would train on."""
    if devices or path is None:
        if path is not None or not devices:
            raise click.UsageError("Give a dataset or model PATH, or --device (not both).")
        return _device_info(as_json)
    from snapfit.model import is_model_file

    if is_model_file(path):
        from snapfit.cli.format import model_lines
        from snapfit.model import model_info

        summary = model_info(path, top=top)
        click.echo(
            json.dumps(summary, indent=2, sort_keys=True) if as_json else model_lines(summary)
        )
        return
    from snapfit.data.info import dataset_info

    summary = dataset_info(path)
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    lines = [
        f"source:        {summary['source']} ({summary['files']} files)",
        f"rows:          {summary['rows']}",
        f"nnz:           {summary['nnz']} ({summary['nnz'] / max(summary['rows'], 1):.1f} per row)",
        f"n_features:    {summary['n_features']}",
        f"row groups:    {summary['row_groups']}",
        _label_line(summary),
        f"bytes on disk: {summary['bytes']}",
        f"snapfit format: {summary['format_version']}",
    ]
    lines += [f"{k + ':':<14} {v}" for k, v in sorted(summary["provenance"].items())]
    click.echo("\n".join(lines))


def _label_line(summary: dict) -> str:
    """``positive rate: 0.2207``, or for real targets their mean, spread and range."""
    t = summary["targets"]
    if t is not None:
        return (f"targets:       real, mean {t['mean']:.6g}, std {t['std']:.6g}, "
                f"min {t['min']:.6g}, max {t['max']:.6g}")  # fmt: skip
    rate = summary["positive_rate"]
    return f"positive rate: {'unlabelled' if rate is None else f'{rate:.4f}'}"


def _device_info(as_json: bool) -> None:
    from snapfit.gpu.launch import describe_devices

    summary = describe_devices()
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    if not summary["gpus"]:
        click.echo(f"No GPU: {summary['reason']}.")
        return
    for g in summary["gpus"]:
        memory = "unknown" if g["memory"] is None else f"{g['memory'] / 2**30:.1f} GiB"
        launch, chunk = g["launch"], g["chunk"]
        click.echo("\n".join([
            f"GPU {g['device']}: {g['name']} (compute capability {g['compute_capability']}), "
            f"{g['sm_count']} SMs, memory {memory}",
            f"  backend: {g['backend']}",
            f"  launch for {chunk['rows']}-row chunks of {chunk['nnz_per_row']:g} values per "
            f"row: {launch['blocks']} blocks x {launch['block']} threads, team "
            f"{launch['team']}, {launch['rows_in_flight']} rows in flight "
            f"(occupancy {g['occupancy']:.1%})",
        ]))  # fmt: skip


commands = [convert, make_data, info]
