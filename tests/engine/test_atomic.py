"""Nothing half-done: a killed apply is recovered by the next run; concurrent applies serialize."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from synth import numbered

from dsv4_patch.gitcmd import Git

ROOT = Path(__file__).resolve().parents[2]

KILLER = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = [{root!r}]
    from dsv4_patch import outdir, tree
    from dsv4_patch.config import load_project
    from dsv4_patch.sources import Cache
    where = sys.argv[1]
    if where == "swap":      # die between the two renames of the swap
        real = os.replace
        calls = []
        def replace(a, b):
            real(a, b)
            if os.path.isdir(b):  # a tree moved (the journal is a file renamed into place first)
                calls.append(a)
            if len(calls) == 1:
                os.kill(os.getpid(), signal.SIGKILL)
        outdir.os.replace = replace
    elif where == "am":      # die while the commits are made (git am or fast-import), staging half-built
        real_am = tree._am
        def am(*a, **k):
            os.kill(os.getpid(), signal.SIGKILL)
        tree._am = am
        tree.incremental.fast_commits = am
    stack = load_project({proj!r}).stack("demo")
    tree.build_tree(stack, {out!r}, cache=Cache({cache!r}), force=True)
""")


def run_killed(env, where: str) -> int:
    (env.out / "demo" / "stray.txt").write_text("x\n")  # not pristine: the forced apply really rebuilds
    code = KILLER.format(root=str(ROOT), proj=str(env.root), out=str(env.out), cache=str(env.cache.root))
    return subprocess.run([sys.executable, "-c", code, where]).returncode


def test_killed_during_swap_is_completed_by_the_next_run(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.author({"src/b.txt": numbered(30, "b").replace("b 3\n", "b three\n")}, "[DSV4] Bee")
    assert run_killed(env, "swap") == -9
    assert not (env.out / "demo").exists()  # the kill really landed between the renames
    assert list((env.out / ".dsv4").glob("swap-*.json"))
    res = env.apply()
    assert res.status == "noop"  # the journal completed the swap: the new tree was complete
    assert not list((env.out / ".dsv4").glob("swap-*.json")) and not list((env.out / ".dsv4").glob("old-*"))
    assert len(Git(res.tree).out("log", "--format=%H", "refs/dsv4/base..HEAD").split()) == 2


def test_killed_during_am_leaves_the_previous_tree_and_no_staging(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    before = Git(env.out / "demo").rev("HEAD")
    assert run_killed(env, "am") == -9
    assert Git(env.out / "demo").rev("HEAD") == before
    assert any((env.out / ".dsv4/staging").iterdir())  # the half tree exists until the next run
    env.apply(force=True)
    assert not (env.out / ".dsv4/staging").exists() or not any((env.out / ".dsv4/staging").iterdir())


def test_two_concurrent_applies_serialize_and_agree(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    code = (f"import sys, json; sys.path[:0]=[{str(ROOT)!r}]\n"
            "from dsv4_patch.config import load_project\nfrom dsv4_patch.sources import Cache\n"
            "from dsv4_patch.tree import build_tree\n"
            f"r = build_tree(load_project({str(env.root)!r}).stack('demo'), {str(env.out)!r}, "
            f"cache=Cache({str(env.cache.root)!r}), force=True)\nprint(json.dumps(r.to_dict()))")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0]["commits"] == outs[1]["commits"]
    assert {o["status"] for o in outs} <= {"applied", "noop"}
    assert Git(env.out / "demo").out("status", "--porcelain") == ""


def test_threads_in_one_process_do_not_corrupt_the_tree(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    (env.out / "demo" / "stray.txt").write_text("x\n")  # not pristine: the first --force rebuilds
    errors = []

    def go():
        try:
            env.apply(force=True)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=go) for _ in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors
    assert "line three" in (env.out / "demo/src/a.py").read_text()
    assert os.listdir(env.out) == ["demo", ".dsv4"] or sorted(os.listdir(env.out)) == [".dsv4", "demo"]
