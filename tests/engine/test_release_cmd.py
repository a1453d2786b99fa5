"""`dsv4-patch release add|move|retire`, bump's port advice, conflict trees that survive a round,
and the carried commits' messages (synthetic upstreams: tests/engine/synth.py, tests/bump/bumpkit.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bump"))

from bumpkit import BumpEnv, edit  # noqa: E402
from synth import numbered  # noqa: E402

from dsv4_patch.bump import BumpOptions, bump, record_resolutions  # noqa: E402
from dsv4_patch.bump.report import bump_markdown  # noqa: E402
from dsv4_patch.config import load_project  # noqa: E402


@pytest.fixture
def benv(tmp_path) -> BumpEnv:
    return BumpEnv(tmp_path)


def run(benv, ref, stack="demo", **kw):
    opts = BumpOptions(out=benv.out, **{"regress": False, "semantic": False, **kw})
    return bump(load_project(benv.root), stack, ref, opts=opts, cache=benv.cache)


# --- conflict trees survive a round ------------------------------------------------------------

def test_a_conflict_tree_with_work_survives_the_next_round_and_is_named_by_its_patch(benv):
    benv.author_all(("p1", "p4"))
    new = benv.upstream_next(upstreamed=False, obsolete=False)
    rep = run(benv, new)
    tree = benv.out / "demo.bump-conflicts/p4-conflict"
    assert rep.conflict_trees == {"p4-conflict.patch": str(tree)}
    assert rep.trees["kept"] == {}
    partial = (tree / "src/a.py").read_text().replace("line 10 p1\n", "line 10 p1 (half resolved)\n")
    (tree / "src/a.py").write_text(partial)
    # the same conflict again: the tree and its work stay as they are
    rep = run(benv, new)
    assert rep.conflict_trees == {"p4-conflict.patch": str(tree)}
    assert (tree / "src/a.py").read_text() == partial
    assert rep.trees["kept"]["p4-conflict.patch"] == ["edited src/a.py"]
    assert "Kept from the last round with your work in it: edited src/a.py" in bump_markdown(rep)
    # another upstream: another pre-image; the tree with work is left in place and named
    benv.up.write("src/a.py", edit(numbered(60), "line 50\n", "line 50 elsewhere\n"))
    other = benv.up.commit("upstream again")
    rep = run(benv, other)
    assert (tree / "src/a.py").read_text() == partial
    assert [(x["tree"], x["why"]) for x in rep.trees["left"]] == [(str(tree), "made against another pre-image")]
    md = bump_markdown(rep)
    assert "Conflict trees left in place" in md and "--force" in md
    # --force discards it and makes the tree of this round
    rep = run(benv, other, force=True)
    assert rep.trees["left"] == [] and rep.conflict_trees == {"p4-conflict.patch": str(tree)}
    assert "line 50 elsewhere" in (tree / "src/a.py").read_text()
    assert "half resolved" not in (tree / "src/a.py").read_text()


def test_a_commit_or_a_staged_resolution_is_work_and_a_recorded_one_is_not(benv):
    benv.author_all(("p1", "p4"))
    new = benv.upstream_next(upstreamed=False, obsolete=False)
    run(benv, new)
    tree = benv.out / "demo.bump-conflicts/p4-conflict"
    resolved = edit(edit(numbered(60), "line 10\n", "line 10 p1\n"), "line 37\n", "line 37 upstream\n")
    (tree / "src/a.py").write_text(edit(resolved, "line 50\n", "line 50 upstream p4\n"))
    from dsv4_patch.gitcmd import Git

    Git(tree).run("add", "src/a.py")
    benv.up.write("src/zz.txt", "unrelated\n")
    later = benv.up.commit("unrelated upstream change")  # p4 meets the same pre-image blobs, another commit
    rep = run(benv, later)
    assert rep.trees["left"] and rep.trees["left"][0]["work"] == ["edited src/a.py"]
    [r] = record_resolutions(load_project(benv.root), "demo", out=benv.out)
    assert r["recorded"], r
    rep = run(benv, new)  # resolved by the recorded resolution: the tree (now recorded) goes
    assert [o.status for o in rep.outcomes] == ["clean", "resolved"]
    assert not tree.exists() and rep.trees["left"] == []


def test_a_folder_bump_did_not_make_is_never_deleted(benv):
    benv.author_all(("p1", "p4"))
    new = benv.upstream_next(upstreamed=False, obsolete=False)
    mine = benv.out / "demo.bump-conflicts/notes"
    mine.mkdir(parents=True)
    (mine / "todo.txt").write_text("mine\n")
    run(benv, new)
    run(benv, new)
    assert (mine / "todo.txt").read_text() == "mine\n"


def test_the_report_names_the_blocked_patches_a_tree_lacks(benv):
    a = edit(numbered(60), "line 10\n", "line 10 pA\n")
    benv.author({"src/a.py": a}, "[DSV4] pA")
    benv.author({"src/a.py": edit(a, "line 50\n", "line 50 pB\n")}, "[DSV4] pB")
    benv.up.write("src/a.py", edit(edit(numbered(60), "line 10\n", "line 10 up\n"), "line 50\n", "line 50 up\n"))
    rep = run(benv, benv.up.commit("upstream changes both lines"))
    assert rep.trees["skipped_before"] == {"pa.patch": [], "pb.patch": ["pa.patch"]}
    assert "This tree lacks the earlier blocked patch(es) `pa.patch`" in bump_markdown(rep)
    data = json.loads(json.dumps(rep.to_dict(), default=str))
    assert data["trees"]["skipped_before"]["pb.patch"] == ["pa.patch"]


# --- release add / move / retire ---------------------------------------------------------------

from synth import META, author_commit, git  # noqa: E402
from test_releases import two_releases  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from dsv4_patch import releases  # noqa: E402
from dsv4_patch.exporter import export_stack  # noqa: E402
from dsv4_patch.tree import build_tree  # noqa: E402
from tools.applypatch import app  # noqa: E402

OPTS = dict(regress=False, semantic=False)


def _v3(env, c_txt: str | None = None) -> str:
    """The next upstream release, tagged v3: b.txt gains a line on top (c.txt changed if given)."""
    env.up.write("src/b.txt", "top\n" + numbered(30, "b"))
    if c_txt is not None:
        env.up.write("src/c.txt", c_txt)
    sha = env.up.commit("v3")
    git(env.up.path, "tag", "v3")
    return sha


def _cli(env, *args):
    return CliRunner().invoke(app, ["release", *args, "--project", str(env.root), "--out", str(env.out)])


def test_release_add_carries_the_nearest_series_and_writes_table_and_folder_together(env):
    two_releases(env)
    v3 = _v3(env)
    toml = env.root / "patches/stacks.toml"
    before = toml.read_text()
    res = releases.add(load_project(env.root), "demo", "v3", opts=releases.ReleaseOptions(out=env.out, **OPTS),
                       cache=env.cache)
    assert (res.status, res.source_release) == ("ok", "v2")  # the newest release older than v3
    assert (res.result, res.exit_code) == ("unverified", 4)  # written; no regression tests ran
    after = toml.read_text()
    assert after.startswith(before.rstrip("\n")) and '[stacks.demo.releases."v3"]' in after  # the rest byte for byte
    rel = load_project(env.root).target("demo@v3")
    assert rel.commit == v3 and rel.patch_dir == env.root / "patches/demo/releases/v3"
    assert (rel.patch_dir / "series").read_text().split()[-1] == "cee.patch"
    assert not list(rel.patch_dir.parent.glob(".*"))  # no staging folder left
    built = build_tree(rel, env.out, cache=env.cache)
    assert (built.tree / "src/c.txt").read_text() == "patched in v2\n" and (built.tree / "src/b.txt").read_text().startswith("top\n")
    # a second add of the same release is refused, naming move
    r = _cli(env, "add", "demo", "v3")
    assert r.exit_code == 2 and "release move demo v3" in r.output


def test_release_add_stops_on_a_conflict_with_nothing_written_then_takes_the_resolution(env):
    two_releases(env)
    _v3(env, c_txt="changed in v3\n")  # v2's patch rewrites this very line
    toml = env.root / "patches/stacks.toml"
    before = toml.read_text()
    r = _cli(env, "add", "demo", "v3", "--no-regress", "--no-semantic")
    assert r.exit_code == 3, r.output
    err = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "demo@v2.bump-conflicts/cee" in err[0] and "release-report.md" in err[0]
    assert "cee.patch: conflict (src/c.txt)" in r.output
    assert toml.read_text() == before and not (env.root / "patches/demo/releases/v3").exists()
    assert not list((env.root / "patches/demo/releases").glob(".*"))
    report = (env.out / "demo@v3.release-report.md").read_text()
    assert "then `dsv4-patch release add demo v3 --from v2 --record-resolution`" in report
    assert "dsv4-patch bump demo@v2" not in report  # that would refresh and re-pin v2 itself
    tree = env.out / "demo@v2.bump-conflicts/cee"
    (tree / "src/c.txt").write_text("patched in v3\n")
    r = _cli(env, "add", "demo", "v3", "--no-regress", "--no-semantic", "--record-resolution")
    assert r.exit_code == 4 and "demo@v3 is unverified" in r.output, r.output
    assert "cee.patch: resolved" in r.output
    assert "+patched in v3" in (env.root / "patches/demo/releases/v3/cee.patch").read_text()


def test_release_add_dry_run_and_json_write_nothing(env):
    two_releases(env)
    _v3(env)
    toml = env.root / "patches/stacks.toml"
    before = toml.read_text()
    r = _cli(env, "add", "demo", "v3", "--from", "v2", "--dry-run", "--json", "--no-semantic")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["status"] == "dry-run" and data["from"] == "v2" and '[stacks.demo.releases."v3"]' in data["toml_block"]
    assert toml.read_text() == before and not (env.root / "patches/demo/releases/v3").exists()


def test_release_move_renames_table_and_folder_and_repins(env):
    two_releases(env)
    v3 = _v3(env)
    r = _cli(env, "move", "demo", "v2", "v3", "--no-regress", "--no-semantic")
    assert r.exit_code == 4, r.output
    proj = load_project(env.root)
    assert [c.label for c in proj.targets()] == ["demo", "demo@v3"]
    assert proj.target("demo@v3").commit == v3
    assert not (env.root / "patches/demo/releases/v2").exists()
    assert (env.root / "patches/demo/releases/v3/cee.patch").is_file()
    assert "v2" not in (env.root / "patches/stacks.toml").read_text().split("[stacks.demo.releases")[1]


def test_a_release_added_then_retired_leaves_stacks_toml_as_it_was(env):
    two_releases(env)
    _v3(env)
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text() + "\n# a table after the releases\n[stacks.other]\nupstream = \"x\"\ncommit = \"0\"\n"
                    "\n[[stacks.other.sources]]\nkind = \"path\"\npath = \"/nowhere\"\n")
    (env.root / "patches/other").mkdir()
    (env.root / "patches/other/series").write_text("")
    before = toml.read_text()
    assert _cli(env, "add", "demo", "v3", "--no-regress", "--no-semantic").exit_code == 4
    text = toml.read_text()
    assert text.index('[stacks.demo.releases."v3"]') < text.index("# a table after the releases")
    assert "\n# Carried from the v2 series by `dsv4-patch release add` (1 clean).\n" in text
    assert _cli(env, "retire", "demo", "v3", "--force").exit_code == 0
    assert toml.read_text() == before


def test_release_retire_removes_a_release_refuses_the_primary_and_names_the_history(env):
    two_releases(env)
    git(env.root, "init", "-q")
    git(env.root, "add", "-A", "patches")
    git(env.root, "commit", "-q", "-m", "project")
    head = git(env.root, "rev-parse", "--short", "HEAD").strip()
    primary = load_project(env.root).stack("demo").release
    r = _cli(env, "retire", "demo", primary)
    assert r.exit_code == 2 and "primary" in r.output
    (env.root / "patches/demo/releases/v2/series").write_text("# edited\ncee.patch\n")
    r = _cli(env, "retire", "demo", "v2")
    assert r.exit_code == 1 and "git does not hold" in r.output
    git(env.root, "checkout", "-q", "--", "patches/demo/releases/v2/series")
    r = _cli(env, "retire", "demo", "v2", "--dry-run")
    assert r.exit_code == 0 and (env.root / "patches/demo/releases/v2").is_dir()
    r = _cli(env, "retire", "demo", "v2")
    assert r.exit_code == 0, r.output
    assert f"git checkout {head} -- patches/demo/releases/v2" in r.output
    assert not (env.root / "patches/demo/releases/v2").exists()
    assert [c.label for c in load_project(env.root).targets()] == ["demo"]
    assert "releases" not in (env.root / "patches/stacks.toml").read_text()


def test_every_release_command_teaches_in_its_help():
    for cmd in ("add", "move", "retire"):
        r = CliRunner().invoke(app, ["release", cmd, "--help"])
        assert r.exit_code == 0 and "--json" in r.output and "--dry-run" in r.output and "dsv4-patch release" in r.output
        assert "Exit codes: 0 " in r.output


# --- bump's advice -------------------------------------------------------------------------------

def test_bump_suggests_the_carried_release_whose_series_fits(env):
    two_releases(env)
    env.up.write("src/a.py", "header\n" + numbered(60).replace("line 3\n", "line 3 upstream\n"))
    git(env.up.path, "commit", "-q", "-am", "v3")
    git(env.up.path, "tag", "v3")
    rep = bump(load_project(env.root), "demo", "v3", opts=BumpOptions(out=env.out, **OPTS), cache=env.cache)
    assert rep.status == "conflicts"
    [hint] = [h for h in rep.hints if "fits" in h]
    assert "the v2 series fits v3 better: 1 of 1 patches apply" in hint
    assert hint.endswith("`dsv4-patch release add demo v3 --from v2`")
    assert "## Advice" in bump_markdown(rep)


def test_bump_onto_a_carried_release_says_so(env):
    two_releases(env)
    git(env.up.path, "tag", "v2")
    rep = bump(load_project(env.root), "demo", "v2", opts=BumpOptions(out=env.out, **OPTS), cache=env.cache)
    assert any(h.startswith("demo already carries v2 (patches/demo/releases/v2): `dsv4-patch apply demo@v2`")
               for h in rep.hints), rep.hints


# --- carried messages ----------------------------------------------------------------------------

def _versioned_release(env) -> None:
    """Release v0.2.0 carried with one patch whose message names v0.2.0 and its tests; tests for
    v0.3.0 exist for one of its two ids."""
    for v in ("v0_2", "v0_3"):
        d = env.root / "tests/regress/demo" / v
        d.mkdir(parents=True, exist_ok=True)
        body = "def test_release():\n    pass\n" + ("def test_other():\n    pass\n" if v == "v0_2" else "")
        (d / f"test_{v}_demo.py").write_text(body)
    env.up.write("src/c.txt", "new\n")
    v2 = env.up.commit("0.2.0")
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text() + f'\n[stacks.demo.releases."v0.2.0"]\ncommit = "{v2}"\n\n'
                    f'[[stacks.demo.releases."v0.2.0".sources]]\nkind = "path"\npath = "{env.up.path}"\n')
    rel = load_project(env.root).target("demo@v0.2.0")
    rel.patch_dir.mkdir(parents=True)
    (rel.patch_dir / "series").write_text("# series\n")
    tree = build_tree(rel, env.out, cache=env.cache).tree
    meta = META.replace("Regression-Test: tests/test_demo.py::test_ok\n",
                        "Regression-Test: tests/regress/demo/v0_2/test_v0_2_demo.py::test_release\n"
                        "Regression-Test: tests/regress/demo/v0_2/test_v0_2_demo.py::test_other\n")
    author_commit(tree, {"src/c.txt": "patched\n"}, "[DSV4] Cee", "Measured on vLLM-like 0.2.0 only.\n\n" + meta)
    export_stack(rel, tree)
    env.up.write("src/b.txt", "top\n" + numbered(30, "b"))
    env.up.commit("0.3.0")
    git(env.up.path, "tag", "v0.3.0")


def test_release_add_refreshes_test_ids_and_flags_what_names_the_old_release(env):
    _versioned_release(env)
    res = releases.add(load_project(env.root), "demo", "v0.3.0", opts=releases.ReleaseOptions(out=env.out, **OPTS),
                       cache=env.cache)
    assert res.status == "ok" and res.source_release == "v0.2.0"
    text = (env.root / "patches/demo/releases/v0.3.0/cee.patch").read_text()
    assert "Regression-Test: tests/regress/demo/v0_3/test_v0_3_demo.py::test_release\n" in text
    assert "Regression-Test: tests/regress/demo/v0_2/test_v0_2_demo.py::test_other\n" in text  # no counterpart: kept
    assert any("-> tests/regress/demo/v0_3/test_v0_3_demo.py::test_release" in m for m in res.messages)
    assert any("test_other names v0.2.0's test; no tests/regress/demo/v0_3/" in m for m in res.messages)
    assert any("message line 3 names v0.2.0: Measured on vLLM-like 0.2.0 only." in m for m in res.messages), res.messages
    assert releases.message_summary(res.messages) == [
        "[DSV4] Cee: 1 test id(s) moved to the new release's tests; 1 test id(s) still name the old release's tests "
        "(no counterpart); message line(s) 3 name the old version"]
    # the carried release's own folder is untouched
    assert "v0_3" not in (env.root / "patches/demo/releases/v0.2.0/cee.patch").read_text()


def test_bump_reports_each_patch_whose_message_names_the_old_release(env):
    _versioned_release(env)
    rep = bump(load_project(env.root), "demo@v0.2.0", "v0.3.0", opts=BumpOptions(out=env.out, **OPTS), cache=env.cache)
    [line] = [h for h in rep.hints if "its message names" in h]
    assert line.startswith("cee.patch: its message names v0.2.0 (2 test id(s) of v0.2.0's tests, patch file line(s) 6)")


def test_release_add_runs_the_new_release_regression_tests(env):
    two_releases(env)
    _v3(env)
    # v2's patch is bound to tests/test_demo.py::test_release, which insists on DSV4_RELEASE_DEMO == v2:
    # run against the new release it fails, which shows it ran there
    res = releases.add(load_project(env.root), "demo", "v3", opts=releases.ReleaseOptions(out=env.out, semantic=False),
                       cache=env.cache)
    assert res.status == "ok" and res.regress is not None and res.regress["ok"] is False
    assert (res.result, res.exit_code) == ("failed", 1)
    [p] = res.regress["patches"]
    assert p["patch"] == "cee.patch" and p["outcome"] == "failed"
    assert load_project(env.root).target("demo@v3")  # written all the same, as bump writes before it regresses


def test_release_move_of_the_primary_is_a_bump_of_it(env):
    two_releases(env)
    v3 = _v3(env)
    primary = load_project(env.root).stack("demo").release
    r = _cli(env, "move", "demo", primary, "v3", "--dry-run")
    assert r.exit_code == 2 and "bump demo v3 --into" in r.output
    r = _cli(env, "move", "demo", primary, "v3", "--no-regress", "--no-semantic")
    assert r.exit_code == 4, r.output  # written, no tests run: unverified
    proj = load_project(env.root)
    assert proj.stack("demo").commit == v3 and proj.target("demo@v2").commit != v3


def test_the_scheduled_bump_of_a_series_whose_newest_release_is_carried_already_does_nothing(env, capsys):
    """The primary (demo) and release v2 are both carried and v2 is the newest upstream: `bump
    --latest` of the primary must not carry it to v2 a second time (a second pull request, or a
    nightly conflict issue, for a release that has its own series), and costs no tree and no test."""
    v2 = two_releases(env)
    proj = load_project(env.root)
    rep = bump(proj, "demo", None, latest=True, opts=BumpOptions(out=env.out, **OPTS), cache=env.cache)
    assert (rep.status, rep.result, rep.exit_code) == ("carried", "carried", 0)
    assert rep.new["carried_as"] == "demo@v2" and rep.new["commit"] == v2
    assert not (env.out / "demo.bump").exists() and rep.outcomes == []
    assert "- carried as: `demo@v2`" in bump_markdown(rep)
    # the release that carries it is simply current
    assert bump(proj, "demo@v2", None, latest=True, opts=BumpOptions(out=env.out, **OPTS), cache=env.cache).status == "current"
    # the CI job says so per stack and exits 0
    from ci.upstream_bump import main as ci_main

    capsys.readouterr()
    assert ci_main(["--project", str(env.root), "--stack", "demo", "--no-regress", "--out", str(env.out)]) == 0
    out = capsys.readouterr().out
    assert f"::notice::demo: {rep.new['label']} is carried already as demo@v2; nothing to do" in out
    assert "::notice::demo@v2: already at" in out and "dry-run:" not in out
    # a REF named by hand is still bumped to: the user asked for it
    assert bump(proj, "demo", v2, opts=BumpOptions(out=env.out, **OPTS), cache=env.cache).status not in ("carried", "current")


def test_a_registry_release_is_recognised_by_its_tag_or_upstream_commit_not_its_import_commit(env, monkeypatch):
    """vLLM's releases come from PyPI: the target's tree is an import with a commit of its own,
    its label is the tag (`v0.34.0`) and the pin records the upstream commit from the archive. The
    carried release is found by either; the import's commit never matches anything."""
    from dsv4_patch.bump import targets
    from dsv4_patch.sources.base import BaseTree

    v2 = two_releases(env)
    proj = load_project(env.root)
    real = targets.resolve(proj.stack("demo"), v2, env.cache)
    for label, pin in (("v2", {"tag": "v2", "commit": "f" * 40}),       # by tag
                       ("v9", {"tag": "v9", "commit": v2[:9]})):        # by the recorded upstream commit
        imported = BaseTree(real.base.git_dir, real.base.commit, "sdist:demo==2")
        fake = targets.Target(imported, real.spec, label, {"stack": pin})
        monkeypatch.setattr(targets, "resolve", lambda *a, fake=fake, **k: fake)
        rep = bump(proj, "demo", None, latest=True, opts=BumpOptions(out=env.out, **OPTS), cache=env.cache)
        assert (rep.status, rep.new["carried_as"]) == ("carried", "demo@v2"), label
    # neither: a newer release nobody carries is bumped to
    fake = targets.Target(BaseTree(real.base.git_dir, real.base.commit, "sdist:demo==9"), real.spec, "v9",
                          {"stack": {"tag": "v9", "commit": "e" * 40}})
    monkeypatch.setattr(targets, "resolve", lambda *a, **k: fake)
    rep = bump(proj, "demo", None, latest=True, opts=BumpOptions(out=env.out, **OPTS), cache=env.cache)
    assert rep.status not in ("carried", "current")
