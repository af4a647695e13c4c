"""CLI commands around a model: train, predict, evaluate, report. Thin: parse, call, print.

The work is done by the library: ``snapfit.LogisticRegression`` trains, ``snapfit.scoring``
applies a model chunk by chunk, ``snapfit.metrics`` accumulates metrics, ``snapfit.report``
draws the curves. This module turns options into calls and results into text.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import warnings

import click

from snapfit.cli.args import (
    CHUNK_ROWS,
    DATA,
    DEVICE,
    FORCE,
    GPUS,
    JSON,
    MODEL,
    N_JOBS,
    PathOrURL,
    memory_budget_option,
    out_option,
)
from snapfit.cli.format import (
    Progress,
    budget_error,
    extra_of,
    kept_epoch,
    metric_rows,
    table,
    train_summary,
    write_json,
)
from snapfit.errors import ResourceError

#: Seconds to wait for a Dask scheduler named by --scheduler (distributed's default is 30-60).
CONNECT_TIMEOUT_S = 10.0


# -- shared options (mlflow's cli_args layout) ----------------------------------------------
def _record(rec) -> dict:
    return rec.as_dict() if hasattr(rec, "as_dict") else dict(rec)


def _test_metric(metric: str, data, coef, intercept: float) -> float:
    """The loss's test metric (``TEST_METRIC``) of the model so far on ``data``."""
    from snapfit.scoring import chunk_scores
    from snapfit.validation import regression_scores, weighted_mean

    batches = ((chunk_scores(coef, intercept, c), c.y, c.weight) for c in data.iter_chunks())
    return regression_scores(batches)[0] if metric == "rmse" else weighted_mean(batches, metric)


def _check_loss(ctx, loss: str, dask: bool, alpha, validation_metric, class_weight) -> str:
    """Usage errors of the options that depend on the loss; the validation metric to use."""
    from click.core import ParameterSource

    from snapfit.validation import LOSS_METRICS

    if loss == "squared" and dask:
        raise click.UsageError(
            "--loss squared trains on one machine for now: --scheduler and --workers train the "
            "classifiers (snapfit.dask.DaskRidge fits ridge on a cluster from Python)."
        )
    if loss == "squared":
        if ctx.get_parameter_source("C") not in (None, ParameterSource.DEFAULT):
            raise click.UsageError(
                "--C is the classifiers' regularization; ridge (--loss squared) takes --alpha "
                "(scikit-learn's Ridge alpha; alpha = 1/C)."
            )
        if class_weight:
            raise click.UsageError("--class-weight is for the classifiers, not --loss squared.")
    elif alpha is not None:
        raise click.UsageError("--alpha is ridge's (--loss squared); the classifiers take --C.")
    metrics = LOSS_METRICS[loss]
    if validation_metric is None:
        return metrics[0]
    if validation_metric not in metrics:
        raise click.UsageError(
            f"--validation-metric {validation_metric} does not score --loss {loss}; choose one "
            f"of {', '.join(metrics)}."
        )
    return validation_metric


def load_any(path):
    """The fitted estimator a model file was saved from, chosen by the loss its header records
    (``LogisticRegression``, ``LinearSVC`` or ``Ridge``)."""
    from snapfit.model import load_arrays

    loss = load_arrays(path)[1].get("loss", "logistic")
    if loss == "squared":
        from snapfit.ridge import load
    elif loss in ("hinge", "squared_hinge"):
        from snapfit.svm import load
    else:
        from snapfit.estimator import load
    return load(path)


def _fit_on_dask(est, data, scheduler, workers, on_epoch, validation=None):
    """Fit ``est``'s parameters on a Dask cluster; return the fitted local estimator (a
    ``LinearSVC`` for ``est`` one). A new local cluster for ``device="gpu"`` is dask-cuda's (one
    worker per GPU) when installed."""
    from snapfit import LinearSVC
    from snapfit.dask import DaskLinearSVC, DaskLogisticRegression, cluster_client

    gpu = est.device == "gpu"
    with contextlib.ExitStack() as stack:
        try:
            client = stack.enter_context(cluster_client(
                scheduler=scheduler, n_workers=workers, gpu=gpu,
                timeout=CONNECT_TIMEOUT_S if scheduler else 60.0,
            ))  # fmt: skip
        except (OSError, asyncio.TimeoutError) as e:  # distributed's connect timeout
            if not scheduler:
                raise
            raise ResourceError(
                f"{scheduler}: no Dask scheduler answered within {CONNECT_TIMEOUT_S:g} s "
                f"({type(e).__name__}); check the address and that a scheduler runs there."
            ) from None
        door = DaskLinearSVC if isinstance(est, LinearSVC) else DaskLogisticRegression
        dask_est = door(client=client, **est.get_params())
        dask_est.fit(data, on_round=lambda rec: on_epoch(rec, None, None), validation=validation)
        return dask_est.to_local()


