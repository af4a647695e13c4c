"""Which device a fit runs on: ``available()`` and ``resolve_device()``.

A GPU counts when numba-cuda is importable and finds a CUDA driver and device. Numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``) also counts for an explicit ``device="gpu"`` (that is how
CI runs the GPU code without a GPU), but never for ``device="auto"``: the simulator runs kernels
in Python threads, far slower than the CPU solver.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

from snapfit.errors import ResourceError
from snapfit.solvers.cudasim import simulated

log = logging.getLogger("snapfit")


def _driver_library() -> str:
    """The CUDA driver library's name as numba-cuda loads it (``NUMBA_CUDA_DRIVER`` overrides)."""
    if os.environ.get("NUMBA_CUDA_DRIVER"):
        return os.environ["NUMBA_CUDA_DRIVER"]
    return "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"


def _driver_loadable() -> bool:
    """Whether the CUDA driver library loads at all: microseconds, where importing
    ``numba.cuda`` and the device kernels to learn the same costs ~70 MB of resident memory
    that a CPU-only fit (``device="auto"`` on a host without a GPU) would carry to its end."""
    try:
        ctypes.CDLL(_driver_library())
    except OSError:
        return False
    return True  # pragma: no cover - needs a CUDA driver


def _probe() -> tuple[bool, str]:
    """``(usable, reason)``; never raises."""
    if not simulated() and not _driver_loadable():
        return False, f"no CUDA driver was found ({_driver_library()} does not load)"
    try:
        from numba import cuda
    except ImportError as e:  # pragma: no cover - numba-cuda is installed wherever tests run
        return False, f"numba-cuda is not installed ({e}); pip install 'snapfit[gpu]'"
    try:
        if cuda.is_available():
            return True, "simulator" if simulated() else "cuda"
    except Exception as e:  # pragma: no cover - is_available() catches driver errors itself
        return False, f"the CUDA driver failed to initialize ({e})"
    return False, "no CUDA driver or device was found"


def device_count() -> int:
    """GPUs numba-cuda sees here (the simulator shows one); 0 without a driver."""
    if not available():
        return 0
    from numba import cuda

    return len(cuda.gpus)


def available() -> bool:
    """Whether ``device="gpu"`` can run here (a CUDA device, or the CUDA simulator)."""
    return _probe()[0]


def resolve_device(device: str) -> str:
    """Map the estimator's ``device`` to ``"cpu"`` or ``"gpu"``.

    ``"gpu"`` without a usable GPU raises ``ResourceError``; ``"auto"`` picks a real GPU when
    there is one and otherwise the CPU, saying so in one log line on the ``snapfit`` logger.
    """
    if device == "cpu":
        return "cpu"
    if device not in ("gpu", "auto"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'gpu'; got {device!r}.")
    ok, reason = _probe()
    if device == "gpu":
        if not ok:
            raise ResourceError(
                f"device='gpu' was requested but snapfit found no usable GPU: {reason}. "
                "Use device='cpu', or device='auto' to fall back to the CPU."
            )
        return "gpu"
    if ok and reason == "cuda":
        return "gpu"  # pragma: no cover - needs a real GPU
    log.info("device='auto': training on the CPU (%s)", reason)
    return "cpu"
