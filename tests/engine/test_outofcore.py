"""Out of core for real, in subprocesses: bounded peak RSS, and SIGKILL mid-run then resume."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from snapfit.datasets.criteo_like import make_criteo_like_parquet

BUDGET = 40 * 10**6


@pytest.fixture(scope="module")
def big_parquet(tmp_path_factory):
    """600k rows, about 190 MB decoded: more than 4x the budget."""
    path = tmp_path_factory.mktemp("ooc") / "big.parquet"
    make_criteo_like_parquet(path, 600_000, seed=3, hash_bits=16, row_group_rows=1 << 15)
    return str(path)


def _run(code: str, *args, wait=True, env=None):
    cmd = [sys.executable, "-c", textwrap.dedent(code), *map(str, args)]
    env = None if env is None else {**os.environ, **env}
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


RSS = """
import json, sys, warnings
from snapfit import LogisticRegression
from snapfit.data import Dataset
from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.stream.plan import resident_peak_nbytes
from snapfit.stream.stats import DataStats

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

X, y = make_criteo_like(2000, seed=0, hash_bits=8)  # compile the kernels first
LogisticRegression(max_iter=2, n_jobs=2).fit(X, y)
del X, y
base = hwm()
warnings.simplefilter("ignore")
clf = LogisticRegression(C=0.1, memory_budget=int(sys.argv[2]), max_iter=3, n_jobs=2)
clf.fit(sys.argv[1])
data = resident_peak_nbytes(DataStats.read(Dataset(sys.argv[1]), sample=False), 2)
print(json.dumps({"growth": hwm() - base, "epochs": int(clf.n_iter_[0]), "data": data}))
"""


def test_peak_rss_stays_within_budget(big_parquet):
    res = json.loads(_run(RSS, big_parquet, BUDGET).strip().splitlines()[-1])
    assert res["epochs"] == 3
    assert res["data"] >= 4 * BUDGET
    assert res["growth"] <= BUDGET + 300 * 10**6, res


FIT = """
import os, signal, sys, warnings
import numpy as np
from snapfit import LogisticRegression
from snapfit.stream.source import StreamSource

kill_epoch = int(sys.argv[6])
if kill_epoch:
    # Crash for real, at a fixed point: SIGKILL from inside, half way through epoch
    # ``kill_epoch + 1`` (its chunks' dual variables partly written back), after the
    # checkpoint of epoch ``kill_epoch``. No timing races with the parent.
    release, done = StreamSource.release, [0]

    def release_then_die(self, k):
        release(self, k)
        done[0] += 1
        if done[0] == self.n_chunks * kill_epoch + self.n_chunks // 2:
            os.kill(os.getpid(), signal.SIGKILL)

    StreamSource.release = release_then_die
warnings.simplefilter("ignore")
clf = LogisticRegression(C=0.1, tol=1e-7, max_iter=int(sys.argv[4]), random_state=7, n_jobs=2,
                         deterministic=True,
                         memory_budget=int(sys.argv[2]), checkpoint_dir=sys.argv[3] or None)
clf.fit(sys.argv[1], resume=bool(sys.argv[3]))
np.save(sys.argv[5], clf.coef_)
print("epochs", clf.n_iter_[0])
"""


def test_sigkill_mid_epoch_then_resume_equals_uninterrupted(big_parquet, tmp_path):
    import struct

    from snapfit.engine.checkpoint import MAGIC

    ckpt, temp = tmp_path / "ckpt", tmp_path / "temp"
    temp.mkdir()
    env = {"SNAPFIT_TMPDIR": str(temp)}
    epochs = 8
    _run(FIT, big_parquet, BUDGET, "", epochs, tmp_path / "ref.npy", 0, env=env)
    proc = _run(FIT, big_parquet, BUDGET, ckpt, epochs, tmp_path / "x.npy", 4, wait=False, env=env)
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, "the run was not killed"
    assert not (tmp_path / "x.npy").exists()
    assert any(p.name.startswith("snapfit-cache-") for p in temp.iterdir())  # left behind
    raw = (ckpt / "checkpoint.snapfit").read_bytes()
    (n,) = struct.unpack("<Q", raw[len(MAGIC) : len(MAGIC) + 8])
    assert json.loads(raw[len(MAGIC) + 8 : len(MAGIC) + 8 + n])["epoch"] == 4
    _run(FIT, big_parquet, BUDGET, ckpt, epochs, tmp_path / "resumed.npy", 0, env=env)
    assert np.array_equal(np.load(tmp_path / "resumed.npy"), np.load(tmp_path / "ref.npy"))
    assert not list(temp.iterdir())  # the resumed fit removed the killed one's cache, then its own
