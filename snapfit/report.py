"""Training curves as a PNG: primal objective, relative duality gap and test log loss against time.

Input is a training history (``LogisticRegression.history_`` or the ``history`` of
``snapfit train --json``): one dict per epoch with ``seconds`` (that epoch's time), ``primal``,
``rel_gap``, ``exact`` and, when held-out data was given, ``test_<metric>`` (``logloss``; an
SVM's ``hinge``, ridge's ``rmse``) and ``validation_<metric>``. Matplotlib runs on the
Agg backend, so no display is needed.
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from snapfit.errors import DataError, SnapfitError


def load_history(path) -> tuple[list[dict], dict]:
    """The history and a few facts (``tol``, ``source``) from a model file or a train JSON."""
    path = os.fspath(path)
    if zipfile.is_zipfile(path):
        from snapfit.estimator import load

        est = load(path)
        return list(est.history_), {"tol": est.tol, "source": os.path.basename(path)}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(
            f"{path}: neither a snapfit model nor JSON written by `snapfit train --json` ({e})."
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("history"), list):
        raise DataError(
            f"{path}: JSON without a 'history' list; pass `snapfit train --json` output."
        )
    params = doc.get("params") or {}
    return doc["history"], {"tol": params.get("tol"), "source": os.path.basename(path)}


def _series(history: list[dict], key: str):
    t = np.cumsum([float(h.get("seconds", 0.0)) for h in history])
    v = np.array([np.nan if h.get(key) is None else float(h[key]) for h in history])
    return t, v


def held_out_curves(history: list[dict]) -> list[str]:
    """The held-out series of ``history`` the third panel draws: the test metric (``--test``)
    and the validation metric an early-stopped run watched (``--validation``)."""
    from snapfit.validation import METRICS

    keys = ("test_logloss", "test_hinge", "test_rmse", *(f"validation_{m}" for m in METRICS))
    return [k for k in keys if any(h.get(k) is not None for h in history)]


def _higher_is_better(key: str) -> bool:
    from snapfit.validation import HIGHER_IS_BETTER

    return key.endswith(tuple(f"_{m}" for m in HIGHER_IS_BETTER))


def plot_history(
    history: list[dict], out, *, tol: float | None = None, title: str = "", fmt: str = "png"
) -> None:
    """Write a three-panel figure of ``history`` to ``out`` in format ``fmt`` (png, svg, pdf)."""
    if not history:
        raise DataError("the training history is empty; nothing to plot (was the model fitted?).")
    try:
        import matplotlib
    except ImportError:
        raise SnapfitError(
            "plots need matplotlib, an optional dependency: pip install 'snapfit[plot]'."
        ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), constrained_layout=True)
    t, primal = _series(history, "primal")
    exact = np.array([bool(h.get("exact")) for h in history])
    ax = axes[0]
    ax.plot(t, primal, "-o", ms=3, color="C0")
    ax.set(title="primal objective", xlabel="seconds", ylabel="P(w)")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4), useOffset=False)

    t, gap = _series(history, "rel_gap")
    ax = axes[1]
    ax.semilogy(t, np.maximum(gap, 1e-300), "-o", ms=3, color="C1", label="estimate")
    if exact.any():
        ax.semilogy(t[exact], gap[exact], "s", ms=6, mfc="none", color="k", label="exact")
    if tol:
        ax.axhline(tol, ls="--", lw=1, color="grey", label=f"tol {tol:g}")
    ax.set(title="relative duality gap", xlabel="seconds", ylabel="(P - D) / |P|")
    ax.legend(fontsize=8, loc="upper right")

    ax = axes[2]
    curves = held_out_curves(history)
    for i, key in enumerate(curves):
        t, v = _series(history, key)
        up = _higher_is_better(key)
        on = ax.twinx() if up and len(curves) > 1 else ax
        on.plot(t, v, "-o", ms=3, color=f"C{2 + i}", label=key.replace("_", " "))
        best = int(np.nanargmax(v) if up else np.nanargmin(v))
        on.annotate(
            f"{v[best]:.4f}", (t[best], v[best]), textcoords="offset points",
            xytext=(0, 8), ha="center", fontsize=8,
        )  # fmt: skip
    if curves:
        ax.legend(fontsize=8, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no held-out data\n(train with --test or --validation)", ha="center",
                va="center", transform=ax.transAxes, color="grey")  # fmt: skip
    ax.set(title="held-out data", xlabel="seconds", ylabel="metric")
    for ax in axes:
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    try:
        fig.savefig(out, dpi=90, format=fmt)
    finally:
        plt.close(fig)
