"""Options shared by the CLI's commands (mlflow's ``cli_args`` layout): one definition each."""

from __future__ import annotations

import click


def parse_bytes(text: str) -> int:
    """A size such as ``2GB`` or ``800M`` (decimal, as Dask), ``512MiB`` (binary), ``1e9``: the
    library's parser, so ``--memory-budget`` means what ``memory_budget=`` means."""
    from snapfit.stream.budget import parse_memory_budget

    return parse_memory_budget(text)


class ByteSize(click.ParamType):
    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_bytes(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


def _json_path(ctx, param, value):
    """An unwritable --json FILE is refused before any work, not after a long fit."""
    if value and value != "-":
        from snapfit.data.writer import check_writable

        check_writable(value)
    return value


JSON = click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    callback=_json_path,
    metavar="FILE",
    help="Also write the result as JSON to FILE ('-' for stdout); FILE is overwritten.",
)
DEVICE = click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "gpu"]),
    default="auto",
    show_default=True,
    help="Where to train; 'gpu' fails (exit 4) when no usable GPU is found.",
)


def _device_ids(ctx, param, value):
    if value is None:
        return None
    try:
        ids = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a list of GPU numbers like 0,1.") from None
    if not ids or min(ids) < 0:
        raise click.BadParameter(f"{value!r}: give GPU numbers >= 0, like 0,1.")
    return ids


GPUS = click.option(
    "--gpus",
    callback=_device_ids,
    default=None,
    metavar="IDS",
    help="GPUs to train on, e.g. 0,1 (one unit each; implies --device gpu). On Dask workers: "
    "the ids each worker uses (default 0, the GPU dask-cuda gives it).",
)


def _n_jobs(ctx, param, value):
    if value == 0:
        raise click.BadParameter("0 threads cannot train; give N >= 1, or -1 for all cores.")
    return value


N_JOBS = click.option(
    "--n-jobs",
    type=int,
    default=None,
    callback=_n_jobs,
    metavar="N",
    help="Host threads (-1: all cores); each GPU drives one, the others train on the CPU.",
)
CHUNK_ROWS = click.option(
    "--chunk-rows",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Rows per chunk when the data is cut in memory.",
)


def out_option(metavar: str, help: str):
    """A command's ``--out``: the file it writes (through a temporary name, then renamed)."""
    return click.option(
        "--out", type=click.Path(dir_okay=False), required=True, metavar=metavar, help=help
    )


FORCE = click.option("--force", is_flag=True, help="Overwrite the output file if it exists.")


class PathOrURL(click.Path):
    """An existing local path, a glob matching files (``'day_*.parquet'``, quoted), or a URL
    (``s3://``, ``gs://``, ``hdfs://``, ``file://``, any fsspec protocol) that is checked when
    it is read: what ``snapfit.data.resolve_files`` takes, for every command."""

    def convert(self, value, param, ctx):
        import glob
        import os

        if isinstance(value, str) and "://" in value:
            return value
        if isinstance(value, str) and glob.has_magic(value) and not os.path.exists(value):
            if not glob.glob(value):
                self.fail(f"{value!r} matches no files.", param, ctx)
            return value
        return super().convert(value, param, ctx)


MODEL = click.argument("model", type=click.Path(exists=True, dir_okay=False), metavar="MODEL")
DATA = click.argument("data", type=PathOrURL(exists=True), metavar="DATA")


def memory_budget_option(default, help):
    return click.option(
        "--memory-budget",
        type=ByteSize(),
        default=default,
        show_default=default is not None,
        metavar="SIZE",
        help=help,
    )


# -- small helpers ----------------------------------------------------------------------------
