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
    for door, local in (("DaskLogisticRegression", "LogisticRegression"),
                        ("DaskLinearSVC", "LinearSVC"), ("DaskRidge", "Ridge")):  # fmt: skip
        assert issubclass(getattr(snapfit.dask, door), getattr(snapfit, local))
    assert set(snapfit.dask.__all__) <= set(dir(snapfit.dask))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        snapfit.nope  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        snapfit.dask.nope  # noqa: B018


# -- the import graph: tiers and no circles ----------------------------------------------------

#: Lowest first; a module may import its own tier and those below, never one above (doors ->
#: train -> engine / stream / gpu -> data / solvers). Modules not listed (featuremap, metrics,
#: model, ...) are helpers any tier may use.
TIERS = [
    ("snapfit.data", "snapfit.solvers", "snapfit.errors"),
    ("snapfit.engine", "snapfit.stream", "snapfit.gpu"),
    ("snapfit.train",),
    ("snapfit", "snapfit.estimator", "snapfit.dask", "snapfit.cli", "snapfit.demo"),
]
#: No exception is known (kept as the place to name one, with its reason, should one be needed).
ALLOWED_UP: set[tuple[str, str]] = set()
ALLOWED_CYCLES: list[set[str]] = []


def _import_graph() -> dict[str, set[str]]:
    """Module -> the snapfit modules it imports, at the top or inside a function."""
    import ast
    import pathlib

    import snapfit

    root = pathlib.Path(snapfit.__file__).parent
    mods = {}
    for p in root.rglob("*.py"):
        parts = p.relative_to(root.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p

    def resolve(name: str) -> str:
        while name not in mods:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            graph[m] |= {resolve(n) for n in names if n.startswith("snapfit")} - {m}
    return graph


def _tier(module: str) -> int | None:
    for i, prefixes in enumerate(TIERS):
        for p in prefixes:
            if module == p or (p != "snapfit" and module.startswith(p + ".")):
                return i
    return None


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_snapfit():
    assert _cycles(_import_graph()) == ALLOWED_CYCLES
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_module_imports_a_higher_tier():
    up = sorted(
        (m, r)
        for m, imported in _import_graph().items()
        for r in imported
        if _tier(m) is not None and _tier(r) is not None and _tier(r) > _tier(m)
    )
    assert [e for e in up if e not in ALLOWED_UP] == []
    assert _tier("snapfit.stream.plan") == 1 and _tier("snapfit") == 3
    assert _tier("snapfit.featuremap") is None


def test_stream_and_engine_keep_to_their_contracts():
    """``stream/`` takes from ``engine/`` only the ``ChunkSource`` contract and the dual state
    (the data types a source hands over); the engine does not import the GPU units (the train
    tier passes their factory) or the stream; ``stream/source.py`` executes a plan: it imports
    neither the decoder nor the hot-coordinate code of threads sharing ``w``."""
    graph = _import_graph()
    contract = {"snapfit.engine.source", "snapfit.engine.state"}
    for m, imported in graph.items():
        if m.startswith("snapfit.stream"):
            assert {r for r in imported if r.startswith("snapfit.engine")} <= contract, m
        if m.startswith("snapfit.engine"):
            assert not {r for r in imported if r.startswith(("snapfit.gpu", "snapfit.stream"))}, m
    assert not {"snapfit.stream.decode", "snapfit.engine.shared"} & graph["snapfit.stream.source"]


#: Module docstrings say what a module is for and why in at most this many lines; history and
#: measurements go to docs/.
MAX_DOCSTRING_LINES = 30
LONG_DOCSTRINGS_ALLOWED: set[str] = set()


def test_no_module_docstring_is_longer_than_30_lines():
    import ast
    import pathlib

    import snapfit

    root = pathlib.Path(snapfit.__file__).parent
    long = {}
    for p in sorted(root.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(p.read_text()), clean=False)
        name = p.relative_to(root.parent).as_posix()
        if (
            doc
            and doc.count("\n") + 1 > MAX_DOCSTRING_LINES
            and name not in LONG_DOCSTRINGS_ALLOWED
        ):
            long[name] = doc.count("\n") + 1
    assert long == {}
