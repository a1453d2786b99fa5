"""`bump deepgemm 2.8.1` for real, from PyPI (the DeepGEMM vendored in the vLLM 0.33.0 wheel), and the
docs/bumps page agreeing with what it reports.

Runs without GitHub: the wheel comes from the package index (sha256 pinned in patches/stacks.toml) or the
archive cache; the 54e2261 pin is used where it can be fetched (DSV4_DEEPGEMM_GIT_MIRROR) and the bump
carries on without it otherwise. Skips, with the reason, only when the wheel cannot be had."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsv4_patch.bump import BumpOptions, bump
from dsv4_patch.bump.report import bump_markdown
from dsv4_patch.config import load_project
from dsv4_patch.errors import SourceError

pytestmark = [pytest.mark.network, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "bumps" / "deepgemm-54e2261-to-2.8.1.md"
ROW = re.compile(r"^\| `([^`]+\.patch)` \| (\w[\w-]*) \| ([^|]*) \| ([\w-]+) \|", re.M)


def _doc_rows() -> dict[str, tuple[str, list[str], str]]:
    text = DOC.read_text()
    table = text.split("<!-- verdicts -->", 2)[1]
    return {m[0]: (m[1], re.findall(r"`([^`]+)`", m[2]), m[3]) for m in ROW.findall(table)}


# the compile probe's skips (tests/regress/deepgemm/_cuda_tools.py): no verdict where the CUDA tools are missing
TOOL_SKIPS = ("nvcc not found", "cuobjdump not found", "nvdisasm not found", "CUTLASS headers unavailable")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    project = load_project(ROOT)
    out = tmp_path_factory.mktemp("dgbump")
    try:
        return bump(project, "deepgemm", "2.8.1", opts=BumpOptions(regress=False, out=out))
    except SourceError as e:
        pytest.skip(f"DeepGEMM 2.8.1 (vLLM 0.33.0 wheel) unreachable here: {e.one_line()}")


def test_report_and_docs_agree(report):
    rows = _doc_rows()
    assert [o.patch for o in report.outcomes] == list(rows), "the docs table lists other patches than the stack"
    for o in report.outcomes:
        status, outside, semantic = rows[o.patch]
        assert o.status == status, o.patch
        assert o.outside == outside, o.patch
        got = report.verdict(o.patch)
        if got.verdict == "untestable" and any(t in got.reason for t in TOOL_SKIPS):
            assert semantic == "fixed-upstream", o.patch  # only the compile probe needs those tools
            continue  # the compile probe needs CUDA tools this machine lacks: no verdict, and it says so
        assert got.verdict == semantic, (o.patch, got.reason)
    assert report.status == "conflicts" and report.exit_code == 3
    assert report.new["partial"] == ["deep_gemm/", "third-party/cutlass/include/"]


def test_markdown_report_rows_match_the_docs(report):
    """The report a person reads (build/deepgemm.bump-report.md) says what the docs page says."""
    md = bump_markdown(report)
    for name, (status, outside, semantic) in _doc_rows().items():
        row = next(ln for ln in md.splitlines() if f"| `{name}` |" in ln)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == status
        assert cells[3] in (semantic, "untestable")  # untestable only without the CUDA tools (see above)
        assert all(f"`{f}`" in cells[4] for f in outside)


def test_docs_record_the_tree(report):
    text = DOC.read_text()
    cfg = load_project(ROOT).stack("deepgemm").raw["targets"][0]
    assert cfg["sha256"] in text and cfg["filename"] in text
    assert report.new["commit"] in text  # the import commit is deterministic: same wheel, same commit


def test_nothing_written(report):
    assert report.written_to is None and report.pin == {}
