"""The epoch loop: passes until the duality gap says stop, with checkpoints and callbacks.

Python owns time here, the trainer's units own arithmetic (as umap's ``optimize_layout_*``
calls its kernel once per epoch). When an epoch's gap estimate says the relative gap is below
``tol`` (or the last epoch ran), one exact pass confirms it before stopping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np

from snapfit.engine.checkpoint import Checkpointer, InterruptGuard
from snapfit.engine.problem import EpochRecord, Problem
from snapfit.engine.trainer import Trainer

# A callback gets each epoch's record and the current w (n_features + 1 entries, the intercept
# weight last; read-only: copy it to keep it); returning True stops the fit after that epoch.
Callback = Callable[[EpochRecord, np.ndarray], "bool | None"]


@dataclass
class FitResult:
    w: np.ndarray  # n_features + 1 entries; the last one is the intercept weight
    n_iter: int
    converged: bool
    history: list[EpochRecord] = field(default_factory=list)
    alpha: np.ndarray | None = None  # packed dual variables of all rows, in state order


def run_epochs(
    tr: Trainer,
    problem: Problem,
    *,
    callbacks: Sequence[Callback] = (),
    checkpoint: Checkpointer | None = None,
    converged: bool = False,
    keep_alpha: bool = True,
) -> FitResult:
    """Run epochs until the exact relative gap is at most ``problem.tol`` or ``max_iter``.

    ``converged``: the run resumed from a checkpoint of a converged fit. With ``checkpoint``
    one is written every ``checkpoint.every`` epochs and at the end, and on SIGINT/SIGTERM the
    current epoch finishes, one is written and ``KeyboardInterrupt`` is raised.
    """
    with InterruptGuard() if checkpoint is not None else nullcontext() as guard:
        while not converged and tr.epoch < problem.max_iter:
            rec = tr.run_epoch()
            last = tr.epoch >= problem.max_iter
            if last or tr.wants_check(rec):
                tr.confirm(rec)
                converged = rec.rel_gap <= problem.tol
            tr.history.append(rec)
            stop = any([bool(cb(rec, tr.coef())) for cb in callbacks])
            interrupted = guard is not None and guard.signum is not None
            if checkpoint is not None and (
                interrupted or converged or stop or last or checkpoint.due(tr.epoch)
            ):
                checkpoint.save(tr, converged=converged)
            if interrupted:
                raise KeyboardInterrupt(
                    f"signal {guard.signum} after epoch {tr.epoch}; checkpoint written to "
                    f"{checkpoint.path}, continue with resume=True"
                )
            if converged or stop:
                break
    tr.settle()  # the model is w(alpha) exactly, whatever ended the fit
    return FitResult(
        w=tr.coef().copy(),
        n_iter=tr.epoch,
        converged=converged,
        history=tr.history,
        # Kept for warm starts, unless unwanted or spilled to disk to respect a memory budget.
        alpha=tr.alpha() if keep_alpha and not tr.state.spilled else None,
    )
