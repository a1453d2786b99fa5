"""Issue 11 items 2, 6, 8: export never loses patches, writes only files that re-apply, and only
inside the stack's folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from synth import author_commit, git, numbered

from dsv4_patch import api
from dsv4_patch.config import load_project
from dsv4_patch.errors import ConflictError, Dsv4Error
from dsv4_patch.lint import lint_stack

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "applypatch.py"


def two(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.author({"src/b.txt": numbered(30, "b").replace("b 3\n", "b three\n")}, "[DSV4] Bee")


def export(env, **kw):
    return api.export(load_project(env.root), "demo", out=env.out, **kw)


def test_export_from_a_failed_tree_refuses_and_deletes_nothing(env):
    two(env)
    before = env.patch_bytes()
    env.up.write("src/b.txt", numbered(30, "B"))  # the second patch no longer applies
    env.repin(env.up.commit("conflicting upstream"))
    with pytest.raises(ConflictError) as ei:
        env.rebuild()
    failed = Path(ei.value.report.failed_tree)
    with pytest.raises(Dsv4Error, match="in progress") as ei2:
        export(env, tree=failed)
    assert "\n" not in ei2.value.one_line()
    assert env.patch_bytes() == before
    p = subprocess.run([sys.executable, str(TOOL), "export", "demo", "--tree", str(failed), "--project", str(env.root)],
                       capture_output=True, text=True)
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert env.patch_bytes() == before


def test_export_of_a_tree_built_on_another_pin_refuses(env):
    two(env)
    before = env.patch_bytes()
    env.up.write("src/c.txt", "new upstream file\n")
    env.repin(env.up.commit("newer upstream"))
    with pytest.raises(Dsv4Error, match="pinned to"):
        export(env)
    assert env.patch_bytes() == before


def test_export_of_a_base_tree_refuses(env):
    two(env)
    before = env.patch_bytes()
    res = env.apply(name="demo.base", upto=0, force=True)
    with pytest.raises(Dsv4Error, match="first 0 patches"):
        export(env, tree=res.tree)
    assert env.patch_bytes() == before


def test_export_of_a_tree_not_made_by_apply_refuses(env, tmp_path):
    two(env)
    before = env.patch_bytes()
    with pytest.raises(Dsv4Error, match="not built by"):
        export(env, tree=env.up.path)
    assert env.patch_bytes() == before


def test_removal_needs_the_file_named(env):
    two(env)
    git(env.out / "demo", "reset", "-q", "--hard", "HEAD~1")
    with pytest.raises(Dsv4Error, match="bee.patch"):
        export(env)
    assert (env.stack.patch_dir / "bee.patch").exists()
    with pytest.raises(Dsv4Error, match="--remove three.patch: not a patch"):
        export(env, remove=("bee.patch", "three.patch"))
    export(env, remove=("bee.patch",))
    assert not (env.stack.patch_dir / "bee.patch").exists()


BODIES = [
    "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001",  # the mbox magic
    "From 1234567890abcdef1234567890abcdef12345678 Tue Jan 6 12:34:56 2026",  # a From line with a sha
    "---",
    "--- a/src/a.py",
    "diff --git a/x b/x",
    "Index: src/a.py",
]


@pytest.mark.parametrize("line", BODIES)
def test_a_message_that_would_not_come_back_is_refused_before_writing(env, line):
    tree = env.apply().tree
    author_commit(tree, {"src/a.py": numbered(60).replace("line 5\n", "line five\n")}, "[DSV4] Five",
                  f"Why.\n\n{line}\nmore text\n")
    with pytest.raises(Dsv4Error, match="message line 5") as ei:
        env.export()
    assert "\n" not in ei.value.one_line()
    assert env.patch_bytes() == {"series": b"# demo series\n"}


@pytest.mark.parametrize("line", ["From: Someone Else <x@example.com>", "Subject: another", "date: Mon, 1 Jan 2001"])
def test_a_first_body_line_git_am_reads_as_a_header_is_refused(env, line):
    tree = env.apply().tree
    author_commit(tree, {"src/a.py": numbered(60).replace("line 5\n", "line five\n")}, "[DSV4] Five",
                  f"{line}\nmore text\n")
    with pytest.raises(Dsv4Error, match="message line 3.*header"):
        env.export()
    assert env.patch_bytes() == {"series": b"# demo series\n"}


@pytest.mark.parametrize("line", ["From 1234567890abcdef1234567890abcdef12345678 is where it came from",
                                  "From the docs: x", ">From quoted", "-- ", "----", "--", "diff this"])
def test_message_lines_that_survive_round_trip(env, line):
    tree = env.apply().tree
    author_commit(tree, {"src/a.py": numbered(60).replace("line 5\n", "line five\n")}, "[DSV4] Five",
                  f"Why.\n\n{line}\nmore text\n")
    msg = git(tree, "log", "-1", "--format=%B")
    env.export()
    rebuilt = env.rebuild()
    assert git(rebuilt.tree, "log", "-1", "--format=%B").replace("Patch-Filename: five.patch\n", "") == msg


@pytest.mark.parametrize("value", ["/../../x.patch", "../x.patch", "series", "sub/x.patch", ".hidden.patch",
                                   "x.txt", "a b.patch"])
def test_patch_filename_is_one_safe_component(env, value, tmp_path):
    tree = env.apply().tree
    author_commit(tree, {"src/a.py": numbered(60).replace("line 5\n", "line five\n")}, "[DSV4] Five",
                  f"Why.\n\nPatch-Filename: {value}\n")
    outside = {p for p in tmp_path.rglob("*")}
    with pytest.raises(Dsv4Error, match="Patch-Filename"):
        env.export()
    assert env.patch_bytes() == {"series": b"# demo series\n"}
    assert {p for p in tmp_path.rglob("*")} == outside


def test_check_rejects_the_trailer_inside_a_patch_file(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    p = env.stack.patch_dir / "three.patch"
    p.write_bytes(p.read_bytes().replace(b"Why and how.\n", b"Why and how.\n\nPatch-Filename: ../../x.patch\n"))
    project = load_project(env.root)
    findings = lint_stack(project, project.stack("demo"))
    assert any("Patch-Filename" in f.message for f in findings), findings
    with pytest.raises(Dsv4Error, match="Patch-Filename"):
        env.apply(force=True)


@pytest.mark.parametrize("entry", ["../x.patch", "x.txt", "series", "a b.patch"])
def test_series_entries_are_patch_file_names(env, entry):
    env.stack.series_path.write_text(f"{entry}\n")
    project = load_project(env.root)
    findings = lint_stack(project, project.stack("demo"))
    assert findings and "series:1" in str(findings[0]), findings
