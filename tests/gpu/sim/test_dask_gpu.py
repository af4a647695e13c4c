"""GPUs on Dask workers under the simulator: a lost worker mid-fit, and the CLI's door.

The workers are processes of a LocalCluster started with ``NUMBA_ENABLE_CUDASIM=1`` inherited,
so each sees the simulated GPU as its device 0, as a dask-cuda worker sees its own GPU.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

import snapfit
from snapfit.data import Dataset

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.usefixtures("cell_alarm")

PARAMS = dict(C=0.5, tol=1e-7, max_iter=200, random_state=0)


@pytest.fixture(scope="module")
def data(sparse_parquet):
    X, y, path = sparse_parquet(600, 64, 6, seed=1)
    ref = snapfit.LogisticRegression(device="cpu", **dict(PARAMS, tol=1e-10)).fit(X, y)
    return path, ref.history_[-1]["primal"]


@pytest.fixture(scope="module")
def client(sim_client):
    return sim_client


def test_cli_trains_with_the_gpu_on_a_running_scheduler(client, data, tmp_path):
    from click.testing import CliRunner

    from snapfit.cli import cli

    path, ref = data
    out, doc = tmp_path / "m.npz", tmp_path / "train.json"
    res = CliRunner().invoke(cli, ["train", path, "--out", str(out), "--C", "0.5", "--tol",
                                   "1e-7", "--seed", "0", "--scheduler",
                                   client.scheduler.address, "--gpus", "0", "--json", str(doc),
                                   "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    hist = json.loads(doc.read_text())["history"]
    assert hist[-1]["n_workers"] == 2
    assert abs(hist[-1]["primal"] - ref) <= 1e-6 * ref
    assert snapfit.load(out).coef_.shape == (1, 64)


def test_gpu_fit_survives_a_killed_worker(client, data):
    """A worker process dies in round 2 of a GPU fit: its row groups move to the survivor,
    whose GPU unit takes them, and the fit reaches the same optimum. (Last in this module: the
    nanny's replacement worker is not waited for.)"""
    from snapfit.dask import DaskLogisticRegression

    path, ref = data
    victim = {}

    def kill_in_round_2(rec):
        if rec["epoch"] == 2 and not victim:
            victim["addr"] = addr = sorted(client.scheduler_info()["workers"])[0]
            victim["pid"] = client.run(os.getpid, workers=[addr])[addr]
            os.kill(victim["pid"], signal.SIGKILL)

    est = DaskLogisticRegression(client=client, device="gpu", n_jobs=1, **PARAMS)
    est.fit(path, on_round=kill_in_round_2)
    assert victim
    events = [h["event"] for h in est.history_ if h.get("event")]
    assert len(events) == 1 and victim["addr"] in events[0]
    assert abs(est.history_[-1]["primal"] - ref) <= 1e-6 * ref
    survivor = [p for p in est.parts_ if p["generation"] == 1]
    assert len(survivor) == 1 and survivor[0]["address"] != victim["addr"]
    assert survivor[0]["gpus"] == 1
    assert sorted(survivor[0]["ids"]) == list(range(len(Dataset(path).chunks)))
