"""Shared by the check scripts: run named sub-checks, print one JSON line."""

from __future__ import annotations

import errno
import json
import os
import sys
import traceback
from contextlib import contextmanager



def _install_oracles() -> None:
    """The project's kernels/ (the independent oracles), importable as `dsv4_kernels`. Not as
    `kernels`: that name belongs to PyPI's `kernels` (Hugging Face), which transformers >= 5.25
    requires and imports when installed, and which wins over the project's folder (a namespace
    package: no __init__.py) wherever it is installed. The repository is not on this process's path."""
    import types

    root = os.environ.get("DSV4_CHECK_ROOT")
    pkg = os.path.join(root, "kernels") if root else ""
    if not pkg or not os.path.isdir(pkg) or "dsv4_kernels" in sys.modules:
        return
    module = types.ModuleType("dsv4_kernels")
    module.__path__ = [pkg]  # its modules import one another relatively
    sys.modules["dsv4_kernels"] = module


_install_oracles()
_results: dict[str, dict] = {}
_machine_failures: list[str] = []  # sub-checks the machine failed, not the code (see _by_the_machine)


# torch's allocators raise RuntimeError, not MemoryError ("DefaultCPUAllocator: can't allocate memory")
OUT_OF_MEMORY = ("can't allocate memory", "out of memory")


def _by_the_machine(e: BaseException) -> bool:
    """Out of memory, of disk or of file handles, or interrupted: says nothing about the code."""
    return isinstance(e, (MemoryError, KeyboardInterrupt)) or (
        isinstance(e, OSError) and e.errno in (errno.ENOMEM, errno.ENOSPC, errno.EMFILE, errno.ENFILE)) or (
        isinstance(e, RuntimeError) and any(t in str(e).lower() for t in OUT_OF_MEMORY))


def seed(given: str | None) -> int:
    """The check's random seed: `given` (the run's seed variable, which the runner always sets and the
    script names itself, so that its result is keyed and stored with it), or a fresh draw when the
    script is run by hand without one. Printed either way: a failure is re-run with that value."""
    value = int(given) if given else int.from_bytes(os.urandom(4), "little")
    print(f"seed {value}", flush=True)
    return value


class NotApplicable(Exception):
    """Raised by a sub-check whose subject this tree does not have (a probe of upstream's code, never
    of its version): the test skips with the reason."""


def check(fn):
    try:
        fn()
        _results[fn.__name__] = {"ok": True, "error": ""}
    except NotApplicable as e:
        _results[fn.__name__] = {"ok": False, "error": f"not applicable: {e}", "not_applicable": str(e)}
    except BaseException as e:  # noqa: BLE001 - a sub-check's failure is data here
        tb = traceback.format_exc(limit=int(os.environ.get("DSV4_TB_LIMIT", "3")))
        _results[fn.__name__] = {"ok": False, "error": f"{type(e).__name__}: {e}\n{tb}"}
        if _by_the_machine(e):
            _machine_failures.append(fn.__name__)
    return fn


def report() -> None:
    """The results line, and a line for the runner's result cache: the sub-checks the machine failed
    and the files under the repo (DSV4_CHECK_ROOT) this process imported (its key covers only some)."""
    sys.stdout.flush()
    root = os.environ.get("DSV4_CHECK_ROOT")
    # absolute paths only: some modules carry a made-up relative one (torch._classes: "_classes.py")
    files = sorted({os.path.realpath(f) for m in list(sys.modules.values())
                    if isinstance(f := getattr(m, "__file__", None), str) and os.path.isabs(f)}) if root else []
    repo = [f for f in files if root and f.startswith(os.path.realpath(root) + os.sep)]
    print("DSV4-CHECK-RUN " + json.dumps({"machine_failures": _machine_failures, "repo_files": repo}), flush=True)
    print("DSV4-CHECK " + json.dumps(_results), flush=True)


def run_tree_tests(tree: str, rel: str, *extra: str) -> None:
    """Run the tree's own test file `rel` (under `tree`) here, in this venv, with the runner's pytest
    (DSV4_PYTEST_PATH, put last on sys.path: the venv has none); assert it passes.

    The caller names the variable that holds `tree`, not this module: the runner keys a check by
    the trees its own files name, and every check imports this module, so a name here would key
    every check by the patched tree (a check that reads no tree would then be computed again for
    every tree, the pristine venv's included)."""
    from pathlib import Path

    pytest_path = os.environ.get("DSV4_PYTEST_PATH")
    if pytest_path and pytest_path not in sys.path:
        sys.path.append(pytest_path)
    import pytest

    test = Path(tree) / rel
    assert test.is_file(), f"{rel} is missing"
    outcomes = _Outcomes()
    rc = pytest.main([str(test), "-q", "-p", "no:cacheprovider", "--noconftest", "--rootdir", str(test.parent),
                      "-W", "ignore::DeprecationWarning", *extra], plugins=[outcomes])
    assert rc == 0, f"pytest exit {rc} on {rel}"
    # pytest exits 0 when every test skipped (a skipif mark that the tree's file gains for this
    # platform): that is no evidence that the file's tests pass here
    assert outcomes.passed, f"no test of {rel} passed here ({outcomes.skipped} skipped)"


class _Outcomes:
    """Counts the call-phase passes and the skips of one pytest.main run."""

    def __init__(self):
        self.passed = self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.passed:
            self.passed += 1
        elif report.skipped:
            self.skipped += 1


_MISSING = object()


@contextmanager
def swapped(namespace, name: str, value):
    """namespace.name is value inside the block; afterwards what it was (absent again if it was absent:
    torch.ops namespaces resolve a missing kernel lazily, so deleting is not the same as restoring)."""
    orig = namespace.__dict__.get(name, _MISSING)
    setattr(namespace, name, value)
    try:
        yield
    finally:
        if orig is _MISSING:
            delattr(namespace, name)
        else:
            setattr(namespace, name, orig)
