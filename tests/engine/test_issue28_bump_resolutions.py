"""Issue 28 item 7, bump's side: a remembered resolution (patches/<stack>/resolutions/, which can
arrive in a pull request) was laid by bump with no check at all: one that also adds a file the
patch never touches, a path into .git or a symlink out of the tree went into the bumped tree (and
from there into the refreshed patch). Bump now reads and checks it with the very code apply uses
(bump/resolutions.py: read, foreign_paths, refuse_foreign): one line naming the resolution file,
nothing laid, no patch file or pin written."""

from __future__ import annotations

import shutil

import pytest
from synth import git
from test_safety_newpaths import _apply, _private_cache, _resolve_by_hand, _stack_that_conflicts  # noqa: F401

from dsv4_patch.bump import BumpOptions, bump
from dsv4_patch.config import load_project
from dsv4_patch.errors import PatchFormatError


def _recorded_then_repinned_back(env) -> tuple[str, str]:
    """A resolution recorded by apply --continue at the new pin; the stack pinned back to the old
    one, so that `bump` to the new pin meets the same conflict, with the same key."""
    old = env.base
    failed = _stack_that_conflicts(env, keep_old_tree=False)
    new = env.base
    _resolve_by_hand(failed)
    _apply(env, resume=True)
    env.repin(old)
    return old, new


def _bump(env, ref):
    return bump(load_project(env.root), "demo", ref, opts=BumpOptions(out=env.out, regress=False, semantic=False),
                cache=env.cache)


def _evil(env, extra: str) -> bytes:
    """The recorded resolution as a pull request could change it: the same change plus `extra`."""
    from dsv4_patch.exporter import strip_trailer

    if extra == "not-a-patch":
        return b"not a patch at all\n"
    tree = env.out / "demo"
    three = git(tree, "log", "--format=%H", "--grep=^\\[DSV4\\] Three", "refs/dsv4/base..HEAD").split()[0]
    scratch = env.tmp / f"scratch-{extra}"
    git(env.tmp, "clone", "-q", str(tree), str(scratch))
    git(scratch, "checkout", "-q", three)
    if extra == "escaping-link":
        (scratch / "src/a.py").unlink()  # the patch's own file, made a link out of the tree
        (scratch / "src/a.py").symlink_to("../../../outside")
    else:
        (scratch / "src/evil.py").write_text("import os\n")  # (renamed to .GIT/hooks/... below)
    git(scratch, "add", "-A")
    git(scratch, "commit", "-q", "--amend", "--no-edit")
    evil, _ = strip_trailer(git(scratch, "format-patch", "-1", "--stdout", "--full-index", "--no-signature",
                                "--keep-subject", "--no-stat", "HEAD").encode())
    return evil.replace(b"src/evil.py", b".GIT/hooks/post-checkout") if extra == "into-dot-git" else evil


WANT = {"another-file": "src/evil.py", "escaping-link": "points outside", "into-dot-git": ".git",
        "not-a-patch": "not a usable resolution"}


def test_bump_checks_a_recorded_resolution_as_apply_does(env):
    """The recorded resolution is used as it is; each changed version of it is refused by bump with
    the message apply gives, naming the file, and nothing is laid or written."""
    _, new = _recorded_then_repinned_back(env)
    [stored] = sorted((env.root / "patches/demo/resolutions").rglob("*.patch"))
    evils = {extra: _evil(env, extra) for extra in WANT}
    saved = env.tmp / "saved-patches"
    shutil.copytree(env.root / "patches", saved)
    rep = _bump(env, new)  # (a success refreshes the patches and moves the pin: put back below)
    assert next(o for o in rep.outcomes if o.patch == "three.patch").status == "resolved", rep.outcomes

    def files():
        return {p: p.read_bytes() for p in sorted((env.root / "patches").rglob("*")) if p.is_file()}

    for extra, evil in evils.items():
        shutil.rmtree(env.root / "patches")
        shutil.copytree(saved, env.root / "patches")
        stored.write_bytes(evil)
        shutil.rmtree(env.out / "demo.bump", ignore_errors=True)
        before = files()
        with pytest.raises(PatchFormatError) as ei:
            _bump(env, new)
        msg = ei.value.one_line()
        assert "\n" not in msg and str(stored) in msg and WANT[extra] in msg, (extra, msg)
        assert files() == before, extra
        bumped = env.out / "demo.bump"
        assert not (bumped / "src/evil.py").exists() and not (bumped / "src/a.py").is_symlink(), extra
