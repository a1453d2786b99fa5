"""`dsv4-patch regress`: run the tests bound to each patch (Regression-Test:) against the trees.

Trees reach the tests through one documented channel: DSV4_TREE_<STACK> (patched) and
DSV4_BASE_<STACK> (the pristine pin), read by the `dsv4_tree` fixture in tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import Dsv4Error
from .patchfile import PatchFile


@dataclass
class PatchResult:
    stack: str
    patch: str
    tests: dict[str, str] = field(default_factory=dict)  # node id -> passed/failed/skipped/missing
    reasons: dict[str, str] = field(default_factory=dict)  # node id -> why it skipped/failed

    @property
    def outcome(self) -> str:
        """passed | failed | missing | not-verified (every bound test skipped) | partial (some
        skipped: the rest passed) | no-tests. Tests deselected by -m/-k were not run here."""
        vals = set(self.tests.values()) - {"deselected"}
        if not vals:
            return "no-tests"
        for worst in ("failed", "missing"):
            if worst in vals:
                return worst
        if vals == {"skipped"}:
            return "not-verified"
        return "partial" if "skipped" in vals else "passed"

    @property
    def reason(self) -> str:
        """Why the patch is not verified / failed: the first skip or failure reason."""
        want = {"not-verified": "skipped", "partial": "skipped"}.get(self.outcome, self.outcome)
        return next((self.reasons.get(n, "") for n, o in self.tests.items() if o == want and self.reasons.get(n)), "")

    def to_dict(self) -> dict:
        return {"stack": self.stack, "patch": self.patch, "outcome": self.outcome, "reason": self.reason,
                "tests": self.tests, "reasons": self.reasons}


# Per-patch outcomes that are no evidence: the patch is not verified (bump and CI say `unverified`)
UNVERIFIED_OUTCOMES = ("not-verified", "no-tests")


@dataclass
class RegressReport:
    results: list[PatchResult]
    seconds: float
    pytest_rc: int
    first_bad: tuple[str, str] | None = None  # (stack, patch) from --bisect
    missing_modules: dict[str, str] = field(default_factory=dict)  # module -> command that installs it
    no_patches: list[str] = field(default_factory=list)  # stacks/releases whose series is empty: nothing to test

    @property
    def ok(self) -> bool:
        """Nothing failed. A patch whose tests all skipped is not verified, which is not a failure
        (GPU tests skip on a CPU machine); it is reported per patch with the skip reason. The plain
        `regress` command gates on this; whoever calls a result verified (bump, CI, `regress
        --require-verified`) gates on `verified` as well."""
        return all(r.outcome not in ("failed", "missing") for r in self.results) and self.first_bad is None

    @property
    def unverified(self) -> dict[str, str]:
        """`stack/patch` -> why, for each patch whose bound tests gave no evidence: `not-verified`
        (every one skipped) or `no-tests` (none bound or all deselected). `partial` is evidence (some
        ran and passed, the rest skipped with a reason: a CPU run's GPU tests)."""
        return {f"{r.stack}/{r.patch}": f"{r.outcome}" + (f": {r.reason}" if r.reason else "")
                for r in self.results if r.outcome in UNVERIFIED_OUTCOMES}

    @property
    def verified(self) -> bool:
        """Every patch's bound tests ran and passed (`passed`, or `partial`), and nothing failed."""
        return self.ok and not self.unverified

    def to_dict(self) -> dict:
        return {"ok": self.ok, "verified": self.verified, "unverified": self.unverified,
                "seconds": round(self.seconds, 2), "pytest_rc": self.pytest_rc,
                "first_bad": list(self.first_bad) if self.first_bad else None,
                "missing_modules": self.missing_modules,
                "patches": [r.to_dict() for r in self.results], "no_patches": self.no_patches}


# ---------------------------------------------------------------- what regress needs installed
ENGINE_ROOT = Path(__file__).resolve().parents[1]


def install_command(extra: str | None, module: str, python: str = sys.executable) -> str:
    """The command that installs `module` into `python`: the project's extra that lists it when
    there is one (so versions stay the project's), else the module by name."""
    if extra and (ENGINE_ROOT / "pyproject.toml").is_file():
        # torch named first, pinned: a bare torch requirement lets pip pick a multi-GB CUDA build
        from .build import DEFAULT_TORCH

        torch = f"torch=={DEFAULT_TORCH} " if extra == "kernels" else ""
        return f"{python} -m pip install {torch}-e '{ENGINE_ROOT}[{extra}]'"
    return f"{python} -m pip install {module}"


def extra_for(module: str) -> str | None:
    """The optional-dependency group of our pyproject.toml that names `module` (e.g. triton -> kernels)."""
    try:
        import tomllib

        groups = tomllib.loads((ENGINE_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    except (OSError, KeyError, ValueError):
        return None
    norm = module.replace("_", "-").lower()
    for extra, reqs in groups.items():
        for req in reqs:
            name = re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].replace("_", "-").lower()
            if name == norm:
                return extra
    return None


def require_pytest(python: str = sys.executable) -> None:
    """regress runs pytest in this interpreter: say in one line if it is missing, and how to get it."""
    import importlib.util

    if python == sys.executable:
        try:
            if importlib.util.find_spec("pytest") is not None:
                return
        except (ImportError, ValueError):
            pass
    if python != sys.executable:
        r = subprocess.run([python, "-c", "import pytest"], capture_output=True)
        if r.returncode == 0:
            return
    raise Dsv4Error(f"regress needs pytest, which is not installed in {python}",
                    hint="install it: " + install_command(extra_for("pytest") or "test", "pytest", python))


MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def missing_modules(outcomes: dict[str, dict], python: str = sys.executable) -> dict[str, str]:
    """module -> install command, for every `No module named X` among the failures."""
    found: dict[str, str] = {}
    for o in outcomes.values():
        for m in MISSING_MODULE.finditer(o.get("why", "")):
            top = m.group(1).split(".")[0]
            found.setdefault(top, install_command(extra_for(top), top, python))
    return found


def tree_env(trees: dict[str, tuple[Path, Path]]) -> dict[str, str]:
    """DSV4_TREE_/DSV4_BASE_ of each stack NAME (a label `vllm@v0.33.0` is split: its release is
    named too, see release_tree_env)."""
    env = {}
    for stack, (patched, base) in trees.items():
        name, _, release = stack.partition("@")
        env.update(release_tree_env(name, release or None, patched, base))
    return env


def release_tree_env(name: str, release: str | None, patched: Path, base: Path, *,
                     also: list[str] = ()) -> dict[str, str]:
    """What the `dsv4_tree` fixture (tests/conftest.py, api.tree_for_tests) reads for one release
    of stack `name` under test: DSV4_TREE_<NAME> / DSV4_BASE_<NAME>, DSV4_RELEASE_<NAME> = `release`,
    and DSV4_TREE_<NAME>__<TAG> / DSV4_BASE_<NAME>__<TAG> for `release` and each of `also` (a bump's
    target: the tree stands in for that release as well). The variable is built from the stack's
    name, never from a label (`vllm@v0.33.0` is no part of a variable name a test reads)."""
    from .config import env_key

    env = {f"DSV4_RELEASE_{env_key(name)}": release or ""}
    for rel in [None, release, *also]:
        if rel is None and f"DSV4_TREE_{env_key(name)}" in env:
            continue
        env[f"DSV4_TREE_{env_key(name, rel)}"] = str(patched)
        env[f"DSV4_BASE_{env_key(name, rel)}"] = str(base)
    return env


VENV_CACHE_ENV = "DSV4_VENV_CACHE"


def venv_cache_root() -> Path:
    """Where the tests' overlay venvs live: DSV4_VENV_CACHE, else venvs/ in the tool cache (which
    DSV4_PATCH_CACHE, else XDG_CACHE_HOME, moves: one variable moves every cache)."""
    from .sources.base import Cache

    env = os.environ.get(VENV_CACHE_ENV)
    return Path(env) if env else Cache.default().root / "venvs"


# The folder a test run may keep scratch in (the project's tests/conftest.py: e.g. results it computed
# once for the whole run); set to a temporary folder of the run's own when the caller has none.
RUN_DIR_ENV = "DSV4_TEST_RUN_DIR"
# set to 1 in bump's intent-test run (bump/semantic.py): the base tree IS the new upstream there
INTENT_ENV = "DSV4_INTENT"
# Where the project's tests keep the results of their expensive checks, keyed by everything a check
# reads (the project's tests/_check_cache.py): read back by later runs unless this says `run` (kept
# for the one run only: every check computed afresh) or `0` (none).
RESULT_CACHE_ENV = "DSV4_CHECK_MEMO"
# The seed of the project's randomized checks (tests/conftest.py draws one per test run when unset).
SEED_ENV = "DSV4_SEED"


@contextlib.contextmanager
def one_test_run():
    """Every child pytest started inside (bump: the intent run on the pristine tree, then the
    regression run on the rebased one) is one test run: one scratch folder (RUN_DIR_ENV) and one
    seed (SEED_ENV). Each drew its own before, so the pristine checks the intent run had just
    computed (and the project's tests keep for the rest of the run) were computed again under
    another seed by the regression run's "unpatched tree fails" tests. What the caller set (a test
    suite calling the tool) is kept, each variable on its own; a folder made here goes when the
    block ends, and the variables are as they were."""
    saved = {k: os.environ.get(k) for k in (RUN_DIR_ENV, SEED_ENV)}
    with contextlib.ExitStack() as stack:
        try:
            if not saved[RUN_DIR_ENV]:
                os.environ[RUN_DIR_ENV] = stack.enter_context(tempfile.TemporaryDirectory(prefix="dsv4-run-"))
            if not (saved[SEED_ENV] or "").strip():
                os.environ[SEED_ENV] = str(int.from_bytes(os.urandom(4), "little"))  # as tests/conftest.py draws it
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def own_basetemp(scratch: str, pytest_args: tuple[str, ...] = (), env_extra: dict[str, str] | None = None) -> list[str]:
    """`--basetemp` inside `scratch` (the child run's temporary folder) unless the caller gave one,
    in `pytest_args` or in a PYTEST_ADDOPTS it set for the child (`env_extra`). One inherited from
    our own environment is not the caller's choice: pytest empties a given basetemp when it starts,
    and that one may be the folder of the pytest run that started us (ours comes later and wins).

    Without it, each child pytest makes a numbered folder in the system's /tmp/pytest-of-<user>
    and deletes all but the three newest there, whoever made them: a `regress` or `bump` started
    while another pytest runs (a test suite that calls the tool, a second checkout) took that run's
    folders away under its tests, and spent the time deleting them."""
    try:
        given = [*pytest_args, *shlex.split((env_extra or {}).get("PYTEST_ADDOPTS", ""))]
    except ValueError:  # unbalanced quotes: pytest itself says so
        given = list(pytest_args)
    if any(a == "--basetemp" or a.startswith("--basetemp=") for a in given):
        return []
    return [f"--basetemp={Path(scratch) / 'pytest-tmp'}"]


TIMEOUT_ENV = "DSV4_REGRESS_TIMEOUT"  # seconds one regress pytest run may take [default: no bound]


def stop_group(p: subprocess.Popen) -> None:
    """Stop a child started with start_new_session and everything it started (its process group)."""
    import signal

    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 30)):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_bounded(argv: list[str], timeout: float | None, **kw) -> tuple[int, bool]:
    """subprocess.run in a process group of its own, stopped as a whole past `timeout` (or when we
    are interrupted); returns (exit code, timed out)."""
    p = subprocess.Popen(argv, start_new_session=True, **kw)
    try:
        return p.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        stop_group(p)
        return p.returncode, True
    except BaseException:
        stop_group(p)
        raise


