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
    return getattr(model, "feature_map_", None) or of_width(model.coef_.shape[1])


def describe(m: dict) -> str:
    """``format criteo, hash_bits 20, ...`` for messages."""
    return ", ".join(f"{k} {m[k]}" for k in (*KEYS, "n_features") if k in m)


def check(model: dict, data: dict, where: str) -> None:
    """Raise a one-line :class:`DataError` when data with map ``data`` (named ``where``) cannot
    be scored by a model with map ``model``."""
    known = "format" in model and "format" in data
    if known:
        for k in KEYS:
            mine, theirs = model.get(k), data.get(k)
            if k == "format":
                mine, theirs = _SAME.get(mine, mine), _SAME.get(theirs, theirs)
            if mine != theirs:
                raise DataError(
                    f"{where}: its {k} is {theirs!r} but the model's is {mine!r} (model: "
                    f"{describe(model)}; data: {describe(data)}); convert the data the way the "
                    "training data was converted."
                )
    n, d = data["n_features"], model["n_features"]
    if n > d or (known and "hash_bits" in model and n != d):
        raise DataError(
            f"{where}: has n_features {n} but the model was trained with {d} (model: "
            f"{describe(model)}); convert the data with the same hash bits as the training data."
        )
