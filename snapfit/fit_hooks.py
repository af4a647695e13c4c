"""What every estimator's fit builds from its parameters beside the problem: the checkpoints it
writes (``checkpoint_dir``, ``checkpoint_every``, ``resume``) and the early stopping it scores
(``validation``, ``validation_metric``, ``early_stopping_rounds``), and what its model file
records of how the fit went: one code for the classifiers and ``Ridge``."""

from __future__ import annotations

import os
import warnings

from snapfit.train import Checkpoints


def has_checkpoint(directory) -> bool:
    """Whether ``directory`` holds a checkpoint that ``resume=True`` would continue from."""
    from snapfit.engine.checkpoint import FILENAME

    return os.path.isfile(os.path.join(os.fspath(directory), FILENAME))


class FitHooks:
    """A mixin of the estimators: ``_checkpoints`` and ``_early_stopping`` from their
    parameters (a classifier's validation labels are read as its ``classes_``)."""

    def _fit_record(self) -> dict:
        """What a model file records of how the fit went, beside its arrays and parameters:
        the best validation epoch, whether it converged, stopped early or streamed, and the
        format of the cache it re-read (each only when the fit set it)."""
        meta: dict = {}
        if hasattr(self, "best_iteration_"):
            meta.update(best_iteration=int(self.best_iteration_), best_score=self.best_score_)
        for name in ("converged_", "stopped_early_", "streamed_"):
            if hasattr(self, name):
                meta[name.rstrip("_")] = bool(getattr(self, name))
        if hasattr(self, "cache_format_"):
            meta["cache_format"] = self.cache_format_
        return meta

    def _checkpoints(self, resume: bool) -> Checkpoints | None:
        if self.checkpoint_dir is None:
            return None
        if resume and not has_checkpoint(self.checkpoint_dir):
            warnings.warn(
                f"resume=True but {os.fspath(self.checkpoint_dir)} holds no checkpoint; "
                "starting a fresh fit.",
                UserWarning,
                stacklevel=3,
            )
        return Checkpoints(os.fspath(self.checkpoint_dir), every=int(self.checkpoint_every),
                           resume=bool(resume))  # fmt: skip

    def _early_stopping(self, validation, d: int, bias: float):
        """The validation callback for ``fit(validation=...)``, or None."""
        if validation is None:
            if self.early_stopping_rounds is not None:
                raise ValueError(
                    "early_stopping_rounds needs validation data: fit(X, y, validation=...)."
                )
            return None
        from snapfit.validation import EarlyStopping, validation_data

        data = validation_data(validation, getattr(self, "classes_", None), d,
                               getattr(self, "feature_map_", None))  # fmt: skip
        return EarlyStopping(data, metric=self.validation_metric, n_features=d, bias=bias,
                             rounds=self.early_stopping_rounds, gap=self.early_stopping_gap,
                             tol=self.tol)  # fmt: skip
