"""Imports run one way (docs/architecture.md, "Modules and the direction of imports"): no two
modules of dsv4_patch/ reach each other round a circle, and nothing below the commands layer (api, commands/)
imports it or the cli.

An import inside a function counts: it runs one way or the other at some call, and a circle of
them is the same knot of modules whichever line runs first. So does a package's `__init__`, which
importing any of its submodules runs first (`from .bump.classify import X` runs bump/__init__.py),
except where the importer is inside that package (its `__init__` is already running or done) and
takes a submodule; a name taken from its own package's `__init__` does count (that is the circle a
half-loaded package makes). An import under `if TYPE_CHECKING:` does not: it never runs (annotations
naming a type of a module above). Read from the source (ast), no module imported; a module loaded by
name (`importlib.import_module`) is not seen."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_name(pkg_root: Path, path: Path) -> str:
    parts = path.relative_to(pkg_root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.AST):
    """The Import/ImportFrom nodes that can run: all but those under `if TYPE_CHECKING:`."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(pkg_root: Path) -> dict[str, set[str]]:
    """{module: the modules of the package whose code importing it can run (see the docstring)}."""
    files = {module_name(pkg_root, p): p for p in sorted(pkg_root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                taken = [f"{target}.{a.name}" for a in node.names]
                found.update(t for t in taken if t in files)  # a submodule taken by name
                if any(t not in files for t in taken):  # a name the module `target` defines
                    found.add(target)
                found.update(_inits_on_the_way(target, name))
            else:
                for a in node.names:
                    found.update(_inits_on_the_way(a.name, name) | {a.name})
        graph[name] = {m for m in found if m in files and m != name}
    return graph


def _inits_on_the_way(target: str, importer: str) -> set[str]:
    """The packages whose `__init__` importing `target` runs first, but those the importer is
    inside (already running or done by the time the importer runs)."""
    parts = target.split(".")
    return {p for p in (".".join(parts[:k]) for k in range(1, len(parts))) if not importer.startswith(p + ".")}


def knots(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan): modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each knot, in import order, for the message."""
    return [_round(graph, group) for group in knots(graph)]


def _round(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """One circle inside `group`: from its first module, the shortest way back to it."""
    start = min(group)
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v] & group):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    return sorted(group)


def test_no_module_of_the_engine_reaches_itself_round_a_circle():
    graph = imports(ROOT / "dsv4_patch")
    found = knots(graph)
    # one circle of each knot, and all its members: a knot of many modules holds more circles than one
    assert not found, "import circles: " + "; ".join(
        f"{' -> '.join(_round(graph, k))} (a knot of {len(k)}: {', '.join(sorted(k))})" for k in found)


def test_nothing_below_the_commands_layer_imports_it_or_the_cli():
    graph = imports(ROOT / "dsv4_patch")
    layer = lambda m: m == "dsv4_patch.api" or m == "dsv4_patch.commands" or m.startswith("dsv4_patch.commands.")  # noqa: E731
    upward = sorted(f"{m} -> {d}" for m, deps in graph.items() if not layer(m) for d in deps if layer(d))
    assert not upward, f"the commands layer (api, commands/) imported from below it: {upward}"
    for path in sorted((ROOT / "dsv4_patch").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
        assert not names & {"typer", "tools", "rich"}, f"{path.relative_to(ROOT)} imports the cli's {names & {'typer', 'tools', 'rich'}}"


def test_the_reader_sees_a_circle_through_a_function_level_import_and_a_package_init(tmp_path):
    """The detector itself, on a planted package: a circle closed by an import inside a function,
    one closed only by the `__init__` that a submodule import runs, and one where a submodule takes
    a name from its own half-loaded package; not one through an import only type checkers run, nor
    a package `__init__` importing its own submodules, nor a plain chain."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "own").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")  # a -> b -> a, late
    (pkg / "sub" / "__init__.py").write_text("from .heavy import run\n")
    (pkg / "sub" / "heavy.py").write_text("from ..low import y\nfrom . import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("")
    (pkg / "low.py").write_text("from .sub.leaf import z\n")  # runs sub/__init__ -> heavy -> low
    (pkg / "own" / "__init__.py").write_text("from .part import p\nVALUE = 1\n")
    (pkg / "own" / "part.py").write_text("from . import VALUE\n")  # a name of the half-loaded package
    (pkg / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .chain import C\n")
    (pkg / "chain.py").write_text("from .a import q\nfrom .low import r\nfrom .typed import T\n")
    found = circles(imports(pkg))
    assert sorted(map(tuple, found)) == [("pkg.a", "pkg.b", "pkg.a"),
                                         ("pkg.low", "pkg.sub", "pkg.sub.heavy", "pkg.low"),
                                         ("pkg.own", "pkg.own.part", "pkg.own")]
    (pkg / "b.py").write_text("def f():\n    return 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "own" / "part.py").write_text("VALUE = 1\n")
    assert circles(imports(pkg)) == []
