"""ci/pr_check.py over a stack carried on two releases (synthetic upstream)."""

from __future__ import annotations

from test_releases import two_releases

from ci import pr_check
from dsv4_patch.config import load_project
from dsv4_patch.pinning import set_keys


def test_pr_check_covers_every_release(env, monkeypatch):
    two_releases(env)
    monkeypatch.setenv("EXPECT_PRIMARY", env.stack.release)
    lines: list[str] = []
    assert pr_check.run(env.root, ["check", "apply", "export", "regress"], None, None, emit=lines.append) == 0, lines
    assert lines == []
    assert (env.out / "demo").is_dir() and (env.out / "demo@v2").is_dir()


def test_a_release_that_does_not_apply_is_annotated_on_its_own_patch(env):
    two_releases(env)
    proj = load_project(env.root)
    rel = proj.target("demo@v2")
    # v2's patch edits src/c.txt, which the primary's base does not have
    proj.config_path.write_text(set_keys(proj.config_path.read_text(), rel.table, {"commit": env.base}))
    lines: list[str] = []
    assert pr_check.run(env.root, ["apply"], None, None, emit=lines.append) == 1
    assert len(lines) == 1 and lines[0].startswith("::error file=patches/demo/releases/v2/cee.patch,"), lines
    lines.clear()
    assert pr_check.run(env.root, ["apply"], None, None, emit=lines.append, releases=[env.stack.release]) == 0
    assert lines == []
