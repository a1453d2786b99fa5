"""A stack carried on two upstream releases (synthetic upstream): each release has its own pin,
series and tree (OUT/<stack> and OUT/<stack>@<tag>), and every command takes --release."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synth import META, author_commit, numbered
from test_cli import cli

from dsv4_patch import api
from dsv4_patch.config import load_project
from dsv4_patch.errors import ConfigError, UsageError
from dsv4_patch.exporter import export_stack
from dsv4_patch.pinning import add_release, set_keys
from dsv4_patch.tree import build_tree

TESTS = '''
import os
from pathlib import Path

def test_primary():
    tree = Path(os.environ["DSV4_TREE_DEMO"])
    assert os.environ["DSV4_RELEASE_DEMO"] == os.environ["EXPECT_PRIMARY"]
    assert "line three" in (tree / "src/a.py").read_text()
    assert not (tree / "src/c.txt").exists()

def test_release():
    tree = Path(os.environ["DSV4_TREE_DEMO"])
    assert os.environ["DSV4_RELEASE_DEMO"] == "v2"
    assert tree == Path(os.environ["DSV4_TREE_DEMO__V2"])
    assert (tree / "src/c.txt").read_text() == "patched in v2\\n"
    assert (Path(os.environ["DSV4_BASE_DEMO__V2"]) / "src/c.txt").read_text() == "new in v2\\n"
'''


def release_table(commit: str, upstream: Path, key: str = "v2", extra: str = "") -> str:
    return (f'\n[stacks.demo.releases."{key}"]\ncommit = "{commit}"\n{extra}'
            f'\n[[stacks.demo.releases."{key}".sources]]\nkind = "path"\npath = "{upstream}"\n')


def two_releases(env) -> str:
    """Primary pinned at the first upstream commit with patch 'three'; release v2 at a later
    commit (a.py shifted, c.txt new) with its own patch 'cee'. Returns v2's commit."""
    (env.root / "tests").mkdir(exist_ok=True)
    (env.root / "tests/test_demo.py").write_text(TESTS)
    meta = META.replace("tests/test_demo.py::test_ok", "tests/test_demo.py::test_primary")
    env.author({"src/a.py": numbered(60).replace("line 3\n", "line three\n")}, "[DSV4] Three", body="Why.\n\n" + meta)
    env.up.write("src/a.py", "header\n" + numbered(60))
    env.up.write("src/c.txt", "new in v2\n")
    v2 = env.up.commit("v2")
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text() + release_table(v2, env.up.path))
    rel_dir = env.root / "patches/demo/releases/v2"
    rel_dir.mkdir(parents=True)
    (rel_dir / "series").write_text("# v2 series\n")
    rel = load_project(env.root).target("demo@v2")
    tree = build_tree(rel, env.out, cache=env.cache).tree
    author_commit(tree, {"src/c.txt": "patched in v2\n"}, "[DSV4] Cee",
                  "Why.\n\n" + META.replace("tests/test_demo.py::test_ok", "tests/test_demo.py::test_release"))
    export_stack(rel, tree)
    return v2


def test_a_release_is_its_own_stack_config(env):
    v2 = two_releases(env)
    proj = load_project(env.root)
    primary, rel = proj.stack("demo"), proj.target("demo", "v2")
    assert [c.label for c in proj.targets()] == ["demo", "demo@v2"]
    assert (rel.primary, rel.release, rel.commit, rel.upstream) == (False, "v2", v2, primary.upstream)
    assert rel.patch_dir == env.root / "patches/demo/releases/v2"
    assert rel.table == '[stacks.demo.releases."v2"]' and rel.env_key == "DEMO__V2"
    # the primary answers to its own release name too
    assert proj.target("demo", primary.release) is primary
    assert [c.label for c in proj.targets(["demo"], ["v2"])] == ["demo@v2"]
    with pytest.raises(UsageError, match="no release 'v9'"):
        proj.targets(["demo"], ["v9"])


def test_apply_builds_every_release_into_its_own_tree(env):
    v2 = two_releases(env)
    import shutil

    shutil.rmtree(env.out)  # built from the patch files alone
    p = cli(env, "apply", "--json", check=0)
    rows = {r["label"]: r for r in json.loads(p.stdout)}
    assert set(rows) == {"demo", "demo@v2"}
    assert [r["status"] for r in rows.values()] == ["applied", "applied"]  # each built once, by its own row
    assert rows["demo@v2"]["release"] == "v2" and rows["demo@v2"]["primary"] is False
    assert rows["demo"]["base"] == env.base and rows["demo@v2"]["base"] == v2
    assert [c["patch"] for c in rows["demo"]["commits"]] == ["three.patch"]
    assert [c["patch"] for c in rows["demo@v2"]["commits"]] == ["cee.patch"]
    assert Path(rows["demo"]["tree"]) == env.out / "demo"  # the primary keeps build/<stack>
    assert Path(rows["demo@v2"]["tree"]) == env.out / "demo@v2"
    assert "line three" in (env.out / "demo/src/a.py").read_text()
    assert not (env.out / "demo/src/c.txt").exists()
    assert (env.out / "demo@v2/src/c.txt").read_text() == "patched in v2\n"
    assert "line three" not in (env.out / "demo@v2/src/a.py").read_text()


