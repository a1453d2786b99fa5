"""Issue 30 item 2: `--out` never is, contains or sits inside the checkout's tracked folders
(patches/, any tracked path, the checkout root); `--force` does not override that."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from synth import git, numbered

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "applypatch.py"
META = "Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _tracked_project(env):
    """The synthetic project as a git checkout (its patches, tests and docs tracked)."""
    (env.root / "tests/sub").mkdir(parents=True, exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    (env.root / "docs").mkdir(exist_ok=True)
    (env.root / "docs/readme.md").write_text("docs\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three", body=META)
    (env.root / ".gitignore").write_text("/build/\n")
    git(env.root, "init", "-q")
    git(env.root, "add", "-A")
    git(env.root, "commit", "-q", "-m", "project")
    return _snapshot(env.root / "patches")


@pytest.mark.parametrize("where", ["patches", "patches/demo", "patches/demo/new", ".", "ROOT", "PARENT",
                                   "tests", "tests/sub/trees", "docs/readme.md", ".git", ".git/trees"])
def test_out_on_tracked_paths_is_refused_even_with_force(env, cli, where):
    before = _tracked_project(env)
    out = {"ROOT": str(env.root), "PARENT": str(env.root.parent)}.get(where, where)
    listing = sorted(os.listdir(env.root))
    for args in (["apply", "demo", "--out", out, "--force"], ["export", "demo", "--out", out],
                 ["regress", "demo", "--out", out]):
        p = subprocess.run([sys.executable, str(TOOL), *args, "--project", str(env.root)], cwd=env.root,
                           capture_output=True, text=True, env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root)})
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --out ") and "Traceback" not in p.stderr, p.stderr
    assert _snapshot(env.root / "patches") == before
    assert sorted(os.listdir(env.root)) == listing  # nothing made (no .dsv4/ in a tracked folder)
    assert not (env.root / "patches/.dsv4").exists() and not (env.root / "patches/demo/.git").exists()


def test_out_outside_the_tracked_paths_still_works(env, cli, tmp_path):
    _tracked_project(env)
    p = subprocess.run([sys.executable, str(TOOL), "apply", "demo", "--out", "trees", "--project", str(env.root)],
                       cwd=env.root, capture_output=True, text=True,
                       env={**os.environ, "DSV4_PATCH_CACHE": str(env.cache.root)})
    assert p.returncode == 0, p.stderr
    assert (env.root / "trees/demo/src/a.py").read_text().count("line three") == 1
    cli(env, "apply", "demo", "--out", str(tmp_path / "elsewhere"), check=0)
    cli(env, "apply", "demo", "--out", str(env.out / "nested"), check=0)  # inside the ignored build/


def test_apply_sglang_out_patches_force_leaves_the_real_patches_intact(tmp_path):
    """The issue's command, on a copy of this checkout's patches/ (a tracked folder there too)."""
    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "patches", proj / "patches")
    git(proj, "init", "-q")
    git(proj, "add", "-A")
    git(proj, "commit", "-q", "-m", "copy")
    before = _snapshot(proj / "patches")
    p = subprocess.run([sys.executable, str(TOOL), "apply", "sglang", "--out", "patches", "--force",
                        "--project", str(proj)], cwd=proj, capture_output=True, text=True,
                       env={**os.environ, "DSV4_PATCH_CACHE": str(tmp_path / "cache")})
    assert p.returncode == 2, p.stderr
    assert "patches" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert _snapshot(proj / "patches") == before
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.whl"))  # nothing fetched
