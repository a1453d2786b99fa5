"""`export --upstream` signs the mbox off as the person who sends it (issue 27, part 4).

A DCO sign-off certifies a person: the team's `Signed-off-by` the patch files carry is left out,
other people's trailers stay as they are, and the sender's own `Signed-off-by: Name <email>` (git
config user.name/user.email, or --signoff-as) is added as `git commit -s` adds it. Without an
identity: one line, exit 1, nothing written. Every run here uses a private HOME and global git
config, so the machine's own identity never matters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from synth import author_commit, git, numbered
from test_cli import TOOL
from test_upstream_export import FULL_META, add_test_file

from dsv4_patch.exporter import export_stack
from dsv4_patch.upstream_mbox import TEAM_IDENTITY, upstream_patch

TEAM_SOB = f"Signed-off-by: {TEAM_IDENTITY}"
SAM = "Sam Sender <sam@example.com>"
SAM_SOB = f"Signed-off-by: {SAM}"
ANN = "Ann Other <ann@example.com>"
META_TEAM = FULL_META.replace("Signed-off-by: Pat Cher <pat@example.com>\n", TEAM_SOB + "\n")


def home(env, name: str | None = None, email: str | None = None) -> dict:
    """The environment of a user whose only git config is a private global file with these keys."""
    h = env.tmp / "home"
    (h / ".config").mkdir(parents=True, exist_ok=True)
    cfg = "[user]\n" + (f"\tname = {name}\n" if name else "") + (f"\temail = {email}\n" if email else "")
    (h / ".gitconfig").write_text(cfg, encoding="utf-8")
    e = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "EMAIL"}
    e.update(HOME=str(h), XDG_CONFIG_HOME=str(h / ".config"), GIT_CONFIG_GLOBAL=str(h / ".gitconfig"),
             GIT_CONFIG_NOSYSTEM="1", EMAIL="guess@example.com", DSV4_PATCH_CACHE=str(env.cache.root))
    if not (env.root / ".git").exists():  # the project is a repository with no identity of its own
        git(env.root, "init", "-q")
    return e


def send(env, *args, user: dict, check: int | None = 0) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, str(TOOL), "export", "demo", "--upstream", *args, "--project", str(env.root)],
                       capture_output=True, text=True, env=user)
    if check is not None:
        assert p.returncode == check, p.stdout + p.stderr
    return p


def team_patch(env, files: dict, subject: str, body: str) -> None:
    """One patch as the patch files are today: authored (From:) and signed off by the team."""
    tree = env.apply(force=True).tree
    author_commit(tree, files, subject, body)
    git(tree, "commit", "-q", "--amend", "--no-edit", "--author", TEAM_IDENTITY)
    export_stack(env.stack, tree)


def four_patches(env):
    """The trailer shapes a sender meets: another person's trailers around the team sign-off; only
    ours (the paragraph empties); the sender already signed last; the sender signed, then someone else."""
    add_test_file(env)
    team_patch(env, {"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three",
               body=f"Why three.\n\nCo-developed-by: {ANN}\nSigned-off-by: {ANN}\nReviewed-by: Rev Iewer "
                    f"<rev@example.com>\n" + META_TEAM)
    team_patch(env, {"src/a.py": numbered(60).replace("line 3\n", "line three\n").replace("line 30\n", "line 3O\n")},
               "[DSV4] Thirty", body="Why thirty.\n\n" + META_TEAM)
    team_patch(env, {"src/b.txt": numbered(30, "b").replace("b 9\n", "b nine\n")}, "[DSV4] Nine",
               body=f"Why nine.\n\n{SAM_SOB}\n" + META_TEAM)
    team_patch(env, {"src/b.txt": numbered(30, "b").replace("b 9\n", "b nine\n").replace("b 20\n", "b twenty\n")},
               "[DSV4] Twenty", body=f"Why twenty.\n\n{SAM_SOB}\nSigned-off-by: {ANN}\n" + META_TEAM)


def messages(repo: Path, base: str) -> list[str]:
    return [m.strip("\n") for m in git(repo, "log", "--reverse", "--format=%B%x00", f"{base}..HEAD").split("\x00")
            if m.strip()]


def test_team_sign_off_out_others_kept_sender_signs_once(env):
    four_patches(env)
    assert TEAM_SOB in (env.root / "patches/demo/three.patch").read_text()  # what the files carry today
    user = home(env, "Sam Sender", "sam@example.com")
    row = json.loads(send(env, "--json", user=user).stdout)
    assert row["signed_off_by"] == SAM and row["removed_lines"] == 4 * 5  # 4 metadata lines + the team's, each
    text = (env.root / "build/upstream/demo.mbox").read_text()
    assert text.count(TEAM_IDENTITY) == 4 and text.count(f"From: {TEAM_IDENTITY}\n") == 4  # the author stays
    assert (f"Why three.\n\nCo-developed-by: {ANN}\nSigned-off-by: {ANN}\nReviewed-by: Rev Iewer <rev@example.com>\n"
            f"{SAM_SOB}\n---\n") in text
    assert f"Why thirty.\n\n{SAM_SOB}\n---\n" in text  # the emptied trailer paragraph: a blank line, then it
    assert f"Why nine.\n\n{SAM_SOB}\n---\n" in text  # signed last already: not twice
    assert f"Why twenty.\n\n{SAM_SOB}\nSigned-off-by: {ANN}\n{SAM_SOB}\n---\n" in text  # not last: git adds it


def test_mbox_git_ams_with_the_senders_sign_off_last_exactly_as_git_commit_s(env):
    four_patches(env)
    user = home(env, "Sam Sender", "sam@example.com")
    mbox = env.tmp / "send.mbox"
    send(env, "--mbox", str(mbox), user=user)
    scratch = env.tmp / "maintainer"
    git(env.tmp, "clone", "-q", str(env.up.path), str(scratch))
    git(scratch, "checkout", "-q", "-b", "signed", env.base)
    git(scratch, "am", "-q", "-k", str(mbox))
    got = messages(scratch, env.base)
    assert len(got) == 4 and all(TEAM_IDENTITY not in m for m in got)
    assert git(scratch, "log", "-1", "--format=%an <%ae>") == TEAM_IDENTITY + "\n"  # git am keeps the From:
    for m in got:  # git's own parser: the sender's sign-off is the last trailer
        assert git(scratch, "interpret-trailers", "--parse", input=m.encode()).splitlines()[-1] == SAM_SOB, m
    # the oracle: the same series without any sender, signed by git itself (`git commit --amend -s` as Sam)
    bare = b"".join(upstream_patch((env.root / "patches/demo" / n).read_bytes())[0]
                    for n in ("three.patch", "thirty.patch", "nine.patch", "twenty.patch"))
    git(scratch, "checkout", "-q", "-b", "by-git", env.base)
    git(scratch, "am", "-q", "-k", input=bare)
    git(scratch, "rebase", "-q", "--exec", "git commit -q --amend --no-edit -s", env.base,
        env={"GIT_COMMITTER_NAME": "Sam Sender", "GIT_COMMITTER_EMAIL": "sam@example.com"})
    assert messages(scratch, env.base) == got
    built = env.rebuild().tree
    assert git(scratch, "rev-parse", "signed^{tree}") == git(built, "rev-parse", "HEAD^{tree}")


def test_no_identity_is_one_line_exit_1_and_nothing_written(env):
    four_patches(env)
    mine = env.tmp / "mine.mbox"
    mine.write_text("the user's own file\n")
    for name, email, missing in ((None, None, "user."), ("Sam Sender", None, "user.email"),
                                 (None, "sam@example.com", "user.name")):
        user = home(env, name, email)  # $EMAIL is set: git must not guess from it
        for args in ((), ("--mbox", str(mine)), ("--mbox", "-")):
            p = send(env, *args, user=user, check=1)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and missing in lines[0] and "git config --global user.name" in lines[0], p.stderr
            assert "nothing written" in lines[0] and p.stdout == ""
        assert not (env.root / "build/upstream").exists() and mine.read_text() == "the user's own file\n"
    p = send(env, "--json", user=home(env), check=1)
    assert json.loads(p.stdout)["exit_code"] == 1


def test_signoff_as_overrides_and_is_checked(env):
    four_patches(env)
    user = home(env, "Sam Sender", "sam@example.com")
    p = send(env, "--mbox", "-", "--signoff-as", "Zoë Ünal <zoe@example.com>", user=user)
    assert p.stdout.count("Signed-off-by: Zoë Ünal <zoe@example.com>\n---\n") == 4
    assert p.stdout.count(SAM_SOB) == 2  # the patch files' own (nine, twenty), none from the config
    scratch = env.tmp / "z"
    git(env.tmp, "clone", "-q", str(env.up.path), str(scratch))
    git(scratch, "checkout", "-q", env.base)
    git(scratch, "am", "-q", "-k", input=p.stdout.encode())  # the non-ASCII name survives git am
    assert all(m.endswith("Signed-off-by: Zoë Ünal <zoe@example.com>") for m in messages(scratch, env.base))
    for bad in ("Zoe", "Zoe <zoe>", "<zoe@example.com>", "Zoe zoe@example.com"):
        p = send(env, "--signoff-as", bad, user=user, check=2)
        assert len(p.stderr.strip().splitlines()) == 1 and "is not 'Name <email>'" in p.stderr, p.stderr
    p = send(env, "--signoff-as", TEAM_IDENTITY, user=user, check=1)
    assert "not a person" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = send(env, user=home(env, "DeepSeek V4 patch maintainers", "dsv4-patch@users.noreply.github.com"), check=1)
    assert "not a person" in p.stderr
    assert not (env.root / "build/upstream").exists()
    p = subprocess.run([sys.executable, str(TOOL), "export", "demo", "--signoff-as", SAM, "--project", str(env.root)],
                       capture_output=True, text=True, env=user)
    assert p.returncode == 2 and "--signoff-as goes with --upstream" in p.stderr
