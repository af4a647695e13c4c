"""The scikit-learn door: ``snapfit.LogisticRegression``.

``__init__`` stores its arguments verbatim; ``fit`` validates them, turns the input into a
source, hands it and a ``Problem`` to ``snapfit.train.train`` and keeps what comes back. The
objective is scikit-learn's (liblinear's, with a regularized intercept feature), so coefficients
can be checked against ``sklearn.linear_model.LogisticRegression(solver="liblinear")`` for the
same ``C``.
"""

from __future__ import annotations

import os
import sys
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from snapfit import featuremap
from snapfit import model as model_io
from snapfit.data import check_two_classes
from snapfit.data.validate import check_class_labels
from snapfit.engine.source import InMemorySource
from snapfit.fit_hooks import FitHooks
from snapfit.inputs import (
    as_dataset,
    class_bounds,
    class_counts,
    class_labels,
    csr_chunks,
    model_callback,
    ovr_bounds,
    rows_key,
    weighted_counts,
)
from snapfit.solvers import cpu
from snapfit.train import (
    Warm,
    open_dataset,
    resolve_budget,
    resolve_devices,
    train,
)


def _interop():
    """``snapfit.gpu.interop``, imported on first need: it brings ``numba.cuda`` and the device
    kernels (~70 MB resident), which fits and predictions on host data never use."""
    from snapfit.gpu import interop

    return interop


def _on_device(x) -> bool:
    """Whether ``x`` (an array or a CSR matrix) lives on a GPU. Until ``numba.cuda`` is imported
    no simulated device array can exist, so only ``__cuda_array_interface__`` (on ``x`` or on a
    CSR matrix's ``data``) can say yes, and host input is told apart without importing it."""
    if "numba.cuda" not in sys.modules and not any(
        hasattr(a, "__cuda_array_interface__") for a in (x, getattr(x, "data", None))
    ):
        return False
    return _interop().is_device_input(x)


def _how_read(source) -> tuple[bool, str | None]:
    """Whether a fit streamed its data, and the format of the cache its epochs re-read
    (``raw``, ``compact``, ``lz4``; None: in memory, or Parquet decoded every epoch)."""
    if "snapfit.stream.source" not in sys.modules:  # never imported: nothing was streamed
        return False, None
    from snapfit.stream.source import StreamSource

    if not isinstance(source, StreamSource):
        return False, None
    return True, (source.cache_format if source.mode == "cache" else None)


def _check_class_weight(class_weight, classes) -> None:
    """scikit-learn's rule (``compute_class_weight``): a dict that leaves a class of y out
    and names a class y does not have is a mistake (a typo, or the wrong labels)."""
    if not isinstance(class_weight, dict):
        return
    keys = []
    for c in classes:
        try:
            keys.append(int(c))
        except (TypeError, ValueError):  # string classes
            keys.append(str(c))
    left_out = [c for c in keys if c not in class_weight]
    if left_out and len(keys) - len(left_out) != len(class_weight):
        unknown = [k for k in class_weight if k not in keys]
        raise ValueError(
            f"The classes, {left_out}, are not in class_weight: it names {unknown}, which y "
            f"does not have (classes {keys}); key class_weight by the labels of y."
        )


