"""The packages' shape: servelab's layers and the grader's trust sides import only downward, neither package has an
import cycle (function-level imports count), no module grows past 600 lines, no servelab module's docstring past 20
(and the examples in one hold), and every old module path still works, with a warning that names the new place."""

import ast
import doctest
import importlib
import re
import warnings
from pathlib import Path

import pytest

from servelab import _moved
from servelab_autograder import _moved as _grader_moved

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"servelab": ROOT / "lib" / "servelab", "servelab_autograder": ROOT / "autograder" / "servelab_autograder"}

# servelab's layers, lowest first: a module may import its own layer and the layers before it, never a later one or
# another package of its own rank (engine and simulator are peers)
LAYERS = [("servelab._moved",), ("servelab.analytic",), ("servelab.kernels",), ("servelab.schedulers",),
          ("servelab.engine", "servelab.simulator"), ("servelab.plots",), ("servelab.claims",)]
# the grader's packages, lowest first: the kernel side, then the trusted side by what it needs
GRADER_LAYERS = [("servelab_autograder._moved",), ("servelab_autograder.exercises",), ("servelab_autograder.paths",),
                 ("servelab_autograder.judge",), ("servelab_autograder.runner",), ("servelab_autograder.course",),
                 ("servelab_autograder.testing",)]
RANK = {pkg: i for layers in (LAYERS, GRADER_LAYERS) for i, pkgs in enumerate(layers) for pkg in pkgs}

MAX_LINES = 600
# a chapter's exercise module is an adapter over the shared kernel-side modules (replay, radix_*, nanovllm_*, ...)
EXERCISE_MAX_LINES = 420


def _modules() -> dict[str, Path]:
    found = {}
    for top, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((top, *parts))] = path
    return found


MODULES = _modules()
OLD_PATHS = {**_moved.OLD_PATHS, **_grader_moved.OLD_PATHS}
OLD = set(OLD_PATHS)     # the old paths are three-line modules that import lazily, through _moved


