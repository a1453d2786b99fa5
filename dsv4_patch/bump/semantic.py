"""Semantic obsolescence: does the pristine upstream already do what a patch is for?

Upstream rarely takes a fix byte for byte; it fixes the same problem its own way, and the patch then
conflicts, or still applies while doing nothing. The textual verdicts (classify.py) cannot tell.
Here each patch's intent tests run with the *pristine* upstream tree standing in for the patched
one (DSV4_TREE_<STACK> and DSV4_BASE_<STACK> both point at it): a test that failed on the unpatched
pin and passes now says upstream caught up.

Intent tests: when the stack already carries the patch for the target release (same name in
patches/<stack>/releases/<tag>, or .../bumps/<tag>), that copy's tests, written for that release;
else the pytest ids a patch's `Drop-When:` names (a checkable condition: `Drop-When:
tests/regress/x/test_y.py::test_z passes`), else its `Regression-Test:` ids. Verdicts:

    fixed-upstream  every intent test passed without the patch
    needed          an intent test failed by assertion: upstream still lacks the behaviour
    outside         an intent test needs a file a partial tree does not carry (or skipped saying so)
    probe-error     an intent test raised something other than an assertion (the probe is broken
                    on this upstream, no verdict), or a named test id was not collected
    unimportable    the intent tests' module cannot be collected (imports) against this upstream
    untestable      an intent test skipped (nvcc missing, ...): the reason is kept
    timeout         the intent run ran past its bound (DSV4_INTENT_TIMEOUT) before this patch's
                    tests finished: no verdict, the other patches keep theirs
    no-intent       the patch names no test at all (or every one skipped as "not an intent test")

The tests get the pristine tree through the variables the `dsv4_tree` fixture reads for the
release whose series is checked (regress.release_tree_env): DSV4_TREE_<STACK> / DSV4_BASE_<STACK>,
DSV4_RELEASE_<STACK> naming that release, and DSV4_TREE_<STACK>__<TAG> for it and for the target
(`vllm@v0.33.0` -> v0.34.0: DSV4_TREE_VLLM, DSV4_TREE_VLLM__V0_33_0 and DSV4_TREE_VLLM__V0_34_0 are
all the pristine v0.34.0). A test that still builds a tree of the checked stack (another release)
shares the caller's stack lock (locks.child_spawn), so it never waits for the bump that runs it.

The run is bounded: DSV4_INTENT_TIMEOUT seconds for one stack's whole intent run (default
INTENT_TIMEOUT_DEFAULT). Past it the run is stopped (its process group), the results of the tests
that finished are kept (the plugin writes them as they come) and every patch whose tests did not
all finish gets `timeout`.

The run sets DSV4_INTENT=1. A test about the unpatched tree ("the unpatched tree fails") means the
opposite there, since the base tree is the new upstream: it should skip with a reason containing
"not an intent test", and is then left out of the verdict.

Only `fixed-upstream` proposes dropping a patch; every other outcome says why no verdict was reached.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..config import StackConfig, env_key
from ..errors import Dsv4Error
from ..locks import child_spawn
from ..patchfile import PatchFile
from ..regress import INTENT_ENV, RESULT_CACHE_ENV, RUN_DIR_ENV, own_basetemp, release_tree_env, run_bounded
from ..sources import BaseTree, Progress
from ..sources.base import say
from .classify import in_tree
from .repo import scratch

VERDICTS = ("fixed-upstream", "needed", "outside", "probe-error", "unimportable", "untestable", "timeout",
            "no-intent")
# Only these are a verdict; every other one says why none was reached (bump: the patch is unverified)
DECIDED = ("fixed-upstream", "needed")
MISSING_FILE_RE = re.compile(r"No such file or directory: '([^']+)'")
PARTIAL_SKIP = "outside the partial tree"  # a test that skips for this reason gets `outside`
NOT_INTENT = "not an intent test"  # a test that skips for this reason under DSV4_INTENT is left out
TIMEOUT_ENV = "DSV4_INTENT_TIMEOUT"  # seconds for one stack's whole intent run
# One stack's intent run: cold, the vLLM tests build two overlay venvs (a few minutes); warm they take
# well under a minute. Ten minutes bounds a hung probe without cutting a cold first run short, and
# keeps the scheduled job (every stack, 90 minutes) finishing with room; ci/upstream_bump.py lowers
# it further to what its own budget has left.
INTENT_TIMEOUT_DEFAULT = 600.0
SELECT_ENV = "DSV4_INTENT_SELECT"  # the node ids the intent run keeps (intent_results.py deselects the rest)


@dataclass
class Semantic:
    patch: str
    verdict: str
    reason: str  # one line: why this verdict
    decided_by: str  # "Drop-When" | "Regression-Test" | ""
    tests: dict[str, dict] = field(default_factory=dict)  # node id -> {"outcome", "why", ...}

    @property
    def fixed(self) -> bool:
        return self.verdict == "fixed-upstream"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def intent_tests(patch: PatchFile, ported: PatchFile | None = None, where: str = "") -> tuple[list[str], str]:
    """The tests that decide whether `patch` is still needed, and where they were named. `ported`: the
    same patch as the stack carries it for the target release (its tests are written for that release)."""
    if ported is not None:
        nodes, by = intent_tests(ported)
        if nodes:
            return nodes, f"{by} of {where}"
    named = patch.metadata.drop_when_tests
    if named:
        return list(dict.fromkeys(named)), "Drop-When"
    if patch.metadata.regression_tests:
        return list(patch.metadata.regression_tests), "Regression-Test"
    return [], ""


def release_port(cfg: StackConfig, label: str) -> tuple[dict[str, PatchFile], str]:
    """The patches the stack already carries for release `label` (a `releases."<label>"` table, or the
    folder patches/<stack>/releases/<label> or .../bumps/<label>), by name, and that folder."""
    from ..stack import load_stack

    rel = getattr(cfg, "releases", None) or {}
    folders = [rel[label].patch_dir] if label in rel else []
    folders += [cfg.patch_dir / sub / label for sub in ("releases", "bumps")]
    for folder in folders:
        if (folder / "series").is_file():
            loaded = load_stack(dataclasses.replace(cfg, patch_dir=folder))
            root = cfg.patch_dir.parent.parent
            where = folder.relative_to(root).as_posix() if folder.is_relative_to(root) else str(folder)
            return {p.name: p for p in loaded.patches}, where
    return {}, ""


def pristine_checkout(dest: Path, base: BaseTree) -> Path:
    """A work tree of the pristine upstream commit (borrowing its objects), for the intent tests."""
    g = scratch(dest, [Path(base.git_dir)], bare=False)
    g.run("checkout", "--quiet", "--force", "--detach", base.commit)
    g.run("clean", "-q", "-f", "-d", "-x")
    return dest


def _matches(node: str, results: dict[str, dict]) -> dict[str, dict]:
    return {k: v for k, v in results.items() if k == node or k.startswith(node + "[") or k.startswith(node + "::")}


def _collect_error(node: str, results: dict[str, dict]) -> dict | None:
    module = node.split("::", 1)[0]
    for k, v in results.items():
        if v.get("when") == "collect" and (k == module or module.startswith(k.rstrip("/") + "/") or k == "<session>"):
            return v
    return None


def _outside_path(why: str, tree: Path, partial: list[str] | None) -> str | None:
    """The tree path a FileNotFoundError names, when it lies outside the partial tree."""
    if partial is None:
        return None
    m = MISSING_FILE_RE.search(why)
    if not m:
        return None
    try:
        rel = Path(m.group(1)).resolve().relative_to(tree.resolve()).as_posix()
    except ValueError:
        return None
    return None if in_tree(rel, partial) else rel


def judge(name: str, nodes: list[str], decided_by: str, results: dict[str, dict], tree: Path,
          partial: list[str] | None) -> Semantic:
    """One patch's verdict from the recorded results of its intent tests (worst reason first)."""
    if not nodes:
        return Semantic(name, "no-intent", "names no Regression-Test and no test in Drop-When", "")
    tests: dict[str, dict] = {}
    errors, failures, skips, outside, timeouts = [], [], [], [], []
    for node in nodes:
        hits = _matches(node, results)
        if not hits and results.get("<timeout>"):
            tests[node] = {"outcome": "timeout", "why": results["<timeout>"]["why"]}
            timeouts.append(f"{node}: {results['<timeout>']['why']}")
            continue
        if not hits:
            bad = _collect_error(node, results)
            if bad:
                tests[node] = bad
                return Semantic(name, "unimportable", f"{node.split('::')[0]} cannot be collected on this upstream: "
                                f"{bad['why']}", decided_by, tests)
            tests[node] = {"outcome": "missing", "why": "not collected"}
            errors.append(f"{node}: no such test was collected (check the id with `dsv4-patch check`)")
            continue
        tests.update(hits)
        for k, v in hits.items():
            if v["outcome"] == "timeout":
                timeouts.append(f"{k}: {v['why']}")
                continue
            if v["outcome"] == "failed" and v.get("when") == "collect":
                return Semantic(name, "unimportable", f"{k} cannot be collected on this upstream: {v['why']}",
                                decided_by, tests)
            if v["outcome"] == "failed" and not v.get("assertion"):
                path = _outside_path(v.get("why", ""), tree, partial)
                (outside if path else errors).append(f"{k}: needs {path}" if path else f"{k}: {v['why']}")
            elif v["outcome"] == "failed":
                failures.append(f"{k}: {v['why']}")
            elif v["outcome"] == "skipped" and NOT_INTENT in v.get("why", ""):
                continue  # e.g. "the unpatched tree fails": about the base, which is the new upstream here
            elif v["outcome"] == "skipped":
                (outside if PARTIAL_SKIP in v.get("why", "") else skips).append(f"{k}: {v['why']}")
    if errors:
        return Semantic(name, "probe-error", errors[0], decided_by, tests)
    if outside:
        return Semantic(name, "outside", outside[0] + " (the partial tree does not carry it)", decided_by, tests)
    if failures:
        return Semantic(name, "needed", failures[0], decided_by, tests)
    if timeouts:
        return Semantic(name, "timeout", timeouts[0], decided_by, tests)
    if skips:
        return Semantic(name, "untestable", skips[0], decided_by, tests)
    if all(t.get("outcome") == "skipped" for t in tests.values()):
        return Semantic(name, "no-intent", "every named test skipped as not an intent test", decided_by, tests)
    return Semantic(name, "fixed-upstream", f"{len(tests)} intent test(s) pass on the pristine upstream "
                    f"without the patch ({decided_by})", decided_by, tests)


