"""Issue 28 item 12, the two last smaller ones:

- OUT/<stack> (and the kept failed tree) was always mode 0700 (tempfile.mkdtemp's staging folder
  renamed into place) whatever the umask: it now follows the umask, as `git clone` does.
- A pin that names a branch of a git source (`commit = "main"`: fetch_ref re-fetches branches) was
  re-resolved by a fresh build but never by an apply over a built tree: "nothing changed (same
  base, same patch bytes)" while upstream had moved, even with --force. An apply over a built
  tree now asks the source where the branch is, and rebuilds when it moved.
"""

from __future__ import annotations

import os
import shutil
import stat

import pytest
from synth import git, numbered

from dsv4_patch import api
from dsv4_patch.config import load_project
from dsv4_patch.errors import ConflictError


@pytest.fixture(autouse=True)
def _private_cache(env, monkeypatch):
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(env.cache.root))


@pytest.fixture
def umask():
    old = os.umask(0o022)
    try:
        yield lambda m: os.umask(m)
    finally:
        os.umask(old)


def _apply(env, **kw):
    return api.apply(load_project(env.root), ["demo"], out=env.out, **kw)


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_the_tree_follows_the_umask(env, umask, mask):
    umask(mask)
    _apply(env)
    assert _mode(env.out / "demo") == 0o777 & ~mask
    assert _mode(env.out / "demo" / "src") == 0o777 & ~mask  # (git's own, for comparison)


def test_a_kept_failed_tree_follows_the_umask(env, umask):
    umask(0o022)
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.up.write("src/a.py", numbered(60).replace("line 3\n", "line 3 (upstream)\n"))
    env.repin(env.up.commit("upstream rewrites line 3"))
    with pytest.raises(ConflictError):
        _apply(env)
    assert _mode(env.out / ".dsv4" / "failed" / "demo") == 0o755


# ------------------------------------------------------------------------ a pin that is a branch
def _branch_pinned(env) -> str:
    branch = git(env.up.path, "rev-parse", "--abbrev-ref", "HEAD").strip()
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text().replace('kind = "path"\npath =', 'kind = "git"\nurl =')
                    .replace(f'commit = "{env.base}"', f'commit = "{branch}"'))
    return branch


def _base(env) -> str:
    return git(env.out / "demo", "rev-parse", "refs/dsv4/base").strip()


@pytest.mark.parametrize("patched", [False, True])
def test_an_apply_over_a_built_tree_follows_a_branch_pin(env, patched):
    if patched:
        env.author({"src/b.txt": numbered(30, "b").replace("b 7\n", "b seven\n")}, "[DSV4] Seven")
        shutil.rmtree(env.out / "demo")
    _branch_pinned(env)
    first = _apply(env)[0]
    assert _base(env) == env.base
    assert _apply(env)[0].status == "noop"  # the branch did not move: still a no-op
    env.up.write("src/a.py", numbered(60).replace("line 9\n", "line nine (upstream)\n"))
    moved = env.up.commit("upstream moves the branch")
    again = _apply(env)[0]
    assert again.status == "applied" and again.base == moved and _base(env) == moved, again
    assert "line nine (upstream)" in (env.out / "demo/src/a.py").read_text()
    if patched:
        assert "b seven" in (env.out / "demo/src/b.txt").read_text()
    assert first.base != again.base
    # what a fresh build of the same pin makes
    fresh = api.apply(load_project(env.root), ["demo"], out=env.tmp / "fresh")[0]
    assert fresh.base == moved and [c[0] for c in fresh.commits] == [c[0] for c in again.commits]
    assert git(env.tmp / "fresh" / "demo", "rev-parse", "HEAD^{tree}") == git(env.out / "demo", "rev-parse", "HEAD^{tree}")


def test_a_full_hash_pin_is_never_fetched_again(env):
    """Only a branch is movable: a hash pin's no-op contacts no source (the upstream may be gone)."""
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text().replace('kind = "path"\npath =', 'kind = "git"\nurl ='))
    _apply(env)
    shutil.move(env.up.path, env.tmp / "upstream-gone")
    assert _apply(env)[0].status == "noop"


def test_a_branch_pin_whose_source_is_unreachable_keeps_the_tree_and_says_so(env):
    _branch_pinned(env)
    _apply(env)
    shutil.move(env.up.path, env.tmp / "upstream-gone")
    res = _apply(env)[0]
    assert res.status == "noop" and _base(env) == env.base
    assert "not looked up again" in res.note, res.note