def test_release_selection_on_the_command_line(env):
    two_releases(env)
    for args in (["apply", "--release", "v2"], ["apply", "demo@v2"], ["apply", "demo", "-r", "v2"]):
        rows = json.loads(cli(env, *args, "--json", check=0).stdout)
        assert [r["label"] for r in rows] == ["demo@v2"], args
    p = cli(env, "apply", "--release", "v9", check=2)
    assert "no stack has release 'v9'" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = cli(env, "check", "demo@v9", check=2)
    assert "stack demo has no release 'v9'" in p.stderr


def test_export_writes_each_release_into_its_own_folder(env):
    two_releases(env)
    cli(env, "apply", check=0)
    before = {p.name: p.read_bytes() for p in (env.root / "patches/demo").glob("*") if p.is_file()}
    tree = env.out / "demo@v2"
    author_commit(tree, {"src/b.txt": numbered(30, "b").replace("b 5\n", "b five\n")}, "[DSV4] Five", "Why.\n\n" + META)
    rows = json.loads(cli(env, "export", "demo", "--json", check=0).stdout)
    assert [(r["label"], r["written"], r["series_changed"]) for r in rows] == [
        ("demo", [], False), ("demo@v2", ["five.patch"], True)]
    rel_dir = env.root / "patches/demo/releases/v2"
    assert (rel_dir / "series").read_text().splitlines()[1:] == ["cee.patch", "five.patch"]
    after = {p.name: p.read_bytes() for p in (env.root / "patches/demo").glob("*") if p.is_file()}
    assert after == before  # the primary's files and series are untouched
    # one release: one JSON object, as before releases existed
    one = json.loads(cli(env, "export", "demo@v2", "--check", "--json", check=0).stdout)
    assert one["label"] == "demo@v2" and one["stale"] is False


def test_export_skips_a_release_without_a_tree_unless_named(env):
    two_releases(env)
    cli(env, "apply", "demo", "--release", env.stack.release, check=0)
    import shutil

    shutil.rmtree(env.out / "demo@v2")
    p = cli(env, "export", "demo", check=0)
    assert "demo@v2: skipped, no tree" in p.stdout
    p = cli(env, "export", "demo@v2", check=1)
    assert "no patched tree" in p.stderr and "dsv4-patch apply demo@v2" in p.stderr


def test_check_and_status_cover_every_release(env):
    two_releases(env)
    cli(env, "check", check=0)
    (env.root / "patches/demo/releases/v2/stray.patch").write_text("x")
    p = cli(env, "check", "--json", check=1)
    got = [(f["file"], f["stack"], f["release"]) for f in json.loads(p.stdout)]
    assert got == [("patches/demo/releases/v2/stray.patch", "demo", "v2")]
    cli(env, "check", "--release", env.stack.release, check=0)  # the primary alone is clean
    rows = json.loads(cli(env, "status", "--json", check=0).stdout)
    assert [(r["label"], r["release"], [x["name"] for x in r["patches"]]) for r in rows] == [
        ("demo", env.stack.release, ["three.patch"]), ("demo@v2", "v2", ["cee.patch"])]


def test_regress_runs_each_release_against_its_own_trees(env, monkeypatch):
    two_releases(env)
    monkeypatch.setenv("EXPECT_PRIMARY", env.stack.release)
    p = cli(env, "regress", "--json", check=0)
    rows = {(r["label"], r["patch"]): (r["outcome"], r["release"]) for r in json.loads(p.stdout)["patches"]}
    assert rows == {("demo", "three.patch"): ("passed", env.stack.release),
                    ("demo@v2", "cee.patch"): ("passed", "v2")}
    p = cli(env, "regress", "--release", "v2", "--json", check=0)
    assert [r["label"] for r in json.loads(p.stdout)["patches"]] == ["demo@v2"]


def test_recorded_levels_land_in_each_release_folder_and_the_matrix_shows_them(env, monkeypatch):
    from dsv4_patch.e2e.matrix import compute_matrix

    two_releases(env)
    monkeypatch.setenv("EXPECT_PRIMARY", env.stack.release)
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(env.cache.root))
    proj = load_project(env.root)
    rep = api.regress(proj, None, releases=["v2"])
    written = api.record_levels(proj, rep, ["integration"], "cpu")
    assert [p.parent for p in written] == [env.root / "patches/demo/releases/v2/results"]
    rows = {m.stack: [(r.name, [(c.level, c.hardware, c.status) for c in r.cells]) for r in m.rows]
            for m in compute_matrix(env.root)}
    assert rows == {"demo": [("three.patch", [])],
                    "demo@v2": [("cee.patch", [("integration", "cpu", "passed")])]}


