"""Shared fixtures.

`dsv4_tree(stack, patched=True, release=None)` is the one documented way a test gets an upstream
tree:
- `dsv4-patch regress` sets DSV4_TREE_<STACK> (patched) and DSV4_BASE_<STACK> (pristine pin) to
  the trees of the release under test, DSV4_RELEASE_<STACK> to its tag, and
  DSV4_TREE_<STACK>__<TAG> / DSV4_BASE_<STACK>__<TAG> (tag upper-cased, other characters `_`:
  DSV4_TREE_VLLM__V0_33_0) as well; the fixture returns those paths. `release="v0.33.0"` asks for
  that release whatever is under test (dsv4_patch.api.tree_for_tests);
- run directly under pytest, the fixture builds the tree through the engine (cached under build/
  and reused when nothing changed) and skips with the engine's one-line reason when no source of
  that stack can be reached (DeepGEMM in CI).

The whole suite (`pytest` with no paths: the README's and .ci/run's command) runs on every core
with pytest-xdist, one test file per worker (`--dist loadfile`: a file's session fixtures, e.g. its
overlay venvs or probe runs, are built once), longest files first. This is set here rather than in
pyproject's addopts: those would also reach the pytest runs that `dsv4-patch regress` and `bump`
start for a few node ids (their result plugins expect one process). DSV4_TEST_WORKERS=0 runs
serially; DSV4_TEST_WORKERS=N uses N workers, also for a run naming paths.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Started first under xdist, so the longest files do not end the run alone (measured durations:
# docs/architecture.md, "Test suite time"). A file's own test order is kept.
LONGEST_FIRST = (
    "tests/newcomer/test_newcomer_session.py",
    "tests/engine/test_real_sources.py",
    "tests/regress/sglang/test_o_fp8_qdq.py",
    "tests/bump/test_deepgemm_bump.py",
)
# Started last: it waits for the real Slurm jobs submitted at collection (tests/e2e/conftest.py),
# whose time-limit scenario takes ~90 s of the scheduler's time; run earlier, a worker sits idle.
LAST = ("tests/e2e/test_e2e_slurm.py",)


def _workers(config) -> str | None:
    """How many xdist workers this run gets: "auto", a number, or None (serial)."""
    if hasattr(config, "workerinput") or os.environ.get("PYTEST_XDIST_WORKER"):
        return None  # a worker: never spread again
    if not config.pluginmanager.hasplugin("xdist") or config.option.numprocesses is not None:
        return None  # no xdist here, or -n given on the command line: that decides
    if config.getoption("usepdb", False) or config.getoption("collectonly", False):
        return None
    want = os.environ.get("DSV4_TEST_WORKERS", "").strip()
    if want:
        return None if want in ("0", "1") else want
    whole_suite = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    return "auto" if whole_suite and (os.cpu_count() or 1) > 1 else None


@pytest.hookimpl(tryfirst=True)  # before xdist's own (registered earlier, so called after this one)
def pytest_cmdline_main(config):
    n = _workers(config)
    if n is not None:
        config.option.numprocesses = n if n == "auto" else int(n)
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # keep LONGEST_FIRST's order


try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # the kernels-only environments: no property test runs there
    pass
else:
    # Every property test draws the same examples every run (derandomized: hypothesis seeds each from
    # the test's own code, so a failure comes back on the next run and the one after), and no example
    # database carries a failure from one run into another's. A test's own @settings inherit this.
    _hypothesis_settings.register_profile("dsv4", derandomize=True, database=None)
    _hypothesis_settings.load_profile("dsv4")

from dsv4_patch.flock import file_lock  # noqa: E402
from dsv4_patch.regress import RUN_DIR_ENV  # noqa: E402 - a folder for this test run, shared by its workers and child runs
from _check_cache import MEMO_ENV as _MEMO_ENV  # noqa: E402 - the check-result cache (tests/_check_cache.py)
import _suite_floor  # noqa: E402 - "all skipped is never green" for a whole-suite run
from dsv4_patch.bump.semantic import INTENT_ENV  # noqa: E402

_FLOOR: _suite_floor.Floor | None = None  # the outermost run's counts (pytest_configure)
_CHILD_PREFIXES = ("DSV4_TREE_", "DSV4_BASE_", "DSV4_RELEASE_")  # regress's trees and release per stack


def pytest_configure(config):
    """The run's folder: made by the outermost pytest before xdist starts its workers, which inherit
    it, as do the pytest runs `regress`, `bump` and `pin` start (those make their own when run
    outside the suite, in a temporary folder they remove); removed when the pytest that made it ends.

    The check-result cache (DSV4_CHECK_MEMO), chosen here once for the run and its children:
    unset, the tool cache's `check-results/` (results keyed by everything a check reads, kept across
    runs); `run`, a folder in the run's folder (every distinct check runs once per run); `0`, none
    (every check runs every time it is asked for); any other value, that folder."""
    if hasattr(config, "workerinput"):
        return
    global _FLOOR
    whole_suite = getattr(config, "args_source", None) == pytest.Config.ArgsSource.TESTPATHS
    if _suite_floor.applies(config, whole_suite):
        _FLOOR = _suite_floor.Floor()
    config._dsv4_seed_drawn = _run_seed()
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        # the outermost run (no run folder yet: dsv4-patch gives every pytest it starts one): what
        # dsv4-patch sets for those runs must not come from the caller's shell. DSV4_INTENT never
        # (it makes every pristine-tree test skip as "not an intent test"); DSV4_TREE_*/DSV4_BASE_*/
        # DSV4_RELEASE_* point the tests at other trees and releases, which a developer may ask of a
        # run of some test files, never of the whole suite (`.ci/run`)
        leftovers = sorted(k for k in os.environ
                           if k == INTENT_ENV or (whole_suite and k.startswith(_CHILD_PREFIXES)))
        if leftovers:
            raise pytest.UsageError(f"{', '.join(leftovers)} set in this shell: dsv4-patch sets them only for the "
                                    "pytest runs it starts; unset them and run again")
        import tempfile

        run_dir = config._dsv4_run_dir = tempfile.mkdtemp(prefix="dsv4-test-run-")
        os.environ[RUN_DIR_ENV] = run_dir
        _bytecode_in(config, run_dir)
    memo = os.environ.get(_MEMO_ENV, "")
    if memo == "0":
        return
    if memo == "run":
        memo = os.path.join(run_dir, "checks")
    else:
        from _check_cache import prune

        if not memo:
            from dsv4_patch.sources.base import Cache

            memo = str(Cache.default().root / "check-results")
            config._dsv4_memo_set = True
        prune(Path(memo))
    os.makedirs(memo, exist_ok=True)
    os.environ[_MEMO_ENV] = memo


# The run's seed for every randomized check (tests/regress/vllm/checks: the script names the variable,
# so its result is keyed and stored with the seed): DSV4_SEED when given (a failure is re-run with
# the value the header and the summary print), else a fresh draw per run, so CI tries new inputs on
# every run rather than one draw per cache key forever. Set once by the outermost pytest; xdist
# workers and the pytest runs `regress`/`bump`/`pin` start inherit it.
from dsv4_patch.regress import SEED_ENV  # noqa: E402 - `bump` draws one for its child runs by the same name


def _run_seed() -> bool:
    """Checks DSV4_SEED, or draws one into it; whether it drew (pytest_unconfigure removes a drawn one)."""
    given = os.environ.get(SEED_ENV, "").strip()
    if given:
        if not given.isdigit() or int(given) >= 2**63:
            raise pytest.UsageError(f"{SEED_ENV}={given!r}: not a seed (a non-negative integer below 2**63); "
                                    "unset it to draw one")
        return False
    os.environ[SEED_ENV] = str(int.from_bytes(os.urandom(4), "little"))
    return True


def pytest_report_header(config):
    return f"dsv4 seed: {os.environ.get(SEED_ENV)} (re-run the randomized checks with {SEED_ENV}=that value)"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if os.environ.get(SEED_ENV):
        terminalreporter.write_line(f"dsv4 seed: {SEED_ENV}={os.environ[SEED_ENV]} re-runs the randomized checks")
    for line in getattr(config, "_dsv4_floor_failed", []):
        terminalreporter.write_line(f"dsv4 floor: {line}: a whole-suite run that checked nothing there "
                                    "is not green (tests/_suite_floor.py)", red=True)


def pytest_runtest_logreport(report):
    if _FLOOR is not None:
        _FLOOR.add(report)


def pytest_itemcollected(item):
    if _suite_floor.reaches_upstream(item):  # on the worker that runs it; the report carries it to the controller
        item.user_properties.append((_suite_floor.TAG, True))


def pytest_sessionfinish(session, exitstatus):
    if _FLOOR is None:
        return
    failed = _FLOOR.failures()
    session.config._dsv4_floor_failed = failed
    if failed and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _bytecode_in(config, run_dir: str) -> None:
    """Byte code cached in the run's folder where PYTHONDONTWRITEBYTECODE forbids it beside the
    sources. The run starts hundreds of interpreters (the command line, git-driving engine runs,
    child pytests) that import the same modules: without a cache each compiles them all again (a
    `dsv4-patch status` took 0.73 s that way and 0.33 s with one; `import torch`, installed with
    --no-compile, 4.4 s and 2.0 s). The folder goes with the run, so nothing is written beside a
    source file, as the variable asks. A PYTHONPYCACHEPREFIX the caller set is kept as it is."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    config._dsv4_bytecode = os.environ.pop("PYTHONDONTWRITEBYTECODE")
    prefix = os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(run_dir, "pycache")
    sys.pycache_prefix, sys.dont_write_bytecode = prefix, False  # this process's later imports too


