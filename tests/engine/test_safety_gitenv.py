"""Issue 11 item 10: the caller's git environment never reaches the engine's git calls."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from synth import git, numbered

from dsv4_patch.gitcmd import Git

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "applypatch.py"


def test_git_dir_work_tree_and_index_of_the_caller_are_ignored(env, tmp_path, monkeypatch):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.autocrlf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "true")
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'diff.noprefix'='true'")
    res = env.rebuild()
    assert len(res.commits) == 1
    assert Git(res.tree).out("rev-parse", "--show-toplevel") == str(res.tree)
    assert not env.export(check=True).stale
    assert not (other / ".git" / "refs" / "dsv4").exists()


def test_template_hooks_do_not_run_and_symlinks_stay_links(env, tmp_path, monkeypatch):
    env.up.write("src/a.py", numbered(60))
    os.symlink("a.py", env.up.path / "src/link.py")
    env.repin(env.up.commit("with a symlink"))
    tpl = tmp_path / "tpl" / "hooks"
    tpl.mkdir(parents=True)
    marker = tmp_path / "hook-ran"
    for hook in ("post-checkout", "applypatch-msg", "pre-applypatch", "post-applypatch", "post-commit"):
        h = tpl / hook
        h.write_text(f"#!/bin/sh\ntouch {marker}\n")
        h.chmod(h.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("GIT_TEMPLATE_DIR", str(tpl.parent))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.symlinks")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "false")
    env.author({"src/b.txt": numbered(30, "b").replace("b 3\n", "b three\n")}, "[DSV4] Bee")
    res = env.rebuild()
    assert (res.tree / "src/link.py").is_symlink()
    assert not marker.exists()


def test_project_pre_commit_hook_runs_under_git_commit_a(env):
    """The project's own hooks (check, export --check) run inside `git commit -a`, where git sets
    GIT_INDEX_FILE (and GIT_DIR for some commands) for the project's repository."""
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    proj = env.root
    (proj / ".gitignore").write_text("build/\n")
    git(proj, "init", "-q")
    git(proj, "add", "-A")
    git(proj, "commit", "-q", "-m", "project")
    hook = proj / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!/bin/sh\nset -e\n{sys.executable} {TOOL} export demo --check --project {proj}\n")
    hook.chmod(0o755)
    (proj / "patches" / "demo" / "series").write_text((proj / "patches" / "demo" / "series").read_text() + "# x\n")
    p = subprocess.run(["git", "commit", "-a", "-q", "-m", "edit"], cwd=proj, capture_output=True, text=True,
                       env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                            "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "a",
                            "GIT_COMMITTER_EMAIL": "a@x", "DSV4_PATCH_CACHE": str(env.cache.root)})
    assert "Traceback" not in p.stderr, p.stderr
    # the series comment changed, so export --check reports stale (exit 1) with one line, never a crash
    assert p.returncode != 0 and "stale" in p.stderr, p.stdout + p.stderr
