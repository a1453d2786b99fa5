"""The test code a recorded result speaks for, so `status --matrix` can say when it changed since.

A result records a level run of a patch's bound tests (`Regression-Test:` ids). A pass on the H200
says nothing about a GPU test file, or the gate that decides whether it skips, edited after that run.
The test code of a patch is, for every module its ids name:

    the module itself                        tests/regress/vllm/test_e4m3_encode_gpu.py
    its folder's helper modules (`_*.py`)    tests/regress/vllm/_cuda_torch.py (the GPU gate), ...
    every conftest.py from tests/ down       tests/conftest.py, tests/regress/vllm/conftest.py
    the check scripts they name              tests/regress/vllm/checks/sparse_mla_reader.py (run by name:
                                               CHECK = "sparse_mla_reader"), and what those import
    what any of these imports from tests/    tests/regress/vllm/test_e4m3_encode_gpu.py (imported by the
      or kernels/, transitively                decode GPU tests), tests/_check_cache.py,
                                               kernels/fp8_ds_mla/naive.py (an oracle; the checks
                                               import kernels/ as `dsv4_kernels`)

Imports are read from the source (ast), not run: a bare name resolves against the importing file's
folder and each folder above it, then the checkout's root. Product code (dsv4_patch/, tools/) is
not test code: a result does not go stale when the engine changes.

New results carry `tests: {path: sha256}` of those files (record.py). For a result written before
that field existed, the newest commit that touched any of them is compared with the result's date.
"""

from __future__ import annotations

import ast
import hashlib
from datetime import datetime
from pathlib import Path

from ..gitcmd import Git


# Where test code lives: what the recorded tests run and the oracles they compare with.
TEST_CODE_TOPS = ("tests", "kernels")
# The checks import the project's kernels/ under this name (tests/regress/vllm/checks/_harness.py).
KERNELS_ALIAS = "dsv4_kernels"


def files_of_tests(root: Path, nodes: list[str]) -> list[str]:
    """The files (paths relative to `root`, sorted) that make up the test code of these node ids."""
    root = Path(root).resolve()
    todo: list[Path] = []
    for node in nodes:
        path = root / node.split("::", 1)[0]
        if not path.is_file():
            continue
        todo.append(path)  # a test module: closure adds the `_*.py` beside it
        folder = path.parent
        while folder != root and root in folder.parents:
            conftest = folder / "conftest.py"
            if conftest.is_file():
                todo.append(conftest)
            folder = folder.parent
    return sorted(p.relative_to(root).as_posix() for p in closure(root, todo))


def closure(root: Path, start: list[Path], checks_beside: bool = True) -> set[Path]:
    """`start` and the test code it reaches (files under TEST_CODE_TOPS of `root`): what any of them
    imports, transitively; the requirements files beside them (`requirements*.txt`: the pins of the
    venvs their fixtures build); the helper modules (`_*.py`) beside each test module (the plugins
    and standalone modules its tests run by name); and (`checks_beside`) each check script they name:
    a string that is the name of a script in a `checks/` folder beside the file or above it (the
    fixture runs them from there: `CHECK = "sparse_mla_reader"`, never imported), or beside it when
    the file is a check script itself."""
    root = Path(root).resolve()
    files: set[Path] = set()
    todo = list(start)
    while todo:
        f = todo.pop()
        if f in files or not _is_test_code(root, f):
            continue
        files.add(f)
        if f.suffix != ".py":
            continue
        tree = _parse(f)
        todo += [r for r in f.parent.glob("requirements*.txt") if r.is_file()]
        if f.name.startswith("test_"):
            todo += [h for h in f.parent.glob("_*.py") if h.is_file()]
        if tree is None:
            continue
        if checks_beside:
            above = [d for d in (f.parent, *f.parent.parents) if d == root or root in d.parents]
            folders = [d / "checks" for d in above] + ([f.parent] if f.parent.name == "checks" else [])
            named = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                     and n.value.isidentifier()}
            todo += [d / f"{name}.py" for d in folders if d.is_dir() for name in named if (d / f"{name}.py").is_file()]
        todo += _imported_files(root, f, tree)
    return files


