"""The semantic step's child pytest (issue 26): it shares the stack lock the bump holds (no deadlock)
while an unrelated process still waits; it gets the pristine tree through the variables the
`dsv4_tree` fixture reads for the release being bumped (`demo@v2`: DSV4_TREE_DEMO, not
DSV4_TREE_DEMO@V2); and a run past its bound gives the unfinished patch `timeout`, the others their
verdicts, instead of stopping the bump."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bumpkit import edit
from synth import author_commit, git, numbered
from test_releases import release_table

from dsv4_patch.bump import BumpOptions, bump
from dsv4_patch.bump.report import bump_markdown
from dsv4_patch.config import load_project
from dsv4_patch.exporter import export_stack
from dsv4_patch.locks import INHERIT_ENV, child_spawn, stack_lock
from dsv4_patch.tree import build_tree

ENGINE = str(Path(__file__).resolve().parents[2])


def _meta(*tests: str) -> str:
    return "Why and how.\n\nUpstream-Status: Pending\n" + "".join(f"Regression-Test: {t}\n" for t in tests)


def _taker(root: Path) -> str:
    """A python -c program that takes the demo stack's lock and says so."""
    return (f"import sys; sys.path[:0] = [{ENGINE!r}]\n"
            "from dsv4_patch.locks import stack_lock\nfrom dsv4_patch.config import load_project\n"
            f"with stack_lock(load_project({str(root)!r}).stack('demo')):\n    print('got it', flush=True)\n")


def test_a_child_handed_the_lock_shares_it_and_an_unrelated_process_waits(benv):
    code = _taker(benv.root)
    with stack_lock(benv.stack):
        extra, fds = child_spawn()
        assert fds and json.loads(extra[INHERIT_ENV])["pid"] == os.getpid()
        t0 = time.monotonic()
        child = subprocess.run([sys.executable, "-c", code], env={**os.environ, **extra}, pass_fds=fds,
                               capture_output=True, text=True, timeout=60)
        assert child.stdout.strip() == "got it", child.stderr
        assert time.monotonic() - t0 < 30  # it did not wait for us
        # the same variable in a process not handed the descriptor: it waits, and the child's exit
        # above did not let go of our lock either
        other = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **extra},
                                 stdout=subprocess.PIPE, text=True)
        time.sleep(1.5)
        assert other.poll() is None
    assert other.communicate(timeout=60)[0].strip() == "got it"
    # nothing held: nothing passed on (and an inherited variable is cleared for the next child)
    assert child_spawn() == ({INHERIT_ENV: ""}, ())


# Intent tests of the synthetic project: they see the tree the tool hands them through the
# fixture's own lookup (dsv4_patch.api.tree_for_tests), as tests/conftest.py's dsv4_tree does.
INTENT = '''
import json
import os
import subprocess
import time
from pathlib import Path

from dsv4_patch.api import ensure_tree, tree_for_tests

ROOT = Path(__file__).resolve().parents[1]


def test_line10_fixed():
    # builds the patched tree of the stack being bumped (takes its stack lock) before looking
    ensure_tree(ROOT, "demo")
    tree = tree_for_tests(ROOT, "demo", patched=True)
    assert "fixed" in (tree / "src/a.py").read_text().splitlines()[9]


def test_sees_the_release_trees():
    seen = {k: v for k, v in os.environ.items() if k.startswith(("DSV4_TREE_DEMO", "DSV4_BASE_DEMO", "DSV4_RELEASE_DEMO"))}
    seen["fixture"] = str(tree_for_tests(ROOT, "demo"))
    seen["fixture_v2"] = str(tree_for_tests(ROOT, "demo", release="v2"))
    Path(os.environ["SEEN_FILE"]).write_text(json.dumps(seen))
    assert "line 20 p2" in (Path(seen["fixture_v2"]) / "src/a.py").read_text()


def test_hangs():
    p = subprocess.Popen(["sleep", "300"])
    Path(os.environ["SLEEP_PID"]).write_text(str(p.pid))
    time.sleep(300)
'''