def regress_timeout() -> float | None:
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise Dsv4Error(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds",
                        hint="set it to the seconds one regress pytest run may take, or unset it") from None
    return value if value > 0 else None


def run_pytest(root: Path, nodes: list[str], env_extra: dict[str, str], *, marker: str | None = None,
               pytest_args: tuple[str, ...] = (), log=None, fresh: bool = False) -> tuple[int, dict[str, dict]]:
    """Run pytest on `nodes` in a child process; returns (exit code, outcome per node id). `fresh`:
    the tests read no check result an earlier run stored (RESULT_CACHE_ENV). Bounded by
    DSV4_REGRESS_TIMEOUT when set (the scheduled bump sets it from its budget): past it the run
    and its children are stopped and the run is an error (no verdict), naming the variable.

    A test file that does not import (torch missing in this venv) is a verdict for its own ids (failed,
    with the reason), never for the others: pytest refuses a whole command line whose node id lies in
    such a file ("found no collectors"), so the ids in the files that did import run once more."""
    rc, outcomes = _run_pytest_once(root, nodes, env_extra, marker=marker, pytest_args=pytest_args, log=log,
                                    fresh=fresh)
    broken = {k for k, o in outcomes.items() if o.get("why", "").startswith("collection error")}
    if broken:
        rest = [n for n in nodes if n.split("::")[0] not in broken and match(n, outcomes)[0] == "missing"]
        if rest:
            _, more = _run_pytest_once(root, rest, env_extra, marker=marker, pytest_args=pytest_args, log=log,
                                       fresh=fresh)
            outcomes.update(more)
        rc = 1  # tests failed: those whose files did not import
    return rc, outcomes


