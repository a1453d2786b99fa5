"""Semantic obsolescence: each patch's intent tests run on the pristine new upstream.

A synthetic upstream and project (tests/engine/synth.py); the project carries its own intent tests
under tests/, which read the tree the tool hands them (DSV4_TREE_DEMO). One patch per verdict,
each verdict planted explicitly; the bad inputs (a probe that errors, tests that cannot import,
a partial tree, a wheel without the vendored folder) each get their own verdict, never
`fixed-upstream`."""

from __future__ import annotations

import hashlib
import zipfile

import pytest
from bumpkit import edit
from synth import numbered

from dsv4_patch.bump import BumpOptions, bump
from dsv4_patch.bump.report import annotations, bump_markdown
from dsv4_patch.config import load_project
from dsv4_patch.errors import SourceError

INTENT = '''
import os
from pathlib import Path

import pytest

TREE = Path(os.environ.get("DSV4_TREE_DEMO", "/nonexistent"))


def lines():
    return (TREE / "src/a.py").read_text().splitlines()


def test_line10_fixed():            # behaviour: line 10 is fixed, however the fix is spelled
    assert "fixed" in lines()[9]


def test_line20_tagged():
    assert lines()[19] == "line 20 p2"


def test_probe_errors():
    raise RuntimeError("probe cannot run on this upstream")


def test_needs_nvcc():
    pytest.skip("nvcc not found")


def test_some_line_fixed():
    assert any("fixed" in ln for ln in lines())


def test_line40_any():              # Drop-When probe: true upstream, while the exact check is not
    assert lines()[39].startswith("line 40")


def test_line40_exact():
    assert lines()[39] == "line 40 p7"


def test_unpatched_tree_fails():
    if os.environ.get("DSV4_INTENT"):
        pytest.skip("not an intent test: it checks the unpatched tree, which is the new upstream here")
    assert "fixed" not in lines()[9]


def test_reads_csrc():
    assert "kernel" in (TREE / "csrc/k.cc").read_text()
'''

UNIMPORTABLE = "import module_the_upstream_dropped  # noqa: F401\n\n\ndef test_any():\n    assert True\n"


def _meta(*tests: str, drop: str = "") -> str:
    return ("Why and how.\n\nUpstream-Status: Pending\n" + "".join(f"Regression-Test: {t}\n" for t in tests)
            + (f"Drop-When: {drop}\n" if drop else ""))


T = "tests/test_intent.py::"


def _stack(benv) -> None:
    (benv.root / "tests").mkdir(exist_ok=True)
    (benv.root / "tests" / "test_intent.py").write_text(INTENT)
    (benv.root / "tests" / "test_gone.py").write_text(UNIMPORTABLE)
    a = numbered(60)
    steps = [
        ("p1 fix line 10", "line 10\n", "line 10 fixed\n", _meta(T + "test_line10_fixed", T + "test_unpatched_tree_fails")),
        ("p2 tag line 20", "line 20\n", "line 20 p2\n", _meta(T + "test_line20_tagged")),
        ("p3 probe errors", "line 25\n", "line 25 p3\n", _meta(T + "test_probe_errors")),
        ("p4 tests cannot import", "line 30\n", "line 30 p4\n", _meta("tests/test_gone.py::test_any")),
        ("p5 skipped", "line 35\n", "line 35 p5\n", _meta(T + "test_needs_nvcc")),
        ("p6 no intent", "line 45\n", "line 45 p6\n", "Why and how.\n\nUpstream-Status: Pending\n"),
        ("p7 drop-when probe", "line 40\n", "line 40 p7\n",
         _meta(T + "test_line40_exact", drop=f"`{T}test_line40_any` passes on the new upstream")),
    ]
    for subject, old, new, body in steps:
        a = edit(a, old, new)
        benv.author({"src/a.py": a}, f"[DSV4] {subject}", body=body)


