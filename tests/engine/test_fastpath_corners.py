"""Issue 28 item 10: the fast path (fastapply) against `git am` itself in the corners where they
parted: the fast path either makes the very commit `git am -k --keep-cr` makes, or declines.

Each case is a format-patch mail of a real commit, edited in one header or hunk; the oracle runs
`git am` on a fresh clone of the same base (same committer identity and date: gitcmd pins them)."""

from __future__ import annotations

import itertools
import re

import pytest
from synth import Upstream, git, numbered

from dsv4_patch import fastapply
from dsv4_patch.gitcmd import Git

_n = itertools.count()


@pytest.fixture
def base(tmp_path):
    up = Upstream(tmp_path / "up")
    up.write("src/a.py", numbered(20))
    up.write("src/noeol.txt", "one\ntwo\nthree")
    start = up.commit("base")
    return up, start


def mail_of(up: Upstream, start: str, files: dict[str, str], subject: str = "[DSV4] Change",
            body: str = "Why and how.\n") -> bytes:
    for rel, content in files.items():
        up.write(rel, content)
    git(up.path, "add", "-A")
    git(up.path, "commit", "-q", "-m", f"{subject}\n\n{body}",
        env={"GIT_AUTHOR_NAME": "Pat Cher", "GIT_AUTHOR_EMAIL": "pat@example.com",
             "GIT_AUTHOR_DATE": "2026-02-01T00:00:00+0000"})
    raw = Git(up.path).format_patch_one("HEAD")
    git(up.path, "reset", "-q", "--hard", start)
    return raw


def fast(up: Upstream, start: str, mail: bytes) -> str | None:
    g = Git(up.path)
    marks = up.path / ".git" / f"marks-{next(_n)}"
    shas, _ = fastapply.commit_series(g, start, [mail], "refs/test/fast", str(marks))
    g.run("update-ref", "-d", "refs/test/fast", check=False)
    return shas[0] if shas else None


def am(tmp, up: Upstream, start: str, mail: bytes) -> tuple[int, str | None]:
    """(git am's exit code, the commit it made on top of `start`, or None)."""
    clone = tmp / f"am-{next(_n)}"
    git(tmp, "clone", "-q", str(up.path), str(clone))
    g = Git(clone)
    g.run("checkout", "-q", "--detach", start)
    r = g.run("am", "--keep-cr", "-k", "--no-signoff", "--quiet", "--whitespace=nowarn", check=False, stdin=mail)
    head = g.rev("HEAD")
    return r.rc, (head if head != start else None)


def same_or_declined(tmp, up, start, mail) -> tuple[str | None, tuple[int, str | None]]:
    f = fast(up, start, mail)
    rc, made = am(tmp, up, start, mail)
    assert f is None or (rc == 0 and f == made), (f, rc, made)
    return f, (rc, made)


def test_a_date_in_minus_0000_is_what_git_am_records(tmp_path, base):
    up, start = base
    mail = mail_of(up, start, {"src/a.py": numbered(20).replace("line 3\n", "line three\n")})
    mail = re.sub(rb"^Date: (.*) \+0000$", rb"Date: \1 -0000", mail, count=1, flags=re.M)
    assert b" -0000\n" in mail
    same_or_declined(tmp_path, up, start, mail)


@pytest.mark.parametrize("folded", [
    b"Subject: [DSV4] Folded\n \n here\n", b"Subject: [DSV4] Folded\n\t\n\there\n",
    b"Subject: [DSV4]\n  \n  Folded  \n here\n", b"Subject: [DSV4] Folded\n \t \n\there  \n",
    b"Subject: [DSV4] Folded here\n \n \n", b"Subject: \n \n [DSV4] Folded here\n"])
def test_a_subject_folded_with_a_blank_continuation(tmp_path, base, folded):
    up, start = base
    mail = mail_of(up, start, {"src/a.py": numbered(20).replace("line 3\n", "line three\n")},
                   subject="[DSV4] Folded here")
    mail = mail.replace(b"Subject: [DSV4] Folded here\n", folded, 1)
    same_or_declined(tmp_path, up, start, mail)


