"""`check` checks the Signed-off-by lines a patch file carries (it need not carry one);
`export --upstream` writes an mbox for the upstream project: our metadata trailers left out,
everything else kept, and it applies (git am -k) to the same tree. The sender's sign-off:
test_export_upstream_signoff.py (here the sender is Pat Cher, who signed each message last)."""

from __future__ import annotations

from synth import META, git, numbered
from test_cli import cli

from dsv4_patch.config import load_project
from dsv4_patch.lint import lint_stack

SOB = "Signed-off-by: Pat Cher <pat@example.com>"
AS_PAT = ("--signoff-as", "Pat Cher <pat@example.com>")  # the sender: never this machine's git identity
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


def test_check_needs_no_signed_off_by_and_checks_the_ones_there_are(env):
    add_test_file(env)
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")  # META signs off
    assert findings(env) == []
    env.rebuild(force=True)  # a person's sign-off is added when a person sends the patch (export --upstream)
    git(env.out / "demo", "commit", "-q", "--amend", "-m",
        "[DSV4] Three\n\nWhy.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\n")
    env.export()
    assert findings(env) == []
    cases = {
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
    p = cli(env, "export", "demo", "--upstream", "--json", *AS_PAT, check=0)
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
    cli(env, "export", "demo", "--upstream", "--mbox", str(mbox), *AS_PAT, check=0)
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
    cli(env, "export", "demo", "--upstream", *AS_PAT, check=0)
    p = cli(env, "export", "demo", "--upstream", "--mbox", "-", *AS_PAT, check=0)
    assert p.stdout == (env.root / "build/upstream/demo.mbox").read_text()


def test_a_patch_without_sign_off_is_signed_off_by_the_sender(env):
    add_test_file(env)
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three",
               body="Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\n")
    p = cli(env, "export", "demo", "--upstream", "--mbox", "-", *AS_PAT, check=0)
    assert "\n\nWhy.\n\n" + SOB + "\n---\n" in p.stdout
