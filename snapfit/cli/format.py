"""How the CLI shows results: the epoch progress bar, summary tables, JSON documents."""

from __future__ import annotations

import json
import math
import sys

import click


def si(x: float) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


def write_json(path: str, doc: dict) -> None:
    text = json.dumps(doc, indent=2, sort_keys=True, default=_json_default) + "\n"
    if path == "-":
        click.echo(text, nl=False)
        return
    from snapfit.data import atomic_output

    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    return repr(o)


def table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows) + 2
    return "\n".join(f"{k:<{width}}{v}" for k, v in rows)


def budget_error(e: Exception):
    from snapfit.errors import ResourceError

    return ResourceError(f"{e} (--memory-budget)")


def metric_rows(m: dict, prefix: str = "") -> list[tuple[str, str]]:
    """The metrics of ``snapfit.scoring.evaluate`` as rows: a ridge model's RMSE, MAE and R²,
    an SVM's accuracy, hinge losses and AUC, else log loss, AUC, accuracy and calibration."""
    if "classes" in m:  # one-vs-rest over K > 2 classes
        rows = [(f"{prefix}rows", f"{m['rows']}"), (f"{prefix}classes", f"{m['classes']}"),
                (f"{prefix}accuracy", f"{m['accuracy']:.6f}")]  # fmt: skip
        if "logloss" in m:
            rows.append((f"{prefix}logloss", f"{m['logloss']:.6f} (one-vs-rest, normalized)"))
        return rows
    if "rmse" in m:
        r2 = "undefined (constant targets)" if m["r2"] is None else f"{m['r2']:.6f}"
        return [(f"{prefix}rows", f"{m['rows']}"), (f"{prefix}RMSE", f"{m['rmse']:.6g}"),
                (f"{prefix}MAE", f"{m['mae']:.6g}"), (f"{prefix}R2", r2)]  # fmt: skip
    auc = m["auc"]
    if auc is None:
        auc_text = "undefined (one class only)"
    elif m["auc_method"] == "exact":
        auc_text = f"{auc:.6f} (exact)"
    else:
        auc_text = f"{auc:.6f} (bounded: error <= {m['auc_error_bound']:.1e}, {m['passes']} passes)"
    if "hinge" in m:
        return [
            (f"{prefix}rows", f"{m['rows']}"),
            (f"{prefix}accuracy", f"{m['accuracy']:.6f}"),
            (f"{prefix}hinge loss", f"{m['hinge']:.6f} (mean; squared {m['squared_hinge']:.6f})"),
            (f"{prefix}ROC AUC", auc_text),
        ]
    cal = m["calibration"]
    return [
        (f"{prefix}rows", f"{m['rows']}"),
        (f"{prefix}logloss", f"{m['logloss']:.6f}"),
        (f"{prefix}ROC AUC", auc_text),
        (f"{prefix}accuracy", f"{m['accuracy']:.6f}"),
        (
            f"{prefix}calibration",
            f"mean predicted {cal['mean_predicted']:.4f}, observed rate "
            f"{cal['observed_rate']:.4f}, ECE {cal['ece']:.4f}",
        ),
    ]