def test_semantic_verdict_per_patch(benv):
    _stack(benv)
    # upstream fixes line 10 its own way (the patch now conflicts) and touches nothing else
    benv.up.write("src/a.py", edit(numbered(60), "line 10\n", "line 10 fixed (upstream)\n"))
    new = benv.up.commit("upstream fixes line 10 differently")
    before = benv.patch_bytes()
    rep = bump(load_project(benv.root), "demo", new, opts=BumpOptions(regress=False), cache=benv.cache)
    got = {s.patch.split("-", 1)[1].removesuffix(".patch"): s.verdict for s in rep.semantic}
    assert got == {"fix-line-10": "fixed-upstream", "tag-line-20": "needed", "probe-errors": "probe-error",
                   "tests-cannot-import": "unimportable", "skipped": "untestable", "no-intent": "no-intent",
                   "drop-when-probe": "fixed-upstream"}
    by = {s.patch.split("-", 1)[1].removesuffix(".patch"): s for s in rep.semantic}
    assert rep.outcomes[0].status == "conflict"          # textual: conflict; semantic: fixed upstream
    assert by["fix-line-10"].tests[T + "test_unpatched_tree_fails"]["outcome"] == "skipped"  # left out
    assert "module_the_upstream_dropped" in by["tests-cannot-import"].reason
    assert "probe cannot run" in by["probe-errors"].reason
    assert "nvcc not found" in by["skipped"].reason
    assert by["drop-when-probe"].decided_by == "Drop-When"
    assert list(by["drop-when-probe"].tests) == [T + "test_line40_any"]
    assert rep.status == "conflicts" and benv.patch_bytes() == before  # nothing written
    md = bump_markdown(rep)
    assert "| fixed-upstream |" in md and "## Semantic verdicts" in md
    d = rep.to_dict()
    assert d["patches"][0]["semantic"]["verdict"] == "fixed-upstream"
    notes = annotations(rep.outcomes, "patches/demo", "new", rep.semantic)
    assert sum("fixed upstream in new" in n for n in notes) == 2


def test_fixed_upstream_blocks_a_clean_bump_until_dropped(benv):
    """A patch that still applies cleanly but whose intent test passes on the new upstream is not
    refreshed silently: the bump stops as for an upstreamed patch; --drop-upstreamed drops it."""
    (benv.root / "tests").mkdir()
    (benv.root / "tests" / "test_intent.py").write_text(INTENT)
    a = edit(numbered(60), "line 10\n", "line 10 fixed\n")
    benv.author({"src/a.py": a}, "[DSV4] p1 fix", body=_meta(T + "test_some_line_fixed"))
    benv.author({"src/a.py": edit(a, "line 20\n", "line 20 p2\n")}, "[DSV4] p2 tag", body=_meta(T + "test_line20_tagged"))
    benv.up.write("src/a.py", edit(numbered(60), "line 55\n", "line 55 fixed upstream\n"))  # far from both hunks
    new = benv.up.commit("upstream fixes it elsewhere")
    before = benv.patch_bytes()
    rep = bump(load_project(benv.root), "demo", new, opts=BumpOptions(regress=False), cache=benv.cache)
    assert [o.status for o in rep.outcomes] == ["clean", "clean"]
    assert [s.verdict for s in rep.semantic] == ["fixed-upstream", "needed"]
    assert rep.status == "upstreamed" and rep.exit_code == 3 and benv.patch_bytes() == before
    rep = bump(load_project(benv.root), "demo", new, opts=BumpOptions(regress=False, drop_upstreamed=True),
               cache=benv.cache)
    assert rep.status == "ok" and "dropped: fixed upstream" in rep.outcomes[0].note
    assert rep.refreshed == [n for n in before if "tag" in n]
    series = (benv.root / "patches/demo/series").read_text()
    assert "p1-fix" not in series and "p2-tag" in series