def test_a_mail_system_internal_data_author_is_never_committed_by_the_fast_path(tmp_path, base):
    up, start = base
    mail = mail_of(up, start, {"src/a.py": numbered(20).replace("line 3\n", "line three\n")})
    mail = mail.replace(b"From: Pat Cher <pat@example.com>", b"From: Mail System Internal Data <pat@example.com>", 1)
    f, (rc, made) = same_or_declined(tmp_path, up, start, mail)
    assert f is None  # git am skips such a message (pine's folder data): no commit to match


@pytest.mark.parametrize("marker", [b"\\ No newline", b"\\ x", b"\\"])
def test_a_malformed_no_newline_marker(tmp_path, base, marker):
    up, start = base
    mail = mail_of(up, start, {"src/noeol.txt": "one\ntwo\nthree!"})
    assert mail.count(b"\\ No newline at end of file\n") == 2
    mail = mail.replace(b"\\ No newline at end of file\n", marker + b"\n", 1)
    same_or_declined(tmp_path, up, start, mail)


def test_a_no_newline_marker_in_the_middle_of_a_hunk(tmp_path, base):
    up, start = base
    mail = mail_of(up, start, {"src/a.py": numbered(20).replace("line 10\n", "line ten\n")})
    mail = mail.replace(b"\n line 8\n", b"\n line 8\n\\ No newline at end of file\n", 1)
    same_or_declined(tmp_path, up, start, mail)


def test_a_control_byte_in_the_message(tmp_path, base):
    up, start = base
    mail = mail_of(up, start, {"src/a.py": numbered(20).replace("line 3\n", "line three\n")},
                   body="Why \x01 and how.\n")
    assert b"\x01" in mail
    f, (rc, made) = same_or_declined(tmp_path, up, start, mail)
    assert rc == 0 and made


def test_a_control_byte_in_a_message_is_applied_not_taken_for_upstream(env):
    """The commits of a build are found by their Patch-Filename line; a \\x01 in a message (git am
    keeps it) split the log output there, and the patch was reported as already upstream (exit 3)."""
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three",
               body="Why \x01 and how.\n\nSigned-off-by: Pat Cher <pat@example.com>\n")
    res = env.rebuild()
    assert [p for p, _ in res.commits] == ["three.patch"]
    assert b"\x01" in (env.root / "patches/demo/three.patch").read_bytes()


def corner_mutation(mail: bytes, rng) -> bytes:
    """One or two of the corners above, at random, on a format-patch mail."""
    for _ in range(rng.randint(1, 2)):
        kind = rng.randrange(5)
        if kind == 0:
            tz = rng.choice([b"-0000", b"+0000", b"-0100", b"+1400", b"-1200"])
            mail = re.sub(rb"^(Date: .*) [+-]\d{4}$", rb"\1 " + tz, mail, count=1, flags=re.M)
        elif kind == 1:
            fold = rng.choice([b"\n \n ", b"\n\t\n\t", b"\n  \t\n ", b"\n ", b"\n\t"])
            mail = mail.replace(b"Subject: [DSV4] Folded here", b"Subject: [DSV4]" + fold + b"Folded here", 1)
        elif kind == 2:
            marker = rng.choice([b"\\ No newline", b"\\ x", b"\\", b"\\ No newline at end of file "])
            mail = mail.replace(b"\\ No newline at end of file\n", marker + b"\n", 1)
        elif kind == 3:
            byte = bytes([rng.choice([1, 2, 7, 8, 0x1b, 0x7f])])
            mail = mail.replace(b"Why and how.", b"Why " + byte + b" and how.", 1)
        else:
            mail = mail.replace(b"From: Pat Cher", rng.choice([b"From: Mail System Internal Data", b"From: Pat  Cher",
                                                               b"From: Pat Cher "]), 1)
    return mail


@pytest.mark.parametrize("seed", range(3))
def test_random_corner_mails_fast_path_equals_git_am(tmp_path, base, seed):
    """Seeded (re-run one with -k 'corner_mails and SEED'): 12 mails a seed, each the fast path
    makes exactly as git am does, or declines."""
    import random

    rng = random.Random(seed)
    up, start = base
    mail = mail_of(up, start, {"src/noeol.txt": "one\ntwo\nthree!", "src/a.py": numbered(20).replace("line 3\n", "3\n")},
                   subject="[DSV4] Folded here")
    taken = 0
    for _ in range(12):
        f, _ = same_or_declined(tmp_path, up, start, corner_mutation(mail, rng))
        taken += f is not None
    assert taken >= 1, "the fast path declined every mail: the comparison proves nothing"
