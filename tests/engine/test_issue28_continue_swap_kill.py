"""Issue 28: a SIGKILL inside `apply --continue`'s swap (the journal write, the two renames that
replace OUT/<stack> by the resolved tree in OUT/.dsv4/failed/<stack>, the journal's removal and
the old tree's: every write, rename and removal of OutDir.swap_in under --continue). The next run (`apply --continue` again, as the person would,
then a plain `apply`) must end with the resolved tree in OUT/<stack>, the resolution remembered,
each patch committed once, nothing left in OUT/.dsv4 and no traceback: nothing the person made is
lost. Deterministic: the kill points are counted, each one is visited once."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from synth import git
from test_safety_kill import leftovers
from test_safety_newpaths import _apply, _private_cache, _resolve_by_hand, _stack_that_conflicts  # noqa: F401

from dsv4_patch.errors import Dsv4Error, UsageError

ROOT = Path(__file__).resolve().parents[2]

KILLER = textwrap.dedent("""
    import os, shutil, signal, sys
    sys.path[:0] = [{root!r}]
    from pathlib import Path
    from dsv4_patch import api, atomicio, outdir
    from dsv4_patch.config import load_project
    point, seen, armed = int(sys.argv[1]), [0], [False]

    def tick(label):
        if not armed[0]:
            return
        seen[0] += 1
        if seen[0] == point:
            print(label, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    real_write, real_replace, real_unlink, real_rmtree = atomicio._write_all, os.replace, os.unlink, shutil.rmtree

    def write_all(fd, data):  # a torn write: half the bytes, then the kill
        seen[0] += armed[0]
        if armed[0] and seen[0] == point:
            os.write(fd, data[: len(data) // 2])
            print("torn write", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        real_write(fd, data)

    def replace(a, b, **kw):
        tick(f"before rename {{Path(a).parent.name}}/{{Path(a).name}} -> {{Path(b).parent.name}}/{{Path(b).name}}")
        real_replace(a, b, **kw)
        tick(f"after rename {{Path(a).parent.name}}/{{Path(a).name}} -> {{Path(b).parent.name}}/{{Path(b).name}}")

    def unlink(p, **kw):
        if "dir_fd" not in kw:  # (not the files shutil.rmtree removes one by one)
            tick(f"before unlink {{Path(p).name}}")
        real_unlink(p, **kw)

    def rmtree(p, *a, **kw):
        tick(f"before rmtree {{Path(p).name}}")
        real_rmtree(p, *a, **kw)

    real_swap = outdir.OutDir.swap_in

    def swap_in(*a, **kw):  # the kill points: every write, rename and removal of the swap
        armed[0] = True
        return real_swap(*a, **kw)

    project = load_project({proj!r})
    atomicio._write_all, os.replace, os.unlink, shutil.rmtree = write_all, replace, unlink, rmtree
    outdir.OutDir.swap_in = swap_in
    api.apply(project, ["demo"], out=Path({out!r}), resume=True)
""")


def test_a_kill_at_every_step_of_the_continue_swap(env):
    failed = _stack_that_conflicts(env)  # OUT/demo holds the tree at the old pin: the swap replaces it
    _resolve_by_hand(failed)
    saved_out, saved_patches = env.tmp / "saved-out", env.tmp / "saved-patches"
    shutil.copytree(env.out, saved_out, symlinks=True)
    shutil.copytree(env.root / "patches", saved_patches, symlinks=True)
    code = KILLER.format(root=str(ROOT), proj=str(env.root), out=str(env.out))
    steps, outcomes = [], {}
    for point in range(1, 80):
        for live, saved in ((env.out, saved_out), (env.root / "patches", saved_patches)):
            shutil.rmtree(live)
            shutil.copytree(saved, live, symlinks=True)
        p = subprocess.run([sys.executable, "-c", code, str(point)], capture_output=True, text=True)
        if p.returncode == 0:
            break  # every kill point was visited
        assert p.returncode == -9, p.stderr[-3000:]
        step = p.stdout.strip().splitlines()[-1]
        steps.append(step)
        try:  # the person runs --continue again
            _apply(env, resume=True)
            how = "continued"
        except UsageError as e:  # nothing left to continue: the killed run had finished the swap
            assert "no stopped apply" in e.one_line(), (step, e.one_line())
            how = "already done"
        except Dsv4Error as e:
            raise AssertionError(f"{step}: the next --continue failed: {e.one_line()}") from None
        outcomes[how] = outcomes.get(how, 0) + 1
        tree = env.out / "demo"
        log = git(tree, "log", "--format=%s", "refs/dsv4/base..HEAD").split("\n")
        assert log[:2] == ["[DSV4] Seven", "[DSV4] Three"], (step, log)
        assert "line three (upstream)" in (tree / "src/a.py").read_text(), step
        assert git(tree, "status", "--porcelain") == "", step
        assert list((env.root / "patches/demo/resolutions").rglob("*.patch")), step
        assert not failed.exists(), step
        assert _apply(env)[0].status == "noop", step
        assert leftovers(env.out) == [], (step, leftovers(env.out))  # (an old tree goes at the next locked run)
    else:
        raise AssertionError("--continue never completed")
    labels = "\n".join(steps)
    print(f"{len(steps)} kill points ({outcomes}):\n{labels}")
    assert "-> demo/demo" not in labels  # (names below are relative: failed/demo -> build/demo)
    assert any(s.startswith("before rename demo/demo -> .dsv4/old-demo") or "-> .dsv4/old-demo" in s for s in steps), labels
    assert any(s.startswith("after rename failed/demo -> build/demo") for s in steps), labels
    assert any("swap-demo.json" in s for s in steps), labels
