"""Property: any edits committed on a patched tree -> export -> apply -> export is a fixed point."""

from __future__ import annotations

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


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