def _run_pytest_once(root: Path, nodes: list[str], env_extra: dict[str, str], *, marker: str | None,
                     pytest_args: tuple[str, ...], log, fresh: bool) -> tuple[int, dict[str, dict]]:
    with tempfile.TemporaryDirectory() as td:
        results_file = Path(td) / "results.json"
        from .locks import child_spawn  # the stack locks we hold reach the child (locks.py)

        lock_env, fds = child_spawn()
        env = {**os.environ, **env_extra, **lock_env, "DSV4_RESULTS_FILE": str(results_file)}
        env.setdefault(RUN_DIR_ENV, td)  # the tests' scratch for this run: removed with td, however it ends
        if fresh and env.get(RESULT_CACHE_ENV) != "0":
            env[RESULT_CACHE_ENV] = "run"
        engine = str(Path(__file__).resolve().parents[1])  # so `-p dsv4_patch.pytest_results` imports
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), engine, env.get("PYTHONPATH")]))
        # --continue-on-collection-errors: with file or folder ids, one file that does not import (torch
        # missing in this venv) would stop the session and leave every other file's tests "missing"
        # (node ids inside such a file are refused outright: run_pytest runs the others again).
        argv = [sys.executable, "-m", "pytest", "-p", "dsv4_patch.pytest_results", "-p", "no:cacheprovider",
                "-p", "no:xdist", "-q", "-rs", "--continue-on-collection-errors",
                *own_basetemp(td, pytest_args, env_extra), *(["-m", marker] if marker else []),
                *pytest_args, *nodes]
        limit = regress_timeout()
        rc, timed_out = run_bounded(argv, limit, cwd=root, env=env, pass_fds=fds,
                                    stdout=log if log is not None else subprocess.DEVNULL, stderr=subprocess.STDOUT)
        if timed_out:
            raise Dsv4Error(f"the regression tests ran past {limit:.0f} s ({TIMEOUT_ENV}): stopped, no verdict",
                            hint=f"raise {TIMEOUT_ENV}, or run `dsv4-patch regress` on its own to see which test hangs")
        outcomes = json.loads(results_file.read_text()) if results_file.exists() else {}
    collection_failed = any(o.get("why", "").startswith("collection error") for o in outcomes.values())
    if rc == 3 or (rc in (2, 4) and not collection_failed):
        # internal error, usage error, interrupted: no verdict at all (a module that does not
        # import is a verdict: its tests fail, with the reason)
        raise Dsv4Error(f"pytest could not run the bound tests (exit {rc})",
                        hint="its output above says why; check the Regression-Test ids with `dsv4-patch check`")
    return rc, outcomes


