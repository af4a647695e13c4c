"""Host waits with a deadline, so that a stuck GPU or unit thread fails the fit with one line
naming the unit and the operation instead of blocking the process for good.

CUDA's own synchronizations (CuPy's and numba's) have no timeout, so GPU waits poll the event
(``poll``); waits on unit threads use ``threading`` timeouts (``wait_event``). The deadline is
``SNAPFIT_STALL_TIMEOUT`` seconds (default 600): far above any one item's work (a kernel's first
compilation is ~5-40 s), so only a stall reaches it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from snapfit.errors import StallError

ENV = "SNAPFIT_STALL_TIMEOUT"
DEFAULT_SECONDS = 600.0
#: Longest sleep between two polls: a GPU item takes milliseconds, so a coarser poll would
#: add visible latency to every wait.
MAX_PAUSE = 2e-4


def stall_timeout() -> float:
    """Seconds a wait may last: ``$SNAPFIT_STALL_TIMEOUT``, else ``DEFAULT_SECONDS``."""
    raw = os.environ.get(ENV)
    if not raw:
        return DEFAULT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{ENV} must be a positive number of seconds; got {raw!r}.")
    return value


def _stalled(what: str, seconds: float) -> StallError:
    return StallError(
        f"{what} did not complete within {seconds:g} s (a stuck GPU or thread); set "
        f"{ENV} to wait longer."
    )


def poll(done: Callable[[], bool], what: str, timeout: float | None = None) -> None:
    """Return once ``done()`` is true; ``StallError`` naming ``what`` after ``timeout`` s."""
    if done():
        return
    seconds = stall_timeout() if timeout is None else timeout
    deadline = time.monotonic() + seconds
    pause = 1e-6
    while not done():
        if time.monotonic() > deadline:
            raise _stalled(what, seconds)
        time.sleep(pause)
        pause = min(2 * pause, MAX_PAUSE)


def wait_event(event: threading.Event, what: str, timeout: float | None = None) -> None:
    """``event.wait()`` with the stall deadline; ``StallError`` naming ``what`` past it."""
    seconds = stall_timeout() if timeout is None else timeout
    if not event.wait(seconds):
        raise _stalled(what, seconds)
