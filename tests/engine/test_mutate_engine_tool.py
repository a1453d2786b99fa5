"""benchmarks/mutate_engine.py and its shared machinery (benchmarks/_mutation.py) on a planted module:
a mutant the planted test sees is killed, an equivalent one survives, a pytest usage error is an
error (never a kill), and the seeded sample is the same for the same seed. Not the real run (tens of
minutes: docs/engine-mutation-report.md); this is seconds."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PLANTED = '''
def over_limit(n, limit):
    if n > limit:
        return True
    return False


def is_empty(xs):
    return len(xs) == 0 or not xs
'''

PLANTED_TEST = '''
from planted_mut import is_empty, over_limit


def test_over_limit():
    assert over_limit(3, 2) and not over_limit(2, 2)


def test_is_empty():
    assert is_empty([]) and not is_empty([1])
'''


@pytest.fixture(scope="module")
def me():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("mutate_engine", ROOT / "benchmarks" / "mutate_engine.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules.setdefault("mutate_engine", mod)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _site(me, startswith: str) -> int:
    sites = me.source_sites(PLANTED)
    hits = [i for i, (_, what, _) in enumerate(sites) if what.startswith(startswith)]
    assert len(hits) == 1, (startswith, [w for _, w, _ in sites])
    return hits[0]


def _run(me, box: Path, index: int | None, extra: list[str] = ()):
    import _mutation

    (box / "planted_mut.py").write_text(PLANTED if index is None else me.mutate_source(PLANTED, index))
    m = _mutation.Mutant("planted", -1 if index is None else index, 0, "")
    args = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(box), "-c", str(box / "pytest.ini"),
            *extra, "test_planted.py"]
    killer, secs = _mutation.fork_pytest(box, args, [([], {})], timeout=60)
    _mutation.judge(m, killer, secs)
    return m


def test_killed_equivalent_and_usage_error(me, tmp_path):
    (tmp_path / "test_planted.py").write_text(PLANTED_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    assert _run(me, tmp_path, None).outcome == "survived"  # the unmutated module passes
    killed = _run(me, tmp_path, _site(me, "> -> >="))
    assert (killed.outcome, killed.killer) == ("killed", "test_planted.py::test_over_limit")
    # `len(xs) == 0 or not xs` -> `and`: both sides agree on a list, nothing can tell
    assert _run(me, tmp_path, _site(me, "or -> and")).outcome == "survived"
    err = _run(me, tmp_path, _site(me, "> -> >="), ["--no-such-option"])
    assert (err.outcome, err.killer) == ("error", "error: pytest exit 4")


def test_operators_make_one_change_each(me):
    whats = [w for _, w, _ in me.source_sites(PLANTED)]
    assert "drop the early exit `if n > limit: ...`" in whats
    assert "constant True -> False" in whats and "`return len(xs) == 0 or not xs` -> `return None`" in whats
    base = ast.dump(ast.parse(ast.unparse(ast.parse(PLANTED))))
    for i in range(len(whats)):
        assert ast.dump(ast.parse(me.mutate_source(PLANTED, i))) != base, whats[i]


def test_sample_is_seeded_and_spread_over_targets(me):
    mutants = [me.Mutant(t, i, 0, "") for t in ("a", "b") for i in range(50 if t == "a" else 5)]
    one = me.sample(mutants, 10, 29, 4)
    assert [(m.target, m.index) for m in one] == [(m.target, m.index) for m in me.sample(mutants, 10, 29, 4)]
    assert sum(m.target == "b" for m in one) == 4  # the small target still gets its minimum
    assert [m.index for m in one] != [m.index for m in me.sample(mutants, 10, 30, 4)]


def test_every_target_and_its_tests_exist(me):
    for target, (rel, tests) in me.TARGETS.items():
        assert (ROOT / rel).is_file() and me.enumerate_mutants(target), target
        assert all((ROOT / t).is_file() for t in tests), target
        assert not any("newcomer_session" in t or "/regress/" in t for t in tests), target  # no venvs, no PyPI
