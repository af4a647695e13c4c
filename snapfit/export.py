"""A fitted model in formats other programs read: JSON (readable weights + feature map), ONNX.

The ``.npz`` model file is snapfit's own (checksummed, loads back into an estimator). Serving
code in another language wants something it can parse without numpy: the JSON document holds
the nonzero weights by index (a hashed Criteo model is mostly zeros), the intercept, the classes
and the feature map that says how to build an input row. ONNX goes through scikit-learn's
``LogisticRegression`` (``to_sklearn()``) and ``skl2onnx``; its input is a dense float tensor,
so it suits models with up to some thousands of features, not 2^20 hashed ones.
"""

from __future__ import annotations

import json

import numpy as np

from snapfit import featuremap
from snapfit.data import atomic_output
from snapfit.errors import SnapfitError

JSON_FORMAT = "snapfit.model.json"
FORMATS = ("json", "onnx")


def to_json(est) -> dict:
    """The JSON document of a fitted estimator (see the module docstring)."""
    coef = np.asarray(est.coef_, dtype=np.float64).ravel()
    nz = np.flatnonzero(coef)
    classes = est.classes_.tolist()
    return {
        "format": JSON_FORMAT,
        "format_version": 1,
        "model": "logistic regression: P(classes[1] | x) = 1 / (1 + exp(-(w.x + intercept)))",
        "classes": classes,
        "intercept": float(est.intercept_[0]),
        "n_features": int(coef.size),
        "feature_map": featuremap.of_model(est),
        "weights": {"indices": nz.tolist(), "values": coef[nz].tolist()},
        "n_iter": int(est.n_iter_[0]),
    }


def to_onnx(est) -> bytes:
    """An ONNX graph (bytes) of ``est.to_sklearn()``: input "input" float [n, n_features],
    outputs "label" and "probabilities" (a plain tensor, no ZipMap)."""
    try:
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import FloatTensorType
    except ImportError:
        raise SnapfitError(
            "ONNX export needs skl2onnx, an optional dependency: pip install 'snapfit[onnx]'."
        ) from None
    sk = est.to_sklearn()
    d = int(est.coef_.shape[1])
    graph = convert_sklearn(sk, initial_types=[("input", FloatTensorType([None, d]))],
                            options={id(sk): {"zipmap": False}})  # fmt: skip
    return graph.SerializeToString()


def export(est, out, fmt: str) -> None:
    """Write ``est`` to ``out`` in ``fmt`` (json or onnx), atomically."""
    if fmt == "json":
        payload = (json.dumps(to_json(est), indent=1) + "\n").encode()
    elif fmt == "onnx":
        payload = to_onnx(est)
    else:
        raise ValueError(f"format is {fmt!r}; choose one of {', '.join(FORMATS)}.")
    with atomic_output(out) as tmp, open(tmp, "wb") as f:
        f.write(payload)
