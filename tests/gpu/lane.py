"""The GPU lane, run beside the main test process (``tests/gpu/conftest.py`` starts it): the
``sim/`` suite under Numba's CUDA simulator, then the GPU tests that need no simulator (the
PTX builds, the no-GPU doors, the GPU check's smoke run) that the main process handed over, one
run after the other. Exits non-zero if either failed.

``python -m tests.gpu.lane [NODEID ...]``; the node ids are the second run's. With
``SNAPFIT_GPU_COVERAGE`` set to a coverage ``--include`` pattern (CI sets it), both runs are
measured (``coverage run -p``) for the GPU modules' report.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def pytest_command(*args: str) -> list[str]:
    """``python -m pytest -q ARGS``, under ``coverage run -p`` when CI measures the GPU code."""
    run = [sys.executable, "-m"]
    include = os.environ.get("SNAPFIT_GPU_COVERAGE")
    if include:
        run += ["coverage", "run", "-p", f"--include={include}", "-m"]
    return [*run, "pytest", "-q", "-p", "no:cacheprovider", *args]


def main(node_ids: list[str]) -> int:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    sim = subprocess.call(pytest_command(str(Path(__file__).parent / "sim")), env=env, cwd=ROOT)
    rest = 0
    if node_ids:
        env.pop("NUMBA_ENABLE_CUDASIM")
        sys.stdout.flush()
        rest = subprocess.call(pytest_command(*node_ids), env=env, cwd=ROOT)
    return 1 if sim or rest else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
