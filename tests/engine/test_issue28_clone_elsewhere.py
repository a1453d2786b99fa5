"""Issue 28 item 6, the other callers: an explicit `git clone --local` dies where it cannot hard-link
(another file system than the source, a read-only bind-mounted cache) instead of copying. apply
was fixed; bump (its rebased tree) and upstream-ci (its scratch clone) still passed --local.
Every clone now goes through gitcmd.clone_local, which hard-links where it can and copies where
it cannot. /dev/shm (tmpfs) is the other file system here."""

from __future__ import annotations

import ast
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from synth import numbered

from dsv4_patch.bump import BumpOptions, bump
from dsv4_patch.config import load_project
from dsv4_patch.gitcmd import Git

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def elsewhere(env):
    shm = "/dev/shm"
    if not os.path.isdir(shm) or os.stat(shm).st_dev == os.stat(env.tmp).st_dev:
        pytest.skip("no second file system (tmpfs /dev/shm) next to the test folder")
    d = Path(tempfile.mkdtemp(prefix="dsv4-out-", dir=shm))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_bump_with_out_on_another_file_system(env, elsewhere, monkeypatch):
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(env.cache.root))
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.up.write("src/b.txt", numbered(30, "b").replace("b 20\n", "b 20 (upstream)\n"))
    new = env.up.commit("upstream moves on")
    opts = BumpOptions(out=elsewhere / "trees", regress=False, semantic=False)
    rep = bump(load_project(env.root), "demo", new, opts=opts, cache=env.cache)
    assert [o.status for o in rep.outcomes] == ["clean"], rep.outcomes
    tree = elsewhere / "trees" / "demo.bump"
    assert Git(tree).rev("refs/dsv4/base") == new and "line three" in (tree / "src/a.py").read_text()
    assert os.stat(tree).st_dev != os.stat(env.up.path).st_dev


def _clone_calls(path: Path) -> list[int]:
    """Lines of `<x>.run("clone", ...)` calls in a module (the git clone itself)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("run", "out")
                and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "clone"):
            found.append(node.lineno)
    return found


def test_every_clone_goes_through_the_one_helper():
    """upstream-ci's scratch clone (cache -> OUT tree) is not run here (it needs a provider's lint
    and test set-up); what holds it is that no module calls `git clone` by itself."""
    offenders = {str(p.relative_to(ROOT)): lines for p in sorted((ROOT / "dsv4_patch").rglob("*.py"))
                 if p.name != "gitcmd.py" and (lines := _clone_calls(p))}
    assert offenders == {}, f"git clone outside gitcmd.clone_local: {offenders}"
