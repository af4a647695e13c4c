"""The default launch of the kernels, from the device's properties and the chunk's shape.

Why not "as many threads as the device holds": with the step that is safe for ``tau`` rows in
flight, the epochs grow about linearly in ``tau`` on rows that share dense columns (Criteo's 13
integer fields and the intercept are in every row; docs/gpu-performance-model.md, last
section), while a latency-bound kernel gains at most linearly in ``tau``. Past the point where
every SM has work, more rows in flight buy no time to target and cost epochs. So the rule is
the fewest rows in flight that keep every warp scheduler of every SM issuing:

- ``team`` (threads per row): the power of two at or above the mean row length (``choose_team``),
  so each stored value has a lane;
- ``block``: ``WARPS_PER_SM`` warps (one per scheduler), and never fewer threads than a team;
- ``blocks``: one per SM (all resident at once: no second wave, no SM idle), fewer when the
  chunk has fewer rows.

Rows in flight are then ``blocks * block / team``, capped by the chunk's rows (``tau`` of
``cd_pass``): 264 on an H100 (132 SMs) for Criteo-like rows, where the old default (128-thread
blocks, up to 1024) ran ~1,600. ``block``, ``team`` and ``max_blocks`` given to ``GpuUnit``
override the rule, e.g. more blocks on data without dense shared columns, where the safe step
costs little. Under the CUDA simulator every CUDA thread is a Python thread, so the rule gives
``SIMULATOR_LAUNCH`` (4 rows in flight) instead.

Under the hot block (``hot_columns=True``, ``snapfit.engine.hot``) rows in flight share only
sparse columns, where the safe step's excess is near 1: in the emulator the epochs stayed flat
from 1 to 4,096 rows in flight (docs/gpu-performance-model.md). There the rule fills the
device instead: as many blocks as every SM holds at once (``max_threads_per_sm / block`` per
SM), ~4,200 rows in flight on an H100 for Criteo-like rows. Not yet measured on a GPU.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import asdict, dataclass

from snapfit.gpu import SIMULATOR_LAUNCH
from snapfit.gpu.device import simulated
from snapfit.solvers.gpu import MAX_BLOCK, choose_team

log = logging.getLogger("snapfit")

#: Warps per block: one per warp scheduler (SM sub-partition), four on every architecture
#: since Maxwell; fewer would leave schedulers of every SM idle.
WARPS_PER_SM = 4

#: The chunk ``describe`` assumes: the out-of-core default of 64k rows, Criteo-like rows.
TYPICAL_CHUNK = {"rows": 65536, "nnz_per_row": 39.0}


@dataclass(frozen=True)
class DeviceProps:
    """What the launch rule reads from a device (numba-cuda ``Device`` attributes)."""

    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    max_threads_per_block: int
    warp_size: int
    max_threads_per_sm: int
    memory: int | None = None  # total bytes; None where unknown (the simulator)
    simulated: bool = False


#: The simulator's fake device offers only ``compute_capability``; the rest are documented
#: stand-ins (one SM, CUDA's usual limits), reported as such by ``describe``.
SIMULATOR_DEVICE = {"name": "CUDA simulator", "sm_count": 1, "max_threads_per_block": 1024,
                    "warp_size": 32, "max_threads_per_sm": 2048}  # fmt: skip


#: The driver attributes the rule reads: numba-cuda's ``Device.<NAME>`` queries
#: ``CU_DEVICE_ATTRIBUTE_<NAME>`` (``cuda.bindings.driver.CUdevice_attribute``).
ATTRIBUTES = {
    "sm_count": "MULTIPROCESSOR_COUNT",
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "warp_size": "WARP_SIZE",
    "max_threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR",
}


def props_of(dev, total_memory: float | None, *, simulated: bool) -> DeviceProps:
    """``DeviceProps`` of a numba-cuda device object (its attributes are driver queries).
    Only the simulator's device, which offers none of them, takes the ``SIMULATOR_DEVICE``
    values (logged); on a real device a failed query raises."""
    if simulated:
        missing = [a for a in ATTRIBUTES.values() if not hasattr(dev, a)]
        if missing:
            log.debug("CUDA simulator: %s from SIMULATOR_DEVICE", ", ".join(missing))
        values = {k: int(getattr(dev, a, SIMULATOR_DEVICE[k])) for k, a in ATTRIBUTES.items()}
    else:
        values = {k: int(getattr(dev, a)) for k, a in ATTRIBUTES.items()}
    name = getattr(dev, "name", SIMULATOR_DEVICE["name"])
    name = name.decode() if isinstance(name, bytes) else str(name)
    finite = total_memory is not None and total_memory != float("inf")
    return DeviceProps(
        name=name,
        compute_capability=tuple(int(v) for v in dev.compute_capability),
        memory=int(total_memory) if finite else None,
        simulated=simulated,
        **values,
    )


@functools.cache
def device_props(device_id: int = 0) -> DeviceProps:
    """The properties of GPU ``device_id``, read once per process."""
    from numba import cuda

    with cuda.gpus[device_id]:
        dev = cuda.get_current_device()
        total = cuda.current_context().get_memory_info().total
    return props_of(dev, total, simulated=simulated())


@dataclass(frozen=True)
class Launch:
    """One launch: ``blocks`` x ``block`` threads, ``team`` threads per row."""

    blocks: int
    block: int
    team: int
    rows_in_flight: int


def choose_launch(
    props: DeviceProps,
    n_rows: int,
    mean_nnz: float,
    *,
    block: int | None = None,
    team: int | None = None,
    max_blocks: int | None = None,
    fill: bool = False,
) -> Launch:
    """The launch for ``n_rows`` rows of ``mean_nnz`` stored values on ``props``' device
    (the module docstring states the rule); ``block``, ``team``, ``max_blocks`` override it.
    ``fill``: every SM as full as it gets (the hot block's rule), not one block per SM."""
    if props.simulated:
        if block is None:
            team = team or SIMULATOR_LAUNCH["team"]
            block = max(SIMULATOR_LAUNCH["block"], team)
        max_blocks = max_blocks or SIMULATOR_LAUNCH["max_blocks"]
    cap = min(MAX_BLOCK, props.max_threads_per_block, props.max_threads_per_sm)
    if team is None:
        team = choose_team(mean_nnz, block or cap)
    if block is None:
        block = max(team, min(cap, WARPS_PER_SM * props.warp_size))
    per_block = block // team
    per_sm = max(1, props.max_threads_per_sm // block) if fill else 1
    blocks = max(1, min(max_blocks or per_sm * props.sm_count, -(-n_rows // per_block)))
    return Launch(blocks, block, team, min(blocks * per_block, n_rows))


def describe(device_id: int, backend: str, chunk: dict = TYPICAL_CHUNK) -> dict:
    """One GPU for diagnostics (``snapfit info --device``): its properties, the launch the
    rule picks for ``chunk`` and the backend that owns its memory."""
    props = device_props(device_id)
    launch = choose_launch(props, chunk["rows"], chunk["nnz_per_row"])
    out = asdict(props)
    out["compute_capability"] = "{}.{}".format(*props.compute_capability)
    return out | {
        "device": device_id,
        "backend": backend,
        "chunk": dict(chunk),
        "launch": asdict(launch),
        # resident threads per SM over the SM's capacity (one block per SM)
        "occupancy": launch.block / props.max_threads_per_sm,
    }


def describe_devices() -> dict:
    """``{"gpus": [describe(i) for each GPU], "reason": ...}``; no GPUs, and why, when none is
    usable (no driver, no device, numba-cuda missing)."""
    from snapfit.gpu.backend import backend_name, choose_backend
    from snapfit.gpu.device import _probe

    ok, reason = _probe()
    if not ok:
        return {"gpus": [], "reason": reason}
    from numba import cuda

    backend = backend_name(choose_backend())
    return {"gpus": [describe(i, backend) for i in range(len(cuda.gpus))], "reason": reason}
