"""What a model's coefficients mean: the feature map recorded at fit, checked before scoring.

A coefficient vector is only meaningful for data built the same way: the same format (Criteo
hashing, svmlight indices, a hashed table), the same number of hash bits, the same transform of
numeric fields, the same columns. A model trained on 2^20 hashed features would score data
hashed to 2^18 without complaint (the indices fit) and return nonsense, so the map travels with
the model (its file header) and every scorer compares it with the data's Parquet metadata.

A map is a small JSON-able dict: ``n_features`` plus the data's recorded provenance keys
(``KEYS``). Models trained on arrays, or saved before maps existed, know only ``n_features``,
and so do pyarrow Tables (``pq.read_table`` drops the file's key-value metadata): where either
side's map is unknown the check is the old one (no more features than the model has).
"""

from __future__ import annotations

from snapfit.errors import DataError

#: Provenance keys that define the feature space (``source`` and the like do not).
KEYS = ("format", "hash_bits", "transform", "fields", "categorical", "numeric", "crosses",
        "numeric_transform")  # fmt: skip
#: Formats that hash the same way (make-data writes what `convert` makes of Criteo TSV).
_SAME = {"criteo-like": "criteo"}


def of_data(data) -> dict:
    """The feature map of a Dataset (its metadata) or of arrays (``n_features`` only)."""
    meta = getattr(data, "metadata", None) or {}
    out = {k: meta[k] for k in KEYS if k in meta}
    out["n_features"] = int(data.n_features)
    return out


def of_width(n_features: int) -> dict:
    """The map of a model fitted on arrays, or loaded from a file that recorded none."""
    return {"n_features": int(n_features)}


def of_model(model) -> dict:
    """A fitted estimator's map (``feature_map_``; its width alone for older objects)."""
    return getattr(model, "feature_map_", None) or of_width(model.coef_.shape[-1])


def describe(m: dict) -> str:
    """``format criteo, hash_bits 20, ...`` for messages."""
    return ", ".join(f"{k} {m[k]}" for k in (*KEYS, "n_features") if k in m)


def differences(a: dict, b: dict) -> list[str]:
    """The provenance keys on which maps ``a`` and ``b`` differ (none when either is unknown:
    arrays, Tables, foreign files)."""
    if "format" not in a or "format" not in b:
        return []
    out = []
    for k in KEYS:
        mine, theirs = a.get(k), b.get(k)
        if k == "format":
            mine, theirs = _SAME.get(mine, mine), _SAME.get(theirs, theirs)
        if mine != theirs:
            out.append(k)
    return out


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def name_differences(keys: list[str], here: dict, there: dict, there_name: str) -> str:
    """``crosses ['a^b'] here but ['a^b', 'c^d'] in the model; hash_bits ...``: the fields
    that differ only, each value cut to a readable length."""
    return "; ".join(
        f"{k} {_short(here.get(k))} here but {_short(there.get(k))} in {there_name}" for k in keys
    )


def check(model: dict, data: dict, where: str, against: str = "the model") -> None:
    """Raise a one-line :class:`DataError` when data with map ``data`` (named ``where``) cannot
    be scored by a model with map ``model`` (named ``against``): the one rule of every scorer
    and of the test and validation data of a fit."""
    keys = differences(model, data)
    if keys:
        raise DataError(
            f"{where}: converted another way than {against}: "
            f"{name_differences(keys, data, model, against)}; convert it the way the "
            "training data was converted."
        )
    known = "format" in model and "format" in data
    n, d = data["n_features"], model["n_features"]
    if n > d or (known and "hash_bits" in model and n != d):
        trained = "the model was trained with" if against == "the model" else f"{against} has"
        raise DataError(
            f"{where}: has n_features {n} but {trained} {d}; convert the data with the same "
            "hash bits (or --n-features) as the training data."
        )
