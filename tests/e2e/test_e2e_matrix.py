"""The verification matrix from result files: absent, passed, failed, stale; invalid files reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv4_patch.e2e.matrix import compute_matrix
from dsv4_patch.e2e.record import make_result, write_result
from dsv4_patch.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

STACKS = """
[stacks.vllm]
upstream = "https://github.com/vllm-project/vllm"
commit = "6e448d0ea"
patches = "vllm"
[[stacks.vllm.sources]]
kind = "path"
path = "/nowhere"
"""


@pytest.fixture
def project(tmp_path):
    (tmp_path / "patches" / "vllm").mkdir(parents=True)
    (tmp_path / "patches" / "stacks.toml").write_text(STACKS)
    d = tmp_path / "patches" / "vllm"
    (d / "0001-reader.patch").write_text("reader v1\n")
    (d / "0002-skinny.patch").write_text("skinny v1\n")
    (d / "series").write_text("# order\n0001-reader.patch\n0002-skinny.patch\n")
    return tmp_path


def _record(project, level, hw, passed, date):
    d = project / "patches" / "vllm"
    return write_result(d, make_result("vllm", d, level, hw, passed, {"suite": "chat32"}, date=date))


def test_nothing_recorded_means_nothing_claimed(project):
    [m] = compute_matrix(project)
    assert [r.name for r in m.rows] == ["0001-reader.patch", "0002-skinny.patch"]
    assert all(r.cells == [] for r in m.rows) and m.problems == []


def test_passed_failed_newest_wins_and_edits_make_results_stale(project):
    _record(project, "hardware", "gfx936", True, "2026-12-01T10:00:00+00:00")
    _record(project, "apply", "cpu", True, "2026-12-01T09:00:00+00:00")
    _record(project, "hardware", "B200", True, "2026-12-01T10:00:00+00:00")
    _record(project, "hardware", "B200", False, "2026-12-02T10:00:00+00:00")
    [m] = compute_matrix(project)
    reader = m.rows[0]
    assert reader.passed("hardware") == ["gfx936"] and reader.passed("apply") == ["cpu"]
    assert {c.hardware: c.status for c in reader.cells_for("hardware")} == {"B200": "failed", "gfx936": "passed"}
    assert reader.passed("gpu") == []
    (project / "patches" / "vllm" / "0002-skinny.patch").write_text("skinny v2\n")
    [m] = compute_matrix(project)
    # every result for the edited patch, passed or failed, describes an older file now
    assert {c.status for c in m.rows[1].cells} == {"stale"}
    assert m.rows[1].passed("hardware") == [] and m.rows[0].passed("hardware") == ["gfx936"]


def test_a_result_only_counts_for_the_patches_it_names(project):
    _record(project, "hardware", "gfx936", True, "2026-12-01T10:00:00+00:00")
    d = project / "patches" / "vllm"
    (d / "0003-new.patch").write_text("new\n")
    (d / "series").write_text("0001-reader.patch\n0002-skinny.patch\n0003-new.patch\n")
    [m] = compute_matrix(project)
    assert m.rows[2].cells == []


def test_invalid_result_files_are_reported_not_trusted(project):
    res = project / "patches" / "vllm" / "results"
    res.mkdir()
    (res / "bad.json").write_text(json.dumps({"schema": "dsv4-patch-result/1", "stack": "vllm", "level": "vibes",
                                              "hardware": "gfx936", "status": "passed", "date": "x", "patches": []}))
    (res / "broken.json").write_text("{")
    [m] = compute_matrix(project)
    assert len(m.problems) == 2 and "vibes" in m.problems[0]
    assert all(r.cells == [] for r in m.rows)


def test_make_result_refuses_a_series_entry_without_its_file(project):
    d = project / "patches" / "vllm"
    (d / "series").write_text("0001-reader.patch\n0009-gone.patch\n")
    with pytest.raises(ConfigError, match="0009-gone.patch"):
        make_result("vllm", d, "hardware", "gfx936", True, {})


def test_the_repository_claims_only_what_its_result_files_record():
    for m in compute_matrix(ROOT):
        assert m.problems == [], m.problems
        for row in m.rows:
            for cell in row.cells:
                data = json.loads(cell.source.read_text())
                assert data["level"] == cell.level and data["hardware"] == cell.hardware