def match(node: str, outcomes: dict[str, dict]) -> tuple[str, str]:
    """(outcome, reason) of a Regression-Test id: itself and its parametrized cases (node[...]),
    everything under a file or class id, and the collection error of the file that holds it."""
    hits = [o for k, o in outcomes.items()
            if k == node or k.startswith(node + "[") or k.startswith(node + "::")
            or (node.startswith(k + "::") and o["outcome"] == "failed")]  # its module did not import
    if not hits:
        return "missing", "pytest collected no test with this id"
    if all(o["outcome"] == "deselected" for o in hits):
        return "deselected", ""
    for want in ("failed", "passed", "skipped"):
        picked = [o for o in hits if o["outcome"] == want]
        if picked:
            return want, next((o.get("why", "") for o in picked if o.get("why")), "")
    return "skipped", ""


def bound_tests(patches: list[PatchFile]) -> list[str]:
    seen: list[str] = []
    for p in patches:
        for n in p.metadata.regression_tests:
            if n not in seen:
                seen.append(n)
    return seen


def summarize(stack_patches: list[tuple[str, list[PatchFile]]], outcomes: dict[str, dict]) -> list[PatchResult]:
    out = []
    for stack, patches in stack_patches:
        for p in patches:
            got = {n: match(n, outcomes) for n in p.metadata.regression_tests}
            out.append(PatchResult(stack, p.name, {n: o for n, (o, _) in got.items()},
                                   {n: why for n, (o, why) in got.items() if why and o != "passed"}))
    return out