@click.command()
@DATA
@click.option(
    "--test",
    type=PathOrURL(exists=True),
    metavar="TEST",
    help="Labelled data scored after every epoch by the loss's metric (log loss; an SVM's "
    "hinge loss; ridge's RMSE) and at the end (all its metrics).",
)
@click.option(
    "--validation",
    type=PathOrURL(exists=True),
    metavar="VALID",
    help="Labelled held-out data scored after every epoch by --validation-metric; with "
    "--early-stopping-rounds the best epoch's model is the one written.",
)
@click.option(
    "--early-stopping-rounds",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Stop when the validation metric has not improved for N eligible epochs (needs "
    "--validation); see --early-stopping-gap.",
)
@click.option(
    "--early-stopping-gap",
    type=click.FloatRange(min=0),
    default=1e-2,
    show_default=True,
    metavar="GAP",
    help="An epoch can be kept or end the fit early only once its relative duality gap is at "
    "most GAP: dual CD's early epochs score by luck of the path ('inf': every epoch counts).",
)
@click.option(
    "--validation-metric",
    type=click.Choice(["logloss", "auc", "accuracy", "hinge", "rmse", "r2"]),
    default=None,
    help="What --validation is scored by: logistic logloss (default) or auc; SVMs auc "
    "(default), accuracy or hinge (mean hinge loss); ridge rmse (default) or r2.",
)
@out_option("MODEL", "Model file to write (.npz; read by snapfit.load and the other commands).")
@click.option(
    "--C",
    "C",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Inverse regularization strength of the classifiers (scikit-learn's C; snapml's "
    "regularizer is 1/C).",
)
@click.option(
    "--alpha",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Ridge's regularization (--loss squared; scikit-learn's Ridge alpha, 1/C)  [default: 1]",
)
@DEVICE
@GPUS
@N_JOBS
@memory_budget_option(
    None,
    "Host memory for training data, e.g. 2GB (default: half of what this process may still use, "
    "cgroup limits included).",
)
@CHUNK_ROWS
@click.option(
    "--max-iter",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    metavar="N",
    help="Most epochs (passes over the data).",
)
@click.option(
    "--tol",
    type=click.FloatRange(min=0),
    default=1e-4,
    show_default=True,
    metavar="X",
    help="Stop at this relative duality gap (P - D) / |P|.",
)
@click.option(
    "--class-weight",
    type=click.Choice(["balanced"]),
    default=None,
    help="Weigh classes inversely to their frequency.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the visiting order.")
@click.option(
    "--deterministic/--shared-threads",
    default=True,
    show_default=True,
    help="How --n-jobs CPU threads work together: on private copies of the weights merged "
    "every epoch, bit-identical for a --seed and --n-jobs; or sharing one copy (about one "
    "thread's epochs, ~2x the CPU per epoch, not reproducible run to run).",
)
@click.option(
    "--hot-columns",
    is_flag=True,
    help="Solve the dense columns (intercept, integer fields, frequent values) as a primal "
    "block with a Newton step each epoch, so rows updated at once (GPU rows in flight, several "
    "units) couple only through sparse columns. Logistic loss, two classes, one machine.",
)
@click.option(
    "--checkpoint-dir",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="Save the solver state here after every epoch (and on Ctrl-C).",
)
@click.option("--resume", is_flag=True, help="Continue from the checkpoint in --checkpoint-dir.")
@click.option("--scheduler", metavar="ADDRESS", default=None,
              help="Train on a running Dask cluster (tcp://HOST:PORT); one that does not "
              "answer within 10 s is an error (exit 4).")  # fmt: skip
@click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
              help="Train on a new local Dask cluster of N worker processes.")  # fmt: skip