def test_no_semantic_option_and_unchanged_textual_verdicts(benv):
    _stack(benv)
    benv.up.write("src/a.py", edit(numbered(60), "line 10\n", "line 10 fixed (upstream)\n"))
    new = benv.up.commit("u")
    rep = bump(load_project(benv.root), "demo", new, opts=BumpOptions(regress=False, semantic=False), cache=benv.cache)
    assert rep.semantic is None and "| not run |" in bump_markdown(rep)
    assert rep.outcomes[0].status == "conflict"


# ------------------------------------------------------------------ partial trees from a wheel
def _wheel(path, files: dict[str, str]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _partial_project(benv, include: str = "host/third_party/demo/*") -> None:
    """Upstream has src/ (vendored by a host package's wheel) and csrc/ (not vendored)."""
    benv.up.write("csrc/k.cc", "int kernel() { return 0; }\n")
    base = benv.up.commit("csrc")
    benv.repin(base)
    a = edit(numbered(60), "line 10\n", "line 10 fixed\n")
    wheel = benv.cache.dir("archives") / "host-1.0-py3-none-any.whl"
    sha = _wheel(wheel, {"host/__init__.py": "", "host/third_party/demo/src/a.py": edit(numbered(60), "line 10\n", "line 10 fixed up\n"),
                         "host/third_party/demo/src/b.txt": numbered(30, "b"),
                         "host/third_party/demo/__init__.py": "__version__ = '2.0'\n",
                         "host-1.0.dist-info/METADATA": "x"})
    with open(benv.root / "patches" / "stacks.toml", "a") as f:
        f.write(f'''
[[stacks.demo.targets]]
ref = "2.0"
what = "demo 2.0 as vendored in host 1.0"
kind = "wheel"
package = "host"
version = "1.0"
filename = "host-1.0-py3-none-any.whl"
sha256 = "{sha}"
include = ["{include}"]
reroot = {{ "host/third_party/demo/" = "" }}
version_file = "__init__.py"
partial = ["src/", "__init__.py"]
''')
    (benv.root / "tests").mkdir(exist_ok=True)
    (benv.root / "tests" / "test_intent.py").write_text(INTENT)
    benv.author({"src/a.py": a, "csrc/k.cc": "int kernel() { return 1; }\n"}, "[DSV4] p1 fix line 10 and csrc",
                body=_meta(T + "test_line10_fixed"))
    benv.author({"csrc/k.cc": "int kernel() { return 2; }\n"}, "[DSV4] p2 csrc only",
                body=_meta(T + "test_reads_csrc"))


def test_partial_tree_names_files_outside_instead_of_conflicts(benv):
    _partial_project(benv)
    before = benv.patch_bytes()
    toml = (benv.root / "patches/stacks.toml").read_text()
    rep = bump(load_project(benv.root), "demo", "2.0", opts=BumpOptions(regress=False), cache=benv.cache)
    first, second = rep.outcomes
    assert first.status == "conflict" and first.files == ["src/a.py"] and first.outside == ["csrc/k.cc"]
    assert second.status == "outside" and second.outside == ["csrc/k.cc"]
    assert [s.verdict for s in rep.semantic] == ["fixed-upstream", "outside"]
    assert "csrc/k.cc" in rep.semantic[1].reason
    assert rep.new["partial"] == ["src/", "__init__.py"] and rep.new["what"].startswith("demo 2.0")
    assert rep.status == "conflicts" and rep.exit_code == 3
    assert benv.patch_bytes() == before and (benv.root / "patches/stacks.toml").read_text() == toml
    md = bump_markdown(rep)
    assert "outside the partial tree: `csrc/k.cc`" in md and "partial tree: carries only" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| 1 |"))
    assert row.count("outside the partial tree") == 1, row  # named once, not once per note


def test_partial_tree_without_conflicts_writes_nothing(benv):
    _partial_project(benv)
    # drop the patch that conflicts with the vendored copy: the rest lies outside -> status partial
    (benv.root / "patches/demo/series").write_text(
        "".join(ln + "\n" for ln in (benv.root / "patches/demo/series").read_text().splitlines() if "line-10" not in ln))
    before = benv.patch_bytes()
    rep = bump(load_project(benv.root), "demo", "2.0", opts=BumpOptions(regress=False), cache=benv.cache)
    assert [o.status for o in rep.outcomes] == ["outside"]
    assert rep.status == "partial" and rep.exit_code == 3 and rep.written_to is None
    assert benv.patch_bytes() == before


def test_wheel_without_the_vendored_folder_is_refused(benv):
    _partial_project(benv, include="host/third_party/other/*")
    with pytest.raises(SourceError, match=r"no member matches include \['host/third_party/other/\*'\]"):
        bump(load_project(benv.root), "demo", "2.0", opts=BumpOptions(regress=False), cache=benv.cache)


def test_target_that_is_not_the_release_it_claims_is_refused(benv):
    _partial_project(benv)
    toml = benv.root / "patches/stacks.toml"
    toml.write_text(toml.read_text().replace('ref = "2.0"', 'ref = "2.1"'))
    with pytest.raises(SourceError, match="says version 2.0, the target is 2.1"):
        bump(load_project(benv.root), "demo", "2.1", opts=BumpOptions(regress=False), cache=benv.cache)


def test_status_check_runs_the_intent_tests_on_the_pristine_pin(benv):
    """At the pin every intent test must fail without its patch; one that passes proves nothing."""
    from dsv4_patch import api

    (benv.root / "tests").mkdir()
    (benv.root / "tests" / "test_intent.py").write_text(INTENT)
    a = edit(numbered(60), "line 20\n", "line 20 p2\n")
    benv.author({"src/a.py": a}, "[DSV4] p1 tag", body=_meta(T + "test_line20_tagged"))
    benv.author({"src/a.py": edit(a, "line 40\n", "line 40 p7\n")}, "[DSV4] p2 vacuous", body=_meta(T + "test_line40_any"))
    row, = api.status(load_project(benv.root), ["demo"], check_apply=True, cache=benv.cache)
    assert row.applies == {"ok": True}
    assert [s["verdict"] for s in row.semantic] == ["needed", "fixed-upstream"]
    assert any("p2-vacuous" in w and "pass on the pristine pin" in w for w in row.warnings)
    row, = api.status(load_project(benv.root), ["demo"], check_apply=True, semantic=False, cache=benv.cache)
    assert row.semantic is None


def test_bump_carries_on_where_the_pin_of_a_stack_with_targets_is_unreachable(benv):
    """DeepGEMM in CI: no registry has the pin, the 2.8.1 target comes from a wheel."""
    _partial_project(benv)
    toml = benv.root / "patches/stacks.toml"
    toml.write_text(toml.read_text().replace(f'path = "{benv.up.path}"', 'path = "/nonexistent/upstream"'))
    rep = bump(load_project(benv.root), "demo", "2.0", opts=BumpOptions(regress=False), cache=benv.cache)
    assert "unreachable" in rep.old["source"] and "pin is unreachable" in rep.range_diff
    assert [o.status for o in rep.outcomes] == ["conflict", "outside"]


def test_a_patch_carried_for_the_target_release_is_decided_by_that_copys_tests(benv):
    """patches/<stack>/releases/<tag>: the stack's port to that release binds tests written for it."""
    (benv.root / "tests").mkdir()
    (benv.root / "tests" / "test_intent.py").write_text(INTENT)
    a = edit(numbered(60), "line 20\n", "line 20 p2\n")
    benv.author({"src/a.py": a}, "[DSV4] p1 tag", body=_meta(T + "test_line20_tagged"))
    benv.up.write("src/a.py", edit(numbered(60), "line 40\n", "line 40 moved\n"))
    new = benv.up.commit("v2")
    from synth import git
    git(benv.up.path, "tag", "v2")
    name, raw = next((n, b) for n, b in benv.patch_bytes().items() if n.endswith(".patch"))
    port = benv.root / "patches/demo/releases/v2"
    port.mkdir(parents=True)
    raw = raw.replace(f"Regression-Test: {T}test_line20_tagged".encode(),
                                           f"Regression-Test: {T}test_line40_any".encode())
    (port / name).write_bytes(raw)
    (port / "series").write_text(name + "\n")
    rep = bump(load_project(benv.root), "demo", "v2", opts=BumpOptions(regress=False, into=benv.tmp / "into"),
               cache=benv.cache)
    sem, = rep.semantic
    assert sem.verdict == "fixed-upstream" and list(sem.tests) == [T + "test_line40_any"]
    assert sem.decided_by == "Regression-Test of patches/demo/releases/v2"
    assert new and rep.status == "upstreamed"  # fixed-upstream: nothing written without --drop-upstreamed


def test_check_refuses_a_drop_when_test_that_does_not_exist(benv):
    """A typo in a Drop-When test id is found by `check`, not at the next bump (as a probe-error)."""
    from dsv4_patch.lint import lint_stack

    (benv.root / "tests").mkdir()
    (benv.root / "tests" / "test_intent.py").write_text(INTENT)
    benv.author({"src/a.py": edit(numbered(60), "line 20\n", "line 20 p2\n")}, "[DSV4] p1",
                body=_meta(T + "test_line20_tagged", drop=f"{T}test_line20_tagget passes"))
    found = [x.message for x in lint_stack(load_project(benv.root), load_project(benv.root).stack("demo"))]
    assert any(m.startswith(f"Drop-When names {T}test_line20_tagget:") for m in found), found


FORMS = '''
import os
from pathlib import Path

import pytest

TREE = Path(os.environ.get("DSV4_TREE_DEMO", "/nonexistent"))


def fixed():
    return "fixed" in (TREE / "src/a.py").read_text().splitlines()[9]


@pytest.mark.parametrize("case", ["a", "b"])
def test_param(case):
    assert fixed()


class TestKind:
    def test_method(self):
        assert fixed()


def test_plain():
    assert fixed()
'''


def test_every_id_form_is_judged_in_the_one_intent_run(benv):
    """All intent tests go to one pytest by module path and the plugin keeps the named ids: a
    parametrized test by its base id, a class method, a plain test, and an id that names no test
    (its patch alone gets probe-error, the others their verdicts)."""
    (benv.root / "tests").mkdir(exist_ok=True)
    (benv.root / "tests" / "test_forms.py").write_text(FORMS)
    f = "tests/test_forms.py::"
    a = numbered(60)
    for subject, old, new, test in [("param", "line 20\n", "line 20 p1\n", f + "test_param"),
                                    ("kind", "line 30\n", "line 30 p2\n", f + "TestKind::test_method"),
                                    ("plain", "line 40\n", "line 40 p3\n", f + "test_plain"),
                                    ("gone", "line 50\n", "line 50 p4\n", f + "test_not_there")]:
        a = edit(a, old, new)
        benv.author({"src/a.py": a}, f"[DSV4] {subject}", body=_meta(test))
    benv.up.write("src/a.py", edit(numbered(60), "line 10\n", "line 10 fixed (upstream)\n"))
    rep = bump(load_project(benv.root), "demo", benv.up.commit("upstream fixes line 10"),
               opts=BumpOptions(regress=False), cache=benv.cache)
    got = {s.patch.removesuffix(".patch"): s for s in rep.semantic}
    assert {k: v.verdict for k, v in got.items()} == {"param": "fixed-upstream", "kind": "fixed-upstream",
                                                      "plain": "fixed-upstream", "gone": "probe-error"}
    assert sorted(got["param"].tests) == [f + "test_param[a]", f + "test_param[b]"]
    assert "no such test was collected" in got["gone"].reason
