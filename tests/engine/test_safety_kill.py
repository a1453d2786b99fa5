"""Issue 11: SIGKILL at each step of the swap (torn journal/state writes, between the renames,
around the journal's removal) and of the incremental in-place switch. After each kill the next run finds the old tree or the new one,
never a mix, and a rerun of apply succeeds with nothing left behind."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from synth import numbered

from dsv4_patch.gitcmd import Git
from dsv4_patch.outdir import OutDir
from dsv4_patch import incremental
from dsv4_patch.tree import read_state, write_state

ROOT = Path(__file__).resolve().parents[2]

KILLER = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = [{root!r}]
    from dsv4_patch import atomicio, tree
    from dsv4_patch.config import load_project
    from dsv4_patch.sources import Cache
    point, seen = int(sys.argv[1]), [0]
    if sys.argv[2] == "swap":  # a full rebuild swapped in (no in-place incremental switch)
        tree._apply_incrementally = lambda *a, **k: None

    def tick(label):
        seen[0] += 1
        if seen[0] == point:
            print(label, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    real_write, real_replace, real_unlink = atomicio._write_all, os.replace, os.unlink

    def write_all(fd, data):  # torn write: half the bytes reach the temp file, then the kill
        seen[0] += 1
        if seen[0] == point:
            os.write(fd, data[: len(data) // 2])
            print("torn write", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        real_write(fd, data)

    def replace(a, b, **kw):
        tick(f"before rename {{os.path.basename(a)}} -> {{os.path.basename(b)}}")
        real_replace(a, b, **kw)

    def unlink(p, **kw):
        journal = str(p).endswith((".json",)) and ("swap-" in str(p) or str(p).endswith("switch.json"))
        if journal:
            tick("before journal removal")
        real_unlink(p, **kw)
        if journal:
            tick("after journal removal")

    # loaded before the hooks: the kill points are the build's, not the stacks.toml memo's (whose first
    # write, in a cache no earlier run warmed, would shift every point by one)
    stack = load_project({proj!r}).stack("demo")
    atomicio._write_all, os.replace, os.unlink = write_all, replace, unlink
    tree.build_tree(stack, {out!r}, cache=Cache({cache!r}))
""")


def leftovers(out: Path) -> list[str]:
    meta = out / ".dsv4"
    found = [p.name for p in meta.glob("swap-*")] + [p.name for p in meta.glob(".swap-*")]
    found += [p.name for p in meta.glob("old-*")]
    staging = meta / "staging"
    found += [p.name for p in staging.iterdir()] if staging.exists() else []
    return found


@pytest.mark.parametrize("mode", ["swap", "in-place"])
def test_kill_at_every_step_of_the_swap(env, mode):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    patch = env.stack.patch_dir / "three.patch"
    versions = [patch.read_bytes()]
    versions.append(versions[0].replace(b"Why and how.", b"Why and how, reworded."))
    heads = []
    for v in versions:  # the HEAD each version gives (commit hashes are deterministic)
        patch.write_bytes(v)
        heads.append(Git(env.rebuild().tree).rev("HEAD"))
    assert heads[0] != heads[1]
    current = 1  # the tree now holds versions[1]
    code = KILLER.format(root=str(ROOT), proj=str(env.root), out=str(env.out), cache=str(env.cache.root))
    steps = []
    for point in range(1, 20):
        new = 1 - current
        patch.write_bytes(versions[new])
        p = subprocess.run([sys.executable, "-c", code, str(point), mode], capture_output=True, text=True)
        if p.returncode == 0:
            break  # every step was visited
        assert p.returncode == -9, p.stderr
        steps.append(p.stdout.strip())
        tree = env.out / "demo"
        with OutDir(env.out).locked():  # what the next run sees after its recovery
            if tree.exists():  # an in-place switch (the incremental apply) is completed too
                incremental.recover(tree, write_state)
        assert tree.exists(), steps[-1]
        head = Git(tree).rev("HEAD")
        assert head in (heads[current], heads[new]), steps[-1]
        assert read_state(tree)["tip"] == head, steps[-1]  # state and tree agree
        assert Git(tree).out("status", "--porcelain") == ""
        res = env.apply()  # no --force: the recovered tree is clean
        assert Git(res.tree).rev("HEAD") == heads[new], steps[-1]
        assert leftovers(env.out) == [], (steps[-1], leftovers(env.out))
        current = new
    else:
        raise AssertionError("the build never completed")
    labels = "\n".join(steps)
    print(f"{len(steps)} kill points:\n{labels}")
    # the steps the promise is about were all hit
    assert "torn write" in labels and "before journal removal" in labels and "after journal removal" in labels
    if mode == "swap":
        assert any("-> old-demo" in s for s in steps), labels
        assert any(s.endswith("-> demo") for s in steps), labels
    else:
        assert any("-> switch.json" in s for s in steps), labels
