"""A per-test alarm: a hung test (a lost worker, a deadlock) fails instead of blocking CI."""

from __future__ import annotations

import signal
from contextlib import contextmanager


@contextmanager
def alarm(seconds: int, what: str = "test"):
    """Raise ``TimeoutError`` in the main thread if the block runs longer than ``seconds``."""

    def boom(signum, frame):
        raise TimeoutError(f"{what} exceeded its {seconds} s alarm")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
