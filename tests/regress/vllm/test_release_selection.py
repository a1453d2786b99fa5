"""Which release the vLLM tests run against (conftest.py): the one the environment gives under
regress/bump, else every carried release, each case only where that release's series binds it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

HERE = Path(__file__).resolve().parent


def _load(monkeypatch):
    """A fresh copy of conftest.py (its own caches)."""
    spec = importlib.util.spec_from_file_location("dsv4_vllm_conftest_under_test", HERE / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def conf(monkeypatch):
    mod = _load(monkeypatch)
    for k in ("DSV4_TREE_VLLM", "DSV4_BASE_VLLM", "DSV4_RELEASE_VLLM"):
        monkeypatch.delenv(k, raising=False)
    return mod


def test_given_trees_are_the_one_release_under_test(conf, monkeypatch):
    monkeypatch.setenv("DSV4_TREE_VLLM", "/x/patched")
    monkeypatch.setenv("DSV4_RELEASE_VLLM", "v9.9.9")  # a release no stacks.toml names
    assert conf.releases() == [conf.Release("v9.9.9", None)]


def test_plain_pytest_runs_every_carried_release(conf):
    carried = conf._stack().all_releases()
    assert [r.id for r in conf.releases()] == [c.release or c.tag or c.commit for c in carried]
    assert all(r.tag for r in conf.releases())


def _item(nodeid: str, fixed: str | None = None):
    marker = SimpleNamespace(args=(fixed,)) if fixed else None
    return SimpleNamespace(nodeid=nodeid, get_closest_marker=lambda name: marker if name == "fixed_upstream" else None)


def test_a_case_runs_only_where_its_release_binds_it(conf, monkeypatch):
    series = {"vA": (frozenset({"t.py::test_a", "t.py::test_both"}), frozenset({"pa"})),
              "vB": (frozenset({"t.py::test_b", "t.py::test_both"}), frozenset({"pb"}))}
    monkeypatch.setattr(conf, "_series", lambda tag: series[tag])
    monkeypatch.setattr(conf, "releases", lambda: [conf.Release("vA", "vA"), conf.Release("vB", "vB")])
    a, b = conf.Release("vA", "vA"), conf.Release("vB", "vB")
    assert conf._why_not_here(_item("t.py::test_a[vA]"), a) is None
    assert conf._why_not_here(_item("t.py::test_both[vB]"), b) is None
    why = conf._why_not_here(_item("t.py::test_a[vB]"), b)
    assert why and "vB's series binds no patch to t.py::test_a (bound at vA)" in why
    assert conf._why_not_here(_item("t.py::test_unbound[vB]"), b) is None  # bound nowhere: runs everywhere
    fixed = _item("t.py::test_evidence[vA]", fixed="pa")
    assert "carries pa" in conf._why_not_here(fixed, a)  # the series still needs the patch
    assert conf._why_not_here(_item("t.py::test_evidence[vB]", fixed="pa"), b) is None


def test_the_real_series_bind_tests_that_exist(conf):
    """Every vLLM Regression-Test id of every carried release names a test function of its module."""
    import ast

    conf_mod = conf
    root = HERE.parents[2]
    for rel in conf_mod._stack().all_releases():
        bound, _ = conf_mod._series(rel.release or rel.tag)
        for node in bound:
            path, name = node.split("::", 1)
            tree = ast.parse((root / path).read_text())
            names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} | {
                a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
            assert name in names, f"{rel.release}: {node} names no test"