@JSON
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary table.")
@click.option("--loss", type=click.Choice(["logistic", "hinge", "squared_hinge", "squared"]),
              default="logistic", show_default=True,
              help="logistic: LogisticRegression; hinge, squared_hinge: a linear SVM (LinearSVC, "
              "read with snapfit.svm.load); squared: ridge regression of real targets (Ridge, "
              "--alpha; read with snapfit.ridge.load).")  # fmt: skip
@FORCE
@click.pass_context
def train(
    ctx, data, test, validation, early_stopping_rounds, early_stopping_gap, validation_metric,
    out, C, alpha, device, gpus, n_jobs, memory_budget, chunk_rows, max_iter, tol,
    class_weight,
    seed, deterministic, hot_columns, checkpoint_dir, resume, scheduler, workers, json_path,
    quiet, loss, force,
):  # fmt: skip
    """Train a model of --loss (logistic regression, a linear SVM, ridge regression) on DATA
    (Parquet file, directory or glob) and write it to MODEL."""
    from sklearn.exceptions import ConvergenceWarning

    from snapfit import LinearSVC, LogisticRegression, Ridge, featuremap
    from snapfit.cli.format import TEST_METRIC, n_iter
    from snapfit.data import Dataset, check_output
    from snapfit.data.validate import check_class_labels
    from snapfit.scoring import evaluate, open_for

    if resume and not checkpoint_dir:
        raise click.UsageError("--resume needs --checkpoint-dir DIR (where the checkpoint is).")
    if resume:
        from snapfit.fit_hooks import has_checkpoint

        if not has_checkpoint(checkpoint_dir):
            click.echo(f"No checkpoint in {checkpoint_dir}: --resume starts a fresh fit.", err=True)
    if quiet:
        from snapfit import progress

        progress.quiet()
    if scheduler and workers:
        raise click.UsageError("--scheduler and --workers exclude each other: use one.")
    if gpus is not None:
        if device == "cpu":
            raise click.UsageError("--gpus names GPUs but --device is cpu; use --device gpu.")
        device = "gpu"
    if early_stopping_rounds and not validation:
        raise click.UsageError("--early-stopping-rounds needs --validation FILE.")
    if hot_columns and (loss != "logistic" or scheduler or workers):
        raise click.UsageError(
            "--hot-columns fits logistic regression on one machine; drop it for --loss "
            f"{loss}" + (" or a Dask run." if scheduler or workers else ".")
        )
    if (scheduler or workers) and (checkpoint_dir or test):
        raise click.UsageError(
            "--checkpoint-dir and --test are for single-machine runs; a Dask fit checkpoints its "
            "dual variables on the driver every round and is evaluated with `snapfit evaluate`."
        )
    validation_metric = _check_loss(ctx, loss, bool(scheduler or workers), alpha,
                                    validation_metric, class_weight)  # fmt: skip
    start = time.perf_counter()
    check_output(out, [p for p in (data, test, validation) if p], force=force)
    if loss == "squared":
        est = Ridge(alpha=1.0 if alpha is None else alpha)
    else:
        est = LogisticRegression(C=C, class_weight=class_weight) if loss == "logistic" else (
            LinearSVC(C=C, class_weight=class_weight, loss=loss))  # fmt: skip
    est.set_params(
        tol=tol, max_iter=max_iter, device=device, n_jobs=n_jobs,
        device_ids=gpus, memory_budget=memory_budget, chunk_rows=chunk_rows, random_state=seed,
        deterministic=deterministic,
        early_stopping_rounds=early_stopping_rounds, early_stopping_gap=early_stopping_gap,
        validation_metric=validation_metric,
    )  # fmt: skip
    if checkpoint_dir:
        est.set_params(checkpoint_dir=checkpoint_dir)
    if hot_columns:
        est.set_params(hot_columns=True)
    # fail on a bad file before any work, with its name; targets as the loss reads them
    targets = "real" if loss == "squared" else "class"
    train_data = Dataset(data, targets=targets)
    test_data = Dataset(test, targets=targets) if test else None
    if loss != "squared":
        for one in (train_data, test_data):
            if one is not None and check_class_labels(one) is not None and test:
                raise click.UsageError(
                    f"{one.source} holds more than two classes: --test scores two per epoch; "
                    "train without it and score the model with `snapfit evaluate`."
                )
    # Every input converted the way the training data was, checked before the first epoch by
    # the rule of every scorer (`evaluate`, `predict`).
    train_map = featuremap.of_data(train_data)
    for path, role in ((test, "test"), (validation, "validation")):
        if path:
            other = test_data if role == "test" else Dataset(path)
            featuremap.check(train_map, featuremap.of_data(other), f"{path} ({role})",
                             "the training data")  # fmt: skip
    progress = Progress(max_iter=max_iter, tol=tol, quiet=quiet)
    history: list[dict] = []

    test_metric = TEST_METRIC[loss]

    def on_epoch(rec, coef, intercept):
        row = _record(rec)
        if test_data is not None and coef is not None:
            row[f"test_{test_metric}"] = _test_metric(test_metric, test_data, coef, intercept)
        history.append(row)
        progress.update(row)

    t_fit = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always", ConvergenceWarning)
            if scheduler or workers:
                est = _fit_on_dask(est, data, scheduler, workers, on_epoch, validation)
            else:
                est.fit(data, validation=validation, resume=resume, callbacks=[on_epoch])
    except KeyboardInterrupt:
        progress.close()
        if checkpoint_dir:
            click.echo(f"Checkpoint in {checkpoint_dir}; continue with --resume.", err=True)
        raise
    progress.close()
    fit_seconds = time.perf_counter() - t_fit
    # Not from the warnings caught: the estimator says how the fit ended (stopping early on
    # the validation metric is not convergence, and warns of nothing).
    converged = est.converged_
    est.history_ = [dict(h, **extra_of(h, history)) for h in est.history_]
    t_save = time.perf_counter()
    est.save(out)
    save_seconds = time.perf_counter() - t_save
    metrics, eval_seconds = None, 0.0
    if test_data is not None:
        t_eval = time.perf_counter()
        try:
            metrics = evaluate(est, open_for(est, test), memory_budget=memory_budget or 1 << 30)
        except Exception as e:
            from snapfit.metrics import BudgetError

            if isinstance(e, BudgetError):
                raise budget_error(e) from None
            raise
        eval_seconds = time.perf_counter() - t_eval
    total = time.perf_counter() - start
    if not quiet and json_path != "-":
        click.echo(train_summary(est, train_data, fit_seconds, converged, metrics, out))
    if json_path:
        params = {k: v for k, v in est.get_params().items() if k != "callbacks"}
        write_json(
            json_path,
            {
                "command": "train",
                "data": data,
                "test": test,
                "model": out,
                "params": params,
                "converged": converged,
                "stopped_early": est.stopped_early_,
                "n_iter": n_iter(est),
                "loss": loss,
                "kept_epoch": kept_epoch(est),
                "streamed": getattr(est, "streamed_", None),
                "cache_format": getattr(est, "cache_format_", None),
                "validation": validation,
                "best_iteration": getattr(est, "best_iteration_", None),
                "best_score": getattr(est, "best_score_", None),
                "rows": train_data.n_rows,
                "nnz": train_data.nnz,
                "n_features": train_data.n_features,
                "history": est.history_,
                "metrics": {"test": metrics} if metrics is not None else {},
                "timings": {
                    "fit": fit_seconds,
                    "save": save_seconds,
                    "evaluate": eval_seconds,
                    "total": total,
                },
            },
        )


