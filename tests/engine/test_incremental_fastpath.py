"""The fast path (fastapply: one git fast-import) makes exactly the commits `git am` makes.

The oracle is `git am` itself: every series is built twice, once normally and once with the fast
path switched off, and the commit ids must agree. Seeded random mails probe the message/author
rules (mailinfo + stripspace); planted diffs probe the edges (no newline at EOF, empty and deleted
files, CRLF, first/last lines) and the patches the fast path must leave to git am."""

from __future__ import annotations

import itertools
import os
import random
import re

import pytest
from synth import META, author_commit, numbered

from dsv4_patch import fastapply, incremental
from dsv4_patch.errors import ConflictError
from dsv4_patch.exporter import export_stack
from dsv4_patch.gitcmd import Git
from dsv4_patch.tree import build_tree

_n = itertools.count()


def build(env, *, am_only: bool, monkeypatch) -> tuple[list | str, list[str]]:
    """(commits, progress lines), or the error message where the build was refused."""
    said: list[str] = []
    with monkeypatch.context() as m:
        if am_only:
            m.setattr(incremental, "fast_commits", lambda g, start, mails, **kw: ([], "test: git am only"))
        try:
            res = build_tree(env.stack, env.tmp / f"out-{next(_n)}", cache=env.cache, progress=said.append)
        except ConflictError as e:  # e.g. a '---' line in a message: git am cuts it there, trailer and all
            return f"{e.report.kind}: {e.report.patch}", said
    assert Git(res.tree).out("status", "--porcelain") == ""
    return res.commits, said


def am_fallbacks(said: list[str]) -> list[str]:
    """The patches handed to git am, each with ' +N' when the N after it went along."""
    out = []
    for m in said:
        if ": git am: " in m:
            rest = m.split(": git am: ", 1)[1]
            name, _, more = rest.partition(" and the ")
            out.append(name.split(" (")[0] + (f" +{more.split()[0]}" if more else ""))
    return out


def make_series(env, series) -> None:
    tree = build_tree(env.stack, env.tmp / f"scratch-{next(_n)}", cache=env.cache, upto=0).tree
    for subject, files, kw in series:
        author_commit(tree, files, subject, "Why and how.\n\n" + META, **kw)
    export_stack(env.stack, tree)


def edge_upstream(env) -> None:
    env.up.write("src/noeol.txt", "one\ntwo\nthree")  # no newline at end of file
    env.up.write("src/crlf.txt", "".join(f"row {i}\r\n" for i in range(12)))
    env.up.write("src/gone.txt", numbered(5, "g"))
    env.up.write("src/bin.dat", bytes(range(256)))
    env.up.write("src/tool.sh", "#!/bin/sh\necho hi\n")
    env.repin(env.up.commit("edges"))


def test_planted_edges_fast_path_equals_git_am(env, monkeypatch):
    edge_upstream(env)
    a = numbered(60)
    make_series(env, [
        ("[DSV4] First line and last line", {"src/a.py": "line zero\n" + a.replace("line 60\n", "line 60!\n")}, {}),
        ("[DSV4] Last line without newline", {"src/noeol.txt": "one\ntwo\nthree!"}, {}),
        ("[DSV4] Add the missing newline", {"src/noeol.txt": "one\ntwo\nthree!\n"}, {}),
        ("[DSV4] CRLF rows", {"src/crlf.txt": "".join(f"row {i}{'!' if i == 6 else ''}\r\n" for i in range(12))}, {}),
        ("[DSV4] Empty file, deletion, new file without newline",
         {"src/empty.py": "", "src/gone.txt": None, "src/new.txt": "no newline"}, {}),
        ("[DSV4] A subject long enough that format-patch has to fold it over two lines of the mail header",
         {"src/b.txt": numbered(30, "b").replace("b 1\n", "b one\n")}, {"date": "2026-03-04T05:06:07-0800"}),
    ])
    fast, said = build(env, am_only=False, monkeypatch=monkeypatch)
    assert am_fallbacks(said) == []  # all of them went through the fast path
    am, _ = build(env, am_only=True, monkeypatch=monkeypatch)
    assert fast == am and len(fast) == 6


