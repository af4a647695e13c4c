"""The cluster door's public side: ``DaskLogisticRegression``, ``DaskLinearSVC``, ``DaskRidge``,
``fit``, ``cluster_client`` and ``warm_up`` (imported from ``snapfit.dask``; see its docstring
and ``docs/dask.md``). Each Dask estimator subclasses its local estimator: parameters, the
problem (its loss included), early stopping and the fitted attributes are the local door's; the
placement of the data and the rounds are the cluster's (``_driver.train``)."""

from __future__ import annotations

import contextlib
import logging
import os

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from snapfit import featuremap
from snapfit.dask import _worker
from snapfit.dask._driver import (
    alive_workers,
    train,
    wait_all,
)
from snapfit.data.validate import check_class_labels
from snapfit.estimator import LogisticRegression
from snapfit.inputs import as_dataset
from snapfit.ridge import Ridge
from snapfit.svm import LinearSVC, _never

log = logging.getLogger("snapfit")


def _units(est) -> dict:
    """What each worker resolves into its units (``snapfit.train.resolve_devices``)."""
    return {"device": est.device, "n_jobs": est.n_jobs, "device_ids": est.device_ids,
            "deterministic": est.deterministic}  # fmt: skip


def _is_dask_collection(x) -> bool:
    import dask

    return dask.is_dask_collection(x)


class _DaskDoor:
    """What a Dask estimator adds to its local estimator (``_local``, next in its MRO)."""

    _local: type

    def _client(self):
        if self.client is not None:
            return self.client
        from distributed import get_client

        return get_client()

    def _lazy_decision(self, X, coef, intercept: float):
        """``X coef + intercept`` as a dask array for a dask array or Parquet paths (read and
        scored on the workers, one block per row group); None for other input."""
        if _is_dask_collection(X) and np.ndim(coef) == 2:  # one-vs-rest: (rows, K)
            k = coef.shape[0]
            return X.rechunk({1: X.shape[1]}).map_blocks(
                _worker.decision_block,
                coef.T,
                intercept,
                chunks=(X.chunks[0], (k,)),
                dtype=np.float64,
            )
        if _is_dask_collection(X):
            return X.map_blocks(_worker.decision_block, coef, intercept, drop_axis=1,
                                dtype=np.float64)  # fmt: skip
        dataset = _predict_dataset(X)
        if dataset is None:
            return None
        from snapfit.scoring import check_map

        check_map(self, dataset)
        return _parquet_decision(dataset, coef, intercept)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["client"] = None  # a client does not travel
        return state


