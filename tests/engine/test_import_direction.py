"""Imports run one way (docs/architecture.md, "Modules and the direction of imports"): cli → api →
domain → adapters, and no two modules of dsv4_patch/ reach each other round a circle.

An import inside a function counts: it runs one way or the other at some call, and a circle of
them is the same knot of modules whichever line runs first. So does a package's `__init__`, which
importing any of its submodules runs first (`from .bump.classify import X` runs bump/__init__.py).
Read from the source (ast), no module imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_name(pkg_root: Path, path: Path) -> str:
    parts = path.relative_to(pkg_root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(pkg_root: Path) -> dict[str, set[str]]:
    """{module: the modules of the package it imports, anywhere in its text, with the packages
    whose `__init__` those imports run}."""
    files = {module_name(pkg_root, p): p for p in sorted(pkg_root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                wanted = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                wanted = [a.name for a in node.names]
            else:
                continue
            for w in wanted:
                parts = w.split(".")
                found.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))  # every __init__ on the way
        # a package's own parents run before it anyway: not an edge
        graph[name] = {m for m in found if m in files and m != name and not name.startswith(m + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each as one circle through
    its members, in import order, for the message."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

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
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(_round(graph, set(group)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


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
    found = circles(imports(ROOT / "dsv4_patch"))
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)


def test_nothing_below_the_commands_layer_imports_it_or_the_cli():
    graph = imports(ROOT / "dsv4_patch")
    upward = sorted(m for m, deps in graph.items() if "dsv4_patch.api" in deps and m != "dsv4_patch.api")
    assert not upward, f"import dsv4_patch.api (the commands layer) from below it: {upward}"
    for path in sorted((ROOT / "dsv4_patch").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
        assert not names & {"typer", "tools", "rich"}, f"{path.relative_to(ROOT)} imports the cli's {names & {'typer', 'tools', 'rich'}}"


def test_the_reader_sees_a_circle_through_a_function_level_import_and_a_package_init(tmp_path):
    """The detector itself, on a planted package: a circle closed by an import inside a function,
    and one closed only by the `__init__` that a submodule import runs; a plain chain is none."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("def f():\n    from . import a\n")  # a -> b -> a, late
    (pkg / "sub" / "__init__.py").write_text("from .heavy import run\n")
    (pkg / "sub" / "heavy.py").write_text("from ..low import y\n")
    (pkg / "sub" / "leaf.py").write_text("")
    (pkg / "low.py").write_text("from .sub.leaf import z\n")  # runs sub/__init__ -> heavy -> low
    (pkg / "chain.py").write_text("from .a import q\nfrom .low import r\n")
    found = circles(imports(pkg))
    assert sorted(map(tuple, found)) == [("pkg.a", "pkg.b", "pkg.a"), ("pkg.low", "pkg.sub", "pkg.sub.heavy", "pkg.low")]
    (pkg / "b.py").write_text("def f():\n    return 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    assert circles(imports(pkg)) == []