@click.command()
@MODEL
@DATA
@out_option(
    "PRED",
    "Parquet file to write, one row per row of DATA in its order: "
    "'probability' (logistic), 'decision' (an SVM's margin) or 'prediction' (ridge).",
)
@click.option("--labels", is_flag=True, help="Also write a classifier's 'predicted_label' (0/1: "
              "probability above 0.5, margin above 0).")  # fmt: skip
@click.option(
    "--id-column",
    metavar="NAME",
    default=None,
    help="Copy DATA's column NAME (a row id) into PRED, first, so predictions join by key.",
)
@FORCE
@JSON
def predict(model, data, out, labels, id_column, force, json_path):
    """Write MODEL's probabilities (an SVM's margins, a ridge model's predictions) for the rows
    of DATA (labels not needed) to a Parquet file, one chunk at a time."""
    from snapfit import featuremap
    from snapfit.data import check_output
    from snapfit.datasets.featurize import is_raw
    from snapfit.scoring import open_for, predict_raw_to_parquet, predict_to_parquet

    start = time.perf_counter()
    check_output(out, [data, model], force=force)
    est = load_any(model)
    if labels and est._loss_name() == "squared":
        raise click.UsageError("--labels is for classifiers; a ridge model predicts numbers.")
    if is_raw(data, featuremap.of_model(est)):  # a CSV / TSV / table: featurized as convert did
        rows = predict_raw_to_parquet(est, data, out, labels=labels, id_column=id_column)
    else:
        data_set = open_for(est, data, require_labels=False)
        rows = predict_to_parquet(est, data_set, out, labels=labels, id_column=id_column)
    seconds = time.perf_counter() - start
    if json_path:
        write_json(json_path, {"command": "predict", "model": model, "data": data, "out": out,
                               "rows": rows, "labels": labels, "seconds": seconds})  # fmt: skip
    if json_path != "-":
        click.echo(f"Wrote {out}: {rows} rows in {seconds:.1f} s.")


