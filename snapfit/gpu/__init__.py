"""GPUs as CoCoA+ units: device detection, chunk streaming to the device, the GPU unit, and the
heterogeneous node (GPUs and CPU threads training together).

Importing this package does not import ``numba.cuda``; ``available()`` and ``resolve_device()``
do, on first call. The kernels themselves are in ``snapfit.solvers.gpu``.
"""

from snapfit.gpu.device import available, resolve_device
from snapfit.gpu.split import RateMeter, proportional_split

__all__ = ["RateMeter", "available", "proportional_split", "resolve_device"]
