"""Engine decisions that survived the engine mutation run (benchmarks/mutate_engine.py, seed 29;
docs/engine-mutation-report.md): each test states what a user sees, and fails when the rule behind
it is dropped or bent.

- the compile check blames a new `.py` file that does not compile even when a later patch of the
  series touches it again (the file did not exist upstream: nothing there excuses it);
- the fast path reads a mail without a diff (`git format-patch` of an empty commit) to its end and
  returns, rather than looping on the end of the text;
- export refuses a commit message with a line `--- text` (git am ends the message there: the rest
  of the message would be lost), as it refuses a bare `---`;
- a patch file cut short inside its last hunk is a format error, not a conflict;
- apply refuses an output folder it did not build (no state of its own there), one line, the
  person's files untouched, and a patch file that carries the Patch-Filename line apply adds itself;
- `apply --json` at a conflict describes it (patch, kind, files);
- the fast path commits a body line that looks like mbox (`From `, `>From`, a form feed, a vertical
  tab, a whole mbox separator line, which git am splits the mail at) as git am does, or declines."""

from __future__ import annotations

import json
import signal

import pytest
from synth import author_commit, numbered
from test_cli import cli
from test_fastpath_corners import base, mail_of, same_or_declined  # noqa: F401  (base: a fixture)

from dsv4_patch import fastapply
from dsv4_patch.api import compile_problems
from dsv4_patch.errors import ConflictError, Dsv4Error, PatchFormatError

META = "Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n"


def test_a_new_python_file_that_does_not_compile_is_blamed_when_a_later_patch_touches_it(env):
    env.author({"pkg/new.py": "def f(:\n    pass\n\nX = 1\n"}, "[DSV4] Add new.py", body=META)
    env.author({"pkg/new.py": "def f(:\n    pass\n\nX = 2\n"}, "[DSV4] Tune new.py", body=META)
    with pytest.raises(Dsv4Error) as e:
        compile_problems(env.stack, env.rebuild())
    assert "pkg/new.py:1: SyntaxError" in str(e.value), str(e.value)


def test_the_fast_path_reads_a_mail_without_a_diff_to_its_end():
    """`git format-patch --always` of an empty commit: headers, message, signature, no diff."""
    raw = (b"From 0123456789abcdef0123456789abcdef01234567 Mon Sep 17 00:00:00 2001\n"
           b"From: Pat Cher <pat@example.com>\nDate: Tue, 1 Dec 2026 10:00:00 +0000\n"
           b"Subject: [PATCH] [DSV4] Nothing\n\nA note only.\n-- \n2.43.0\n\n")

    def hang(*_):
        raise TimeoutError("parse_mail still reading after 20 s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(20)
    try:
        mail = fastapply.parse_mail(raw)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert mail.diff == b"" and mail.message.startswith(b"[PATCH] [DSV4] Nothing\n\nA note only.\n")


@pytest.mark.parametrize("line", ["--- then the numbers", "---"])
def test_export_refuses_a_message_line_that_git_am_takes_for_the_end_of_the_message(env, line):
    tree = env.apply(force=True).tree
    author_commit(tree, {"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three",
                  f"Why.\n\n{line}\nand the rest of the reasoning.\n\n" + META)
    with pytest.raises(Dsv4Error) as e:
        env.export()
    assert "message line" in str(e.value) and "end of the message" in str(e.value), str(e.value)
    assert not list((env.root / "patches/demo").glob("*.patch"))  # nothing written


def test_a_patch_file_cut_short_in_its_last_hunk_is_a_format_error_not_a_conflict(env):
    """A copy that lost its tail (a truncated download, an editor that stopped) is refused as a
    format error naming the file (exit 1), before git is asked: not a conflict (exit 3) that sends
    the user to resolve a merge that does not exist."""
    env.author({"src/a.py": numbered(60).replace("line 20\n", "line twenty\n").replace("line 21\n", "line 21!\n")},
               "[DSV4] Twenty")
    (patch,) = (env.root / "patches/demo").glob("*.patch")
    text = patch.read_text()
    head, _, _ = text.rpartition("\n line 23\n")  # the hunk's last context lines and the signature go
    patch.write_text(head)  # cut at the end of a line, as a stopped copy leaves it: no final newline
    with pytest.raises(Dsv4Error) as e:
        env.rebuild()
    assert not isinstance(e.value, ConflictError) and e.value.exit_code == 1, e.value
    assert patch.name in str(e.value) and "truncated" in str(e.value) and "Traceback" not in str(e.value), e.value


def test_apply_refuses_an_output_folder_it_did_not_build_and_leaves_it_alone(env):
    tree = env.out / "demo"
    tree.mkdir(parents=True)
    (tree / "mine.txt").write_text("my notes\n")
    with pytest.raises(Dsv4Error) as e:
        env.apply()
    assert "was not built by dsv4-patch" in str(e.value) and str(tree) in str(e.value), e.value
    assert [p.name for p in tree.iterdir()] == ["mine.txt"] and (tree / "mine.txt").read_text() == "my notes\n"


def test_apply_refuses_a_patch_file_that_holds_a_patch_filename_line(env):
    """apply adds that line itself (export names the file from it and strips it): one carried in a
    patch file would name the patch after another file, or be stripped from the person's message."""
    env.author({"src/a.py": numbered(60).replace("line 7\n", "line seven\n")}, "[DSV4] Seven",
               "Why.\n\n" + META)
    (patch,) = (env.root / "patches/demo").glob("*.patch")
    patch.write_text(patch.read_text().replace("Upstream-Status: Pending\n",
                                               "Upstream-Status: Pending\nPatch-Filename: other.patch\n", 1))
    with pytest.raises(PatchFormatError) as e:
        env.rebuild()
    assert f"{patch.name}: holds a Patch-Filename: line" in str(e.value), e.value


def test_apply_json_describes_the_conflict(env):
    """`apply --json` at a conflict: the failure names the patch, its kind and the files, for tools."""
    env.author({"src/a.py": numbered(60).replace("line 10\n", "line ten\n")}, "[DSV4] Ten")
    (patch,) = (env.root / "patches/demo").glob("*.patch")
    env.up.write("src/a.py", numbered(60).replace("line 10\n", "line 10 upstream\n"))
    env.repin(env.up.commit("upstream edits line 10"))
    p = cli(env, "apply", "demo", "--json", check=3)
    (row,) = json.loads(p.stdout)
    failure = row["failure"]
    assert (failure["patch"], failure["kind"], failure["files"]) == (patch.name, "conflict", ["src/a.py"]), failure
    assert [h["header"] for h in failure["hunks"]] == ["@@ -7,7 +7,7 @@ line 6"] and failure["failed_tree"]


@pytest.mark.parametrize("line", [b">From the docs", b"From the docs", b"a form\x0cfeed", b"a vertical\x0btab",
                                  b"From 0123456789abcdef0123456789abcdef01234567 Mon Sep 17 00:00:00 2001"])
def test_the_fast_path_commits_a_mbox_like_body_line_as_git_am_does_or_declines(tmp_path, base, line):
    up, start = base
    mail = mail_of(up, start, {"src/a.py": numbered(20).replace("line 3\n", "line three\n")},
                   body="Why and how.\n\nXXX\nthe end.\n")
    same_or_declined(tmp_path, up, start, mail.replace(b"XXX", line, 1))