@pytest.mark.parametrize("what", ["binary", "mode", "rename", "symlink", "utf8-author"])
def test_patches_the_fast_path_declines_go_through_git_am(env, monkeypatch, what):
    edge_upstream(env)
    a = numbered(60)
    change = {
        "binary": ({"src/bin.dat": bytes(range(255, -1, -1))}, {}),
        "mode": ({"src/tool.sh": "#!/bin/sh\necho hi\n"}, {}),
        "rename": ({"src/gone.txt": None, "src/moved.txt": numbered(5, "g")}, {}),
        "symlink": ({}, {}),
        "utf8-author": ({"src/b.txt": numbered(30, "b").replace("b 2\n", "b two\n")}, {}),
    }[what]
    tree = build_tree(env.stack, env.tmp / "scratch", cache=env.cache, upto=0).tree
    author_commit(tree, {"src/a.py": a.replace("line 4\n", "line four\n")}, "[DSV4] Before", "Why.\n\n" + META)
    if what == "mode":
        os.chmod(tree / "src/tool.sh", 0o755)
    if what == "symlink":
        os.symlink("a.py", tree / "src/link.py")
    extra = {"GIT_AUTHOR_NAME": "Zoë Ğüл"} if what == "utf8-author" else {}
    from synth import git

    for rel, content in change[0].items():
        p = tree / rel
        if content is None:
            p.unlink()
        else:
            p.write_bytes(content if isinstance(content, bytes) else content.encode())
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "[DSV4] The odd one\n\nWhy.\n\n" + META,
        env={"GIT_AUTHOR_NAME": "Pat Cher", "GIT_AUTHOR_EMAIL": "pat@example.com",
             "GIT_AUTHOR_DATE": "2026-02-01T00:00:00+0000", **extra})
    author_commit(tree, {"src/a.py": (tree / "src/a.py").read_text().replace("line 50\n", "line fifty\n")},
                  "[DSV4] After", "Why.\n\n" + META)
    export_stack(env.stack, tree)
    fast, said = build(env, am_only=False, monkeypatch=monkeypatch)
    # git am makes only the odd one: the fast path resumes after it
    assert am_fallbacks(said) == ["the-odd-one.patch"]
    am, _ = build(env, am_only=True, monkeypatch=monkeypatch)
    assert fast == am and len(fast) == 3


# ----------------------------------------------------------------- seeded random mails
def _rand_text(rng: random.Random, n: int) -> str:
    alphabet = "abcdefghij KLMNOP.,:;!?()[]-_/'\"#*\t"
    return "".join(rng.choice(alphabet) for _ in range(n))


def mutate_mail(raw: bytes, rng: random.Random) -> bytes:
    """Rewrite the headers and message of a format-patch mail, keeping its diff."""
    head, _, rest = raw.partition(b"\n\n")
    at = rest.find(b"\ndiff --git ")
    diff = rest[at + 1:]
    first = head.split(b"\n")[0]
    name = rng.choice(["Pat Cher", "J. R. Hacker", "Bob", "Anne-Marie Oneil"] * 3
                      + ["ab", "x" * 61, "Anne-Marie O'Neil", "Li  Wei", "dot.ted.", "A (B) C"])
    email = rng.choice(["pat@example.com", "j.r+tag@mail.example.org", "x@y"])
    tz = rng.choice(["+0000", "-0800", "+0530", "+1400"])
    day = rng.randint(1, 28)
    date = f"{rng.choice(['Mon', 'Tue', 'Sun'])}, {day} {rng.choice(['Jan', 'Jun', 'Dec'])} " \
           f"{rng.randint(1999, 2030)} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} {tz}"
    subject = _rand_text(rng, rng.randint(1, 120)).strip() or "s"
    if rng.random() < 0.3:
        subject = "  " + subject + "   "
    subj_lines = [subject]
    if len(subject) > 50 and rng.random() < 0.6:  # fold as mailers do
        cut = subject.rfind(" ", 10, 60)
        if cut > 0:
            subj_lines = [subject[:cut], rng.choice([" ", "\t", "  "]) + subject[cut + 1:]]
    body_lines = []
    for _ in range(rng.randint(0, 8)):
        kind = rng.random()
        if kind < 0.2:
            body_lines.append("")
        elif kind < 0.3:
            body_lines.append(" " * rng.randint(1, 3) + "\t")
        elif kind < 0.35:
            body_lines.append(rng.choice(["From: someone", "Subject: x", "Date: y", "---", "----", "--- a"]))
        else:
            body_lines.append(_rand_text(rng, rng.randint(1, 70)) + rng.choice(["", " ", "\t "]))
    if rng.random() < 0.3:
        body_lines.insert(0, "")
    body = "\n".join(body_lines + ["", META.rstrip("\n")])
    hdr = [first.decode(), f"From: {name} <{email}>", f"Date: {date}", f"Subject: {subj_lines[0]}", *subj_lines[1:]]
    return ("\n".join(hdr) + "\n\n" + body + "\n\n").encode() + diff


