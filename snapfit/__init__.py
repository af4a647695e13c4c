"""snapfit: out-of-core dual coordinate descent for sparse L2-regularized logistic regression."""

__version__ = "0.1.0"

from snapfit.estimator import LogisticRegression, load  # noqa: E402

__all__ = ["LogisticRegression", "load", "__version__"]
