"""snapfit benchmarks: ``python -m bench --quick`` (see ``bench/run.py``)."""