def _parse(f: Path) -> ast.AST | None:
    try:
        return ast.parse(f.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None


def _is_test_code(root: Path, f: Path) -> bool:
    rel = f.relative_to(root).parts if f.is_relative_to(root) else ()
    return bool(rel) and rel[0] in TEST_CODE_TOPS and "__pycache__" not in rel


def _imported_files(root: Path, f: Path, tree: ast.AST) -> list[Path]:
    """The files under `root` that `f`'s import statements name (each package __init__ on the way too).
    A relative import resolves from `f`'s package; an absolute one against `f`'s folder and each
    folder above it (what pytest and the conftests put on the path), the alias of kernels/ against
    the root only."""
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(0, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names.append((node.level, base))
            names += [(node.level, f"{base}.{a.name}" if base else a.name) for a in node.names if a.name != "*"]
    out: list[Path] = []
    for level, name in names:
        parts = [p for p in name.split(".") if p]
        if level:
            start = f.parent
            for _ in range(level - 1):
                start = start.parent
            bases = [start]
        elif parts[:1] == [KERNELS_ALIAS]:
            parts, bases = ["kernels", *parts[1:]], [root]
        else:
            bases = [f.parent, *[d for d in f.parent.parents if d == root or root in d.parents]]
        for base in bases:
            hit = _module_files(base, parts)
            if hit:
                out += hit
                break
    return out


def _module_files(base: Path, parts: list[str]) -> list[Path]:
    """The file of module `parts` under `base` and the __init__.py of each package it is in; [] when
    absent. A package (`x/__init__.py`) wins over a module of the same name (`x.py`), as in Python."""
    if not parts:
        init = base / "__init__.py"
        return [init] if init.is_file() else []
    found: list[Path] = []
    folder = base
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        package = folder / part
        if (package / "__init__.py").is_file():
            found.append(package / "__init__.py")
        elif last and (folder / f"{part}.py").is_file():
            return [*found, folder / f"{part}.py"]
        elif not package.is_dir():  # a namespace package (kernels/ has no __init__.py) goes on
            return []
        folder = package
    return found


def fingerprint(root: Path, files: list[str]) -> dict[str, str]:
    """{path: sha256 of its bytes} for each file that exists."""
    out = {}
    for rel in files:
        p = Path(root) / rel
        if p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


class CodeDates:
    """Answers "did this test code change after that result?" for one checkout, asking git once per file."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._git = Git(self.root) if (self.root / ".git").exists() else None
        self._last: dict[str, datetime | None] = {}
        self._dirty: set[str] | None = None

    def _last_commit(self, rel: str) -> datetime | None:
        if rel not in self._last:
            stamp = self._git.out("log", "-1", "--format=%cI", "--", rel, check=False) if self._git else ""
            self._last[rel] = datetime.fromisoformat(stamp) if stamp else None
        return self._last[rel]

    def _uncommitted(self) -> set[str]:
        if self._dirty is None:
            self._dirty = set()
            if self._git is not None:
                out = self._git.run("status", "--porcelain", "--no-renames", "-z", "--", *TEST_CODE_TOPS, check=False).out
                self._dirty = {entry[3:] for entry in out.split("\0") if len(entry) > 3}
        return self._dirty

    def changed_since(self, files: list[str], recorded: dict[str, str] | None, date: str) -> list[str]:
        """The test files that changed after the result was recorded (empty: the result still speaks
        for today's test code). With `recorded` (its fingerprint), any file of `files` whose bytes differ from the
        recorded ones (or that the record does not name, or that is gone); without one (an older result), the files whose newest commit is later than
        `date`, or that have uncommitted changes."""
        if recorded is not None:
            now = fingerprint(self.root, files)
            return sorted(f for f in files if now.get(f) != recorded.get(f))
        try:
            when = datetime.fromisoformat(date)
        except ValueError:
            return []
        dirty = self._uncommitted()
        return [f for f in files if f in dirty or ((t := self._last_commit(f)) is not None and t > when)]
