"""``python -m bench [--quick]``: see ``bench/run.py``; ``python -m bench gpu``: see
``bench/gpu_check.py`` (imported alone: it needs neither Dask nor the CPU benchmarks)."""

import sys

if sys.argv[1:2] == ["gpu"]:
    from bench.gpu_check import main as gpu_main

    sys.exit(gpu_main(sys.argv[2:]))

from bench.run import main

main()
