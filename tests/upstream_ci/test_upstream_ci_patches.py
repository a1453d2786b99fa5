"""Every patch at every release the project carries passes the upstream-ci level: the upstream's
own pre-commit hooks (only what the patch introduces counts) and its in-tree tests under its pinned
pytest (dsv4_patch/upstream_ci.py, docs/upstream-ci.md).

Parametrized over the releases patches/stacks.toml declares, so a new release is covered without
editing this file. The first run installs the hooks and pins (tool cache) and the vLLM CPU venv of
a release (shared with the integration level); results are kept per patch commit in the tool
cache (DSV4_CHECK_MEMO=run computes them again), so an unchanged patch is not checked twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsv4_patch import api
from dsv4_patch.config import load_project
from dsv4_patch.stack import load_stack

ROOT = Path(__file__).resolve().parents[2]
PROJECT = load_project(ROOT)
TARGETS = PROJECT.targets(None, None)

pytestmark = [pytest.mark.slow, pytest.mark.network]


def _table(rep) -> str:
    lines = []
    for r in rep.results:
        lines.append(f"{r.stack} {r.patch}: {r.outcome} {r.reason}")
        lines += [f"    {o:8} {n} {r.reasons.get(n, '')}" for n, o in r.tests.items() if o != "passed"]
    return "\n".join(lines)


@pytest.mark.parametrize("label", [c.label for c in TARGETS])
def test_every_patch_passes_its_upstreams_own_ci(label, tmp_path):
    cfg = PROJECT.target(label)
    if not load_stack(cfg).patches:
        pytest.skip(f"{label}: 0 patches in series")
    rep = api.upstream_ci(PROJECT, [cfg.selector], out=tmp_path / "build")
    table = _table(rep)
    print(table)
    assert rep.results, f"{label}: no patch checked"
    red = [r for r in rep.results if r.outcome in ("failed", "missing")]
    assert not red, f"{label}: {len(red)} patch(es) the upstream's CI would reject:\n{table}"
    tree = tmp_path / "build" / cfg.label
    if (tree / ".pre-commit-config.yaml").is_file():
        # the lint hooks ran (the level is not green by having run nothing)
        for r in rep.results:
            assert any(o == "passed" for n, o in r.tests.items() if not n.startswith("pytest ")), \
                f"{label} {r.patch}: no pre-commit hook ran:\n{table}"
    else:
        for r in rep.results:
            assert r.tests.get("pre-commit") == "skipped", table
            assert "no .pre-commit-config.yaml in the tree" in r.reasons["pre-commit"], table
