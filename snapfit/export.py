"""A fitted model in formats other programs read: JSON (readable weights + feature map), ONNX.

The ``.npz`` model file is snapfit's own (checksummed, loads back into an estimator). Serving
code in another language wants something it can parse without numpy: the JSON document holds
the nonzero weights by index (a hashed Criteo model is mostly zeros), the intercept, the classes
and the feature map that says how to build an input row; its "model" says how to score with
them for each estimator. ONNX goes through the estimator's scikit-learn twin (``to_sklearn()``)
and ``skl2onnx``, as that twin would convert: a ``LinearClassifier`` with a logistic post
transform for ``LogisticRegression``, without one for ``LinearSVC`` (labels by the score's
sign), a ``LinearRegressor`` for ``Ridge``; over K > 2 classes a ``OneVsRestClassifier`` of
logistic regressions (probabilities normalized over the classes) or a K-class ``LinearSVC``,
and the JSON's weights and intercepts one per class. Its input is a dense float tensor, so it
suits models with up to some thousands of features, not 2^20 hashed ones.
"""

from __future__ import annotations

import json

import numpy as np

from snapfit import featuremap
from snapfit.data import atomic_output
from snapfit.errors import SnapfitError

JSON_FORMAT = "snapfit.model.json"
FORMATS = ("json", "onnx")


#: What the JSON document's "model" says, by the estimator's loss (``_loss_name``).
MODELS = {
    "logistic": "logistic regression: P(classes[1] | x) = 1 / (1 + exp(-(w.x + intercept)))",
    "hinge": "linear SVM (hinge loss): classes[1] if w.x + intercept > 0 else classes[0]",
    "squared_hinge": "linear SVM (squared hinge loss): classes[1] if w.x + intercept > 0 else "
    "classes[0]",
    "squared": "ridge regression: prediction = w.x + intercept",
}


#: The "model" of a one-vs-rest model over K > 2 classes, by loss.
OVR_MODELS = {
    "logistic": "one-vs-rest logistic regression: s_k = w_k.x + intercept_k; P(classes[k] | x) "
    "= sigmoid(s_k) / sum_j sigmoid(s_j); the prediction is classes[argmax_k s_k]",
    "hinge": "one-vs-rest linear SVM: classes[argmax_k (w_k.x + intercept_k)]",
    "squared_hinge": "one-vs-rest linear SVM: classes[argmax_k (w_k.x + intercept_k)]",
}


def _sparse(coef: np.ndarray) -> dict:
    nz = np.flatnonzero(coef)
    return {"indices": nz.tolist(), "values": coef[nz].tolist()}


def to_json(est) -> dict:
    """The JSON document of a fitted estimator (see the module docstring); a regressor's has
    no "classes"; a one-vs-rest model's "weights" and "intercept" are lists, one per class."""
    loss = est._loss_name()
    coef = np.atleast_2d(np.asarray(est.coef_, dtype=np.float64))
    ovr = coef.shape[0] > 1
    d = coef.shape[1]
    intercept = np.ravel(est.intercept_).astype(np.float64)
    doc = {
        "format": JSON_FORMAT,
        "format_version": 1,
        "model": OVR_MODELS[loss] if ovr else MODELS[loss],
        "loss": loss,
        "classes": est.classes_.tolist() if loss != "squared" else None,
        "intercept": intercept.tolist() if ovr else float(intercept[0]),
        "n_features": int(d),
        # Ridge's coef_ is 1-d, and it records a map only when fitted on converted data
        "feature_map": getattr(est, "feature_map_", None) or featuremap.of_width(d),
        "weights": [_sparse(c) for c in coef] if ovr else _sparse(coef[0]),
        "n_iter": int(np.ravel(est.n_iter_)[0]),
    }
    if doc["classes"] is None:
        del doc["classes"]
    return doc


#: skl2onnx's output names renamed to say what they hold, by loss.
_ONNX_OUTPUTS = {"hinge": {"probabilities": "scores"},
                 "squared_hinge": {"probabilities": "scores"},
                 "squared": {"variable": "prediction"}}  # fmt: skip


def _rename_outputs(graph, names: dict[str, str]) -> None:
    for node in graph.node:
        node.output[:] = [names.get(o, o) for o in node.output]
    for out in graph.output:
        out.name = names.get(out.name, out.name)


def to_onnx(est) -> bytes:
    """An ONNX graph (bytes) of ``est.to_sklearn()`` with input "input" float [n, n_features]
    and outputs: "label" and "probabilities" [n, 2] (a plain tensor, no ZipMap) for logistic
    regression; "label" and "scores" [n, 1] (``w.x + b``) for a linear SVM; "prediction"
    [n, 1] for ridge."""
    try:
        from skl2onnx import convert_sklearn
        from skl2onnx.common.data_types import FloatTensorType
    except ImportError:
        raise SnapfitError(
            "ONNX export needs skl2onnx, an optional dependency: pip install 'snapfit[onnx]'."
        ) from None
    sk = est.to_sklearn()
    loss = est._loss_name()
    d = int(np.shape(est.coef_)[-1])
    # zipmap is an option of the probabilistic classifiers' converters only
    options = {id(sk): {"zipmap": False}} if loss == "logistic" else None
    model = convert_sklearn(sk, initial_types=[("input", FloatTensorType([None, d]))],
                            options=options)  # fmt: skip
    _rename_outputs(model.graph, _ONNX_OUTPUTS.get(loss, {}))
    return model.SerializeToString()


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
