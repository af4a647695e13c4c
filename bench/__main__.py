"""``python -m bench [--quick]``: see ``bench/run.py``."""

from bench.run import main

main()
