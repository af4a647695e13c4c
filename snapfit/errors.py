"""Exception types. The library raises these; the CLI maps each to one line and an exit code."""


class SnapfitError(Exception):
    """Base of snapfit's own errors. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class DataError(SnapfitError, ValueError):
    """Input data is malformed; the message names file, row group, row and column. CLI exit 3."""

    exit_code = 3


class ResourceError(SnapfitError, RuntimeError):
    """A memory budget, device or other resource cannot serve the request. CLI exit 4."""

    exit_code = 4


class StallError(ResourceError):
    """A unit's thread or a GPU made no progress within the stall timeout
    (``SNAPFIT_STALL_TIMEOUT``); the message names the unit and what it was waiting for."""


class BudgetError(Exception):
    """The memory budget is too small for the bounded AUC state of ``snapfit.metrics`` (the
    CLI maps it to exit 4)."""
