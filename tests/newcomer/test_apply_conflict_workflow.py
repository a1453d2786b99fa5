"""Item 3: a path through an `apply` conflict — resolve in the failed tree, `apply --continue`,
`export`; the resolution is remembered in patches/<stack>/resolutions/ and reused by the next apply."""

from __future__ import annotations

import shutil

from synth import git, numbered

META = "Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n"


def _patches(env) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((env.root / "patches/demo").glob("*.patch"))}


def _stack_that_conflicts(env):
    """Two patches at the pin; then upstream rewrites the line the first one edits, and the stack
    is re-pinned there: patch 1 conflicts, patch 2 (another file) applies."""
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three", body=META)
    env.author({"src/b.txt": numbered(30, "b").replace("b 7\n", "b seven\n")}, "[DSV4] Seven", body=META)
    env.up.write("src/a.py", numbered(60).replace("line 3\n", "line 3 (upstream)\n"))
    env.repin(env.up.commit("upstream rewrites line 3"))
    shutil.rmtree(env.out / "demo")


def _resolve_by_hand(tree):
    a = tree / "src/a.py"
    assert "<<<<<<<" in a.read_text()  # git am --3way left its markers for the person
    a.write_text(numbered(60).replace("line 3\n", "line three (upstream)\n"))


def test_conflict_names_the_continue_workflow_then_continue_and_export(env, cli):
    _stack_that_conflicts(env)
    p = cli(env, "apply", "demo", check=3)
    failed = env.out / ".dsv4" / "failed" / "demo"
    assert str(failed) in p.stderr and "dsv4-patch apply demo --continue" in p.stderr
    assert "dsv4-patch export demo" in p.stderr

    _resolve_by_hand(failed)
    p = cli(env, "apply", "demo", "--continue", check=0)
    assert "built" in p.stdout and "conflict(s) resolved" in p.stdout and "export demo" in p.stdout
    tree = env.out / "demo"
    assert (tree / "src/a.py").read_text().count("line three (upstream)") == 1
    assert "b seven" in (tree / "src/b.txt").read_text()  # the patch after the conflict was applied
    assert not failed.exists()
    log = git(tree, "log", "--format=%s", "refs/dsv4/base..HEAD").split("\n")
    assert log[:2] == ["[DSV4] Seven", "[DSV4] Three"]

    stored = sorted((env.root / "patches/demo/resolutions").rglob("*.patch"))
    assert len(stored) == 1 and stored[0].parent.name == "three"  # patch file three.patch
    assert b"+line three (upstream)" in stored[0].read_bytes()

    before = _patches(env)
    p = cli(env, "export", "demo", check=0)
    after = _patches(env)
    changed = [n for n in after if after[n] != before.get(n)]
    assert len(changed) == 1 and b"+line three (upstream)" in after[changed[0]]
    cli(env, "check", check=0)
    cli(env, "apply", "demo", check=0)  # no-op on the exported tree


def test_remembered_resolution_is_reused_by_the_next_apply(env, cli):
    _stack_that_conflicts(env)
    cli(env, "apply", "demo", check=3)
    _resolve_by_hand(env.out / ".dsv4" / "failed" / "demo")
    cli(env, "apply", "demo", "--continue", check=0)
    # Another checkout (or a rebuilt tree) meets the same patch on the same files: no stop.
    shutil.rmtree(env.out / "demo")
    p = cli(env, "apply", "demo", check=0)
    assert "reused" in p.stdout and "resolutions/" in p.stdout
    assert "line three (upstream)" in (env.out / "demo/src/a.py").read_text()


def test_continue_refuses_while_markers_remain_and_keeps_the_attempt(env, cli):
    _stack_that_conflicts(env)
    cli(env, "apply", "demo", check=3)
    failed = env.out / ".dsv4" / "failed" / "demo"
    p = cli(env, "apply", "demo", "--continue", check=3)
    assert "conflict markers left in src/a.py" in p.stderr
    assert (failed / ".git" / "rebase-apply").is_dir()  # nothing half-done: still resumable
    assert not (env.root / "patches/demo/resolutions").exists()


def test_continue_without_a_stopped_apply_is_a_usage_error(env, cli):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three", body=META)
    p = cli(env, "apply", "demo", "--continue", check=2)
    assert "no stopped apply" in p.stderr
    cli(env, "apply", "--continue", check=2)  # needs the STACK


def test_abort_drops_the_attempt_only(env, cli):
    _stack_that_conflicts(env)
    cli(env, "apply", "demo", check=3)
    before = _patches(env)
    cli(env, "apply", "demo", "--abort", check=0)
    assert not (env.out / ".dsv4" / "failed" / "demo").exists()
    assert _patches(env) == before


def test_markers_are_laid_out_when_the_new_base_lacks_the_old_blobs(env, cli):
    """A new pin imported on its own (an sdist: one commit, no history) has none of the blobs the
    patches were made against, so `git am --3way` cannot merge and leaves no markers. The blobs
    are copied from the tree built at the previous pin, and the markers appear."""
    from synth import Upstream

    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three", body=META)
    assert (env.out / "demo").is_dir()  # the tree at the old pin
    lonely = Upstream(env.tmp / "lonely")  # the new release, without the old one's history
    lonely.write("src/a.py", numbered(60).replace("line 3\n", "line 3 (upstream)\n"))
    lonely.write("src/b.txt", numbered(30, "b"))
    new = lonely.commit("release")
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text().replace(str(env.up.path), str(lonely.path)).replace(env.base, new))
    p = cli(env, "apply", "demo", "--force", check=3)
    failed = env.out / ".dsv4" / "failed" / "demo"
    assert "<<<<<<<" in (failed / "src/a.py").read_text(), p.stderr
    _resolve_by_hand(failed)
    cli(env, "apply", "demo", "--continue", check=0)
    assert "line three (upstream)" in (env.out / "demo/src/a.py").read_text()
