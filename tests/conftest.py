"""Settings of the whole suite.

Hypothesis's per-example deadline (200 ms by default) is a wall-clock assertion: on a loaded
machine, or when an example is the first to JIT-compile a kernel, an example runs late and
the test fails as "flaky" though nothing is wrong. No test here asserts on time, so no
deadline (``max_examples`` and the rest stay each test's own).
"""

from hypothesis import settings

settings.register_profile("snapfit", deadline=None)
settings.load_profile("snapfit")
