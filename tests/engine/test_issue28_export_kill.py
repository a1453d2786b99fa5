"""Issue 28, export: a SIGKILL at each write of an export (a torn temporary file, before and after
each rename: the changed patch, a new patch, the series). The next export (no --force) writes the
files a clean export writes, and leaves no `.<name>.tmp-<pid>` behind in patches/ (a killed export
left them there for good: hidden junk in the checkout). Deterministic: every point once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from synth import author_commit, numbered

from dsv4_patch.exporter import export_stack

ROOT = Path(__file__).resolve().parents[2]

KILLER = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = [{root!r}]
    from pathlib import Path
    from dsv4_patch import atomicio
    from dsv4_patch.config import load_project
    from dsv4_patch.exporter import export_stack
    point, seen = int(sys.argv[1]), [0]
    real_write, real_replace = atomicio._write_all, os.replace

    def kill(label):
        print(label, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    def write_all(fd, data):
        seen[0] += 1
        if seen[0] == point:
            os.write(fd, data[: len(data) // 2])
            kill("torn write")
        real_write(fd, data)

    def replace(a, b, **kw):
        seen[0] += 1
        if seen[0] == point:
            kill(f"before rename -> {{Path(b).name}}")
        real_replace(a, b, **kw)
        seen[0] += 1
        if seen[0] == point:
            kill(f"after rename -> {{Path(b).name}}")

    stack = load_project({proj!r}).stack("demo")
    atomicio._write_all, os.replace = write_all, replace
    export_stack(stack, Path({tree!r}))
""")


def _files(root: Path) -> dict:
    return {p.relative_to(root): p.read_bytes() for p in sorted((root / "patches").rglob("*")) if p.is_file()}


def test_a_kill_at_every_write_of_export(env, monkeypatch):
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(env.cache.root))
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    tree = env.apply(force=True).tree
    # a new commit, then the last one reworded: export writes a new patch file and the series
    author_commit(tree, {"src/new.py": "N = 1\n"}, "[DSV4] New one", "Why and how.\n\nSigned-off-by: Pat Cher <pat@example.com>\n")
    saved_patches, saved_tree = env.tmp / "saved-patches", env.tmp / "saved-tree"
    shutil.copytree(env.root / "patches", saved_patches, symlinks=True)
    shutil.copytree(tree, saved_tree, symlinks=True)
    export_stack(env.stack, tree)
    want = _files(env.root)
    code = KILLER.format(root=str(ROOT), proj=str(env.root), tree=str(tree))
    steps = []
    for point in range(1, 40):
        for live, saved in ((env.root / "patches", saved_patches), (tree, saved_tree)):
            shutil.rmtree(live)
            shutil.copytree(saved, live, symlinks=True)
        p = subprocess.run([sys.executable, "-c", code, str(point)], capture_output=True, text=True,
                           env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root)})
        if p.returncode == 0:
            break
        assert p.returncode == -9, p.stderr[-2000:]
        steps.append(p.stdout.strip())
        export_stack(env.stack, tree)  # the next export, no --force
        assert _files(env.root) == want, steps[-1]
    else:
        raise AssertionError("export never completed")
    labels = "\n".join(steps)
    print(f"{len(steps)} kill points:\n{labels}")
    assert "torn write" in labels and "before rename -> series" in labels and "after rename -> new-one.patch" in labels