def test_tree_for_tests_reads_the_release_variables(env):
    two_releases(env)
    prim = env.stack.release
    e = {"DSV4_TREE_DEMO": "/t/under-test", "DSV4_BASE_DEMO": "/b/under-test", "DSV4_RELEASE_DEMO": "v2",
         "DSV4_TREE_DEMO__V2": "/t/v2", "DSV4_TREE_DEMO__" + prim.upper(): "/t/primary"}
    assert api.tree_for_tests(env.root, "demo", environ=e) == Path("/t/under-test")
    assert api.tree_for_tests(env.root, "demo", patched=False, environ=e) == Path("/b/under-test")
    assert api.tree_for_tests(env.root, "demo", release="v2", environ=e) == Path("/t/under-test")
    assert api.tree_for_tests(env.root, "demo", release=prim, environ=e) == Path("/t/primary")
    # a plain run (no DSV4_RELEASE_*): DSV4_TREE_DEMO is the primary, also when asked for by its name
    e = {"DSV4_TREE_DEMO": "/t/primary", "DSV4_TREE_DEMO__V2": "/t/v2"}
    assert api.tree_for_tests(env.root, "demo", release=prim, environ=e) == Path("/t/primary")
    assert api.tree_for_tests(env.root, "demo", release="v2", environ=e) == Path("/t/v2")


def test_pin_keys_land_in_the_release_table_only(env):
    two_releases(env)
    proj = load_project(env.root)
    rel = proj.target("demo@v2")
    text = set_keys(proj.config_path.read_text(), rel.table, {"commit": "abc1234"})
    proj.config_path.write_text(text)
    again = load_project(env.root)
    assert again.stack("demo").commit == env.base and again.target("demo@v2").commit == "abc1234"


def test_add_release_declares_a_validated_release(env):
    v2 = two_releases(env)
    proj = load_project(env.root)
    before = proj.config_path.read_text()
    new = add_release(proj, proj.stack("demo"), "v3", v2, [{"kind": "path", "path": str(env.up.path)}])
    assert new.label == "demo@v3" and new.patch_dir == env.root / "patches/demo/releases/v3"
    text = proj.config_path.read_text()
    assert text.startswith(before.rstrip("\n"))  # appended after the stack's tables, the rest kept
    assert [c.label for c in load_project(env.root).targets()] == ["demo", "demo@v2", "demo@v3"]
    for tag, err in (("v3", "already has release v3"), ("../x", "not a plain tag"), (env.stack.release, "already has")):
        with pytest.raises(ConfigError, match=err):
            add_release(load_project(env.root), proj.stack("demo"), tag, v2, [{"kind": "git"}])
        assert proj.config_path.read_text() == text  # nothing written


def test_release_tables_are_validated(env):
    toml = env.root / "patches/stacks.toml"
    base = toml.read_text()
    cases = {
        release_table("abc", env.up.path, extra='patches = "../../x"\n'): "must name a folder inside patches/",
        release_table("abc", env.up.path, extra='patches = "demo"\n'): "share the patch folder",
        release_table("abc", env.up.path, key=env.base[:12]): "is the primary release of demo",
        release_table("abc", env.up.path, extra='comit = "x"\n'): "unknown key 'comit'",
        release_table("abc", env.up.path, key="a/b"): "not a plain tag",
    }
    for extra, msg in cases.items():
        toml.write_text(base + extra)
        with pytest.raises(ConfigError, match=msg) as e:
            load_project(env.root)
        assert "\n" not in e.value.one_line()


def test_a_bare_continue_finishes_the_release_that_stopped(env):
    """`apply STACK --continue` with a stack of several releases continues the one whose apply
    stopped; it used to fail on every other release ("no stopped apply to continue")."""
    two_releases(env)
    cli(env, "apply", check=0)
    env.up.write("src/a.py", numbered(60).replace("line 3\n", "line 3 (upstream)\n"))
    env.repin(env.up.commit("upstream rewrites line 3"))
    cli(env, "apply", "demo", check=3)  # the primary stops; v2 is unchanged
    failed = env.out / ".dsv4" / "failed" / "demo"
    assert "<<<<<<<" in (failed / "src/a.py").read_text()
    (failed / "src/a.py").write_text(numbered(60).replace("line 3\n", "line three (upstream)\n"))
    p = cli(env, "apply", "demo", "--continue", check=0)
    assert "demo@v2" not in p.stdout + p.stderr
    assert "line three (upstream)" in (env.out / "demo/src/a.py").read_text()
