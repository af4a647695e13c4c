"""Progress bars for the long phases: ingest (the first pass), convert, predict, evaluate.

Library calls stay silent; the CLI turns bars on for the command it runs (``enabled``), and a
bar then shows only when stderr is a terminal (tqdm's ``disable=None``), so logs and pipes get
no control characters. Bars are thread-safe: the reader threads of the first pass share one.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from tqdm import tqdm

_enabled = False
#: Seconds between a bar's redraws.
MININTERVAL = 0.5


@contextmanager
def enabled(on: bool = True):
    """Show bars (on a terminal) for the calls made inside this block."""
    global _enabled
    before, _enabled = _enabled, bool(on)
    try:
        yield
    finally:
        _enabled = before


def quiet() -> None:
    """No bars for the rest of the enclosing ``enabled`` block (a command's ``--quiet``)."""
    global _enabled
    _enabled = False


def bar(desc: str, total: int | None = None, unit: str = "rows") -> tqdm:
    """A bar on stderr counting ``unit`` (scaled: k, M), silent unless enabled on a terminal."""
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=True,
        file=sys.stderr,
        disable=None if _enabled else True,
        leave=False,
        dynamic_ncols=True,
        mininterval=MININTERVAL,
    )
