"""`check` requires Signed-off-by; `export --upstream` writes an mbox for the upstream project:
our metadata trailers left out, everything else kept, and it applies (git am -k) to the same tree."""

from __future__ import annotations

from synth import META, git, numbered
from test_cli import cli

from dsv4_patch.config import load_project
from dsv4_patch.lint import lint_stack

SOB = "Signed-off-by: Pat Cher <pat@example.com>"
FULL_META = ("Upstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nHardware: gfx936\n"
             "Drop-When: upstream fixes it\n" + SOB + "\n")


def add_test_file(env):
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text("def test_ok():\n    pass\n")


def two_patches(env):
    add_test_file(env)
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three",
               body="Why three.\n\nTest plan: ran it.\n\n" + FULL_META)
    env.author({"src/b.txt": numbered(30, "b").replace("b 9\n", "b nine\n")}, "[DSV4] Nine",
               body="Why nine.\n\nCo-authored-by: Ann Other <ann@example.com>\n" + FULL_META)


def findings(env):
    return [(f.file, f.message) for f in lint_stack(load_project(env.root), env.stack)]


def test_check_requires_a_signed_off_by_in_the_closing_trailer_block(env):
    add_test_file(env)
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")  # META signs off
    assert findings(env) == []
    cases = {
        "Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\n": "no Signed-off-by: trailer",
        "Why.\n\n" + META.replace(SOB, "Signed-off-by: pat"): "is not 'Name <email>'",
        "Why.\n\n" + SOB + "\n\nMore text after it.\n\nUpstream-Status: Pending\n"
        "Regression-Test: tests/test_demo.py::test_ok\n": "not in the closing trailer block",
    }
    for body, msg in cases.items():
        env.rebuild(force=True)
        tree = env.out / "demo"
        git(tree, "commit", "-q", "--amend", "-m", "[DSV4] Three\n\n" + body)
        env.export()
        got = findings(env)
        assert len(got) == 1 and msg in got[0][1] and got[0][0] == "patches/demo/three.patch", (body, got)


def test_upstream_mbox_drops_our_trailers_and_keeps_the_rest(env):
    two_patches(env)
    p = cli(env, "export", "demo", "--upstream", "--json", check=0)
    import json

    row = json.loads(p.stdout)
    mbox = env.root / "build/upstream/demo.mbox"
    assert row["mbox"] == str(mbox) and row["patches"] == ["three.patch", "nine.patch"]
    assert row["removed_lines"] == 8
    text = mbox.read_text()
    for key in ("Upstream-Status:", "Regression-Test:", "Hardware:", "Drop-When:", "Patch-Filename:"):
        assert key not in text
    assert text.count(SOB + "\n---\n") == 2  # the sign-off closes each message, then the diff
    assert "Co-authored-by: Ann Other <ann@example.com>\n" + SOB in text  # other trailers stay, in order
    assert "Why three.\n\nTest plan: ran it.\n\n" + SOB in text
    # every byte outside the message is the patch file's
    for name in row["patches"]:
        raw = (env.root / "patches/demo" / name).read_bytes().decode()
        head, diff = raw[: raw.index("\n\n")], raw[raw.index("\ndiff --git "):]
        assert head in text and diff in text


def test_upstream_mbox_applies_with_git_am_to_the_patched_tree(env):
    two_patches(env)
    mbox = env.tmp / "send.mbox"
    cli(env, "export", "demo", "--upstream", "--mbox", str(mbox), check=0)
    clone = env.tmp / "maintainer"
    git(env.tmp, "clone", "-q", str(env.up.path), str(clone))
    git(clone, "checkout", "-q", env.base)
    git(clone, "am", "-q", "-k", str(mbox))
    built = env.rebuild().tree
    assert git(clone, "rev-parse", "HEAD^{tree}") == git(built, "rev-parse", "HEAD^{tree}")
    msgs = git(clone, "log", "--format=%B%x00", f"{env.base}..HEAD")
    assert "Regression-Test" not in msgs and msgs.count(SOB) == 2
    assert git(clone, "log", "-1", "--format=%an <%ae>|%s") == "Pat Cher <pat@example.com>|[DSV4] Nine\n"


def test_upstream_mbox_to_stdout_is_the_same_text(env):
    two_patches(env)
    cli(env, "export", "demo", "--upstream", check=0)
    p = cli(env, "export", "demo", "--upstream", "--mbox", "-", check=0)
    assert p.stdout == (env.root / "build/upstream/demo.mbox").read_text()


def test_a_patch_without_sign_off_is_refused_and_nothing_is_written(env):
    add_test_file(env)
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three",
               body="Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\n")
    p = cli(env, "export", "demo", "--upstream", check=1)
    assert "three.patch: no Signed-off-by: trailer" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (env.root / "build/upstream").exists()
