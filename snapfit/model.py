"""Model files: one ``.npz`` holding the arrays and a JSON header, loaded without pickle.

The header records the format version, the estimator's parameters, the training history and a
SHA-256 of every array, so a truncated or edited file fails with a clear message instead of
predicting with damaged coefficients.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile

import numpy as np

from snapfit.data.writer import publish
from snapfit.errors import DataError

FORMAT = "snapfit.model"
FORMAT_VERSION = 1


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def save_arrays(path: str | os.PathLike, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """Write ``arrays`` and ``meta`` to ``path`` atomically (temporary name, then rename)."""
    path = os.fspath(path)
    header = dict(meta, format=FORMAT, format_version=FORMAT_VERSION)
    header["sha256"] = {k: _digest(v) for k, v in arrays.items()}
    header["dtypes"] = {k: str(v.dtype) for k, v in arrays.items()}
    blob = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".snapfit-model-", suffix=".npz", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, __header__=blob, **arrays)
        publish(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_arrays(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """Read a model file, checking its format, version and every array's checksum."""
    path = os.fspath(path)
    where = f"{path}: "
    try:
        with np.load(path, allow_pickle=False) as z:
            files = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise DataError(
            f"{where}not a readable snapfit model file ({e}); it may be truncated. "
            "Re-save the model or copy the file again."
        ) from None
    if "__header__" not in files:
        raise DataError(f"{where}no snapfit header; this .npz was not written by snapfit.save.")
    try:
        header = json.loads(files.pop("__header__").tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise DataError(f"{where}the model header is damaged; re-save the model.") from None
    if header.get("format") != FORMAT:
        raise DataError(f"{where}not a snapfit model (format {header.get('format')!r}).")
    if header.get("format_version", 0) > FORMAT_VERSION:
        raise DataError(
            f"{where}model format version {header['format_version']} is newer than this snapfit "
            f"reads ({FORMAT_VERSION}); upgrade snapfit."
        )
    expected = header.get("sha256", {})
    if set(expected) != set(files):
        raise DataError(
            f"{where}arrays {sorted(files)} do not match the header's {sorted(expected)}; "
            "the file was altered."
        )
    for k, a in files.items():
        if _digest(a) != expected[k]:
            raise DataError(f"{where}array {k!r} fails its checksum; the file was altered.")
    return files, header


def jsonable(params: dict) -> dict:
    """Estimator parameters as JSON values (class-weight dicts keep their keys as strings)."""
    out = {}
    for k, v in params.items():
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[k] = v
        elif isinstance(v, dict):
            out[k] = {str(a): float(b) for a, b in v.items()}
        else:
            out[k] = repr(v)
    return out


def _key(s: str):
    try:
        return int(s)
    except ValueError:
        return s


# Which loader reads a model of each loss.
_LOADERS = {
    "logistic": "load",
    "hinge": "svm.load",
    "squared_hinge": "svm.load",
    "squared": "ridge.load",
}


def load_estimator(path, est):
    """Fill the unfitted estimator ``est`` from the model file at ``path``."""
    arrays, header = load_arrays(path)
    loss, wanted = header.get("loss", "logistic"), est._loss_name()
    if _LOADERS.get(loss) != _LOADERS[wanted]:  # another estimator's file
        raise DataError(
            f"{os.fspath(path)}: the model was trained with the {loss} loss, not {wanted}; "
            f"load it with the loader of its estimator (snapfit.{_LOADERS[loss]})."
        )
    valid = est.get_params()
    kw = {}
    for k, v in header.get("params", {}).items():
        if k in valid and k != "random_state":
            if k == "class_weight" and isinstance(v, dict):
                v = {_key(a): b for a, b in v.items()}
            kw[k] = v
    est.set_params(**kw)
    try:
        est.classes_ = arrays["classes"]
        # a row per problem: K for one-vs-rest over K > 2 classes, else 1
        rows = len(est.classes_) if len(est.classes_) > 2 else 1
        est.coef_ = arrays["coef"].astype(np.float64).reshape(rows, -1)
        est.intercept_ = arrays["intercept"].astype(np.float64).reshape(rows)
    except (KeyError, ValueError) as e:
        raise DataError(f"{os.fspath(path)}: model arrays are incomplete ({e}).") from None
    est.n_features_in_ = est.coef_.shape[1]
    est.feature_map_ = header.get("feature_map") or {"n_features": est.n_features_in_}
    est.n_iter_ = np.array([header.get("n_iter", 0)], dtype=np.int32)
    est.history_ = header.get("history", [])
    if "best_iteration" in header:
        est.best_iteration_, est.best_score_ = header["best_iteration"], header["best_score"]
    for name in ("converged", "stopped_early", "streamed"):
        if name in header:
            setattr(est, name + "_", bool(header[name]))
    if "cache_format" in header:
        est.cache_format_ = header["cache_format"]
    if header.get("names"):
        est.hashed_names_ = header["names"]
    return est


def load_any(path):
    """The fitted estimator of the model file at ``path``, by the loss its header records:
    ``snapfit.load``, ``snapfit.svm.load`` or ``snapfit.ridge.load`` (for commands that take
    any model, such as ``snapfit export``)."""
    import importlib

    _, header = load_arrays(path)
    loss = header.get("loss", "logistic")
    if loss not in _LOADERS:
        raise DataError(
            f"{os.fspath(path)}: the model's loss {loss!r} is not one this snapfit knows "
            f"({', '.join(_LOADERS)}); upgrade snapfit."
        )
    module = _LOADERS[loss].rpartition(".")[0] or "estimator"  # snapfit.load is estimator's
    return importlib.import_module(f"snapfit.{module}").load(path)


def is_model_file(path) -> bool:
    """Whether ``path`` is a local file in the model format (an .npz with snapfit's header)."""
    path = os.fspath(path)
    if not os.path.isfile(path) or not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return "__header__.npy" in z.namelist()


def feature_name(index: int, feature_map: dict, names: dict | None) -> str | None:
    """The readable name of feature ``index``: a key recorded at convert time (``names``:
    ``{"keys": {index: key}, "collisions": [...]}``; ``a | b?`` when recorded keys collide
    there, ``?`` as other keys may share it unseen) or Criteo's integer fields ``I1..I13``;
    None when unknown."""
    if feature_map.get("format") in ("criteo", "criteo-like") and index < 13:
        return f"I{index + 1}"
    if not names:
        return None
    key = names.get("keys", {}).get(str(index))
    if key is None:
        return None
    return f"{key} (collision)" if index in set(names.get("collisions", ())) else key


def top_weights(coef: np.ndarray, feature_map: dict, names: dict | None, k: int) -> list[dict]:
    """The ``k`` largest weights by magnitude: index, weight and name (None when unknown)."""
    coef = np.asarray(coef, dtype=np.float64).ravel()
    order = np.argsort(-np.abs(coef), kind="stable")[: max(0, int(k))]
    return [
        {
            "index": int(i),
            "weight": float(coef[i]),
            "name": feature_name(int(i), feature_map, names),
        }
        for i in order
        if coef[i] != 0.0
    ]


def model_info(path, *, top: int = 10) -> dict:
    """What ``snapfit info MODEL`` shows: the parameters, how the fit ended and read its data,
    the feature map, the weights' sizes and the ``top`` largest weights by magnitude (feature
    index and weight). Checks the file's checksums as ``load`` does."""
    arrays, header = load_arrays(path)
    coef = arrays["coef"].astype(np.float64).ravel()
    params = header.get("params", {})
    history = header.get("history") or []
    fmap = header.get("feature_map") or {"n_features": int(coef.size)}
    intercept = float(arrays["intercept"].ravel()[0])
    return {
        "model": os.fspath(path),
        "bytes": os.path.getsize(path),
        "n_features": int(coef.size),
        "nonzero_weights": int(np.count_nonzero(coef)),
        "intercept": intercept,
        "classes": arrays["classes"].tolist(),
        "loss": header.get("loss", "logistic"),
        "params": {k: params.get(k) for k in ("C", "alpha", "class_weight", "tol", "max_iter",
                                              "early_stopping_rounds", "validation_metric")},
        "n_iter": header.get("n_iter"),
        "rel_gap": history[-1].get("rel_gap") if history else None,
        "converged": header.get("converged"),
        "stopped_early": header.get("stopped_early"),
        "best_iteration": header.get("best_iteration"),
        "best_score": header.get("best_score"),
        "streamed": header.get("streamed"),
        "cache_format": header.get("cache_format"),
        "feature_map": fmap,
        "names_recorded": len((header.get("names") or {}).get("keys", {})),
        "top_weights": top_weights(coef, fmap, header.get("names"), top),
    }  # fmt: skip