def test_two_declined_in_a_row_hand_the_rest_to_one_git_am(env, monkeypatch):
    a = numbered(60)
    series = []
    for i in range(5):
        a = a.replace(f"line {3 + 7 * i}\n", f"line {3 + 7 * i} p{i}\n")
        series.append((f"[DSV4] Patch {i}", {"src/a.py": a}, {}))
    make_series(env, series)
    for i in (1, 2):  # a CR in the message: declined by the fast path, fine for git am
        p = env.root / f"patches/demo/patch-{i}.patch"
        p.write_bytes(p.read_bytes().replace(b"Why and how.", b"Why and how.\r", 1))
    fast, said = build(env, am_only=False, monkeypatch=monkeypatch)
    assert am_fallbacks(said) == ["patch-1.patch", "patch-2.patch +2"]
    am, _ = build(env, am_only=True, monkeypatch=monkeypatch)
    assert fast == am and len(fast) == 5


@pytest.mark.parametrize("seed", range(6))
def test_random_mails_fast_path_equals_git_am(env, monkeypatch, seed):
    rng = random.Random(seed)
    a = numbered(60)
    series = []
    for i in range(4):
        a = a.replace(f"line {3 + 7 * i}\n", f"line {3 + 7 * i} p{i}\n")
        series.append((f"[DSV4] Patch {i}", {"src/a.py": a}, {}))
    make_series(env, series)
    d = env.root / "patches/demo"
    for p in sorted(d.glob("*.patch")):
        p.write_bytes(mutate_mail(p.read_bytes(), rng))
    fast, said = build(env, am_only=False, monkeypatch=monkeypatch)
    am, _ = build(env, am_only=True, monkeypatch=monkeypatch)
    assert fast == am


@pytest.mark.parametrize("seed", range(6))
def test_random_mails_fast_path_equals_git_am_for_one_patch(env, monkeypatch, seed):
    """One patch a build, so a declined mail cannot hide the others from the fast path."""
    rng = random.Random(1000 + seed)
    make_series(env, [("[DSV4] Only", {"src/a.py": numbered(60).replace("line 9\n", "line nine\n")}, {})])
    p = next((env.root / "patches/demo").glob("*.patch"))
    raw = p.read_bytes()
    for _ in range(3):
        p.write_bytes(mutate_mail(raw, rng))
        fast, said = build(env, am_only=False, monkeypatch=monkeypatch)
        am, _ = build(env, am_only=True, monkeypatch=monkeypatch)
        assert fast == am


def test_random_mails_mostly_take_the_fast_path():
    """The mail rules accept the common shapes (else the equality tests above prove little)."""
    rng = random.Random(99)
    base = (b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: a <a@b>\n"
            b"Date: Sun, 1 Feb 2026 00:00:00 +0000\nSubject: s\n\nbody\n\ndiff --git a/x b/x\n")
    accepted = 0
    for _ in range(200):
        try:
            fastapply.parse_mail(mutate_mail(base, rng))
            accepted += 1
        except fastapply.Declined:
            pass
    assert 100 <= accepted < 200  # most accepted; the odd names / in-body headers declined


def test_mail_rules_against_known_values():
    raw = (b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
           b"From: J. R. Hacker <jr@example.com>\nDate: Tue, 3 Mar 2026 05:06:07 -0800\n"
           b"Subject: [DSV4] A folded\n  subject line  \n\n\n\nFirst line.  \n\n\n\nSecond.\n---\nignored\n")
    m = fastapply.parse_mail(raw)
    # 2026-03-03T13:06:07Z = 1772543167
    assert m.author == b"J. R. Hacker <jr@example.com> 1772543167 -0800"
    assert m.message == b"[DSV4] A folded  subject line\n\nFirst line.\n\nSecond.\n"
    assert m.diff == b"---\nignored\n"
    with pytest.raises(fastapply.Declined):
        fastapply.parse_mail(raw.replace(b"J. R. Hacker", b"=?UTF-8?q?Zo=C3=AB?="))


def test_hunk_rules():
    fe = fastapply.parse_diff(
        b"diff --git a/f b/f\nindex " + b"1" * 40 + b".." + b"2" * 40 + b" 100644\n--- a/f\n+++ b/f\n"
        b"@@ -1,2 +1,2 @@\n-a\n+A\n b\n@@ -4,2 +4,2 @@\n d\n-e\n\\ No newline at end of file\n+E\n")[0]
    assert fastapply.apply_hunks(b"a\nb\nc\nd\ne", fe) == b"A\nb\nc\nd\nE\n"
    with pytest.raises(fastapply.Declined):  # the second hunk has no trailing context: must end the file
        fastapply.apply_hunks(b"a\nb\nc\nd\ne\nf\n", fe)
    with pytest.raises(fastapply.Declined):  # not where git tries first (git would search; we decline)
        fastapply.apply_hunks(b"x\na\nb\nc\nd\ne", fe)
    assert re.fullmatch(r"[0-9a-f]{40}", fastapply.blob_id(b"x"))
    assert fastapply.blob_id(b"") == fastapply.EMPTY_BLOB