def test_the_intent_child_builds_a_tree_of_the_bumped_stack_without_deadlock(benv, monkeypatch):
    """Before: the child's tree build waited on the lock its parent bump held, until the intent
    timeout (then 1800 s per module) stopped the whole bump."""
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(benv.cache.root))
    monkeypatch.setenv("DSV4_INTENT_TIMEOUT", "90")
    (benv.root / "tests").mkdir()
    (benv.root / "tests/test_intent.py").write_text(INTENT)
    benv.author({"src/a.py": edit(numbered(60), "line 10\n", "line 10 fixed\n")}, "[DSV4] p1 fix",
                body=_meta("tests/test_intent.py::test_line10_fixed"))
    benv.up.write("src/a.py", edit(numbered(60), "line 50\n", "line 50 moved\n"))
    t0 = time.monotonic()
    rep = bump(load_project(benv.root), "demo", benv.up.commit("v2"), opts=BumpOptions(regress=False, out=benv.out),
               cache=benv.cache)
    [sem] = rep.semantic
    assert sem.verdict == "needed", sem  # the child built build/demo (patched) and then read the pristine tree
    assert (benv.out / "demo/src/a.py").read_text().splitlines()[9] == "line 10 fixed"
    assert time.monotonic() - t0 < 80


def _release_v2(benv) -> str:
    """demo@v2: its own pin (upstream commit tagged v2) and series, one patch tagging line 20."""
    (benv.root / "tests").mkdir(exist_ok=True)
    (benv.root / "tests/test_intent.py").write_text(INTENT)
    benv.up.write("src/b.txt", "top\n" + numbered(30, "b"))
    v2 = benv.up.commit("v2")
    git(benv.up.path, "tag", "v2")
    toml = benv.root / "patches/stacks.toml"
    toml.write_text(toml.read_text() + release_table(v2, benv.up.path))
    (benv.root / "patches/demo/releases/v2").mkdir(parents=True)
    (benv.root / "patches/demo/releases/v2/series").write_text("# v2 series\n")
    rel = load_project(benv.root).target("demo@v2")
    tree = build_tree(rel, benv.out, cache=benv.cache).tree
    author_commit(tree, {"src/a.py": edit(numbered(60), "line 20\n", "line 20 p2\n")}, "[DSV4] p2 tag",
                  _meta("tests/test_intent.py::test_sees_the_release_trees"))
    export_stack(rel, tree)
    benv.up.write("src/c.txt", "new in v3\n")
    v3 = benv.up.commit("v3")
    git(benv.up.path, "tag", "v3")
    return v3


def test_a_release_bump_hands_its_tests_the_pristine_tree_by_the_stack_name(benv, monkeypatch, tmp_path):
    """`bump demo@v2 v3`: the variables are DSV4_TREE_DEMO, DSV4_TREE_DEMO__V2 (and __V3) with
    DSV4_RELEASE_DEMO=v2, all the pristine v3; before, the tool set DSV4_TREE_DEMO@V2, which no
    test reads, and the fixture fell back to the patched v2 tree (the patch looked fixed upstream)."""
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(benv.cache.root))
    monkeypatch.setenv("SEEN_FILE", str(tmp_path / "seen.json"))
    monkeypatch.setenv("DSV4_INTENT_TIMEOUT", "90")
    _release_v2(benv)
    rep = bump(load_project(benv.root), "demo@v2", "v3", opts=BumpOptions(regress=False, out=benv.out),
               cache=benv.cache)
    [sem] = rep.semantic
    seen = json.loads((tmp_path / "seen.json").read_text())
    pristine = str(benv.out / "demo@v2.bump-upstream")
    assert seen["fixture"] == seen["fixture_v2"] == pristine, seen
    assert seen["DSV4_TREE_DEMO"] == seen["DSV4_TREE_DEMO__V2"] == seen["DSV4_TREE_DEMO__V3"] == pristine
    assert seen["DSV4_BASE_DEMO"] == pristine and seen["DSV4_RELEASE_DEMO"] == "v2"
    assert not any("@" in k for k in seen)
    assert sem.verdict == "needed", sem  # the pristine v3 lacks the patch's line: still needed


def test_an_intent_run_past_its_bound_gives_the_unfinished_patch_timeout(benv, monkeypatch, tmp_path):
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(benv.cache.root))
    monkeypatch.setenv("DSV4_INTENT_TIMEOUT", "8")
    monkeypatch.setenv("SLEEP_PID", str(tmp_path / "sleep.pid"))
    (benv.root / "tests").mkdir()
    (benv.root / "tests/test_intent.py").write_text(INTENT.replace("    ensure_tree(ROOT, \"demo\")\n", ""))
    a = edit(numbered(60), "line 10\n", "line 10 fixed\n")
    benv.author({"src/a.py": a}, "[DSV4] p1 fix", body=_meta("tests/test_intent.py::test_line10_fixed"))
    benv.author({"src/a.py": edit(a, "line 30\n", "line 30 p3\n")}, "[DSV4] p3 hangs",
                body=_meta("tests/test_intent.py::test_hangs"))
    benv.up.write("src/a.py", edit(numbered(60), "line 50\n", "line 50 moved\n"))
    t0 = time.monotonic()
    rep = bump(load_project(benv.root), "demo", benv.up.commit("v2"), opts=BumpOptions(regress=False, out=benv.out),
               cache=benv.cache)
    took = time.monotonic() - t0
    fix, hang = rep.semantic
    assert fix.verdict == "needed" and hang.verdict == "timeout", (fix, hang)
    assert "DSV4_INTENT_TIMEOUT" in hang.reason and "test_hangs" in hang.reason
    assert took < 60, took
    pid = int((tmp_path / "sleep.pid").read_text())
    time.sleep(0.5)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3], \
        "the run's own children are stopped with it"
    assert rep.status == "ok" and rep.result == "unverified" and rep.exit_code == 4
    assert "timeout" in rep.unverified[hang.patch][0]
    assert "**timeout**" in bump_markdown(rep)


