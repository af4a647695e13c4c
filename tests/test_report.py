import json

import numpy as np
import pytest

from snapfit import LogisticRegression
from snapfit.errors import DataError
from snapfit.report import load_history, plot_history


def _history(n=8, test=True):
    rows = []
    for k in range(n):
        gap = 10.0 ** -(k / 2)
        row = {"epoch": k + 1, "primal": 100 + 50 * gap, "dual": 100 - 50 * gap,
               "rel_gap": gap, "exact": k == n - 1, "seconds": 0.1}  # fmt: skip
        if test:
            row["test_logloss"] = 0.5 + 0.1 * gap
        rows.append(row)
    return rows


@pytest.mark.parametrize("test", [True, False])
def test_plot_history_png(tmp_path, test):
    out = tmp_path / "c.png"
    plot_history(_history(test=test), out, tol=1e-3, title="t")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(data) < 150_000


def test_plot_history_svg_and_empty(tmp_path):
    plot_history(_history(), tmp_path / "c.svg", fmt="svg")
    assert (tmp_path / "c.svg").read_text().lstrip().startswith("<?xml")
    with pytest.raises(DataError, match="empty"):
        plot_history([], tmp_path / "e.png")


def test_load_history_from_json_and_model(tmp_path):
    doc = {"history": _history(), "params": {"tol": 1e-3}}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    history, facts = load_history(tmp_path / "t.json")
    assert history == doc["history"] and facts["tol"] == 1e-3
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(int)
    model = LogisticRegression(max_iter=5, tol=1e-2).fit(X, y)
    model.save(tmp_path / "m.npz")
    history, facts = load_history(tmp_path / "m.npz")
    assert len(history) == model.n_iter_[0] and facts["tol"] == 1e-2


def test_load_history_rejects_other_files(tmp_path):
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(DataError, match="'history'"):
        load_history(tmp_path / "x.json")
    (tmp_path / "x.bin").write_bytes(b"\xff\x00\x01")
    with pytest.raises(DataError, match="neither a snapfit model"):
        load_history(tmp_path / "x.bin")
