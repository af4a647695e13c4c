"""``snapfit demo``: a first run on made-up Criteo-like data, nothing to download."""

from __future__ import annotations

import click


@click.command("demo")
@click.option("--rows", type=click.IntRange(min=1000), default=250_000, show_default=True,
              help="Rows to generate (80 % train, 20 % test).")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--C", "C", type=click.FloatRange(min=0, min_open=True), default=0.1,
              show_default=True, help="Inverse regularization strength.")  # fmt: skip
@click.option("--n-jobs", type=int, default=-1, show_default=True, help="CPU threads (-1: all).")
def demo(rows: int, seed: int, C: float, n_jobs: int) -> None:
    """Train on a seeded Criteo-like demo set and print logloss, AUC, gap and seconds."""
    from snapfit.demo import run_demo

    r = run_demo(rows, seed=seed, C=C, n_jobs=n_jobs)
    click.echo(
        f"Criteo-like demo: {r['rows']:,} rows x {r['features']:,} features, {r['nnz']:,} nnz, "
        f"positive rate {r['positive_rate']:.3f}, C={r['C']}"
    )
    click.echo(f"{'':8}{'logloss':>10}{'AUC':>10}")
    for part in ("train", "test"):
        click.echo(f"{part:8}{r[part + '_logloss']:10.5f}{r[part + '_auc']:10.4f}")
    click.echo(
        f"duality gap (relative) {r['rel_gap']:.2e} after {r['epochs']} epochs, "
        f"{r['seconds']:.2f} s training"
    )


commands = [demo]
