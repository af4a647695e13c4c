"""GPU tests. ``sim/`` needs Numba's CUDA simulator, which is chosen when ``numba.cuda`` is first
imported, so it runs in its own process (``test_simulator.py`` starts it) unless this process
already has ``NUMBA_ENABLE_CUDASIM=1`` (as in the coverage command)."""

import os

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")

collect_ignore_glob = [] if SIMULATED else ["sim/*"]
