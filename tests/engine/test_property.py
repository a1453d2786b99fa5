"""Property: any edits committed on a patched tree -> export -> apply -> export is a fixed point."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth import Env, author_commit, git

line_text = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=30)
edit = st.one_of(
    st.tuples(st.just("modify"), st.sampled_from(["src/a.py", "src/b.txt"]), st.integers(0, 29), line_text),
    st.tuples(st.just("add"), st.sampled_from(["new/x.txt", "src/c.py", "z/y/w.md"]), st.integers(0, 5), line_text),
    st.tuples(st.just("delete"), st.sampled_from(["src/b.txt"]), st.just(0), st.just("")),
    st.tuples(st.just("binary"), st.sampled_from(["bin/data.bin"]), st.integers(1, 300), st.just("")),
    st.tuples(st.just("crlf"), st.sampled_from(["src/a.py"]), st.integers(0, 29), line_text),
)


def apply_edit(tree: Path, op) -> None:
    kind, rel, n, text = op
    p = tree / rel
    if kind == "delete":
        if p.exists():
            p.unlink()
        return
    if kind == "binary":
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes((i * 37 + n) % 256 for i in range(n * 3)))
        return
    lines = p.read_bytes().decode("utf-8").splitlines(keepends=True) if p.exists() else []
    new = text.replace("\n", " ") + ("\r\n" if kind == "crlf" else "\n")
    if kind == "modify" and lines:
        lines[n % len(lines)] = new
    else:
        lines.insert(min(n, len(lines)), new)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes("".join(lines).encode("utf-8"))


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(edit, min_size=1, max_size=3), min_size=1, max_size=3))
def test_export_apply_export_is_a_fixed_point(commits):
    with tempfile.TemporaryDirectory() as td:
        env = Env(Path(td))
        tree = env.apply().tree
        for i, ops in enumerate(commits):
            for op in ops:
                apply_edit(tree, op)
            if git(tree, "status", "--porcelain").strip():  # an edit set that changes nothing is no patch
                author_commit(tree, {}, f"[DSV4] Random change {i}", "Random.\n")
        env.export()
        first = env.patch_bytes()
        edited_tree = git(tree, "rev-parse", "HEAD^{tree}")
        rebuilt = env.rebuild()
        assert not env.export(check=True).stale
        env.export()
        assert env.patch_bytes() == first
        # and the tree rebuilt from the patch files has exactly the edited content
        assert git(rebuilt.tree, "rev-parse", "HEAD^{tree}") == edited_tree


# Commit messages: lines git am could misread are planted among random text (issue 11 item 6).
MESSAGE_EDGES = [
    "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001",
    "From 1234567890abcdef1234567890abcdef12345678 Tue Jan 6 12:34:56 2026",
    "From 1234567890abcdef1234567890abcdef12345678 is where it came from",
    "From: Someone Else <x@example.com>", "Subject: another subject", "Date: Mon, 1 Jan 2001 00:00:00 +0000",
    "---", "--- a/x", "----", "-- ", "diff --git a/x b/x", "Index: x", ">From quoted", "# not a comment",
    "Patch-Filename: series", "Patch-Filename: ../../x.patch", "Signed-off-by: A <a@example.com>",
    "    indented", "",
]
message_line = st.one_of(st.sampled_from(MESSAGE_EDGES), line_text)


def _messages(tree: Path) -> list[str]:
    out = git(tree, "log", "--reverse", "--format=%B%x00", "refs/dsv4/base..HEAD")
    msgs = [m.strip("\n") for m in out.split("\0")][:-1]
    return ["\n".join(ln for ln in m.split("\n") if not ln.startswith("Patch-Filename: ")).strip("\n") for m in msgs]


@settings(max_examples=10 * int(os.environ.get("DSV4_FUZZ_SCALE", "1")), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(line_text.filter(lambda s: s.strip() != ""), st.lists(message_line, max_size=5)),
                min_size=1, max_size=2))
def test_commit_messages_survive_export_and_apply_or_are_refused(commits):
    from dsv4_patch.errors import Dsv4Error

    with tempfile.TemporaryDirectory() as td:
        env = Env(Path(td))
        tree = env.apply().tree
        for i, (subject, body) in enumerate(commits):
            apply_edit(tree, ("add", "new/x.txt", i, f"edit {i}"))
            author_commit(tree, {}, f"[DSV4] {subject}", "\n".join(body) + "\n")
        wanted = _messages(tree)
        edited_tree = git(tree, "rev-parse", "HEAD^{tree}")
        try:
            env.export()
        except Dsv4Error as e:
            assert "\n" not in e.one_line()
            assert "message line" in e.message or "Patch-Filename" in e.message, e.message
            assert env.patch_bytes() == {"series": b"# demo series\n"}  # refused before writing anything
            return
        first = env.patch_bytes()
        rebuilt = env.rebuild()
        assert git(rebuilt.tree, "rev-parse", "HEAD^{tree}") == edited_tree
        assert _messages(rebuilt.tree) == wanted
        env.export()
        assert env.patch_bytes() == first