RUN_SEEN = '''
import os
from pathlib import Path


def test_records_its_run():
    with open(os.environ["RUNS_FILE"], "a") as f:
        f.write(f"{os.environ.get('DSV4_TEST_RUN_DIR')} {os.environ.get('DSV4_SEED')}\\n")
    assert "fixed" in Path(os.environ["DSV4_TREE_DEMO"], "src/a.py").read_text().splitlines()[9]
'''


def test_the_intent_run_and_the_regression_run_of_one_bump_are_one_test_run(benv, monkeypatch, tmp_path):
    """One scratch folder and one seed for both children of a bump: the pristine checks the intent
    run computed are the ones the regression run's unpatched-tree tests ask for again. The outer
    test run's own folder and seed are taken away first: a bump run by hand has neither."""
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(benv.cache.root))
    monkeypatch.setenv("RUNS_FILE", str(tmp_path / "runs.txt"))
    monkeypatch.delenv("DSV4_TEST_RUN_DIR", raising=False)
    monkeypatch.delenv("DSV4_SEED", raising=False)
    (benv.root / "tests").mkdir()
    (benv.root / "tests/test_runs.py").write_text(RUN_SEEN)
    benv.author({"src/a.py": edit(numbered(60), "line 10\n", "line 10 fixed\n")}, "[DSV4] p1 fix",
                body=_meta("tests/test_runs.py::test_records_its_run"))
    benv.up.write("src/a.py", edit(numbered(60), "line 50\n", "line 50 moved\n"))
    rep = bump(load_project(benv.root), "demo", benv.up.commit("v2"), opts=BumpOptions(out=benv.out), cache=benv.cache)
    assert rep.semantic[0].verdict == "needed" and rep.regress["ok"], (rep.semantic, rep.regress)
    runs = (tmp_path / "runs.txt").read_text().split("\n")[:-1]
    assert len(runs) == 2, runs  # the intent run (pristine: the test fails there) and the regression run
    (run_dir, seed), (run_dir2, seed2) = (r.split() for r in runs)
    assert (run_dir, seed) == (run_dir2, seed2) and seed.isdigit(), runs
    assert rep.seed == seed and f"DSV4_SEED={seed}" in bump_markdown(rep)  # how to draw the same inputs again
    assert not Path(run_dir).exists()  # the bump's own folder goes with it
    assert "DSV4_TEST_RUN_DIR" not in os.environ and "DSV4_SEED" not in os.environ  # nothing left behind


def test_one_test_run_keeps_what_the_caller_set_and_adds_only_what_is_missing(monkeypatch, tmp_path):
    from dsv4_patch.regress import one_test_run

    monkeypatch.setenv("DSV4_TEST_RUN_DIR", str(tmp_path))  # a run folder, no seed: the seed is drawn
    monkeypatch.delenv("DSV4_SEED", raising=False)
    with one_test_run():
        assert os.environ["DSV4_TEST_RUN_DIR"] == str(tmp_path) and os.environ["DSV4_SEED"].isdigit()
    assert "DSV4_SEED" not in os.environ and os.environ["DSV4_TEST_RUN_DIR"] == str(tmp_path)
    monkeypatch.delenv("DSV4_TEST_RUN_DIR")  # a seed, no folder: a folder is made, the seed kept
    monkeypatch.setenv("DSV4_SEED", "7")
    try:
        with one_test_run():
            made = os.environ["DSV4_TEST_RUN_DIR"]
            assert Path(made).is_dir() and os.environ["DSV4_SEED"] == "7"
            raise KeyboardInterrupt  # however the block ends
    except KeyboardInterrupt:
        pass
    assert not Path(made).exists() and "DSV4_TEST_RUN_DIR" not in os.environ and os.environ["DSV4_SEED"] == "7"