def intent_timeout() -> float:
    """The bound of one stack's intent run, in seconds (DSV4_INTENT_TIMEOUT, default 600)."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return INTENT_TIMEOUT_DEFAULT
    try:
        value = float(raw)
    except ValueError:
        raise Dsv4Error(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds",
                        hint=f"set it to the seconds one stack's intent run may take, e.g. {TIMEOUT_ENV}=600") from None
    if value <= 0:
        raise Dsv4Error(f"{TIMEOUT_ENV}={raw!r}: the bound must be positive", hint="or pass --no-semantic")
    return value


def run_intent_tests(root: Path, nodes: list[str], env_extra: dict[str, str], *, timeout: float | None = None,
                     log=None) -> dict[str, dict]:
    """Run pytest on `nodes` in one child process; the per-node records of intent_results.py.

    pytest is given the nodes' modules, not the node ids, and intent_results.py deselects every
    other test: named by id, a module that cannot be imported stops the whole run ("found no
    collectors"), while a module named by path is one collection error beside the others' results
    (--continue-on-collection-errors). One run, not one per module: session fixtures (an overlay
    venv, a probe) are built once for every patch that needs them.

    Bounded by `timeout` (default intent_timeout()): past it the run's process group is stopped and
    the records of the tests that finished are returned, with "<timeout>" saying so (and the test
    that was running recorded as `timeout`); judge() gives the unfinished patches `timeout`.
    The stack locks this process holds are passed on (locks.child_spawn)."""
    limit = timeout or intent_timeout()
    with tempfile.TemporaryDirectory(prefix="dsv4-intent-") as td:
        results = Path(td) / "intent.json"
        engine = str(Path(__file__).resolve().parents[2])
        lock_env, fds = child_spawn()
        env = {**os.environ, **env_extra, **lock_env, "DSV4_INTENT_RESULTS": str(results),
               SELECT_ENV: json.dumps(list(nodes))}
        env.setdefault(RUN_DIR_ENV, td)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), engine, env.get("PYTHONPATH")]))
        modules = list(dict.fromkeys(n.split("::", 1)[0] for n in nodes))
        argv = [sys.executable, "-m", "pytest", "-p", "dsv4_patch.bump.intent_results", "-p", "no:cacheprovider",
                "-p", "no:xdist", "--continue-on-collection-errors", "-q", "-rs", *own_basetemp(td, env_extra=env_extra), *modules]
        # its own process group, stopped as a whole past the bound (a check script, a pip install with it)
        rc, timed_out = run_bounded(argv, limit, cwd=root, env=env, pass_fds=fds,
                                    stdout=log if log is not None else subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            data = json.loads(results.read_text()) if results.exists() else {}
        except ValueError:  # cut off while writing (the plugin replaces the file whole: should not happen)
            data = {}
    running = data.pop("<running>", None)
    if timed_out:
        why = f"the intent run ran past {limit:.0f} s ({TIMEOUT_ENV}; raise it or pass --no-semantic)"
        if running and running.get("node"):
            data[running["node"]] = {"outcome": "timeout", "when": "call", "exc": "", "assertion": False,
                                     "why": f"still running when {why}"}
        data["<timeout>"] = {"outcome": "timeout", "when": "", "exc": "", "assertion": False, "why": why}
        return data
    if rc not in (0, 1, 2, 5) and not data:  # internal/usage error, or killed: no record at all
        raise Dsv4Error(f"pytest could not run the intent tests (exit {rc})",
                        hint="check the Regression-Test / Drop-When ids with `dsv4-patch check`; a negative exit "
                             "is a signal (the intent run was killed: memory?)")
    return data


def _stack_release(stack) -> tuple[str, str | None]:
    """(name, release) of a StackConfig, or of a label `vllm` / `vllm@v0.33.0`."""
    if isinstance(stack, str):
        name, _, release = stack.partition("@")
        return name, release or None
    return stack.name, stack.release


def check(root: Path, stack, tree: Path, patches: list[PatchFile], *, partial: list[str] | None = None,
          ported: dict[str, PatchFile] | None = None, ported_where: str = "", target: str | None = None,
          progress: Progress = None) -> list[Semantic]:
    """Each patch's semantic verdict with `tree` (pristine) standing in for the patched tree; with
    `ported`, a patch the stack already carries for this release is decided by that copy's tests.
    `stack`: the StackConfig whose series is checked (or its label, `vllm@v0.33.0`); `target`: the
    release `tree` is, when it is not that one's own pin (bump), also named to the tests."""
    t0 = time.monotonic()
    name, release = _stack_release(stack)
    label = f"{name}@{release}" if release and not getattr(stack, "primary", False) else name
    ported = ported or {}
    wanted = {p.name: intent_tests(p, ported.get(p.name), ported_where) for p in patches}
    nodes = list(dict.fromkeys(n for ns, _ in wanted.values() for n in ns))
    results: dict[str, dict] = {}
    # a named file that does not exist would stop pytest as a whole (usage error): judge it alone
    nodes = [n for n in nodes if (root / n.split("::", 1)[0]).is_file()]
    if nodes:
        say(progress, f"{label}: {len(nodes)} intent test id(s) on the pristine tree")
        # the variables the dsv4_tree fixture reads for this release (the stack's NAME, never the
        # label: DSV4_TREE_VLLM@V0.33.0 is read by no test), all pointing at the pristine tree
        env = {**release_tree_env(name, release, tree, tree, also=[target] if target else []), INTENT_ENV: "1"}
        if partial is not None:
            env[f"DSV4_PARTIAL_{env_key(name)}"] = os.pathsep.join(partial)
        modules = list(dict.fromkeys(n.split("::", 1)[0] for n in nodes))
        say(progress, f"{label}: intent tests of {len(modules)} module(s), in one pytest run "
            f"(bound {intent_timeout():.0f} s, {TIMEOUT_ENV})")
        results.update(run_intent_tests(root, nodes, env))
        if "<timeout>" in results:
            say(progress, f"{label}: {results['<timeout>']['why']}: unfinished patches get `timeout`")
    out = [judge(p.name, *wanted[p.name], results, tree, partial) for p in patches]
    say(progress, f"{label}: semantic verdicts in {time.monotonic() - t0:.1f} s: "
        + (", ".join(s.verdict for s in out) or "none (0 patches)"))
    return out


def run_on_pristine(root: Path, cfg: StackConfig, base_tree: Path, nodes: list[str], *, log=None) -> dict[str, dict]:
    """The bound ids `nodes` on the pristine tree (it stands in for the patched tree as well), one
    pytest run as the intent run makes it: the plugin's records per collected test. What
    `regress --record` writes into a result file's `pristine` block (pristine.py)."""
    nodes = [n for n in dict.fromkeys(nodes) if (root / n.split("::", 1)[0]).is_file()]
    if not nodes:
        return {}
    env = {**release_tree_env(cfg.name, cfg.release, base_tree, base_tree), INTENT_ENV: "1"}
    if os.environ.get(RESULT_CACHE_ENV) != "0":
        env[RESULT_CACHE_ENV] = "run"  # a record is computed afresh, as `regress --record` computes it
    return run_intent_tests(root, nodes, env, log=log)