@click.command()
@MODEL
@DATA
@memory_budget_option(
    "1GB", "Memory for the AUC: exact when all scores fit (24 bytes a row), else bounded."
)
@click.option(
    "--auc-tol",
    type=click.FloatRange(min=0, min_open=True),
    default=1e-4,
    show_default=True,
    metavar="X",
    help="Largest AUC error allowed when the AUC is bounded (more passes lower it).",
)
@JSON
def evaluate(model, data, memory_budget, auc_tol, json_path):
    """The metrics of MODEL's loss on labelled DATA, streaming: log loss, ROC AUC, accuracy and
    calibration (logistic); accuracy, mean hinge loss and ROC AUC (SVMs); RMSE, MAE and R²
    (ridge, on real targets)."""
    from snapfit.metrics import BudgetError
    from snapfit.scoring import evaluate as run
    from snapfit.scoring import open_for

    start = time.perf_counter()
    est = load_any(model)
    try:
        m = run(est, open_for(est, data), memory_budget=memory_budget, tol=auc_tol)
    except BudgetError as e:
        raise budget_error(e) from None
    seconds = time.perf_counter() - start
    if json_path:
        write_json(json_path, dict(m, command="evaluate", model=model, data=data, seconds=seconds))
    if json_path == "-":
        return
    click.echo(table(metric_rows(m) + [("time", f"{seconds:.2f} s")]))
    if m.get("auc") is not None and m["auc_error_bound"] > auc_tol:
        click.echo(
            f"Warning: the AUC error bound {m['auc_error_bound']:.1e} exceeds --auc-tol "
            f"{auc_tol:g}; raise --memory-budget for a tighter AUC.",
            err=True,
        )


@click.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False), metavar="MODEL_OR_JSON")
@out_option("IMAGE", "Image to write: .png, .svg or .pdf.")
@click.option("--title", default=None, help="Figure title (default: the input's file name).")
@FORCE
def report(source, out, title, force):
    """Plot primal objective, duality gap and test log loss against time, from a model file or
    the JSON of `snapfit train --json`."""
    from snapfit.data import atomic_output, check_output
    from snapfit.report import load_history, plot_history

    fmt = out.rsplit(".", 1)[-1].lower() if "." in out else ""
    if fmt not in ("png", "svg", "pdf"):
        raise click.BadParameter(f"{out!r} must end in .png, .svg or .pdf.", param_hint="'--out'")
    check_output(out, [source], force=force)
    history, facts = load_history(source)
    with atomic_output(out) as tmp:
        plot_history(history, tmp, tol=facts["tol"], title=title or facts["source"], fmt=fmt)
    click.echo(f"Wrote {out} ({len(history)} epochs).")


@click.command()
@MODEL
@click.argument("out", type=click.Path(dir_okay=False), metavar="OUT")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "onnx"]),
    default=None,
    help="json: readable nonzero weights, intercept and feature map; onnx: a graph for ONNX "
    "runtimes (dense float input; needs snapfit[onnx]). Default: from OUT's suffix.",
)
@FORCE
def export(model, out, fmt, force):
    """Write MODEL (logistic regression, linear SVM or ridge) as JSON or ONNX to OUT, for
    serving outside Python."""
    from snapfit.data import check_output
    from snapfit.export import export as run
    from snapfit.model import load_any

    if fmt is None:
        fmt = out.rsplit(".", 1)[-1].lower() if "." in out else ""
        if fmt not in ("json", "onnx"):
            raise click.BadParameter(
                f"{out!r}: pass --format json|onnx or end OUT in .json or .onnx.",
                param_hint="'--format'",
            )
    check_output(out, [model], force=force)
    run(load_any(model), out, fmt)
    click.echo(f"Wrote {out} ({fmt}).")


commands = [train, predict, evaluate, report, export]