# -- train ------------------------------------------------------------------------------------
class Progress:
    """Per-epoch progress bar on stderr: rows/s, nnz/s, gap, test log loss and an ETA."""

    def __init__(self, *, max_iter: int, tol: float, quiet: bool):
        from tqdm import tqdm

        self.tol, self.max_iter = tol, max_iter
        self.bar = tqdm(
            total=max_iter,
            desc="train",
            bar_format="{desc}: epoch {n_fmt}/{total_fmt} [{elapsed}]{postfix}",
            file=sys.stderr,
            disable=quiet or not sys.stderr.isatty(),  # no `\r` lines in logs and pipes
            dynamic_ncols=True,
        )
        self.gaps: list[tuple[float, float]] = []  # (cumulative seconds, rel_gap)

    def eta(self, rec: dict) -> str:
        """Time to reach ``tol`` at the rate the log gap fell over the last epochs."""
        t = (self.gaps[-1][0] if self.gaps else 0.0) + rec["seconds"]
        self.gaps.append((t, max(rec["rel_gap"], 1e-300)))
        if rec["rel_gap"] <= self.tol or len(self.gaps) >= self.max_iter:
            return "0s"
        (t0, g0), (t1, g1) = self.gaps[max(0, len(self.gaps) - 4)], self.gaps[-1]
        epochs_left = self.max_iter - len(self.gaps)
        per_epoch = t1 / len(self.gaps)
        cap = epochs_left * per_epoch
        if t1 <= t0 or g1 >= g0 or self.tol <= 0:  # tol 0: only max_iter ends the fit
            return f"<{cap:.0f}s"
        rate = (math.log(g0) - math.log(g1)) / (t1 - t0)
        return f"~{min(math.log(g1 / self.tol) / rate, cap):.0f}s"

    def update(self, rec: dict) -> None:
        parts = [f"{si(rec[k])} {unit}" for k, unit in
                 (("rows_per_s", "rows/s"), ("nnz_per_s", "nnz/s")) if k in rec]  # fmt: skip
        parts.append(f"gap {rec['rel_gap']:.2e}")
        for key in TEST_KEYS:
            if rec.get(key) is not None:
                parts.append(f"test {key.removeprefix('test_')} {rec[key]:.5f}")
        parts.append(f"ETA {self.eta(rec)}")
        self.bar.set_postfix_str(", ".join(parts), refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


#: What ``snapfit train --test`` scores every epoch, by loss (a loss's own metric).
TEST_METRIC = {"logistic": "logloss", "hinge": "hinge", "squared_hinge": "hinge",
               "squared": "rmse"}  # fmt: skip
TEST_KEYS = tuple(dict.fromkeys(f"test_{m}" for m in TEST_METRIC.values()))


def n_iter(est) -> int:
    """Epochs the fit ran (a classifier's ``n_iter_`` is an array, ``Ridge``'s an int)."""
    import numpy as np

    return int(np.ravel(est.n_iter_)[0])


def kept_epoch(est) -> int:
    """The epoch whose model was kept: the best one when early stopping chose it, else the
    last one."""
    if getattr(est, "stopped_early_", False) or (
        est.early_stopping_rounds is not None and hasattr(est, "best_iteration_")
    ):
        return int(est.best_iteration_)
    return n_iter(est)


def _record_of(est, epoch: int) -> dict:
    return next((h for h in est.history_ if h.get("epoch") == epoch), est.history_[-1])


def train_summary(est, data, fit_seconds, converged, metrics, out) -> str:
    """The table ``snapfit train`` prints: how the fit ended and the kept model's numbers."""
    epochs = len(est.history_)
    kept = kept_epoch(est)
    rec = _record_of(est, kept)
    epochs_run = n_iter(est)
    if getattr(est, "stopped_early_", False):
        metric = est.validation_metric
        ended = (
            f"{epochs_run} (stopped early: validation {metric} not improved for "
            f"{est.early_stopping_rounds} epochs after epoch {kept})"
        )
    elif converged:
        last = est.history_[-1]
        ended = f"{epochs_run} (converged: relative gap {last['rel_gap']:.2e} <= tol {est.tol:g})"
    else:
        last = est.history_[-1]
        ended = (
            f"{epochs_run} (NOT converged: relative gap {last['rel_gap']:.2e} > tol {est.tol:g}; "
            "raise --max-iter)"
        )
    of = f" (epoch {kept}, relative gap {rec['rel_gap']:.2e})" if kept != epochs_run else ""
    per_s = epochs / max(fit_seconds, 1e-9)
    rows = [
        ("epochs", ended),
        ("primal", f"{rec['primal']:.8g}{of}"),
        *_best_rows(est),
        ("dual", f"{rec['dual']:.8g}{of}"),
        ("train rows", f"{data.n_rows} ({data.nnz} nnz, {data.n_features} features)"),
        *_read_rows(est),
        (
            "fit time",
            f"{fit_seconds:.2f} s ({si(data.n_rows * per_s)} rows/s, {si(data.nnz * per_s)} nnz/s)",
        ),
    ]
    if metrics is not None:
        rows += metric_rows(metrics, "test ")
    rows.append(("model", out))
    return table(rows)


def _read_rows(est) -> list[tuple[str, str]]:
    """How the fit read its data: in memory, or streamed and from which cache."""
    streamed = getattr(est, "streamed_", None)
    if streamed is None:  # a Dask fit: each worker decides for its share
        return []
    if not streamed:
        return [("data", "in memory")]
    fmt = est.cache_format_
    how = f"a {fmt} cache" if fmt else "no cache, Parquet decoded every epoch"
    return [("data", f"streamed under the memory budget ({how})")]


def _best_rows(est) -> list[tuple[str, str]]:
    """The validation summary: best epoch and its metric, and whether that model was kept."""
    best = getattr(est, "best_iteration_", None)
    if best is None:
        return []
    metric = est.validation_metric
    kept = "kept" if est.early_stopping_rounds is not None else "last epoch kept"
    return [("best epoch", f"{best} (validation {metric} {est.best_score_:.6f}; {kept})")]


def extra_of(h: dict, history: list[dict]) -> dict:
    """Fields the CLI added to an epoch (the test metric), matched by epoch number."""
    for row in history:
        if row.get("epoch") == h.get("epoch"):
            extra = {k: row[k] for k in TEST_KEYS if k in row}
            if extra:
                return extra
    return {}


# -- predict, evaluate, report ----------------------------------------------------------------


def model_lines(m: dict) -> str:
    """``snapfit info MODEL``'s text from :func:`snapfit.model.model_info`."""
    from snapfit.featuremap import describe

    p = m["params"]
    if m["stopped_early"]:
        ended = f"stopped early, epoch {m['best_iteration']} kept"
    elif m["converged"] is None:
        ended = "not recorded (a model saved before snapfit said)"
    else:
        ended = "converged" if m["converged"] else "NOT converged (max_iter reached)"
    gap = "" if m["rel_gap"] is None else f", relative gap {m['rel_gap']:.2e}"
    rows = [
        ("model", f"{m['model']} ({m['bytes']} bytes)"),
        ("features", f"{m['n_features']} ({m['nonzero_weights']} nonzero weights)"),
        ("intercept", f"{m['intercept']:.6g}"),
    ]
    loss = m.get("loss", "logistic")
    if loss == "squared":
        rows += [("loss", "squared (ridge regression)"), ("alpha", f"{p['alpha']}")]
    else:
        rows += [("loss", loss)] if loss != "logistic" else []
        weights = f", class_weight {p['class_weight']}" if p["class_weight"] else ""
        rows += [("classes", ", ".join(str(c) for c in m["classes"])), ("C", f"{p['C']}{weights}")]
    rows.append(("fit", f"{m['n_iter']} epochs, {ended}{gap} (tol {p['tol']})"))
    if m["best_iteration"] is not None:
        rows.append(("best epoch", f"{m['best_iteration']} (validation {p['validation_metric']} "
                                   f"{m['best_score']:.6f})"))  # fmt: skip
    if m["streamed"] is not None:
        fmt = m["cache_format"]
        how = "in memory" if not m["streamed"] else (
            f"streamed ({f'a {fmt} cache' if fmt else 'Parquet decoded every epoch'})"
        )  # fmt: skip
        rows.append(("data", how))
    rows.append(("feature map", describe(m["feature_map"])))
    text = table(rows)
    if m["top_weights"]:
        lines = [f"  {t['weight']:+.6g}  [{t['index']}] {t['name'] or ''}".rstrip()
                 for t in m["top_weights"]]  # fmt: skip
        text += f"\ntop {len(lines)} weights (by magnitude; names recorded at convert):\n"
        text += "\n".join(lines)
    return text
