"""Checkpoints: exact resume, refusal of foreign checkpoints, atomic files, signal handling."""

import os
import signal
import warnings

import numpy as np
import pytest

from snapfit import LogisticRegression
from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.engine.checkpoint import FILENAME, CheckpointMismatch


@pytest.fixture(scope="module")
def data():
    return make_criteo_like(3000, seed=2, hash_bits=12)


def _clf(tmp_path, **kw):
    # deterministic: a resumed fit replays the uninterrupted one bit for bit
    kw = dict(C=0.1, tol=1e-8, max_iter=200, random_state=0, n_jobs=2, deterministic=True) | kw
    return LogisticRegression(checkpoint_dir=str(tmp_path), **kw)


def test_resume_replays_the_uninterrupted_run(tmp_path, data):
    X, y = data
    full = _clf(tmp_path / "a").fit(X, y)
    part = _clf(tmp_path / "b", max_iter=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        part.fit(X, y)
    resumed = _clf(tmp_path / "b").fit(X, y, resume=True)
    assert np.array_equal(resumed.coef_, full.coef_)
    assert resumed.n_iter_[0] == full.n_iter_[0]
    assert len(resumed.history_) == len(full.history_)


def test_threads_sharing_w_resume_from_the_saved_model_in_the_datas_order(tmp_path, data):
    """A sharing fit runs in its own feature order (hot features relabeled); its checkpoint
    holds w in the data's order and a resumed fit reaches the uninterrupted optimum."""
    X, y = data
    kw = dict(deterministic=False)
    full = _clf(tmp_path / "a", **kw).fit(X, y)
    part = _clf(tmp_path / "b", max_iter=5, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        part.fit(X, y)
    resumed = _clf(tmp_path / "b", **kw).fit(X, y, resume=True)
    assert resumed.n_iter_[0] > 5 and resumed.history_[-1]["rel_gap"] <= 1e-8
    p_full, p_res = full.history_[-1]["primal"], resumed.history_[-1]["primal"]
    assert abs(p_res - p_full) <= 1e-7 * abs(p_full)
    np.testing.assert_allclose(resumed.coef_, full.coef_, atol=1e-3)


def test_other_parameters_are_refused_by_name(tmp_path, data):
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _clf(tmp_path, max_iter=3).fit(X, y)
    with pytest.raises(CheckpointMismatch, match="c_pos was 0.1 in the checkpoint and is 0.5"):
        _clf(tmp_path, C=0.5).fit(X, y, resume=True)
    with pytest.raises(CheckpointMismatch, match="arrays_sha256"):
        _clf(tmp_path).fit(X[:2000], y[:2000], resume=True)


def test_corrupt_checkpoint_is_refused(tmp_path, data):
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _clf(tmp_path, max_iter=3).fit(X, y)
    path = tmp_path / FILENAME
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointMismatch, match="corrupt"):
        _clf(tmp_path).fit(X, y, resume=True)


def test_no_temp_files_left(tmp_path, data):
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _clf(tmp_path, max_iter=4, checkpoint_every=2).fit(X, y)
    assert os.listdir(tmp_path) == [FILENAME]


def test_sigint_stops_at_epoch_end_with_a_checkpoint(tmp_path, data):
    X, y = data
    before = signal.getsignal(signal.SIGINT)

    def interrupt(rec, coef, intercept):
        if rec.epoch == 3:
            os.kill(os.getpid(), signal.SIGINT)

    clf = _clf(tmp_path, checkpoint_every=100)
    with pytest.raises(KeyboardInterrupt, match="checkpoint written"):
        clf.fit(X, y, callbacks=[interrupt])
    assert signal.getsignal(signal.SIGINT) is before
    resumed = _clf(tmp_path).fit(X, y, resume=True)
    full = _clf(tmp_path / "full").fit(X, y)
    assert np.array_equal(resumed.coef_, full.coef_)


def test_resume_needs_a_directory(data):
    with pytest.raises(ValueError, match="checkpoint_dir"):
        LogisticRegression().fit(*data, resume=True)