def _imports(name: str, path: Path) -> set[str]:
    """The servelab modules `name` imports anywhere in its code (a name imported from a package counts as its
    submodule when there is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return {m for m in out if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> str | None:
    return next((pkg for pkg in sorted(RANK, key=len, reverse=True) if module == pkg or module.startswith(pkg + ".")),
                None)


def _top(module: str) -> str:
    return module.split(".")[0]


@pytest.mark.parametrize("top", sorted(PACKAGES))
def test_every_module_has_a_layer(top):
    loose = sorted(m for m in MODULES if _top(m) == top and m != top and m not in OLD and _layer(m) is None)
    assert not loose, f"modules outside every layer (put each in one of {sorted(RANK)}): {loose}"


@pytest.mark.parametrize("top", sorted(PACKAGES))
def test_imports_point_only_downward(top):
    bad = []
    for name, deps in GRAPH.items():
        mine = _layer(name)
        if mine is None or _top(name) != top:
            continue
        for dep in deps:
            theirs = _layer(dep)
            if dep in OLD:
                bad.append(f"{name} imports {dep}, an old path: import {OLD_PATHS[dep]}")
            elif _top(dep) != top:
                continue   # the grader uses the library (the other way round is the next test)
            elif theirs is not None and theirs != mine and RANK[theirs] >= RANK[mine]:
                bad.append(f"{name} (layer {RANK[mine]}) imports {dep} (layer {RANK[theirs]})")
    assert not bad, "\n".join(sorted(bad))


def test_the_library_never_imports_the_grader():
    bad = sorted(f"{name} imports {dep}" for name, deps in GRAPH.items() if _top(name) == "servelab"
                 for dep in deps if _top(dep) == "servelab_autograder")
    assert not bad, "\n".join(bad)


def test_the_layer_test_catches_an_upward_import():
    saved = {k: set(v) for k, v in GRAPH.items()}
    try:
        GRAPH["servelab_autograder.judge.verdicts"].add("servelab_autograder.runner.sandbox")
        with pytest.raises(AssertionError, match=r"judge\.verdicts \(layer 3\) imports servelab_autograder\.runner"):
            test_imports_point_only_downward("servelab_autograder")
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


def _cycles() -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles() == [], "import cycles (a function-level import counts too): " + "; ".join(
        " <-> ".join(c) for c in _cycles())


def test_the_cycle_finder_finds_a_cycle():
    saved = {k: set(v) for k, v in GRAPH.items()}
    try:
        GRAPH["servelab.analytic.costmodel"].add("servelab.analytic.capacity")   # capacity imports costmodel
        assert ["servelab.analytic.capacity", "servelab.analytic.costmodel"] in _cycles()
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_over_its_line_limit(name):
    lines = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    exercise = re.fullmatch(r"servelab_autograder\.exercises\.ch\d\d", name)
    limit = EXERCISE_MAX_LINES if exercise else MAX_LINES
    assert lines <= limit, f"{name} has {lines} lines (limit {limit}): split it by concept"


MAX_DOCSTRING_LINES = 20
LIBRARY = sorted(name for name in MODULES if _top(name) == "servelab" and name not in OLD)


def _docstring(name: str) -> str:
    return ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8"))) or ""


@pytest.mark.parametrize("name", LIBRARY)
def test_a_module_docstring_says_what_the_module_is_for_in_20_lines(name):
    lines = len(_docstring(name).splitlines())
    assert lines <= MAX_DOCSTRING_LINES, (
        f"{name}'s docstring has {lines} lines (limit {MAX_DOCSTRING_LINES}): say what the module is for, and move "
        f"long explanations to docs/<topic>.md and maps to upstream sources to docs/upstream/<topic>.md")


@pytest.mark.parametrize("name", [n for n in LIBRARY if ">>>" in _docstring(n)])
def test_the_examples_in_a_module_docstring_hold(name):
    module = importlib.import_module(name)
    [test] = [t for t in doctest.DocTestFinder(recurse=False).find(module) if t.name == name]
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0 and runner.tries > 0, f"{name}: {runner.failures} of {runner.tries} examples fail"

@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_an_old_module_path_warns_and_finds_its_names_in_the_new_place(old):
    new = OLD_PATHS[old]
    new = (new,) if isinstance(new, str) else new
    importlib.sys.modules.pop(old, None)          # so the import runs again, and warns again
    with pytest.warns(DeprecationWarning, match=f"{old} has moved to {new[0]}"):
        module = importlib.import_module(old)
    for place in new:
        target = importlib.import_module(place)
        public = [n for n in getattr(target, "__all__", dir(target)) if not n.startswith("_")]
        assert public, f"{place} exports nothing"
        for attr in public:
            assert getattr(module, attr) is getattr(target, attr), f"{old}.{attr}"
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


@pytest.mark.parametrize("module,name", sorted((m, n) for m, names in _moved.MOVED_NAMES.items() for n in names))
def test_a_name_that_left_a_module_warns_and_is_found(module, name):
    where = _moved.MOVED_NAMES[module][name]
    with pytest.warns(DeprecationWarning, match=f"{module}.{name} has moved to {where}.{name}"):
        got = getattr(importlib.import_module(module), name)
    assert got is getattr(importlib.import_module(where), name)


def test_new_places_import_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for name in sorted(MODULES):
            if name.startswith("servelab.") and name not in OLD:
                importlib.import_module(name)


def test_the_kernel_side_of_the_grader_imports_nothing_from_the_trusted_side():
    """What the sandbox shows (servelab_autograder.exercises) must run without the grader's tables, verdicts or
    runner: an import of one would fail in the sandbox, or worse, put trusted code where the learner can read it."""
    bad = sorted(f"{name} imports {dep}" for name, deps in GRAPH.items()
                 if name.startswith("servelab_autograder.exercises") for dep in deps
                 if dep.startswith("servelab_autograder") and dep != "servelab_autograder"
                 and not dep.startswith("servelab_autograder.exercises"))
    assert not bad, "\n".join(bad)
