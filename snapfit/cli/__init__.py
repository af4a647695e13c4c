"""The ``snapfit`` command: one click group, thin commands that call the library.

Command groups live in their own modules and are registered here. Library errors
(:class:`snapfit.errors.SnapfitError`) become one line on stderr and the error's exit code;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import sys

import click

from snapfit import __version__
from snapfit.errors import SnapfitError

#: The library's advice names Python arguments; the command line's names its flags.
CLI_WORDS = (
    (" (force=True)", ""),
    (" (skip_bad_rows=N)", ""),
    ("pass require_labels=False to read it for prediction", "`snapfit predict` scores it"),
    ("pass n_features=... or re-write it with snapfit", "re-write it with `snapfit convert`"),
    ("pass zero_based=True or 'auto'", "pass --zero-based yes or auto"),
    ("raise n_features", "raise --n-features"),
    ("a smaller chunk_rows", "a smaller --chunk-rows"),
    ("memory_budget of", "--memory-budget of"),
    ("continue with resume=True", "continue with --resume"),
    ("use deterministic=True (CoCoA+ threads)", "use --deterministic (CoCoA+ threads)"),
)


def speak_cli(message: str) -> str:
    """A library error's message with the command line's flags in place of arguments."""
    for python, flag in CLI_WORDS:
        message = message.replace(python, flag)
    return message


class _Group(click.Group):
    """Turns library errors into one line and an exit code, as datasette's CLI does."""

    def invoke(self, ctx):
        from snapfit import progress

        try:
            with progress.enabled():
                return super().invoke(ctx)
        except SnapfitError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"Error: {speak_cli(str(e))}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)


EXIT_CODES = (
    "Exit codes: 0 success; 1 other errors (e.g. an optional dependency missing); 2 usage "
    "errors (bad options or arguments); 3 bad input data (the message names file, row and "
    "column); 4 resources (memory budget, GPU, disk space); 130 interrupted (Ctrl-C)."
)


@click.group(
    cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES
)
@click.version_option(__version__, prog_name="snapfit")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Train sparse logistic regression out of core on CPU threads, GPUs and Dask."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register() -> None:
    # Each module exposes ``commands``: a list of click commands (mlflow's layout).
    from snapfit.cli import data as cli_data
    from snapfit.cli import demo as cli_demo
    from snapfit.cli import train as cli_train

    for module in (cli_data, cli_train, cli_demo):
        for command in module.commands:
            command.epilog = command.epilog or EXIT_CODES
            cli.add_command(command)


_register()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="snapfit")
