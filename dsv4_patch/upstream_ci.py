"""The `upstream-ci` verification level: what the upstream's own CI would say about each patch.

For each patch of a release, on the cumulative tree at that patch (its commit in the built tree):
1. lint: the upstream's pre-commit hooks of its CI stage that can run offline (precommit.py), each
   installed at the version the config pins into a cached tool venv, run on the files the patch
   touches. Only findings the patch introduces count: a hook that reports anything is run again on
   the parent commit (the tree before the patch) and only what the parent does not report is the
   patch's (messages compared without line numbers; a fixer's edits compared line by line).
2. tests: the in-tree test files the patch adds or changes, run with the upstream's pinned test
   tools (pytest and its plugins, from the tree's requirements/test/*.txt) in a venv the project
   provides (PROVIDER: for vLLM, the integration level's CPU venv of the release). A test that
   fails at the patch but passed (or did not exist) at the parent is the patch's; a failure that
   only says the machine has no GPU is reported as not runnable here, never as passed.

Every check is one row of the patch's result (regress.PatchResult: check -> outcome), so the
CLI's table, --json and --record treat this level like the others. A hook or test that cannot run
here (it needs GitHub, a compiler, the network or a GPU) is `skipped` with `not-runnable: why`:
the patch is then `partial`, not `passed`.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import precommit
from .errors import Dsv4Error
from .flock import file_lock
from .gitcmd import Git, clone_local
from .regress import PatchResult
from .sources.base import Cache, Progress, say

LEVEL = "upstream-ci"
ENGINE_ROOT = Path(__file__).resolve().parents[1]
# The project's function that gives the in-tree tests a venv: `test_env(cfg, base_tree, pristine)`
# in this file of the project (see tests/upstream_ci/provider.py); absent -> tests not runnable.
PROVIDER = "tests/upstream_ci/provider.py"
# Which requirements file pins the upstream's test tools: the first that exists. ROCm first: the
# patches are ROCm patches, and the AMD jobs are the ones that run their tests.
TEST_REQUIREMENTS = ("requirements/test/rocm.txt", "requirements/test/cuda.txt", "requirements/test/cpu.txt",
                     "requirements/test.txt", "requirements-test.txt")
TEST_FILE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test)\.py$")
# A failure that says only "this machine has no GPU": the test is not runnable here.
NEEDS_GPU = re.compile(r"Torch not compiled with CUDA|No CUDA GPUs are available|Found no NVIDIA driver|"
                       r"CUDA driver|no ROCm|HIP error|CUDA error|cudaGetDeviceCount|"
                       r"Cannot access accelerator device|device-side assert|torch\.cuda\.is_available\(\)")
NEEDS_CONFTEST = re.compile(r"fixture '[^']+' not found")
HOOK_TIMEOUT = 900
MEMO_ENV = "DSV4_CHECK_MEMO"  # as regress.RESULT_CACHE_ENV: `run` or `0` = compute afresh


# ---------------------------------------------------------------- tool environments
def _env_key(kind: str, deps: list[str]) -> str:
    return hashlib.sha256(json.dumps([kind, sorted(deps), sys.version_info[:2]]).encode()).hexdigest()[:16]


def tool_env(cache: Cache, kind: str, deps: list[str], progress: Progress = None) -> Path:
    """A cached environment holding `deps`: a venv (kind python) or an npm prefix (kind node).
    Built aside and renamed in, under a lock; Dsv4Error (one line) when the install fails."""
    root = cache.dir("upstream-ci", "envs")
    dst = root / f"{kind}-{_env_key(kind, deps)}"
    done = dst / ".dsv4-done"
    if done.is_file():
        return dst
    with file_lock(root / f".{dst.name}.lock"):
        if done.is_file():
            return dst
        tmp = dst.with_name(dst.name + ".tmp")
        subprocess.run(["rm", "-rf", str(tmp), str(dst)], check=False)
        say(progress, f"upstream-ci: installing {' '.join(deps) or kind} into {dst}")
        try:
            if kind == "python":
                _run_install([sys.executable, "-m", "venv", str(tmp)], "python -m venv")
                if deps:
                    _run_install([str(tmp / "bin" / "python"), "-m", "pip", "install", "-q",
                                  "--disable-pip-version-check", *deps], "pip install " + " ".join(deps))
            elif kind == "node":
                tmp.mkdir(parents=True)
                _run_install(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(tmp), *deps],
                             "npm install " + " ".join(deps))
            else:
                raise Dsv4Error(f"no tool environment of kind {kind!r}")
            (tmp / ".dsv4-done").write_text(json.dumps(deps))
            os.replace(tmp, dst)
        finally:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return dst


def _run_install(argv: list[str], what: str) -> None:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    except FileNotFoundError as e:
        raise Dsv4Error(f"{what}: {argv[0]} not found") from e
    if p.returncode != 0:
        last = [ln for ln in (p.stderr + p.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
        raise Dsv4Error(f"{what} failed: {(last or ['exit ' + str(p.returncode)])[-1].strip()[:300]}")


def file_tags(cache: Cache, tree: Path, files: list[str], progress: Progress = None) -> dict[str, set[str]]:
    """identify's tags (python, text, shell, ...) of each file, as pre-commit classifies them."""
    if not files:
        return {}
    env = tool_env(cache, "python", [precommit.IDENTIFY], progress)
    p = subprocess.run([str(env / "bin" / "python"), "-c", precommit.IDENTIFY_SCRIPT, *files], cwd=tree,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise Dsv4Error(f"identify failed on {tree}: {p.stderr.strip().splitlines()[-1:]}")
    return {f: set(t) for f, t in json.loads(p.stdout).items()}


# ---------------------------------------------------------------- one hook, one run
@dataclass
class HookRun:
    rc: int
    output: str
    changes: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (before, after) it rewrote
    not_runnable: str = ""

    @property
    def clean(self) -> bool:
        return not self.not_runnable and self.rc == 0 and not self.changes


def _pygrep(hook: precommit.Hook, tree: Path, files: list[str]) -> HookRun:
    flags = re.I if "-i" in hook.args or "--ignore-case" in hook.args else 0
    negate = "--negate" in hook.args
    pat = re.compile(hook.entry, flags | (re.M if "--multiline" in hook.args else 0))
    hits = []
    for f in files:
        text = (tree / f).read_text(errors="replace")
        if negate:
            if not pat.search(text):
                hits.append(f)
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if pat.search(line):
                hits.append(f"{f}:{n}:{line}")
    return HookRun(1 if hits else 0, "\n".join(hits))


def run_hook(hook: precommit.Hook, tree: Path, files: list[str], envdir: Path | None) -> HookRun:
    """Run `hook` in `tree` on `files` as pre-commit would; whatever it rewrites is recorded and put
    back, so the next hook (and the parent's run) sees the files as committed."""
    if hook.language == "pygrep":
        return _pygrep(hook, tree, files)
    if hook.language == "fail":
        return HookRun(1 if files else 0, "\n".join(f"{f}: {hook.entry}" for f in files))
    try:
        argv = shlex.split(hook.entry) + hook.args + (files if hook.pass_filenames else [])
    except ValueError as e:
        return HookRun(0, "", not_runnable=f"its entry does not parse: {e}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if hook.language == "python" and envdir is not None:
        env["PATH"] = f"{envdir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(envdir)
        exe = envdir / "bin" / argv[0]
        if exe.exists():
            argv[0] = str(exe)
    elif hook.language == "node" and envdir is not None:
        env["PATH"] = f"{envdir / 'node_modules' / '.bin'}{os.pathsep}{env.get('PATH', '')}"
    elif hook.language == "script":
        argv[0] = str(tree / argv[0])
    before = {f: (tree / f).read_bytes() for f in files if (tree / f).is_file()}
    try:
        p = subprocess.run(argv, cwd=tree, env=env, capture_output=True, timeout=HOOK_TIMEOUT,
                           stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return HookRun(0, "", not_runnable=f"{argv[0]} is not installed here")
    except subprocess.TimeoutExpired:
        return HookRun(0, "", not_runnable=f"did not finish in {HOOK_TIMEOUT} s")
    except PermissionError:
        return HookRun(0, "", not_runnable=f"{argv[0]} is not executable")
    out = (p.stdout + p.stderr).decode("utf-8", "replace").replace(str(tree) + "/", "")
    changes = {}
    for f, old in before.items():
        new = (tree / f).read_bytes() if (tree / f).is_file() else b""
        if new != old:
            changes[f] = (old.decode("utf-8", "replace"), new.decode("utf-8", "replace"))
            (tree / f).write_bytes(old)
    return HookRun(p.returncode, out, changes)


def findings(run: HookRun) -> Counter:
    """What a run reports, each finding keyed without its numbers (line, column, counts), so the
    same finding at the parent (where the lines sit elsewhere) is the same key."""
    keys: Counter = Counter()
    for line in run.output.splitlines():
        s = line.strip()
        if s:
            keys[_key(s)] += 1
    for f, (old, new) in run.changes.items():
        for d in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0):
            if d.startswith(("+++", "---", "@@")):
                continue
            keys[_key(f"{f}: the hook rewrites {d[:1]} {d[1:].strip()}")] += 1
    return keys


_DISPLAY: dict[str, str] = {}


def _key(text: str) -> str:
    k = re.sub(r"\d+", "#", text)
    # `--output-format github` lines: the annotation prefix repeats what follows it
    _DISPLAY.setdefault(k, re.sub(r"%0A.*", "", re.sub(r"^::\w+ [^\n]*?::(?=\S)", "", text)))
    return k


def introduced(at_patch: HookRun, at_parent: HookRun | None) -> list[str]:
    """The findings of `at_patch` that `at_parent` does not have (as display lines)."""
    new = findings(at_patch) - (findings(at_parent) if at_parent is not None else Counter())
    return [_DISPLAY.get(k, k) for k in new]


# ---------------------------------------------------------------- the in-tree tests
def test_pins(tree: Path) -> tuple[str, list[str]] | None:
    """(requirements file, [pytest==X, pytest-<plugin>==Y ...]) pinned by the tree, or None."""
    for rel in TEST_REQUIREMENTS:
        f = tree / rel
        if f.is_file():
            pins = re.findall(r"^(pytest(?:-[A-Za-z0-9_.-]+)?==[^\s;#\\]+)", f.read_text(), re.M)
            if any(p.startswith("pytest==") for p in pins):
                return rel, sorted(set(pins))
    return None


def pins_dir(cache: Cache, python: Path, tree: Path, reqfile: str, pins: list[str], progress: Progress = None) -> Path:
    """A folder (pip --target) with the pinned pytest and plugins, for `python`; the rest of what
    they need at the versions the same requirements file pins (-c)."""
    ident = subprocess.run([str(python), "-c", "import sys, sysconfig; print(sys.version, sysconfig.get_platform())"],
                           capture_output=True, text=True).stdout.strip()  # the interpreter, not its path
    key = hashlib.sha256(json.dumps([ident, pins, (tree / reqfile).read_text()]).encode()).hexdigest()[:16]
    root = cache.dir("upstream-ci", "pins")
    dst = root / key
    if (dst / ".dsv4-done").is_file():
        return dst
    with file_lock(root / f".{key}.lock"):
        if (dst / ".dsv4-done").is_file():
            return dst
        tmp = root / f"{key}.tmp"
        subprocess.run(["rm", "-rf", str(tmp), str(dst)], check=False)
        say(progress, f"upstream-ci: installing {' '.join(pins)} (pinned by {reqfile})")
        pinned = {}
        for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)(?:\[[^\]]*\])?==([^\s;\\#]+)", (tree / reqfile).read_text(), re.M):
            pinned.setdefault(m.group(1).lower(), f"{m.group(1)}=={m.group(2)}")
        try:
            tmp.mkdir(parents=True)
            (tmp / ".constraints.txt").write_text("\n".join(pinned.values()) + "\n")
            _run_install([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
                          "--target", str(tmp), "-c", str(tmp / ".constraints.txt"), *pins], "pip install " + " ".join(pins))
            (tmp / ".dsv4-done").write_text("\n".join(pins))
            os.replace(tmp, dst)
        finally:
            subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return dst


# Runs in the test venv, cwd = the tree (first on sys.path, as an editable install of the upstream
# puts it). The pinned tools come after the venv's own packages, so they shadow nothing the venv
# has; pytest itself must be the pinned one.
LAUNCHER = r"""
import json, sys
want, extra, args = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
sys.path.extend(extra)
import pytest
if pytest.__version__ != want:
    print(f"pytest {pytest.__version__} is installed in this venv and shadows the pinned {want}")
    sys.exit(97)
sys.exit(pytest.main(args))
"""


@dataclass
class PytestEnv:
    python: Path
    pythonpath: list[Path] = field(default_factory=list)  # after the pins (e.g. a platform shim)
    plugins: list[str] = field(default_factory=list)  # -p NAME, loaded before the tests import
    args: list[str] = field(default_factory=list)
    note: str = ""


def run_tests(env: PytestEnv, pins: Path, pytest_version: str, tree: Path, files: list[str]) -> tuple[int, dict, str]:
    """(exit code, {node id: {outcome, why}}, output tail) of pytest on `files` in `tree`."""
    with tempfile.TemporaryDirectory(prefix="dsv4-upstream-ci-") as td:
        results = Path(td) / "results.json"
        args = ["-p", "dsv4_patch.pytest_results", "-p", "no:cacheprovider", *[a for p in env.plugins for a in ("-p", p)],
                "-q", "-rfEs", f"--basetemp={Path(td) / 'tmp'}", *env.args, *files]
        extra = [str(pins), str(ENGINE_ROOT), *map(str, env.pythonpath)]
        run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
                   and not k.startswith(("VLLM_", "DSV4_TREE_", "DSV4_BASE_", "PYTEST_"))}
        run_env.update({"DSV4_RESULTS_FILE": str(results), "CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"})
        try:
            p = subprocess.run([str(env.python), "-c", LAUNCHER, pytest_version, json.dumps(extra), json.dumps(args)],
                               cwd=tree, env=run_env, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            return 124, {}, "pytest did not finish in 1800 s"
        outcomes = json.loads(results.read_text()) if results.exists() else {}
    return p.returncode, outcomes, (p.stdout + p.stderr)[-3000:]


def classify(outcome: dict) -> str:
    """passed | skipped | failed | needs-gpu | needs-conftest for one pytest outcome."""
    o, why = outcome.get("outcome"), outcome.get("why", "")
    if o == "failed" and NEEDS_GPU.search(why):
        return "needs-gpu"
    if o == "failed" and NEEDS_CONFTEST.search(why):
        return "needs-conftest"
    return o or "skipped"


# ---------------------------------------------------------------- one release
@dataclass
class Check:
    name: str
    outcome: str  # passed | failed | skipped (not runnable here) | deselected (no files)
    why: str = ""
    # skipped for what this machine did this time (a tool or venv that could not be had, a hook
    # that timed out), not for what the tree or its config says: such a result is never stored
    transient: bool = False


@dataclass
class Release:
    """What one release needs: its label, the built tree (commits on refs/dsv4/base), the pristine
    tree, and the patches in series order."""
    label: str
    tree: Path
    base_tree: Path
    patches: list  # PatchFile
    cfg: object = None  # StackConfig, handed to the test provider


def load_provider(project_root: Path) -> Callable | None:
    """The project's test_env(cfg, base_tree, pristine) (PROVIDER), or None when it has none."""
    f = Path(project_root) / PROVIDER
    if not f.is_file():
        return None
    spec = importlib.util.spec_from_file_location("dsv4_upstream_ci_provider", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, "test_env", None)


def _key_files(provider_file: Path | None, reads=()) -> list[Path]:
    """The files _memo_key hashes (found once per run_release, not once per patch): this module, the
    hook runner, the result plugin the in-tree tests run with, the provider with its folder's modules
    (not its tests) and what it says it reads (`READS`: the venv recipe it imports, the plugins and
    helpers it puts on the test path), with the test code those import (testcode.closure)."""
    from . import pytest_results
    from .e2e.testcode import closure

    files = [Path(__file__), Path(precommit.__file__), Path(pytest_results.__file__)]
    if provider_file is not None and provider_file.is_file():
        root = provider_file.resolve().parents[2]  # tests/upstream_ci/provider.py
        start = [p.resolve() for p in provider_file.parent.rglob("*.py") if not p.name.startswith("test_")]
        for r in map(Path, reads):
            start += sorted(r.rglob("*.py")) if r.is_dir() else [r]
        files += sorted(closure(root, [provider_file.resolve(), *start], checks_beside=False))
    return files


def _memo_key(rel: Release, sha: str, parent: str, what: str, files: list[Path]) -> str:
    """Everything a patch's checks read besides the trees' commits: `files` (_key_files) and the
    variable that picks the venvs' torch."""
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f"{f.name}\0".encode() + f.read_bytes())
    h.update(f"{rel.label}\n{sha}\n{parent}\n{sys.version_info[:2]}\n{what}\n"
             f"DSV4_BUILD_TORCH={os.environ.get('DSV4_BUILD_TORCH')}".encode())
    return h.hexdigest()


def run_release(rel: Release, *, cache: Cache | None = None, provider: Callable | None = None,
                provider_file: Path | None = None, pristine: Callable | None = None, lint: bool = True,
                tests: bool = True, fresh: bool = False, progress: Progress = None) -> list[PatchResult]:
    """One PatchResult per patch of `rel` (checks as its tests: name -> outcome, reasons)."""
    cache = cache or Cache.default()
    g = Git(rel.tree)
    base = g.rev("refs/dsv4/base")
    if base is None:
        raise Dsv4Error(f"{rel.tree}: no refs/dsv4/base, not a tree dsv4-patch built",
                        hint=f"run `dsv4-patch apply {rel.label}`")
    commits = g.out("rev-list", "--reverse", f"{base}..HEAD").split()
    if len(commits) != len(rel.patches):
        raise Dsv4Error(f"{rel.tree}: {len(commits)} commits on the base for {len(rel.patches)} patches",
                        hint=f"export or drop local commits, then `dsv4-patch apply {rel.label}`")
    memo_on = not fresh and os.environ.get(MEMO_ENV) not in ("run", "0")
    memo_dir = cache.dir("upstream-ci", "results")
    key_files = _key_files(provider_file, getattr(provider, "__globals__", {}).get("READS", ()))
    results: list[PatchResult] = []
    with tempfile.TemporaryDirectory(prefix="dsv4-upstream-ci-", dir=cache.dir("tmp")) as td:
        scratch = Path(td) / "tree"
        clone_local(Git(Path(td)), rel.tree, str(scratch))  # the cache and OUT may be on two file systems
        sg = Git(scratch)
        sg.run("update-ref", "refs/dsv4/base", base)
        for k, (patch, sha) in enumerate(zip(rel.patches, commits)):
            parent = commits[k - 1] if k else base
            key = _memo_key(rel, sha, parent, f"lint={lint} tests={tests}", key_files)
            memo = memo_dir / f"{key}.json"
            if memo_on and memo.is_file():
                data = json.loads(memo.read_text())
                results.append(PatchResult(rel.label, patch.name, data["tests"], data["reasons"]))
                continue
            say(progress, f"upstream-ci {rel.label}: {k + 1}/{len(rel.patches)} {patch.name}")
            checks = _patch_checks(rel, sg, scratch, sha, parent, cache, provider, pristine, lint, tests, progress)
            res = PatchResult(rel.label, patch.name, {c.name: c.outcome for c in checks},
                              {c.name: c.why for c in checks if c.why})
            results.append(res)
            # Stored only when it says nothing about this machine's moment: no failure (a flaky one
            # would replay until the patch changes) and no skip for a tool or venv that could not be
            # had this time (it would hide the in-tree tests until then). Passes and the skips the
            # tree and its config decide (no hooks config, GPU-only tests) are kept.
            if not any(c.outcome == "failed" or c.transient for c in checks):
                memo.write_text(json.dumps({"tests": res.tests, "reasons": res.reasons}))
    return results


def _checkout(sg: Git, sha: str) -> None:
    sg.run("checkout", "-q", "--force", "--detach", sha)
    sg.run("clean", "-fdq")  # what a hook or test left that git does not ignore


def _patch_checks(rel, sg, scratch, sha, parent, cache, provider, pristine, lint, tests, progress) -> list[Check]:
    r = sg.run("diff", "--name-status", "--no-renames", "-z", parent, sha)
    parts = [p for p in r.out.split("\0") if p]
    status = {parts[i + 1]: parts[i][0] for i in range(0, len(parts), 2)}
    files = sorted(f for f, s in status.items() if s != "D")
    in_parent = [f for f in files if status[f] != "A"]
    _checkout(sg, sha)
    checks: list[Check] = []
    if lint:
        checks += _lint(scratch, sg, sha, parent, files, in_parent, cache, progress)
    if tests:
        _checkout(sg, sha)
        checks += _tests(rel, scratch, sg, sha, parent, files, in_parent, status, cache, provider, pristine, progress)
    return checks


def _lint(scratch, sg, sha, parent, files, in_parent, cache, progress) -> list[Check]:
    text = sg.run("show", f"{sha}:{precommit.CONFIG_FILE}", check=False)
    if text.rc != 0:
        return [Check("pre-commit", "skipped", f"not-runnable: no {precommit.CONFIG_FILE} in the tree")]
    try:
        cfg = precommit.parse(text.out, f"{sha[:12]}:{precommit.CONFIG_FILE}")
        tags = file_tags(cache, scratch, files, progress)
    except Dsv4Error as e:
        return [Check("pre-commit", "failed", f"error: {e.one_line()}")]
    checks, at_patch, todo = [], {}, []
    for hook in cfg.hooks:
        sel = precommit.select(cfg, hook, files, tags)
        if not sel and not hook.always_run:
            continue
        if hook.not_runnable:
            checks.append(Check(hook.name, "skipped", f"not-runnable: {hook.not_runnable}"))
            continue
        envdir = None
        if hook.language in ("python", "node"):
            try:
                envdir = tool_env(cache, hook.language, hook.deps, progress)
            except Dsv4Error as e:
                checks.append(Check(hook.name, "skipped", f"not-runnable: {e.one_line()}", transient=True))
                continue
        run = run_hook(hook, scratch, sel, envdir)
        if run.not_runnable:
            checks.append(Check(hook.name, "skipped", f"not-runnable: {run.not_runnable}", transient=True))
        elif run.clean:
            checks.append(Check(hook.name, "passed"))
        else:
            at_patch[hook.name] = (hook, sel, envdir, run)
            todo.append(hook.name)
            checks.append(Check(hook.name, "pending"))
    if todo:  # only what reported anything runs again, on the tree before the patch
        _checkout(sg, parent)
        for c in checks:
            if c.outcome != "pending":
                continue
            hook, sel, envdir, run = at_patch[c.name]
            old = [f for f in sel if f in in_parent]
            before = run_hook(hook, scratch, old, envdir) if (old or not hook.pass_filenames) else HookRun(0, "")
            if before.not_runnable:  # nothing to compare with: neither the patch's finding nor a pass
                c.outcome, c.transient = "skipped", True
                c.why = f"not-runnable: {c.name} reported at the patch but could not run before it ({before.not_runnable})"
                continue
            new = introduced(run, before)
            named = [n for n in new if any(f in n for f in sel)]  # a line that names its file first
            new = named + [n for n in new if n not in named]
            if new:
                c.outcome, c.why = "failed", f"{c.name}: {new[0][:240]}" + (f" (+{len(new) - 1} more)" if len(new) > 1 else "")
            elif run.rc != 0 and before.rc == 0:
                tail = (run.output.strip().splitlines() or [""])[-1]
                c.outcome, c.why = "failed", f"{c.name}: exit {run.rc} (0 before the patch): {tail[:200]}"
            else:
                c.outcome, c.why = "passed", ""
        _checkout(sg, sha)
    return checks


def _tests(rel, scratch, sg, sha, parent, files, in_parent, status, cache, provider, pristine, progress) -> list[Check]:
    test_files = [f for f in files if TEST_FILE.search(f)]
    if not test_files:
        return []
    pins = test_pins(scratch)
    name = "in-tree tests"
    if pins is None:
        return [Check(name, "skipped", "not-runnable: the tree pins no test requirements "
                      f"({', '.join(TEST_REQUIREMENTS[:3])} ...)")]
    reqfile, pinlist = pins
    version = next(p.split("==")[1] for p in pinlist if p.startswith("pytest=="))
    name = f"pytest {version}"
    if provider is None:
        return [Check(name, "skipped", f"not-runnable: the project has no {PROVIDER} (a venv for the tests)")]
    try:
        env = provider(rel.cfg, rel.base_tree, pristine)
        if isinstance(env, str):
            return [Check(name, "skipped", f"not-runnable: {env}", transient=True)]
        pdir = pins_dir(cache, env.python, scratch, reqfile, pinlist, progress)
    except Dsv4Error as e:
        return [Check(name, "skipped", f"not-runnable: {e.one_line()}", transient=True)]
    except BaseException as e:  # a provider built on pytest helpers fails with pytest's Failed
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        why = (str(e).splitlines() or [type(e).__name__])[0][:300]
        return [Check(name, "skipped", f"not-runnable: the test venv could not be made: {why}", transient=True)]
    say(progress, f"upstream-ci {rel.label}: pytest {version} on {len(test_files)} test file(s)")
    rc, got, tail = run_tests(env, pdir, version, scratch, test_files)
    for o in got.values():
        o["why"] = o.get("why", "").replace(str(scratch) + "/", "")
    if rc == 97 or (not got and rc not in (0, 5)):
        return [Check(name, "failed", f"error: pytest {version} did not run: {tail.strip().splitlines()[-1:] or rc}")]
    kinds = {n: classify(o) for n, o in got.items()}
    bad = [n for n, c in kinds.items() if c == "failed"]
    if bad:  # which were failing before the patch too
        _checkout(sg, parent)
        old_files = [f for f in test_files if f in in_parent]
        before = run_tests(env, pdir, version, scratch, old_files)[1] if old_files else {}
        _checkout(sg, sha)
        bad = [n for n in bad if before.get(n, {}).get("outcome") != "failed"]
    checks = []
    for f in test_files:
        mine = {n: c for n, c in kinds.items() if n == f or n.startswith(f + "::")}
        cname = f"{name}: {f}"
        new = [n for n in bad if n in mine]
        if new:
            why = got[new[0]].get("why", "")
            checks.append(Check(cname, "failed", f"{new[0]} fails under pytest {version}: {why[:200]}"
                                + (f" (+{len(new) - 1} more)" if len(new) > 1 else "")))
        elif any(c == "passed" for c in mine.values()) and not any(
                c in ("needs-gpu", "needs-conftest") for c in mine.values()):
            checks.append(Check(cname, "passed"))
        else:
            reasons = Counter(c for c in mine.values())
            first = next((got[n].get("why", "") for n, c in sorted(mine.items(), key=lambda kv: kv[1] == "skipped")
                          if c in ("needs-gpu", "skipped", "needs-conftest")), "")  # a test that did not run here first
            what = ", ".join(f"{v} {k}" for k, v in sorted(reasons.items())) or "no test collected"
            checks.append(Check(cname, "skipped", f"not-runnable here: {what} ({first[:160]})"))
    return checks


def timed(fn, *a, **kw):
    t0 = time.monotonic()
    return fn(*a, **kw), time.monotonic() - t0
