"""The hybrid (hot columns as a primal block, ``snapfit.solvers.hybrid``) on a GPU: the state
of one resident chunk on the device and its segment passes, for ``hybrid.run``'s loop.

``hybrid.run`` owns the epochs, the hot step and the exact certificate; what it needs of a pass
is here as a small contract that the emulator's host arrays (``hybrid.HostPass``) and this
device state both keep: ``segment`` runs rows ``[lo, hi)`` of the epoch's order (one launch of
``cd_pass_hot``: rows read ``w`` with the segment's ``w_H``, write its cold columns and add
their hot moves into ``acc``), ``hot_w``/``set_hot_w`` read and write ``w_H`` (a few hundred
values cross the bus per segment; ``w`` and ``alpha`` stay on the device), ``sync`` brings
``alpha``, ``w`` and ``acc`` home for the exact check and ``push`` sends back what the check
changed. The launch sets the rows in flight: ``blocks * block / team`` (``tau``).

Not yet a unit of the trainer (``snapfit.gpu.unit``): a resident chunk on one GPU, for the
emulator's cross-check under the simulator and the hardware bench (``bench.gpu_sections``).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from snapfit.solvers import gpu as kernels
from snapfit.solvers.cudasim import serial
from snapfit.solvers.dual import LOGISTIC

THREADS = 128  # per block of the small gather / scatter of w_H


class DevicePass:
    """``alpha``, ``w``, ``acc`` and one chunk on the device, passed over by ``cd_pass_hot``.

    ``args`` are the chunk's host arrays (``cpu.chunk_args`` order), ``curv`` every row's
    curvature (ESO over its cold columns), ``hot`` the hot ids (the intercept is
    ``n_features``), ``launch`` a ``(blocks, block, team)`` triple.
    """

    def __init__(self, args, c_pos, c_neg, bias, curv, hot, hot_pos, n_features, launch):
        self.args = tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args)
        self.coef = (float(c_pos), float(c_neg), float(bias))
        self.curv = cuda.to_device(np.ascontiguousarray(curv, dtype=np.float64))
        self.hot = cuda.to_device(np.asarray(hot, np.int64))
        self.hot_pos = cuda.to_device(np.asarray(hot_pos, np.int64))
        n = len(args[4])
        self.alpha = cuda.to_device(np.zeros(n))
        self.w = cuda.to_device(np.zeros(n_features + 1))
        self.nh = len(hot)
        self.acc = cuda.to_device(np.zeros(max(self.nh, 1)))
        self.hot_out = cuda.to_device(np.zeros(max(self.nh, 1)))
        self.blocks, self.block, self.team = launch
        self.rows = None
        self.sums = cuda.to_device(np.zeros(2))

    @property
    def tau(self) -> int:
        return self.blocks * (self.block // self.team)

    def epoch_rows(self, rows: np.ndarray) -> None:
        """The epoch's visiting order, uploaded once."""
        self.rows = cuda.to_device(np.ascontiguousarray(rows, dtype=np.int32))

    def segment(self, lo: int, hi: int, seed: int = -1) -> tuple[float, float]:
        """Rows ``[lo, hi)`` of the epoch's order; their ``(gap, entropy)`` sums. ``seed`` is
        the emulator's order of adds; here the atomics land in the hardware's."""
        self.sums.copy_to_device(np.zeros(2))
        blocks = max(1, min(self.blocks, -(-(hi - lo) // (self.block // self.team))))
        with serial:
            kernels.cd_pass_hot[blocks, self.block](
                *self.args, *self.coef, self.curv, self.hot_pos, self.alpha, self.w, self.acc,
                self.rows[lo:hi], 1.0, self.team, self.sums, LOGISTIC,
            )  # fmt: skip
        gap, ent = self.sums.copy_to_host()
        return float(gap), float(ent)

    def hot_w(self) -> tuple[np.ndarray, np.ndarray]:
        """``(w_H, acc)`` on the host: the hot step's inputs."""
        if not self.nh:
            return np.zeros(0), np.zeros(0)
        with serial:
            kernels.get_entries[self._grid(), self._threads()](self.w, self.hot, self.hot_out)
        return self.hot_out.copy_to_host(), self.acc.copy_to_host()

    def set_hot_w(self, values: np.ndarray) -> None:
        """The hot step's new ``w_H`` into ``w``."""
        if self.nh:
            self.hot_out.copy_to_device(np.ascontiguousarray(values, dtype=np.float64))
            with serial:
                kernels.set_entries[self._grid(), self._threads()](self.w, self.hot, self.hot_out)

    def _threads(self) -> int:
        return min(THREADS, self.nh)

    def _grid(self) -> int:
        return -(-self.nh // self._threads())

    def sync(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(alpha, w, acc)`` on the host."""
        acc = self.acc.copy_to_host()[: self.nh]
        return self.alpha.copy_to_host(), self.w.copy_to_host(), acc

    def push(self, alpha=None, w=None, acc=None) -> None:
        """Send back what the host changed (the exact check's ``v_H``, a kept line search)."""
        for dev, host in ((self.alpha, alpha), (self.w, w), (self.acc, acc)):
            if host is not None and len(host):
                dev[: len(host)].copy_to_device(np.ascontiguousarray(host, dtype=np.float64))
