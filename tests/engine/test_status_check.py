"""`status --check`: whether the stack applies at its pin, decided from the pristine tree's objects
where the fast path can make every commit, by a real `git am` build (and its report) otherwise."""

from __future__ import annotations

import pytest
from synth import numbered

from dsv4_patch import api, tree
from dsv4_patch.config import load_project


@pytest.fixture
def built(monkeypatch):
    """The names of the trees status --check builds (upto=0: the pristine pin)."""
    names = []
    real = tree.build_tree

    def spy(cfg, out, **kw):
        names.append("pristine" if kw.get("upto") == 0 else "patched")
        return real(cfg, out, **kw)

    monkeypatch.setattr(tree, "build_tree", spy)
    return names


def _status(env, semantic=True):
    (row,) = api.status(load_project(env.root), ["demo"], check_apply=True, semantic=semantic, cache=env.cache)
    return row


def test_a_stack_that_applies_exactly_needs_no_patched_tree(env, built):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.author({"src/b.txt": numbered(30, "b").replace("b 7\n", "b seven\n")}, "[DSV4] Seven")
    row = _status(env)
    assert row.applies == {"ok": True}
    assert built == ["pristine"]
    assert [s["patch"] for s in row.semantic] == ["three.patch", "seven.patch"]  # the intent runs had their tree


def test_without_the_intent_tests_only_the_patched_tree_is_built(env, built):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    assert _status(env, semantic=False).applies == {"ok": True}
    assert built == ["patched"]


def test_an_empty_series_applies(env, built):
    assert _status(env).applies == {"ok": True}
    assert built == ["pristine"]


def test_a_patch_git_am_places_at_an_offset_applies(env, built):
    env.author({"src/a.py": numbered(60).replace("line 30\n", "line thirty\n")}, "[DSV4] Thirty")
    env.up.write("src/a.py", "".join(f"new {i}\n" for i in range(5)) + numbered(60))
    env.repin(env.up.commit("upstream adds lines at the top"))  # the hunk now sits 5 lines lower
    assert _status(env).applies == {"ok": True}
    assert built == ["pristine", "patched"]  # the fast path declines offsets; git am placed it


def test_a_conflict_at_the_pin_is_reported_by_patch(env, built):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.up.write("src/a.py", numbered(60).replace("line 3\n", "line 3 (upstream)\n"))
    env.repin(env.up.commit("upstream rewrites line 3"))
    applies = _status(env).applies
    assert applies["ok"] is False
    assert applies["failure"]["patch"] == "three.patch" and applies["failure"]["kind"] == "conflict"
    assert applies["failure"]["failed_tree"] is None  # it was in status's own temporary folder
    assert built == ["pristine", "patched"]


def test_a_patch_already_in_the_pin_is_reported_upstreamed(env, built):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    env.up.write("src/a.py", numbered(60).replace("line 3\n", "line three\n"))
    env.repin(env.up.commit("upstream makes the same change"))
    applies = _status(env).applies
    assert applies["ok"] is False and applies["failure"]["patch"] == "three.patch"
    assert applies["failure"]["kind"] == "upstreamed", applies


def test_a_patch_writing_outside_the_tree_is_refused_as_apply_refuses_it(env):
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three")
    p = env.root / "patches" / "demo" / "three.patch"
    p.write_bytes(p.read_bytes().replace(b"src/a.py", b"../escape.py"))
    applies = _status(env).applies
    assert applies["ok"] is False and "escape.py" in str(applies["failure"])
    assert not (env.root.parent / "escape.py").exists()