class LogisticRegression(FitHooks, ClassifierMixin, BaseEstimator):
    """L2-regularized logistic regression by dual coordinate descent, in memory or out of core.

    Minimizes ``1/2 ||w||^2 + sum_i C_i log(1 + exp(-y_i (w.x_i + b)))`` with
    ``C_i = C * class_weight[y_i] * sample_weight_i`` and the intercept ``b`` learned as the
    weight of a constant feature ``intercept_scaling`` (regularized, as in liblinear).

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularization strength (snapml's ``regularizer`` is ``1/C``).
    fit_intercept : bool, default=True
    intercept_scaling : float, default=1.0
        Value of the constant feature; larger values regularize the intercept less.
    class_weight : dict, "balanced" or None
    tol : float, default=1e-4
        Stop when the relative duality gap ``(P - D) / |P|`` is at most ``tol``.
    max_iter : int, default=100
        Maximum number of epochs (passes over the data).
    device : {"auto", "cpu", "gpu"}, default="auto"
        "gpu" trains on GPUs (``device_ids``) with any remaining ``n_jobs`` threads taking the
        residue on the CPU; "auto" uses a GPU when a real one is present (CuPy input: always).
    n_jobs : int or None
        Host threads (None: 1, -1: all cores) solving shares of the rows at once, as
        ``deterministic`` says. With GPUs, each GPU takes one of them to drive it.
    deterministic : bool, default=True
        How ``n_jobs >= 2`` CPU threads work together. True: each thread is a CoCoA+ unit on
        its own copy of ``w``, merged every epoch (``sigma' = n_jobs``: more epochs, ~1.8x on
        Criteo-like rows), and the fit is bit-identical for a given ``random_state`` and
        ``n_jobs``. False: the threads share one ``w``; the coordinates in more than 1 % of
        the rows (and the intercept) are kept in per-thread slots that each thread alone
        writes and all read summed, the others are updated in place Hogwild-style
        (``snapfit.engine.shared``). Two threads then need about the epochs of one, but each
        epoch costs ~2x the CPU (cache lines of the shared coordinates move between cores),
        and the result depends on thread timing (within ``tol`` of the same optimum); on two
        idle cores it was not faster to a target than True (``docs/threads.md``). One thread,
        and CPU threads beside GPUs, are deterministic either way. Both return ``w(alpha)``
        exactly and certify the same gap.
    device_ids : list of int or None
        GPUs to train on with ``device="gpu"``, one unit each (Snap ML's name); None: ``[0]``.
    hot_columns : bool, default=False
        Solve the dense columns (the intercept and every column held by more than 0.1 % of
        the rows, at most 2,048, found on a sample of 65,536 rows) as a primal block: rows
        step on their sparse columns only, so rows updated at once (a GPU's rows in flight,
        several units) no longer interfere through the dense ones, and after each epoch the
        block takes one Newton step (``docs/gpu-performance-model.md``). Each unit is then a
        CoCoA+ unit (``deterministic`` is moot). Binary problems only; not with Dask. Its
        epochs grow with the rows (on Criteo-like rows 0.4x those of the default at 200k
        rows, 0.7x at 1M, 1.5x at 4M): for GPUs' rows in flight on up to ~1M rows.
    memory_budget : int, str or None
        Bytes of host memory for fits from Parquet (e.g. ``"2GB"``, ``"512MB"``). Data that
        does not fit is streamed from a raw cache in ``$SNAPFIT_TMPDIR`` (see
        ``docs/out-of-core.md``). None: half of the memory this process may still use at fit
        time (the host's available memory, cgroup limits included).
    chunk_rows : int or None
        Rows per chunk for in-memory input (None: one chunk, the best convergence per epoch).
    random_state : int, RandomState or None
        Seeds the visiting order; the same seed and ``n_jobs`` give the same ``coef_`` (with
        one thread or ``deterministic=True``, the default).
    warm_start : bool, default=False
        Start from the dual point paired with the previous ``coef_`` (with ``hot_columns``,
        the dense block from the previous ``coef_`` itself).
    verbose : int, default=0
        Print one line per epoch when > 0.
    checkpoint_dir : str or None
        Directory for ``checkpoint.snapfit`` (``w``, dual variables, epoch, fingerprint of data
        and parameters); written atomically every ``checkpoint_every`` epochs, at the end, and
        on SIGINT/SIGTERM (which then raise ``KeyboardInterrupt``). ``fit(..., resume=True)``
        continues from it. Set ``random_state`` (and keep ``deterministic=True`` with
        several threads) to make resumed runs reproducible.
    checkpoint_every : int, default=1
        Epochs between checkpoints.
    early_stopping_rounds : int or None
        With ``fit(..., validation=data)``: stop once the validation metric has not improved
        for this many eligible epochs (see ``early_stopping_gap``) and keep the best eligible
        epoch's model (``best_iteration_``). None: score the validation data every epoch but
        train to ``tol`` and keep the last model.
    early_stopping_gap : float, default=1e-2
        An epoch is eligible to be kept, and to count towards ``early_stopping_rounds``, only
        when its relative duality gap is at most this (or ``tol``, when larger). Dual
        coordinate descent's early epochs are far from the optimum and their validation
        scores are not monotone: stopping on them keeps a model by luck of the path (a
        user's run on a9a with C=10: patience 2 kept a validation log loss of 0.443 where the
        optimum's is 0.326). ``float("inf")`` lets every epoch count, as other libraries do.
    validation_metric : {"logloss", "auc"}, default="logloss"
        The metric of ``validation`` data that early stopping watches.

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features), or (K, n_features) for K > 2 classes
    intercept_ : ndarray of shape (1,), or (K,)
    classes_ : ndarray of shape (2,), or (K,): more than two classes train one-vs-rest, the K
        problems in one pass over the data per epoch (docs/losses.md)
    n_iter_ : ndarray of shape (1,)
    history_ : list of dict
        Per epoch: primal, dual, gap, rel_gap, exact, seconds, rows_per_s, nnz_per_s, io_wait
        (the engine blocked on the source), idle (the solver threads on no rows, on average),
        and ``validation_<metric>`` when fitted with validation data.
    feature_map_ : dict
        How the training data was built (format, hash bits, transform, n_features...); scorers
        refuse data built another way.
    best_iteration_, best_score_ : int, float
        With validation data: the eligible epoch (1-based; see ``early_stopping_gap``) with the
        best validation metric, and that metric (absent when no epoch was eligible).
    converged_ : bool
        Whether the fit reached ``tol`` (the relative duality gap of its last epoch).
    stopped_early_ : bool
        Whether early stopping ended the fit; the model is then ``best_iteration_``'s, not the
        last epoch's.
    hashed_names_ : dict
        When the training data was a converted table: the keys its conversion recorded by
        feature index (see ``top_features``).
    streamed_, cache_format_ : bool, str or None
        Whether the fit streamed its Parquet under ``memory_budget`` (False: it was in
        memory), and the format of the cache its epochs re-read: ``"raw"``, ``"compact"``,
        ``"lz4"``, or None (in memory, or Parquet decoded every epoch).

    Examples
    --------
    >>> import numpy as np
    >>> from snapfit import LogisticRegression
    >>> X = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    >>> clf = LogisticRegression(C=10.0, random_state=0).fit(X, [0, 1, 1, 0])
    >>> clf.predict(X).tolist()
    [0, 1, 1, 0]
    """

    _parameter_constraints: dict = {
        "C": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "device": [StrOptions({"auto", "cpu", "gpu"})],
        "n_jobs": [Integral, None],
        "deterministic": ["boolean"],
        "device_ids": ["array-like", None],
        "hot_columns": ["boolean"],
        "memory_budget": [Interval(Integral, 1, None, closed="left"), str, None],
        "chunk_rows": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": ["random_state"],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
        "checkpoint_dir": [str, os.PathLike, None],
        "checkpoint_every": [Interval(Integral, 1, None, closed="left")],
        "early_stopping_rounds": [Interval(Integral, 1, None, closed="left"), None],
        "validation_metric": [StrOptions({"logloss", "auc"})],
        "early_stopping_gap": [Interval(Real, 0, None, closed="both")],
    }

    def __init__(
        self,
        C=1.0,
        *,
        fit_intercept=True,
        intercept_scaling=1.0,
        class_weight=None,
        tol=1e-4,
        max_iter=100,
        device="auto",
        n_jobs=None,
        deterministic=True,
        device_ids=None,
        hot_columns=False,
        memory_budget=None,
        chunk_rows=None,
        random_state=None,
        warm_start=False,
        verbose=0,
        checkpoint_dir=None,
        checkpoint_every=1,
        early_stopping_rounds=None,
        validation_metric="logloss",
        early_stopping_gap=1e-2,
    ):
        self.C = C
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.tol = tol
        self.max_iter = max_iter
        self.device = device
        self.n_jobs = n_jobs
        self.deterministic = deterministic
        self.device_ids = device_ids
        self.hot_columns = hot_columns
        self.memory_budget = memory_budget
        self.chunk_rows = chunk_rows
        self.random_state = random_state
        self.warm_start = warm_start
        self.verbose = verbose
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_every = checkpoint_every
        self.early_stopping_rounds = early_stopping_rounds
        self.validation_metric = validation_metric
        self.early_stopping_gap = early_stopping_gap

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    # -- fitting ---------------------------------------------------------------------------
    def fit(self, X, y=None, sample_weight=None, *, validation=None, resume=False, callbacks=()):
        """Fit on an array or sparse matrix with labels ``y``, or on Parquet data with labels
        inside: a path, directory, glob or list of them, or a ``pyarrow.Table`` in snapfit's
        format (``label``, ``indices``, optional ``values`` and ``weight``). For Parquet input
        ``classes_`` is ``[0, 1]`` and per-row weights come from its ``weight`` column.

        ``resume=True`` continues from the checkpoint in ``checkpoint_dir`` (if there is one;
        one made with other data or parameters is refused). ``callbacks`` are called after each
        epoch as ``cb(record, coef, intercept)`` with the ``snapfit.engine.EpochRecord`` and the
        model so far (``coef`` is a read-only view: copy it to keep it); one returning True stops
        the fit.

        ``validation``: held-out data scored with ``validation_metric`` after every epoch (what
        ``fit`` takes: Parquet paths or a Table, or a tuple ``(X, y)`` / ``(X, y,
        sample_weight)``); with ``early_stopping_rounds`` the fit stops when it stops improving
        and keeps the best epoch's model."""
        self._validate_params()
        if resume and self.checkpoint_dir is None:
            raise ValueError("resume=True needs checkpoint_dir; set it to the run's directory.")
        on_device = _on_device(X)
        if on_device and self.device == "cpu":
            raise ValueError(
                "X is a GPU array but device='cpu'; use device='gpu' or 'auto', or copy X to "
                "the host (e.g. X.get())."
            )
        # Resolved once here, passed down as numbers.
        devices = resolve_devices("gpu" if on_device else self.device, self.n_jobs,
                                  self.device_ids, deterministic=self.deterministic)  # fmt: skip
        seed, bias = self._seed(), self._bias()
        rows_id = None
        dataset = as_dataset(X)
        if dataset is not None:
            source, counts = self._dataset_source(dataset, y, sample_weight, devices, seed)
        elif on_device:
            source, counts = self._device_source(X, y, sample_weight)
        else:
            source, counts, rows_id = self._array_source(X, y, sample_weight)
        d = source.n_features
        self.feature_map_ = featuremap.of_data(source if dataset is None else dataset)
        self.streamed_, self.cache_format_ = _how_read(source)
        self.__dict__.pop("hashed_names_", None)  # a refit on data without recorded names
        names = dataset is not None and (getattr(dataset, "metadata", None) or {}).get("names")
        if names:
            self.hashed_names_ = names
        c_neg, c_pos = self._class_bounds(counts)
        problem = self._problem(d, c_neg, c_pos, seed, bias)
        if problem.n_classes > 1 and validation is not None:
            raise ValueError(
                f"validation scores two classes; y has {problem.n_classes}. Fit without "
                "validation, or one binary model per class."
            )
        stopper = self._early_stopping(validation, d, bias)
        user = [model_callback(cb, d, bias) for cb in callbacks]
        result = train(
            source, problem, devices=devices,
            warm=self._warm(source, c_pos, c_neg, bias, rows_id),
            checkpoint=self._checkpoints(resume),
            callbacks=([stopper] if stopper else []) + ([self._print_epoch] if self.verbose else [])
            + user,
            # the dual point serves only a warm start on the same rows: arrays (rows_id), where
            # it costs 8 bytes a row; a 200M-row Parquet fit would double its dual state's RSS
            keep_alpha=rows_id is not None,
        )  # fmt: skip
        self._dual = (result.alpha, c_pos, c_neg, rows_id)
        history = [rec.as_dict() for rec in result.history]
        return self._keep(result.w, result.n_iter, result.converged, history, bias, "epochs",
                          stopper)  # fmt: skip

    def _array_source(self, X, y, sample_weight):
        X, y = validate_data(
            self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32], order="C"
        )
        self.classes_, y_code = class_labels(y)
        weight = None
        if sample_weight is not None:
            weight = _check_sample_weight(sample_weight, X, dtype=np.float64).astype(np.float32)
        X = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
        chunks = csr_chunks(X, y_code, weight, self.chunk_rows)
        source = InMemorySource(chunks, X.shape[1])
        return source, self._counts(y_code, weight), rows_key(y_code, weight)

    def _counts(self, y_code, weight):
        """The (weighted) rows of each class, as ``_class_bounds`` takes them."""
        if len(self.classes_) > 2:
            return class_counts(y_code, weight, len(self.classes_))
        return weighted_counts(y_code, weight)

    def _device_source(self, X, y, sample_weight):
        """CuPy (or any ``__cuda_array_interface__``) input: X stays on the device, zero-copy;
        labels and weights (n values) come to the host. Trains on GPUs alone."""
        interop = _interop()
        y = interop.to_host(y)
        self.classes_, y_pm = class_labels(y)
        if len(self.classes_) > 2:
            raise ValueError(
                f"y has {len(self.classes_)} classes: one-vs-rest trains from host arrays or "
                "Parquet (on GPUs too); copy X to the host (e.g. X.get())."
            )
        weight = None
        if sample_weight is not None:
            weight = interop.to_host(sample_weight).astype(np.float32)
        chunk, d = interop.device_chunk(X, y_pm, weight)
        self.n_features_in_ = d
        return interop.DeviceSource([chunk], d), weighted_counts(y_pm, weight)

    def _dataset_source(self, dataset, y, sample_weight, devices, seed):
        if y is not None or sample_weight is not None:
            raise ValueError(
                "Parquet input carries its labels and weights in its 'label' and 'weight' "
                "columns; call fit(path) without y and sample_weight."
            )
        self.n_features_in_ = dataset.n_features
        # more than two classes: (classes, rows of each); real targets refused in one line
        classes = check_class_labels(dataset) if dataset.has_labels else None
        if classes is not None:  # one-vs-rest: labels read as class indices, K duals per row
            dataset = dataset.with_classes(classes[0])
            self.classes_ = classes[0]
            source = open_dataset(dataset, budget=resolve_budget(self.memory_budget),
                                  devices=devices, chunk_rows=self.chunk_rows, seed=seed,
                                  width=len(classes[0]))  # fmt: skip
            return source, classes[1]
        check_two_classes(dataset)
        self.classes_ = np.array([0, 1])
        source = open_dataset(dataset, budget=resolve_budget(self.memory_budget),
                              devices=devices, chunk_rows=self.chunk_rows, seed=seed)  # fmt: skip
        return source, dataset.label_counts()

    # -- what both doors (this one and the Dask one) share ---------------------------------
    def _seed(self) -> int:
        return int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))

    def _bias(self) -> float:
        return float(self.intercept_scaling) if self.fit_intercept else 0.0

    def _class_bounds(self, counts) -> tuple[float, float]:
        """``(C-, C+)``: ``C`` times each class's weight (``classes_[1]`` is the positive
        class); "balanced" from the (weighted) label counts ``(n_neg, n_pos)``. With more
        than two classes both are ``C``, the per-class bounds ``_problem``'s."""
        _check_class_weight(self.class_weight, self.classes_)
        if len(self.classes_) > 2:
            self._ovr = ovr_bounds(self.C, self.class_weight, self.classes_, counts)
            return float(self.C), float(self.C)
        self._ovr = ()
        return class_bounds(self.C, self.class_weight, self.classes_, counts)

    def _loss_name(self) -> str:
        """The loss this estimator fits (``dual.LOSSES``), recorded in its model files."""
        return "logistic"

    def _problem(self, n_features: int, c_neg: float, c_pos: float, seed: int, bias: float):
        from snapfit.engine import Problem
        from snapfit.solvers.dual import LOSSES

        return Problem(n_features=n_features, c_pos=float(c_pos), c_neg=float(c_neg), bias=bias,
                       tol=float(self.tol), max_iter=int(self.max_iter), seed=seed,
                       loss=LOSSES[self._loss_name()],
                       class_bounds=getattr(self, "_ovr", ()),
                       hot_columns=bool(getattr(self, "hot_columns", False)))  # fmt: skip

    def _warm_w(self, n_features: int, bias: float) -> np.ndarray | None:
        """The previous fit's ``w`` (intercept weight last) when warm starting on as many
        features; else None."""
        if not (self.warm_start and hasattr(self, "coef_")):
            return None
        n_blocks = len(self.classes_) if len(self.classes_) > 2 else 1
        if self.coef_.shape != (n_blocks, n_features):
            return None
        b = self.intercept_ / bias if bias else np.zeros(n_blocks)
        return np.c_[self.coef_, b].ravel()

    def _warm(self, source, c_pos, c_neg, bias, rows_id) -> Warm | None:
        """The previous fit's dual variables when the rows are the same (labels and weights),
        scaled into the new bounds; else the dual point paired with the previous ``coef_``."""
        w = self._warm_w(source.n_features, bias)
        if w is None:
            return None
        prev = getattr(self, "_dual", None)
        if len(self.classes_) > 2 or getattr(self, "hot_columns", False):
            # one-vs-rest restarts from w: its bounds are per class; under the hot block the
            # dual variables answered w_H, not the v_H they sum to (``snapfit.engine.hot``)
            prev = None
        if prev is not None and prev[0] is not None and rows_id is not None and prev[3] == rows_id:
            alpha, old_pos, old_neg, _ = prev
            y_pos = np.concatenate([c.y for c in source.chunks]) > 0
            # packed alpha scales with its bound: a -> a r and C - a -> (C - a) r
            return Warm(alpha=alpha * np.where(y_pos, c_pos / old_pos, c_neg / old_neg))
        return Warm(w=w)

    def _keep(self, w, n_iter: int, converged: bool, history: list[dict], bias: float, unit: str,
              stopper=None):  # fmt: skip
        """The fitted attributes from a result (``w``: coefficients, intercept weight last);
        a fit that stopped at ``max_iter`` warns with scikit-learn's ``ConvergenceWarning``.
        With early stopping the best validation epoch's ``w`` is kept instead of the last."""
        self.converged_ = bool(converged)
        self.stopped_early_ = False
        for name in ("best_iteration_", "best_score_"):  # a refit without an eligible epoch
            self.__dict__.pop(name, None)
        if stopper is not None:
            stopper.annotate(history)
            if stopper.best_w is not None:
                self.best_iteration_, self.best_score_ = stopper.best_epoch, stopper.best_score
            if self.early_stopping_rounds is not None and stopper.best_w is not None:
                if not stopper.best_is_last:
                    self._dual = None  # the dual point is the last epoch's, not the best one's
                w = stopper.best_w
                self.stopped_early_ = bool(stopper.stopped)
                converged = converged or stopper.stopped  # stopping early is no failure
        blocks = np.asarray(w).reshape(len(self.classes_) if len(self.classes_) > 2 else 1, -1)
        self.coef_ = blocks[:, :-1].copy()
        self.intercept_ = blocks[:, -1] * bias
        self.n_iter_ = np.array([n_iter], dtype=np.int32)
        self.history_ = history
        if not converged:
            gap = history[-1]["rel_gap"] if history else float("nan")
            warnings.warn(
                f"snapfit did not reach tol={self.tol} in max_iter={self.max_iter} {unit} "
                f"(relative duality gap {gap:.3g}); increase max_iter.",
                ConvergenceWarning,
                stacklevel=3,
            )
        return self

    @staticmethod
    def _print_epoch(rec, w=None) -> None:
        print(
            f"epoch {rec.epoch:4d}  primal {rec.primal:.8g}  rel_gap {rec.rel_gap:.3e}"
            f"{' (exact)' if rec.exact else ''}  {rec.seconds:.3f}s"
            f"  {rec.nnz_per_s / 1e6:.1f}M nnz/s",
            flush=True,
        )

    # -- prediction ------------------------------------------------------------------------
    def decision_function(self, X):
        """Signed distance ``w.x + b``; positive means ``classes_[1]``. With more than two
        classes, shape (n, K): column k scores class k against the rest.

        ``X`` is what ``fit`` takes: arrays, CuPy arrays, or Parquet paths, globs and pyarrow
        Tables in snapfit's format (labels not needed), read chunk by chunk after their feature
        map is checked against the model's (``feature_map_``). A model trained on converted
        data also takes raw rows, featurized batch by batch as ``convert`` did: a table model
        a CSV or Parquet path of named columns, a pandas DataFrame, a pyarrow Table or a list
        of dicts; a Criteo model a Criteo TSV path (``snapfit.datasets.featurize``).
        """
        check_is_fitted(self)
        fmt = (getattr(self, "feature_map_", None) or {}).get("format")
        if fmt in ("table", "criteo", "criteo-like"):  # raw rows, featurized as convert did
            from snapfit.datasets.featurize import is_raw

            if is_raw(X, self.feature_map_):
                from snapfit.scoring import raw_scores

                return raw_scores(self, X)
        dataset = as_dataset(X, require_labels=False, targets="real")  # labels: not used
        if dataset is not None:
            from snapfit.scoring import check_map, iter_scores

            check_map(self, dataset)
            scores = [s for s, _, _ in iter_scores(self, dataset)]
            return np.concatenate(scores) if scores else np.empty(0)
        if _on_device(X) and self.coef_.shape[0] > 1:
            raise ValueError(
                "a one-vs-rest model scores host arrays and Parquet; copy X to the host "
                "(e.g. X.get())."
            )
        if _on_device(X):  # the result is CuPy for CuPy input (like_input)
            interop = _interop()
            b = float(self.intercept_[0])
            out = interop.decision_function(X, self.coef_.ravel(), b, to_host=False)
            return interop.like_input(X, out)
        X = validate_data(self, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=False)
        if self.coef_.shape[0] > 1:
            return np.asarray(X @ self.coef_.T) + self.intercept_
        if not sp.issparse(X):
            return X @ self.coef_.ravel() + self.intercept_[0]
        X = X.tocsr()
        out = np.empty(X.shape[0])
        cpu.decision_function(
            X.indptr.astype(np.int64, copy=False), X.indices.astype(np.int32, copy=False),
            X.data, True, self.coef_.ravel(), float(self.intercept_[0]), out,
        )  # fmt: skip
        return out

    def predict_proba(self, X):
        """Probabilities of ``classes_[0]`` and ``classes_[1]``, shape (n, 2). With more than
        two classes, shape (n, K): each class's one-vs-rest probability, normalized over the
        classes (scikit-learn's liblinear rule)."""
        from scipy.special import expit

        s = self.decision_function(X)
        if self.coef_.shape[0] > 1:  # (n, K) host scores: device input is refused for K > 2
            p = expit(s)
            return p / p.sum(axis=1, keepdims=True)
        if _on_device(s):  # device input: the same, in the input's library
            xp = _interop().array_module(s)
            p = 1.0 / (1.0 + xp.exp(-s))
            return xp.stack([1.0 - p, p], axis=1)
        p = expit(s)
        return np.column_stack([1.0 - p, p])

    def predict_log_proba(self, X):
        from scipy.special import log_expit

        check_is_fitted(self)
        if self.coef_.shape[0] > 1:
            return np.log(self.predict_proba(X))
        s = self.decision_function(X)
        if _on_device(s):  # log_expit(s) = -log(1 + exp(-s))
            xp = _interop().array_module(s)
            return xp.stack([-xp.logaddexp(0.0, s), -xp.logaddexp(0.0, -s)], axis=1)
        return np.column_stack([log_expit(-s), log_expit(s)])

    def predict(self, X):
        """Class labels (a NumPy array, also for device input: ``classes_`` live on the host)."""
        check_is_fitted(self)
        s = self.decision_function(X)
        if _on_device(s):
            s = _interop().to_host(s)
        if self.coef_.shape[0] > 1:
            return self.classes_[np.argmax(s, axis=1)]
        return self.classes_[(s > 0).astype(int)]

    # -- persistence and interop -----------------------------------------------------------
    def top_features(self, k: int = 20) -> list[dict]:
        """The ``k`` largest weights by magnitude, each ``{"index", "weight", "name"}``: the
        name is the key a table conversion recorded (``"site=news"``, ``"site=news^ad=a1"``,
        ``"price"``; the first 256 distinct keys of each column and cross; "(collision)" when
        recorded keys share the index) or a Criteo integer field (``"I3"``); None when not
        recorded. Vowpal Wabbit's ``--invert_hash``, bounded."""
        from snapfit.model import top_weights

        check_is_fitted(self)
        names = getattr(self, "hashed_names_", None)
        return top_weights(self.coef_, featuremap.of_model(self), names, k)

    def save(self, path) -> None:
        """Write the fitted model to ``path`` (.npz with a JSON header; no pickle)."""
        check_is_fitted(self)
        classes = self.classes_
        if classes.dtype == object:
            classes = classes.astype(str)
        arrays = {"coef": self.coef_, "intercept": self.intercept_, "classes": classes}
        meta = {"params": model_io.jsonable(self.get_params()), "n_iter": int(self.n_iter_[0]),
                "history": self.history_, "feature_map": featuremap.of_model(self),
                "loss": self._loss_name()}  # fmt: skip
        meta.update(self._fit_record())
        if hasattr(self, "hashed_names_"):
            meta["names"] = self.hashed_names_
        model_io.save_arrays(path, arrays, meta)

    def to_sklearn(self):
        """A fitted ``sklearn.linear_model.LogisticRegression`` with the same coefficients;
        with more than two classes a fitted ``OneVsRestClassifier`` of them (scikit-learn's
        multiclass ``LogisticRegression`` scores by softmax, which is another model)."""
        from sklearn.linear_model import LogisticRegression as SkLR

        check_is_fitted(self)

        def one(coef, intercept, classes):
            sk = SkLR(C=self.C, fit_intercept=self.fit_intercept, solver="liblinear",
                      intercept_scaling=self.intercept_scaling,
                      class_weight=self.class_weight)  # fmt: skip
            sk.coef_, sk.intercept_, sk.classes_ = coef.copy(), intercept.copy(), classes.copy()
            sk.n_features_in_ = self.n_features_in_
            sk.n_iter_ = self.n_iter_.copy()
            return sk

        if self.coef_.shape[0] == 1:
            return one(self.coef_, self.intercept_, self.classes_)
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.preprocessing import LabelBinarizer

        ovr = OneVsRestClassifier(one(self.coef_[:1], self.intercept_[:1], np.array([0, 1])))
        ovr.label_binarizer_ = LabelBinarizer(sparse_output=True).fit(self.classes_)
        ovr.estimators_ = [one(self.coef_[k : k + 1], self.intercept_[k : k + 1], np.array([0, 1]))
                           for k in range(len(self.classes_))]  # fmt: skip
        ovr.classes_ = self.classes_.copy()
        ovr.n_features_in_ = self.n_features_in_
        return ovr


def load(path) -> LogisticRegression:
    """Load a model written by ``LogisticRegression.save``; checks integrity, never unpickles."""
    return model_io.load_estimator(path, LogisticRegression())