def pytest_unconfigure(config):
    if hasattr(config, "_dsv4_bytecode"):
        os.environ["PYTHONDONTWRITEBYTECODE"] = config._dsv4_bytecode
        os.environ.pop("PYTHONPYCACHEPREFIX", None)
        sys.pycache_prefix, sys.dont_write_bytecode = None, True
    run_dir = getattr(config, "_dsv4_run_dir", None)
    if getattr(config, "_dsv4_seed_drawn", False):
        os.environ.pop(SEED_ENV, None)
    if getattr(config, "_dsv4_memo_set", False):
        os.environ.pop(_MEMO_ENV, None)
    if run_dir:
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)
        for name in (RUN_DIR_ENV, _MEMO_ENV):
            if os.environ.get(name, "").startswith(run_dir):
                del os.environ[name]


def pytest_collection_modifyitems(session, config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # serial runs keep pytest's order
    rank = {f: i for i, f in enumerate(LONGEST_FIRST)} | {f: len(LONGEST_FIRST) + 1 for f in LAST}
    items.sort(key=lambda it: rank.get(it.nodeid.split("::", 1)[0], len(LONGEST_FIRST)))  # stable


# What a source says when it cannot be reached from here (no network, offline, no mirror, a git
# remote that cannot serve an abbreviated id): the only SourceErrors a test skips on. Everything else
# -- a sha256 or commit-id mismatch with the pin, a refused or unreadable archive, an index that
# answers but lists no such file (HTTP 4xx included), a source table missing a key -- is a broken
# pin or a broken archive, and the test fails with it: a skip there would hide it behind "upstream
# unreachable" (a zeroed sha256 in stacks.toml gave "9 skipped", exit 0).
_UNREACHABLE = tuple(re.compile(p) for p in (
    r"^cannot read \S+: (?!HTTP Error 4)",  # the index (a 4xx: it answered)
    r"^download of \S+ failed: (?!HTTP Error 4)",
    r"^git fetch \S+ failed: ",
    r"^\S+ has not been imported yet",  # offline
    r" is not in the local mirror ",  # offline
    r"^abbreviated commit \S+ cannot be fetched by itself",  # the sdist's short id: git cannot serve it
    r"^\S+ does not exist \(clone the upstream there",  # a path source not on this machine
))


def source_unreachable(e) -> bool:
    """Whether a SourceError says only "cannot reach it from here": every source tried (the lines of
    `details`, `  kind:where: reason`) or the error itself failed for one of the _UNREACHABLE reasons."""
    lines = [ln.strip() for ln in (e.details or "").splitlines() if ln.strip()]
    reasons = [ln.split(": ", 1)[1] if ": " in ln else ln for ln in lines] or [e.one_line()]
    return all(any(p.search(r) for p in _UNREACHABLE) for r in reasons)


def _tree(stack: str, patched: bool, release: str | None) -> Path:
    from dsv4_patch.api import tree_for_tests
    from dsv4_patch.errors import SourceError

    try:
        return tree_for_tests(ROOT, stack, patched=patched, release=release)
    except SourceError as e:
        from dsv4_patch.config import load_project
        from dsv4_patch.whereabouts import explain

        what = f"{stack}@{release}" if release else stack
        where = explain(load_project(ROOT).target(stack, release))
        why = " ".join([e.one_line(), *(ln.strip() for ln in (e.details or "").splitlines() if ln.strip())])
        if not source_unreachable(e):
            pytest.fail(f"{what}: the pinned upstream is refused: {why} [{where}]", pytrace=False)
        pytest.skip(f"{what} upstream unreachable here: {why} [{where}]")


@pytest.fixture(scope="session")
def dsv4_tree():
    """Factory: dsv4_tree("vllm") -> patched tree of the release under test (the primary unless
    regress runs another); dsv4_tree("vllm", patched=False) -> its pin;
    dsv4_tree("vllm", release="v0.33.0") -> that release's tree."""
    cache: dict[tuple[str, bool, str | None], Path] = {}

    def get(stack: str, patched: bool = True, release: str | None = None) -> Path:
        key = (stack, patched, release)
        if key not in cache:
            cache[key] = _tree(stack, patched, release)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def venv_template(tmp_path_factory) -> Path:
    """An empty venv made once per run by `python -m venv` (4 s here, nearly all of it ensurepip),
    for tests that copy it to build into (0.2 s) rather than test how a venv is made: build and pip
    call a venv's python by its path, which a copy keeps working. In the run's folder, so the
    workers share it (the first makes it under the lock, the others wait and take it). Named by
    the interpreter it points at (its pyvenv.cfg names that one), in case a caller's run folder
    outlives one interpreter. Never install into it: copy it."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    home = Path(run_dir) if run_dir else tmp_path_factory.mktemp("venv-template")
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    name = f"venv-template-{hashlib.sha256(base.encode()).hexdigest()[:12]}"
    t, done = home / name, home / f"{name}.done"
    with file_lock(home / f"{name}.lock"):
        if not done.is_file():
            shutil.rmtree(t, ignore_errors=True)  # a half-made one (its maker was killed)
            subprocess.run([sys.executable, "-m", "venv", str(t)], check=True)
            done.write_text("")
    return t

