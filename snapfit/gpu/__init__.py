"""GPUs as CoCoA+ units: device detection, chunk streaming to the device, the GPU unit, and the
heterogeneous node (GPUs and CPU threads training together).

Importing this package does not import ``numba.cuda``; ``available()`` and ``resolve_device()``
do, on first call. The kernels themselves are in ``snapfit.solvers.gpu``.
"""

from snapfit.gpu.device import available, resolve_device, simulated
from snapfit.gpu.split import RateMeter, proportional_split

__all__ = ["RateMeter", "available", "make_trainer", "proportional_split", "resolve_device"]


SIMULATOR_LAUNCH = {"block": 16, "team": 2, "max_blocks": 1}


def make_trainer(source, problem, *, warm_w=None):
    """The engine trainer for ``device="gpu"``: the GPU plus ``n_jobs - 1`` CPU threads.

    Sources whose chunks already live on the device (CuPy input) run on the GPU alone, since
    the CPU kernels cannot read device memory.
    """
    from snapfit.gpu.node import HeteroTrainer

    n_cpu = 0 if getattr(source, "device_resident", False) else None
    # Under the CUDA simulator every CUDA thread is a Python thread: launch the smallest grid that
    # still exercises teams and several rows in flight (the real default would take minutes).
    options = SIMULATOR_LAUNCH if simulated() else None
    trainer = HeteroTrainer(source, problem, n_cpu=n_cpu, gpu_options=options)
    if warm_w is not None:
        trainer.warm_start(warm_w)
    return trainer
