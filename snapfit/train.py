"""The training tier: one ``train()`` behind every door, and what the doors resolve for it.

Front doors (``snapfit.LogisticRegression``, ``snapfit.dask.DaskLogisticRegression``, the CLI,
which goes through the estimators) hold parameters, validation and fitted attributes only.
They resolve their numbers once per fit (``resolve_devices``, ``resolve_budget``), turn the
input into a ``ChunkSource`` (``open_dataset`` for Parquet; ``snapfit.inputs`` for arrays and
device arrays) and call ``train``, which owns the rest::

    front doors -> train() -> node Trainer -> units (CPU threads, GPUs) -> kernels
    data -> ChunkSource (resident, streamed, device) -> chunks -> DualState (per row)

``train`` takes the dual state from the source, builds the node trainer for the devices, warm
starts or resumes from a checkpoint, runs the epochs, and closes trainer, state and source. A
Dask worker builds the same node trainer on its share with ``open_dataset`` and
``make_trainer`` (``snapfit.dask._worker``); the driver combines the workers' rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from snapfit.engine.checkpoint import Checkpointer, problem_params
from snapfit.engine.loop import Callback, FitResult, run_epochs
from snapfit.engine.problem import Problem
from snapfit.engine.source import ChunkSource
from snapfit.engine.trainer import Devices, Trainer
from snapfit.errors import ResourceError

__all__ = [
    "Checkpoints",
    "Devices",
    "Warm",
    "make_trainer",
    "open_dataset",
    "resolve_budget",
    "resolve_devices",
    "resolve_n_jobs",
    "train",
]


@dataclass(frozen=True)
class Warm:
    """Where a fit starts: a previous fit's dual variables (best), or the dual point paired
    with its ``w`` (n_features + 1 entries, the intercept weight last)."""

    w: np.ndarray | None = None
    alpha: np.ndarray | None = None


@dataclass(frozen=True)
class Checkpoints:
    """Checkpoint ``directory`` every ``every`` epochs; ``resume`` continues from it."""

    directory: str
    every: int = 1
    resume: bool = False


def resolve_n_jobs(n_jobs: int | None) -> int:
    """scikit-learn's convention: None means 1, -1 all cores, -2 all but one."""
    import os

    if n_jobs is None:
        return 1
    if n_jobs < 0:
        return max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    return int(n_jobs)


def resolve_devices(
    device: str, n_jobs: int | None, device_ids=None, *, deterministic: bool = True
) -> Devices:
    """The units of a fit: ``n_jobs`` host threads (scikit-learn's convention), of which each
    GPU in ``device_ids`` (default ``[0]``) drives one and the others train on the CPU.
    ``deterministic=False`` lets CPU threads without a GPU share ``w`` (``Devices.share_cpu``).

    ``device="gpu"`` without a usable GPU is a ``ResourceError``; ``"auto"`` uses a GPU only
    when a real one is present (see ``snapfit.gpu.resolve_device``). Under the CUDA simulator
    an id may repeat to run several units on its one device.
    """
    from snapfit.gpu import device_count, resolve_device

    n = resolve_n_jobs(n_jobs)
    if device_ids is not None and device == "cpu":
        raise ValueError(
            f"device_ids={list(device_ids)} names GPUs but device='cpu'; use device='gpu' (or "
            "'auto'), or drop device_ids."
        )
    if resolve_device(device) == "cpu":
        return Devices(n_cpu=n, share_cpu=not deterministic)
    ids = (0,) if device_ids is None else tuple(int(i) for i in device_ids)
    count = device_count()
    bad = [i for i in ids if not 0 <= i < count]
    if not ids or bad:
        raise ResourceError(
            f"device_ids={list(ids)}: this machine has {count} GPU(s), numbered 0 to "
            f"{count - 1}; pass ids from that range (each id is one GPU unit)."
        )
    # the launch (and under the simulator its small one) is the GPU unit's: snapfit.gpu.launch
    return Devices(n_cpu=max(0, n - len(ids)), gpu_ids=ids)