class _DaskClassifier(_DaskDoor):
    """The cluster door of a binary classifier: ``fit`` by rounds and lazy predictions."""

    _local = LogisticRegression

    # -- fitting ---------------------------------------------------------------------------
    def fit(
        self,
        X,
        y=None,
        sample_weight=None,
        *,
        timeout: float = 600.0,
        tree_above: int = 16,
        max_passes: int = 10,
        correction: bool = True,
        on_round=None,
        validation=None,
    ):
        """Fit on Parquet paths (labels inside) or a dask array ``X`` with labels ``y``.

        timeout : seconds any single step (loading, a round, recovery) may take before the fit
            fails with ``FitTimeoutError``; it never waits forever.
        tree_above : with more workers than this, ``dw`` and the gradient are summed by a tree
            of tasks on the workers instead of at the driver.
        max_passes : engine passes a worker may run on its subproblem in one round.
        correction : False runs plain CoCoA+ rounds (one pass each, no gradient correction),
            which can stall on data whose rows all share dense features; for comparisons.
        on_round : callable getting each round's record; returning True stops the fit.
        validation : held-out data scored after every round, as by the local estimator's fit
            (read on the client: Parquet paths, a Table or in-memory arrays).
        """
        self._validate_params()
        if self.checkpoint_dir is not None:
            raise ValueError(
                "checkpoint_dir is not used by Dask fits: the driver keeps the checkpoint (alpha "
                "of every row, every checkpoint_every rounds) in memory; set checkpoint_dir=None."
            )
        if getattr(self, "hot_columns", False):
            raise ValueError(
                "hot_columns=True fits on one machine: a Dask round has no hot step (the driver "
                "would take it over every part's moves); set hot_columns=False, or fit with "
                "snapfit.LogisticRegression."
            )
        client = self._client()
        dataset = as_dataset(X) if not _is_dask_collection(X) else None
        counts = None  # the rows of each class, for more than two (one-vs-rest)
        if dataset is not None:
            if y is not None or sample_weight is not None:
                raise ValueError(
                    "Parquet input carries its labels and weights in its 'label' and 'weight' "
                    "columns; call fit(path) without y and sample_weight."
                )
            from snapfit.dask._inputs import ParquetInput

            self.classes_ = np.array([0, 1])
            more = check_class_labels(dataset) if dataset.has_labels else None
            if more is not None:  # labels read as class indices on the workers
                self.classes_, counts = more
                dataset = dataset.with_classes(self.classes_)
            inp = ParquetInput(dataset)
        elif _is_dask_collection(X):
            inp, counts = self._array_input(client, X, y, sample_weight)
        else:
            raise TypeError(
                f"{type(self).__name__}.fit takes Parquet paths or a dask array X; got "
                f"{type(X).__name__}. Use snapfit.{self._local.__name__} for in-memory arrays, "
                "or dask.array.from_array(X) to train on the cluster."
            )
        inp.timeout = timeout
        self.n_features_in_ = inp.n_features
        self.feature_map_ = (featuremap.of_data(dataset) if dataset is not None
                             else featuremap.of_width(inp.n_features))  # fmt: skip
        bias = self._bias()
        class_weights = self._class_bounds
        self._ovr = ()  # per-class bounds of one-vs-rest (``_class_bounds``), set below
        if len(self.classes_) > 2:
            if validation is not None:
                raise ValueError(
                    f"validation scores two classes; y has {len(self.classes_)}. Fit without "
                    "validation, or one binary model per class."
                )
            self._class_bounds(counts)  # every class's bounds in the problem, from the client
            class_weights = None
        problem = self._problem(inp.n_features, 1.0, 1.0, self._seed(), bias)
        stopper = self._early_stopping(validation, inp.n_features, bias)
        callbacks = [stopper] if stopper is not None else []
        per_round = (on_round, self._print_round if self.verbose else None)
        callbacks += [lambda rec, w, c=c: c(rec) for c in per_round if c]

        result = train(
            client, inp, problem,  # its loss is the local estimator's (``_loss_name``)
            class_weights=class_weights,
            units=_units(self), timeout=timeout, checkpoint_every=int(self.checkpoint_every),
            tree_above=tree_above, warm_w=self._warm_w(inp.n_features, bias),
            memory_budget=self.memory_budget, chunk_rows=self.chunk_rows,
            max_passes=max_passes, correction=correction,
            on_round=(lambda rec, w: any([bool(c(rec, w)) for c in callbacks])) if callbacks
            else None,
        )  # fmt: skip
        self.parts_ = result.parts
        self._alpha = result.alpha  # for checks (w = w(alpha)); not used by predictions
        return self._keep(result.w, result.n_iter, result.converged, result.history, bias,
                          "rounds", stopper)  # fmt: skip

    def _array_input(self, client, X, y, sample_weight):
        import dask.array as da

        from snapfit.dask._inputs import ArrayInput

        if y is None:
            raise ValueError("a dask array X needs labels y (a dask array or array-like).")
        y = da.asarray(y)
        classes = np.unique(da.unique(y).compute())
        if len(classes) < 2:
            raise ValueError(
                "This solver needs samples of at least 2 classes in the data, but the data "
                f"contains only one class: {classes[0]!r}"
            )
        self.classes_ = classes
        counts = None
        if len(classes) > 2:  # the rows of each class (weighted), for "balanced"
            import dask

            w = 1.0 if sample_weight is None else da.asarray(sample_weight)
            counts = np.array(dask.compute(*[da.where(y == c, w, 0.0).sum() for c in classes]),
                              dtype=np.float64)  # fmt: skip
        return ArrayInput(client, X, y, sample_weight, classes), counts

    @staticmethod
    def _print_round(rec: dict) -> None:
        print(
            f"round {rec['epoch']:4d}  primal {rec['primal']:.8g}  rel_gap {rec['rel_gap']:.3e}"
            f"{'' if rec['accepted'] else ' (rejected)'}  theta {rec['theta']:.3g}  "
            f"{rec['passes']} passes  {rec['seconds']:.3f}s  {rec['n_workers']} workers  "
            f"{(rec['bytes_sent'] + rec['bytes_received']) / 1e6:.2f} MB"
            f"{'  ' + rec['event'] if rec.get('event') else ''}",
            flush=True,
        )

    # -- prediction ------------------------------------------------------------------------
    def decision_function(self, X):
        """``w.x + b``: a dask array for a dask array or Parquet input, else a numpy array."""
        check_is_fitted(self)
        if self.coef_.shape[0] > 1:  # one-vs-rest: (rows, K) scores
            lazy = self._lazy_decision(X, self.coef_, self.intercept_)
        else:
            lazy = self._lazy_decision(X, self.coef_.ravel(), float(self.intercept_[0]))
        return super().decision_function(X) if lazy is None else lazy

    def predict_proba(self, X):
        if not _lazy(X):
            return super().predict_proba(X)
        import dask.array as da
        from scipy.special import expit

        if self.coef_.shape[0] > 1:  # normalized over the classes, as the local estimator

            def normalized(s):
                p = expit(s)
                return p / p.sum(axis=1, keepdims=True)

            return self.decision_function(X).map_blocks(normalized, dtype=np.float64)
        p = self.decision_function(X).map_blocks(expit, dtype=np.float64)
        return da.stack([1.0 - p, p], axis=1)

    def predict(self, X):
        if not _lazy(X):
            return super().predict(X)
        classes = self.classes_
        if self.coef_.shape[0] > 1:
            return self.decision_function(X).map_blocks(
                lambda s: classes[np.argmax(s, axis=1)], drop_axis=1, dtype=classes.dtype
            )
        return self.decision_function(X).map_blocks(
            lambda s: classes[(s > 0).astype(int)], dtype=classes.dtype
        )

    def to_local(self):
        """The fitted local estimator (``snapfit.LogisticRegression``, ``snapfit.LinearSVC``)
        with the same parameters and coefficients (no client)."""
        check_is_fitted(self)
        params = {k: v for k, v in self.get_params().items() if k != "client"}
        est = self._local(**params)
        for name in ("coef_", "intercept_", "classes_", "n_features_in_", "n_iter_"):
            setattr(est, name, getattr(self, name).copy() if name != "n_features_in_"
                    else self.n_features_in_)  # fmt: skip
        est.history_ = [dict(h) for h in self.history_]
        est.feature_map_ = dict(featuremap.of_model(self))
        for name in ("best_iteration_", "best_score_", "converged_", "stopped_early_"):
            if hasattr(self, name):
                setattr(est, name, getattr(self, name))
        return est


