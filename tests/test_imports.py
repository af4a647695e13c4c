"""What importing snapfit costs: the CLI and Dask workers must not pay for scikit-learn.

scikit-learn takes 1-2 s to import; the CLI imports ``snapfit`` for its version and a Dask
worker imports ``snapfit.dask._worker`` to run the worker code, and neither needs the estimator.
Each check runs in a fresh interpreter, so earlier imports in this process cannot hide one.
"""

import subprocess
import sys

import pytest


def _modules_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "statement",
    ["import snapfit", "import snapfit.cli", "import snapfit.dask._worker"],
)
def test_light_imports_leave_scikit_learn_out(statement):
    loaded = _modules_after(statement)
    assert "sklearn" not in loaded
    assert "snapfit.estimator" not in loaded


def test_public_names_load_on_first_use():
    import snapfit
    import snapfit.dask

    assert snapfit.LogisticRegression.__name__ == "LogisticRegression"
    assert callable(snapfit.load)
    assert snapfit.dask.DaskLogisticRegression.__mro__[1] is snapfit.LogisticRegression
    assert set(snapfit.dask.__all__) <= set(dir(snapfit.dask))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        snapfit.nope  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        snapfit.dask.nope  # noqa: B018
