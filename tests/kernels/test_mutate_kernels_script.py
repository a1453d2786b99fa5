"""benchmarks/mutate_kernels.py (not run in CI, minutes long): its mutant generation stays sound.

Only what is cheap: every target has mutation sites; each mutant's source parses and differs from the
baseline rewrite in exactly the mutated spot; functions left out are left out."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mk():
    spec = importlib.util.spec_from_file_location("mutate_kernels", ROOT / "benchmarks" / "mutate_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutate_kernels", mod)  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_every_target_has_mutants_and_each_is_one_change(mk):
    for target, (rel, tests, _) in mk.TARGETS.items():
        mutants = mk.enumerate_mutants(target)
        if rel.endswith("e4m3_decode/naive.py"):
            assert mutants == []  # one call, nothing to mutate
            continue
        assert len(mutants) > 10, target
        assert all((ROOT / t).is_file() for t in tests)
        base = ast.dump(ast.parse(ast.unparse(ast.parse((ROOT / rel).read_text()))))
        for m in mutants[:: max(1, len(mutants) // 7)]:
            src = mk.mutant_source(target, m.index)
            assert ast.dump(ast.parse(src)) != base, (target, m.index, m.what)


def test_skipped_functions_have_no_mutants(mk):
    lines = (ROOT / "kernels/fp8_ds_mla/naive.py").read_text().splitlines()
    start = next(i for i, l in enumerate(lines, 1) if l.startswith("def wrong_contiguous_reader"))
    assert not [m for m in mk.enumerate_mutants("fp8_ds_mla") if m.line >= start]
    assert {m.in_jit for m in mk.enumerate_mutants("qdq-sglang")} == {True, False}