class DaskLogisticRegression(_DaskClassifier, LogisticRegression):
    """``snapfit.LogisticRegression`` trained on a Dask cluster; the same parameters plus
    ``client`` (None: ``distributed.get_client()``, the current client).

    Every worker runs the node trainer of ``snapfit.train`` on its share: ``device``,
    ``n_jobs`` and ``device_ids`` are resolved on each worker (``n_jobs`` None: the worker's
    own thread count). ``device="gpu"`` trains on each worker's GPUs (``device_ids``, default
    ``[0]``: the GPU a ``dask_cuda.LocalCUDACluster`` gives each worker) with the worker's
    other threads taking the residue; a worker without a GPU is named in a ``ResourceError``.
    sigma' is the sum of the units over the workers; with ``deterministic=False`` a worker's
    CPU threads share ``w`` and count as one unit (the worker then rebuilds its share of
    ``w(alpha)`` once per round, so the rounds stay exact). ``checkpoint_every`` is the rounds
    between alpha checkpoints the parts send the driver (8 bytes per row each time): a lost
    worker costs at most that many rounds. ``checkpoint_dir`` must be None (the checkpoint
    lives in the driver's memory). ``memory_budget`` and ``chunk_rows`` apply per worker, to its
    share of Parquet input: the share stays resident when it fits the budget and is streamed by
    the out-of-core engine otherwise (None: half of the worker's ``memory_limit``, or of its
    available memory when it has no limit).

    ``fit`` takes Parquet paths (a file, directory, glob or list; labels inside) or a dask array
    ``X`` with a dask array or array-like ``y``. ``predict``, ``predict_proba`` and
    ``decision_function`` return dask arrays for dask arrays and Parquet paths (one block per
    row group), numpy arrays otherwise. ``to_local()`` gives the fitted local estimator.
    """

    _parameter_constraints: dict = {
        **LogisticRegression._parameter_constraints,
        "client": "no_validation",
    }

    def __init__(
        self,
        C=1.0,
        *,
        client=None,
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
        # stored verbatim, as scikit-learn's clone and get_params expect
        self.client = client
        self.hot_columns = hot_columns
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


class DaskLinearSVC(_DaskClassifier, LinearSVC):
    """``snapfit.LinearSVC`` (``loss="hinge"`` or ``"squared_hinge"``) trained on a Dask cluster;
    its parameters plus ``client``. Everything ``DaskLogisticRegression`` says holds, with the
    SVM's loss in every worker's passes and measurements; no probabilities, and ``to_local()``
    gives a fitted ``snapfit.LinearSVC``.
    """

    _local = LinearSVC
    _parameter_constraints: dict = {
        **LinearSVC._parameter_constraints,
        "client": "no_validation",
    }

    def __init__(
        self,
        C=1.0,
        *,
        client=None,
        loss="squared_hinge",
        fit_intercept=True,
        intercept_scaling=1.0,
        class_weight=None,
        tol=1e-4,
        max_iter=1000,
        device="auto",
        n_jobs=None,
        deterministic=True,
        device_ids=None,
        memory_budget=None,
        chunk_rows=None,
        random_state=None,
        warm_start=False,
        verbose=0,
        checkpoint_dir=None,
        checkpoint_every=1,
        early_stopping_rounds=None,
        validation_metric="auc",
        early_stopping_gap=1e-2,
    ):
        super().__init__(
            C, loss=loss, fit_intercept=fit_intercept, intercept_scaling=intercept_scaling,
            class_weight=class_weight, tol=tol, max_iter=max_iter, device=device,
            n_jobs=n_jobs, deterministic=deterministic, device_ids=device_ids,
            memory_budget=memory_budget, chunk_rows=chunk_rows, random_state=random_state,
            warm_start=warm_start, verbose=verbose, checkpoint_dir=checkpoint_dir,
            checkpoint_every=checkpoint_every, early_stopping_rounds=early_stopping_rounds,
            validation_metric=validation_metric, early_stopping_gap=early_stopping_gap,
        )  # fmt: skip
        self.client = client

    # An SVM scores margins: no probabilities, lazy or not.
    predict_proba = available_if(_never)(_DaskClassifier.predict_proba)


class DaskRidge(_DaskDoor, Ridge):
    """``snapfit.Ridge`` trained on a Dask cluster; its parameters plus ``client``. ``fit``
    takes snapfit Parquet with real targets in its ``label`` column (each worker reads its row
    groups, resident or streamed within ``memory_budget``) or a dask array ``X`` with targets
    ``y`` (a dask array or array-like, kept as float32 on the workers, as ``Ridge`` keeps them)
    and optional ``sample_weight``. The rounds are ``DaskLogisticRegression``'s with the
    squared loss in every worker's passes and measurements; early stopping is ``Ridge``'s
    (``validation_metric`` "rmse" or "r2"), scored after every round. ``predict`` returns a
    dask array for a dask array or Parquet paths; ``to_local()`` gives a fitted
    ``snapfit.Ridge``.
    """

    _local = Ridge
    _parameter_constraints: dict = {**Ridge._parameter_constraints, "client": "no_validation"}

    def __init__(
        self,
        alpha=1.0,
        *,
        client=None,
        fit_intercept=True,
        intercept_scaling=1.0,
        tol=1e-4,
        max_iter=1000,
        device="auto",
        n_jobs=None,
        deterministic=True,
        device_ids=None,
        memory_budget=None,
        chunk_rows=None,
        random_state=None,
        checkpoint_dir=None,
        checkpoint_every=1,
        early_stopping_rounds=None,
        validation_metric="rmse",
        early_stopping_gap=1e-2,
    ):
        super().__init__(
            alpha, fit_intercept=fit_intercept, intercept_scaling=intercept_scaling, tol=tol,
            max_iter=max_iter, device=device, n_jobs=n_jobs, deterministic=deterministic,
            device_ids=device_ids, memory_budget=memory_budget, chunk_rows=chunk_rows,
            random_state=random_state, checkpoint_dir=checkpoint_dir,
            checkpoint_every=checkpoint_every, early_stopping_rounds=early_stopping_rounds,
            validation_metric=validation_metric, early_stopping_gap=early_stopping_gap,
        )  # fmt: skip
        self.client = client

    def fit(self, X, y=None, sample_weight=None, *, timeout: float = 600.0,
            tree_above: int = 16, max_passes: int = 10, correction: bool = True,
            on_round=None, validation=None):  # fmt: skip
        """Fit on Parquet paths (targets inside) or a dask array ``X`` with targets ``y``; the
        keywords are ``DaskLogisticRegression.fit``'s."""
        from snapfit.dask._inputs import ArrayInput, ParquetInput
        from snapfit.engine import Problem
        from snapfit.solvers.dual import SQUARED

        self._validate_params()
        if self.checkpoint_dir is not None:
            raise ValueError(
                "checkpoint_dir is not used by Dask fits: the driver keeps the checkpoint (alpha "
                "of every row, every checkpoint_every rounds) in memory; set checkpoint_dir=None."
            )
        client = self._client()
        dataset = None if _is_dask_collection(X) else as_dataset(X, targets="real")
        if dataset is not None:
            if y is not None or sample_weight is not None:
                raise ValueError(
                    "Parquet input carries its targets and weights in its 'label' and 'weight' "
                    "columns; call fit(path) without y and sample_weight."
                )
            inp = ParquetInput(dataset)
        elif _is_dask_collection(X):
            if y is None:
                raise ValueError("a dask array X needs targets y (a dask array or array-like).")
            import dask.array as da

            inp = ArrayInput(client, X, da.asarray(y), sample_weight, None)
        else:
            raise TypeError(
                f"DaskRidge.fit takes Parquet paths or a dask array X; got {type(X).__name__}. "
                "Use snapfit.Ridge for in-memory arrays, or dask.array.from_array(X) to train "
                "on the cluster."
            )
        inp.timeout = timeout
        d = self.n_features_in_ = inp.n_features
        self.feature_map_ = (featuremap.of_data(dataset) if dataset is not None
                             else featuremap.of_width(d))  # fmt: skip
        bias = float(self.intercept_scaling) if self.fit_intercept else 0.0
        c = 1.0 / float(self.alpha)
        seed = int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
        problem = Problem(n_features=d, c_pos=c, c_neg=c, bias=bias, tol=float(self.tol),
                          max_iter=int(self.max_iter), seed=seed, loss=SQUARED)  # fmt: skip
        stopper = self._early_stopping(validation, d, bias)
        callbacks = [stopper] if stopper is not None else []
        if on_round is not None:
            callbacks.append(lambda rec, w: on_round(rec))
        result = train(client, inp, problem, class_weights=None, units=_units(self),
                       timeout=timeout, checkpoint_every=int(self.checkpoint_every),
                       tree_above=tree_above, memory_budget=self.memory_budget,
                       chunk_rows=self.chunk_rows, max_passes=max_passes, correction=correction,
                       on_round=(lambda rec, w: any([bool(c(rec, w)) for c in callbacks]))
                       if callbacks else None)  # fmt: skip
        self.parts_ = result.parts
        self._alpha = result.alpha  # for checks (w = w(alpha)); not used by predictions
        self.history_ = result.history
        return self._keep(result.w, int(result.n_iter), bool(result.converged), bias, stopper)

    def predict(self, X):
        """``X w + b``: a dask array for a dask array or Parquet paths, else
        ``snapfit.Ridge.predict``'s."""
        check_is_fitted(self)
        lazy = self._lazy_decision(X, self.coef_, float(self.intercept_))
        return super().predict(X) if lazy is None else lazy

    def to_local(self) -> Ridge:
        """The fitted ``snapfit.Ridge`` with the same parameters and coefficients."""
        check_is_fitted(self)
        est = Ridge(**{k: v for k, v in self.get_params().items() if k != "client"})
        for name, value in vars(self).items():
            if name.endswith("_") and not name.startswith("_") and name != "parts_":
                setattr(est, name, value.copy() if isinstance(value, np.ndarray) else value)
        est.history_ = [dict(h) for h in self.history_]
        return est


def _predict_dataset(X):
    """Parquet paths as a Dataset that may be unlabelled (prediction uses no labels: any are
    read as plain numbers, whatever classes they hold)."""
    from snapfit.data import Dataset

    return Dataset(X, require_labels=False, targets="real") if _is_paths(X) else None


def _is_paths(X) -> bool:
    return isinstance(X, (str, os.PathLike)) or (
        isinstance(X, (list, tuple))
        and bool(X)
        and all(isinstance(p, (str, os.PathLike)) for p in X)
    )


def _lazy(X) -> bool:
    """Whether predictions of ``X`` come back as dask arrays (dask input or Parquet paths)."""
    return _is_dask_collection(X) or _is_paths(X)


def _parquet_decision(dataset, coef, intercept):
    """A dask array with one block per row group, each read and scored by a worker."""
    import dask
    import dask.array as da

    score = dask.delayed(_worker.rowgroup_decision, pure=True)
    tail = () if np.ndim(coef) == 1 else (coef.shape[0],)  # one-vs-rest: (rows, K)
    blocks = [
        da.from_delayed(
            score(dataset, k, coef, intercept), shape=(ref.n_rows, *tail), dtype=np.float64
        )  # fmt: skip
        for k, ref in enumerate(dataset.chunks)
    ]
    return da.concatenate(blocks)


def fit(client, data, y=None, **params) -> DaskLogisticRegression:
    """``DaskLogisticRegression(client=client, **params).fit(data, y)``."""
    return DaskLogisticRegression(client=client, **params).fit(data, y)


@contextlib.contextmanager
def cluster_client(scheduler: str | None = None, n_workers: int | None = None, *,
                   threads_per_worker: int | None = None, gpu: bool = False,
                   timeout: float = 60.0):  # fmt: skip
    """A ``distributed.Client`` for the CLI: to ``scheduler`` (``tcp://HOST:PORT``) or else to a
    new local cluster of ``n_workers`` processes. With ``gpu`` that cluster is dask-cuda's
    ``LocalCUDACluster`` when dask-cuda is installed: one worker per GPU (``n_workers``: the
    first N; None: all), each seeing its own GPU as device 0. Closes what it started."""
    from distributed import Client, LocalCluster

    if scheduler:
        with Client(scheduler, timeout=timeout) as client:
            yield client
        return
    cluster = None
    if gpu:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            log.info("dask-cuda is not installed: a LocalCluster's workers use GPU 0 each")
        else:
            cluster = LocalCUDACluster(n_workers=n_workers, dashboard_address=None)
    if cluster is None:
        if threads_per_worker is None:
            threads_per_worker = max(1, (os.cpu_count() or 1) // max(1, n_workers or 1))
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                               processes=True, dashboard_address=None)  # fmt: skip
    with cluster, Client(cluster, timeout=timeout) as client:
        yield client


def warm_up(client, *, timeout: float = 300.0) -> dict[str, float]:
    """Import the worker code and load or compile its kernels on every worker of ``client``.

    A fresh worker process otherwise pays for both in its first fit (seconds). Returns the
    seconds each worker took for the kernels (after the import).
    """
    workers = sorted(alive_workers(client, timeout))
    futs = {a: client.submit(_worker.warm, workers=[a], allow_other_workers=False, pure=False)
            for a in workers}  # fmt: skip
    try:
        return wait_all(client, futs, timeout=timeout, what="warming up the workers")
    finally:
        for f in futs.values():
            f.release()
