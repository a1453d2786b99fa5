"""Item 4: with local work in the tree, `apply` and `export` name the commands that really keep it
(no circular "run export" when export refuses; no "up to date" while a new file is left out)."""

from __future__ import annotations

from synth import git, numbered

BODY = "Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n"


def _one_patch(env):
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three", body=BODY)
    return env.out / "demo"


def _follow(env, cli, hint_source: str, tree):
    """Run the `git -C TREE ...` commands the message names, in order, then what it says next."""
    import re
    import shlex
    import subprocess

    for cmd in re.findall(r"`(git -C [^`]+)`", hint_source):
        argv = shlex.split(cmd.replace("--fixup=<commit>", "--fixup=HEAD"))
        if "rebase" in argv:
            argv[argv.index("rebase"):argv.index("rebase")] = ["-c", "sequence.editor=:"]
        if "add" in argv and "…" in argv:
            argv.remove("…")
        if "commit" in argv and "--fixup=HEAD" not in argv and any("--fixup" in c for c in re.findall(r"`([^`]+)`", hint_source)):
            continue  # the message offers either a new patch or a fixup: take the fixup
        subprocess.run(argv, check=True, capture_output=True,
                       env={**__import__("os").environ, "GIT_AUTHOR_NAME": "P", "GIT_AUTHOR_EMAIL": "p@x",
                            "GIT_COMMITTER_NAME": "P", "GIT_COMMITTER_EMAIL": "p@x"})


def test_uncommitted_edit_apply_advice_is_followable_and_export_keeps_it(env, cli):
    tree = _one_patch(env)
    (tree / "src/a.py").write_text(numbered(60).replace("line 3\n", "line three\n").replace("line 9\n", "line nine\n"))
    p = cli(env, "apply", "demo", check=1)
    assert "commit -a" in p.stderr and "dsv4-patch export demo" in p.stderr and "--force" in p.stderr
    q = cli(env, "export", "demo", check=1)  # export refuses too, and says how to commit
    assert "would not reach the patch files" in q.stderr and "commit -a" in q.stderr
    _follow(env, cli, p.stderr, tree)
    cli(env, "export", "demo", check=0)
    assert b"+line nine" in (env.root / "patches/demo/three.patch").read_bytes()
    cli(env, "apply", "demo", check=0)


def test_untracked_file_is_not_reported_up_to_date(env, cli):
    tree = _one_patch(env)
    (tree / "src/new_helper.py").write_text("HELPER = 1\n")
    p = cli(env, "apply", "demo", check=1)
    assert f"git -C {tree} add src/new_helper.py" in p.stderr
    q = cli(env, "export", "demo", check=1)
    assert "up to date" not in q.stdout
    assert "untracked file(s) (src/new_helper.py)" in q.stderr and "add -A" in q.stderr
    git(tree, "add", "src/new_helper.py")
    git(tree, "commit", "-q", "--fixup=HEAD")
    git(tree, "-c", "sequence.editor=:", "rebase", "-qi", "--autosquash", "refs/dsv4/base")
    cli(env, "export", "demo", check=0)
    assert b"+HELPER = 1" in (env.root / "patches/demo/three.patch").read_bytes()
