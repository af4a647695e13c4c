"""GPUs as CoCoA+ units: device detection, data on the device, and the GPU unit.

Importing this package does not import ``numba.cuda``; ``available()`` and ``resolve_device()``
do, on first call. The kernels are in ``snapfit.solvers.gpu``; the node that runs GPU units
beside CPU threads is ``snapfit.engine.trainer.Trainer``.
"""

from snapfit.gpu.device import available, device_count, resolve_device, simulated

__all__ = ["SIMULATOR_LAUNCH", "available", "device_count", "resolve_device", "simulated"]

# Under the CUDA simulator every CUDA thread is a Python thread: the smallest launch that still
# has teams (2 threads per row) and several rows in flight (4, so the step that is safe for rows
# in flight is exercised), instead of the real default (snapfit.gpu.launch: a 128-thread block
# per SM), which would take minutes per pass; the launch rule returns it under the simulator.
# Larger tau is the emulator's (solvers/emulate.py): with 8 rows in flight the safe step's
# extra epochs made the simulator suite ~1.6x longer.
SIMULATOR_LAUNCH = {"block": 8, "team": 2, "max_blocks": 1}
