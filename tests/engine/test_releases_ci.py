"""ci/pr_check.py and bump over a stack carried on two releases (synthetic upstream)."""

from __future__ import annotations

from synth import numbered
from test_releases import two_releases

from ci import pr_check
from dsv4_patch.bump import BumpOptions, bump
from dsv4_patch.config import load_project
from dsv4_patch.pinning import declare_bumped_release, set_keys
from dsv4_patch.tree import build_tree


def test_pr_check_covers_every_release(env, monkeypatch):
    two_releases(env)
    monkeypatch.setenv("EXPECT_PRIMARY", env.stack.release)
    lines: list[str] = []
    assert pr_check.run(env.root, ["check", "apply", "export", "regress"], None, None, emit=lines.append) == 0, lines
    assert lines == []
    assert (env.out / "demo").is_dir() and (env.out / "demo@v2").is_dir()


def test_a_release_that_does_not_apply_is_annotated_on_its_own_patch(env):
    two_releases(env)
    proj = load_project(env.root)
    rel = proj.target("demo@v2")
    # v2's patch edits src/c.txt, which the primary's base does not have
    proj.config_path.write_text(set_keys(proj.config_path.read_text(), rel.table, {"commit": env.base}))
    lines: list[str] = []
    assert pr_check.run(env.root, ["apply"], None, None, emit=lines.append) == 1
    assert len(lines) == 1 and lines[0].startswith("::error file=patches/demo/releases/v2/cee.patch,"), lines
    lines.clear()
    assert pr_check.run(env.root, ["apply"], None, None, emit=lines.append, releases=[env.stack.release]) == 0
    assert lines == []


def _upstream_v3(env) -> str:
    env.up.write("src/b.txt", "top\n" + numbered(30, "b"))
    return env.up.commit("v3")


def test_bump_of_a_release_refreshes_its_folder_and_moves_its_pin_only(env):
    two_releases(env)
    v3 = _upstream_v3(env)
    primary_files = {p.name: p.read_bytes() for p in (env.root / "patches/demo").glob("*.patch")}
    rep = bump(load_project(env.root), "demo@v2", v3, opts=BumpOptions(out=env.out, regress=False), cache=env.cache)
    assert rep.status == "ok" and rep.written_to == str(env.root / "patches/demo/releases/v2")
    after = load_project(env.root)
    assert after.stack("demo").commit == env.base and after.target("demo@v2").commit == v3
    assert {p.name: p.read_bytes() for p in (env.root / "patches/demo").glob("*.patch")} == primary_files


def test_a_bumped_stack_declared_as_a_new_release_builds(env):
    two_releases(env)
    v3 = _upstream_v3(env)
    proj = load_project(env.root)
    into = env.root / "patches/demo/releases/v3"
    rep = bump(proj, "demo", v3, opts=BumpOptions(out=env.out, regress=False, into=into), cache=env.cache)
    assert rep.status == "ok"
    rel = declare_bumped_release(proj, proj.stack("demo"), "v3", {"stack": {"commit": v3}}, None)
    assert rel.patch_dir == into and rel.sources[0].kind == "path"
    res = build_tree(load_project(env.root).target("demo@v3"), env.out, cache=env.cache)
    assert res.tree == env.out / "demo@v3" and res.base == v3
    assert [p for p, _ in res.commits] == ["three.patch"]
    assert "line three" in (res.tree / "src/a.py").read_text() and (res.tree / "src/b.txt").read_text().startswith("top\n")
