"""Checkpoints: ``w``, ``alpha`` and the epoch on disk, atomically, so a fit can resume.

A checkpoint is taken at an epoch boundary. Because every random choice of an epoch (chunk
order, thread plan, row order) is derived from ``(seed, epoch)`` alone, resuming from one replays
the uninterrupted run exactly: same ``coef_`` bit for bit (``np.array_equal``).

The file is one ``checkpoint.snapfit`` per directory: a magic line, an 8-byte header length, a
JSON header (epoch, seed, fingerprint, history, CRC-32 of the payload) and the raw float64 ``w``
and ``alpha``. It is written to a temporary name, fsynced and renamed over the old one
(``os.replace``), so a crash leaves either the old or the new checkpoint, never half of one.

The fingerprint names the data (files, sizes, row-group rows and nnz, or a hash of in-memory
arrays), the problem's parameters and the chunk layout; a checkpoint made with anything else is
refused, naming what differs.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import threading
import zlib

import numpy as np

from snapfit.engine.problem import EpochRecord, Problem
from snapfit.errors import DataError

MAGIC = b"SNAPFIT-CHECKPOINT 1\n"
FILENAME = "checkpoint.snapfit"
_SLICE = 1 << 22  # alpha is written and read in slices: it may be a 2 GB file (DiskArray)


class CheckpointMismatch(DataError):
    """A checkpoint exists but was made for other data or parameters (a ValueError; the CLI
    exits with the data-error code)."""


def problem_params(problem: Problem) -> dict:
    """The parameters that change the iterates (``tol`` and ``max_iter`` may change on resume)."""
    return {
        "n_features": problem.n_features,
        "c_pos": problem.c_pos,
        "c_neg": problem.c_neg,
        "bias": problem.bias,
        "seed": problem.seed,
        "bucket_rows": problem.bucket_rows,
        # logistic's checkpoints predate the loss: recorded only for the others
        **({"loss": problem.loss} if problem.loss else {}),
        **(
            {"class_bounds": [list(b) for b in problem.class_bounds]}
            if problem.class_bounds
            else {}
        ),
        **({"hot_columns": True} if problem.hot_columns else {}),
    }


def _diff(old, new, path: str = "") -> str | None:
    """The first place where two fingerprints differ, in words."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            if key not in old or key not in new:
                return f"{path}{key} is only in the {'new run' if key in new else 'checkpoint'}"
            d = _diff(old[key], new[key], f"{path}{key}.")
            if d:
                return d
        return None
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return f"{path.rstrip('.')} has {len(old)} entries in the checkpoint, {len(new)} now"
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            label = a.get("name", i) if isinstance(a, dict) else i
            d = _diff(a, b, f"{path}{label}.")
            if d:
                return d
        return None
    if old != new:
        return f"{path.rstrip('.')} was {old!r} in the checkpoint and is {new!r} now"
    return None


class Checkpointer:
    """Writes and reads ``directory/checkpoint.snapfit`` for one fit.

    Parameters
    ----------
    directory : str
    fingerprint : dict
        JSON-able description of data, parameters and layout (see the module docstring).
    every : int
        Write after every ``every``-th epoch (and at the end, and on SIGINT/SIGTERM).
    resume : bool
        Start from the checkpoint in ``directory`` if there is one.
    """

    def __init__(self, directory, fingerprint: dict, *, every: int = 1, resume: bool = False):
        self.directory = os.fspath(directory)
        self.path = os.path.join(self.directory, FILENAME)
        self.fingerprint = json.loads(json.dumps(fingerprint))  # normalized as stored
        self.every = max(1, int(every))
        self.resume = bool(resume)

    def due(self, epoch: int) -> bool:
        return epoch % self.every == 0

    def save(self, trainer, *, converged: bool = False) -> None:
        os.makedirs(self.directory, exist_ok=True)
        trainer.sync_alpha()  # alpha kept on a device back to the host
        w = np.ascontiguousarray(trainer.coef(), dtype=np.float64)
        alpha = trainer.state.alpha
        crc = zlib.crc32(w.view(np.uint8).data)
        for lo in range(0, len(alpha), _SLICE):
            crc = zlib.crc32(np.ascontiguousarray(alpha[lo : lo + _SLICE]).view(np.uint8).data, crc)
        header = {
            "epoch": int(trainer.epoch),
            "converged": bool(converged),
            "fingerprint": self.fingerprint,
            "n_w": len(w),
            "n_alpha": len(alpha),
            "crc32": crc,
            "chunk_gaps": [float(g) for g in trainer.chunk_gaps],
            "history": [rec.as_dict() for rec in trainer.history],
        }
        blob = json.dumps(header).encode()
        tmp = f"{self.path}.tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            with open(tmp, "wb") as f:
                f.write(MAGIC + struct.pack("<Q", len(blob)) + blob)
                f.write(w.data)
                for lo in range(0, len(alpha), _SLICE):
                    f.write(np.ascontiguousarray(alpha[lo : lo + _SLICE]).data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        dfd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dfd)  # make the rename itself durable
        finally:
            os.close(dfd)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def load(self, trainer) -> bool:
        """Restore ``trainer`` from the checkpoint; return whether that run had converged."""
        with open(self.path, "rb") as f:
            magic = f.read(len(MAGIC))
            if magic != MAGIC:
                raise CheckpointMismatch(
                    f"{self.path}: is not a snapfit checkpoint (bad magic); delete it or point "
                    "checkpoint_dir elsewhere."
                )
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            diff = _diff(header["fingerprint"], self.fingerprint)
            if diff:
                raise CheckpointMismatch(
                    f"{self.path}: was made with other data or parameters ({diff}); resume with "
                    "the same data and parameters, or pass resume=False to start over."
                )
            n_w, n_alpha = len(trainer.coef()), len(trainer.state.alpha)
            if header["n_w"] != n_w or header["n_alpha"] != n_alpha:
                raise CheckpointMismatch(f"{self.path}: sizes do not match this problem.")
            w = np.fromfile(f, dtype=np.float64, count=header["n_w"])
            crc = zlib.crc32(w.view(np.uint8).data)
            alpha = trainer.state.alpha
            for lo in range(0, len(alpha), _SLICE):
                part = np.fromfile(f, dtype=np.float64, count=min(_SLICE, len(alpha) - lo))
                if len(part) != min(_SLICE, len(alpha) - lo):
                    break
                alpha[lo : lo + len(part)] = part
                crc = zlib.crc32(part.view(np.uint8).data, crc)
        if len(w) != header["n_w"] or crc != header["crc32"]:
            raise CheckpointMismatch(
                f"{self.path}: is truncated or corrupt (CRC mismatch); delete it to start over."
            )
        trainer.drop_device_alpha()  # the host state was just written: device copies are stale
        trainer.set_coef(w)
        trainer.drifted = trainer.slots is not None  # threads sharing w may have lost updates
        trainer.epoch = int(header["epoch"])
        trainer.history = [EpochRecord(**h) for h in header["history"]]
        trainer.chunk_gaps[:] = header["chunk_gaps"]
        trainer.source.update_gaps(trainer.chunk_gaps)
        return bool(header["converged"])


class InterruptGuard:
    """Turns the first SIGINT/SIGTERM into a request to stop at the next safe point.

    Handlers are installed only in the main thread (Python allows no other) and the previous
    ones are restored on exit. A second signal raises ``KeyboardInterrupt`` at once.
    """

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame):
        if self.signum is not None:
            raise KeyboardInterrupt(f"second signal {signum}: stopping without a checkpoint")
        self.signum = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        return False