def resolve_budget(memory_budget, *, limit: int | None = None) -> int:
    """Bytes of host memory for a fit: ``memory_budget`` parsed, or by default half of the
    memory available now, and no more than half of ``limit`` (a Dask worker's own limit)."""
    from snapfit.stream.budget import default_memory_budget, parse_memory_budget

    if memory_budget is not None:
        return parse_memory_budget(memory_budget)
    budget = default_memory_budget()
    return budget if not limit else min(budget, int(limit) // 2)


def open_dataset(dataset, *, budget: int, devices: Devices, chunk_rows=None, seed: int = 0,
                 plan=None, width: int = 1):  # fmt: skip
    """The source for a Parquet ``Dataset``: resident when it fits ``budget``, else streamed.
    ``plan``: the ``plan_dataset`` already made for it (a Dask part plans first, to keep a
    resident share's rows for a next generation); ``width``: dual variables per row (K for
    one-vs-rest over K classes, whose threads never share ``w``)."""
    if plan is None:
        plan = plan_dataset(dataset, budget, n_units=devices.n_units, chunk_rows=chunk_rows,
                            hot=devices.shares_cpu and width == 1, allow_resident=True,
                            width=width)  # fmt: skip
    return open_planned(dataset, plan, chunk_rows=chunk_rows, seed=seed)


def stream_dataset(dataset, budget: int, *, n_units: int = 1, chunk_rows=None, piece_rows=None,
                   seed: int = 0, mode=None, cache_format=None, cache_dir=None,
                   hot: bool = False, allow_resident: bool = False, width: int = 1):  # fmt: skip
    """``plan_dataset`` then ``open_planned``: a ``StreamSource``, or with ``allow_resident`` a
    ``ResidentSource`` when the data fits ``budget``."""
    plan = plan_dataset(dataset, budget, n_units=n_units, chunk_rows=chunk_rows,
                        piece_rows=piece_rows, mode=mode, cache_format=cache_format,
                        cache_dir=cache_dir, hot=hot, allow_resident=allow_resident,
                        width=width)  # fmt: skip
    return open_planned(dataset, plan, chunk_rows=chunk_rows, seed=seed, cache_dir=cache_dir)


def plan_dataset(dataset, budget: int, *, n_units: int = 1, chunk_rows=None, piece_rows=None,
                 mode=None, cache_format=None, cache_dir=None, hot: bool = False,
                 allow_resident: bool = True, width: int = 1):  # fmt: skip
    """The data's statistics read once (``DataStats.read``) and the one decision of where its
    rows live (``snapfit.stream.plan.plan_stream``). ``mode`` / ``cache_format`` default to
    ``SNAPFIT_STREAM`` / ``SNAPFIT_CACHE_FORMAT``, else "auto"; ``hot``: threads sharing ``w``
    train on it (their relabeled ids run past ``n_features``: ``snapfit.engine.shared``)."""
    import os

    from snapfit.engine.shared import MAX_HOT, hot_base
    from snapfit.stream.budget import temp_dir
    from snapfit.stream.cache import free_room
    from snapfit.stream.memlimit import available_memory
    from snapfit.stream.plan import first_chunk_rows, piece_rows_for, plan_stream
    from snapfit.stream.stats import DataStats

    nf = int(dataset.n_features)
    id_bound = hot_base(nf) + MAX_HOT if hot else nf
    guess = piece_rows_for(first_chunk_rows(dataset.n_rows, chunk_rows), piece_rows)
    stats = DataStats.read(dataset, piece_rows=guess, id_bound=id_bound)
    mode = mode or os.environ.get("SNAPFIT_STREAM") or "auto"
    fmt = cache_format or os.environ.get("SNAPFIT_CACHE_FORMAT") or "auto"
    return plan_stream(stats, budget=budget, n_units=n_units, chunk_rows=chunk_rows,
                       piece_rows=piece_rows, mode=mode, cache_format=fmt, id_bound=id_bound,
                       disk_free=free_room(cache_dir or temp_dir()) if stats.on_files else 0,
                       memory=available_memory() or 0, allow_resident=allow_resident,
                       width=width)  # fmt: skip


def open_planned(dataset, plan, *, chunk_rows=None, seed: int = 0, cache_dir=None):
    """The source ``plan`` says: ``ResidentSource``, or a ``StreamSource`` whose cache, for
    threads sharing ``w`` (``plan.id_bound`` past ``n_features``), stores the ids of the hot set
    chosen here, before its first pass."""
    import logging

    from snapfit.engine.shared import COUNT_ROWS, choose_hot, hot_code
    from snapfit.engine.source import ResidentSource
    from snapfit.stream.budget import temp_dir
    from snapfit.stream.source import StreamSource
    from snapfit.stream.stats import column_counts

    if plan.resident:
        return ResidentSource(dataset, chunk_rows)
    cache_dir = cache_dir or temp_dir()
    if plan.note:
        logging.getLogger("snapfit").warning("%s (in %s)", plan.note, cache_dir)
    chosen = code = None
    if plan.id_bound > plan.n_features:
        counts = column_counts(dataset, plan.rg_rows, plan.flags, COUNT_ROWS)
        chosen = choose_hot(*counts)
        if plan.mode == "cache" and len(chosen[0]):
            code = hot_code(chosen[0], plan.n_features)
    return StreamSource(dataset, plan, seed=seed, cache_dir=cache_dir, hot=chosen, code=code)


def make_trainer(source: ChunkSource, problem: Problem, devices: Devices) -> Trainer:
    """The node trainer for ``devices`` on ``source``, with the dual state the source gives
    (keyed by row through its pieces). Chunks in device memory are read by GPUs alone."""
    if source.device_resident:
        if not devices.gpu_ids:
            raise ValueError(
                "the data is on a GPU but the fit runs on the CPU; use device='gpu' or 'auto', "
                "or copy it to the host (e.g. X.get())."
            )
        devices = replace(devices, n_cpu=0)
    if problem.n_classes > 1 or problem.hot_columns:
        # the K problems' blocks of w have no hot slots, and the hot block is a round's step
        # over CoCoA+ units' moves: the threads are CoCoA+ units
        devices = replace(devices, share_cpu=False)
    state = source.make_state(width=problem.n_classes)
    try:
        return Trainer(source, problem, state, devices, gpu_unit=_gpu_unit(devices))
    except BaseException:
        state.close()
        raise


def _gpu_unit(devices: Devices):
    """The GPU unit factory for the trainer (imported only when there are GPUs)."""
    if not devices.gpu_ids:
        return None
    from snapfit.gpu.unit import GpuUnit

    return GpuUnit


def _checkpointer(spec: Checkpoints, source, problem, devices) -> Checkpointer:
    fingerprint = {"data": source.data_fingerprint(), "params": problem_params(problem),
                   "units": devices.describe(), "layout": source.fingerprint()}  # fmt: skip
    return Checkpointer(spec.directory, fingerprint, every=spec.every, resume=spec.resume)


def train(
    source: ChunkSource,
    problem: Problem,
    *,
    devices: Devices | None = None,
    warm: Warm | None = None,
    checkpoint: Checkpoints | None = None,
    callbacks: Sequence[Callback] = (),
    keep_alpha: bool = True,
) -> FitResult:
    """Fit ``problem`` on ``source`` with ``devices``; ``train`` owns and closes ``source``.

    Runs epochs until the exact relative gap is at most ``problem.tol`` or ``max_iter``. A
    checkpoint is resumed when ``checkpoint.resume`` and one exists (refused, naming the
    difference, when it was made with other data, parameters, units or layout); otherwise the
    fit starts from ``warm`` (dual variables, else ``w``) or from zero. ``callbacks`` get each
    epoch's record and ``w``; one returning True stops the fit. ``devices`` default: one CPU
    thread. ``keep_alpha=False``: the result carries no dual variables (8 bytes a row, copied
    out of the state: a caller that will not warm start from them should not pay for them).
    """
    devices = devices or Devices()
    with source:
        ck = None if checkpoint is None else _checkpointer(checkpoint, source, problem, devices)
        tr = make_trainer(source, problem, devices)
        try:
            converged = False
            if ck is not None and ck.resume and ck.exists():
                converged = ck.load(tr)
            elif warm is not None and warm.alpha is not None:
                tr.warm_start_alpha(warm.alpha)
            elif warm is not None and warm.w is not None:
                tr.warm_start(warm.w)
            return run_epochs(tr, problem, callbacks=callbacks, checkpoint=ck,
                              converged=converged, keep_alpha=keep_alpha)  # fmt: skip
        finally:
            tr.close()
