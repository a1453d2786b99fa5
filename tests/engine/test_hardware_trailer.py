"""`Hardware:` trailers keep a target's parenthesized note with it: the vLLM patches say
`gfx936 (DCU builds of vLLM with DTK)`, which was split at every space and shown by `status` as
`gfx936,(DCU,builds,of,vLLM,with,DTK)`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dsv4_patch.patchfile import hardware_items, parse_metadata
from tools.applypatch import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("value", "items"), [
    ("gfx936", ["gfx936"]),
    ("gfx936, sm_100a", ["gfx936", "sm_100a"]),
    ("gfx936 sm_100a", ["gfx936", "sm_100a"]),  # space-separated, as before
    ("gfx936 (DCU builds of vLLM with DTK)", ["gfx936 (DCU builds of vLLM with DTK)"]),
    ("gfx936 (forks that widen on_gfx9()), B200 (sm_100)", ["gfx936 (forks that widen on_gfx9())", "B200 (sm_100)"]),
    ("gfx936 (an unclosed note", ["gfx936 (an unclosed note"]),  # kept as written, nothing dropped
    ("(a note first) gfx936", ["(a note first)", "gfx936"]),
    (" , ", []),
])
def test_hardware_items(value, items):
    assert hardware_items(value) == items


def test_trailers_accumulate_and_status_shows_each_target_whole():
    meta, _, _ = parse_metadata("Why.\n\nHardware: gfx936 (DCU builds of vLLM with DTK)\nHardware: B200\n", "x.patch")
    assert meta.hardware == ["gfx936 (DCU builds of vLLM with DTK)", "B200"]
    r = CliRunner().invoke(app, ["status", "vllm@v0.34.0", "--json", "--project", str(ROOT)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    rows = doc if isinstance(doc, list) else doc.get("stacks", [doc])
    hw = {p["name"]: p["hardware"] for s in rows for p in s["patches"]}
    assert hw["encode-e4m3-with-integer-ops-in-the-dsv4-triton-cache-writer.patch"] == ["gfx936 (DCU builds of vLLM with DTK)"]
    assert hw["run-modelopt-nvfp4-experts-on-deepgemm-s-nvfp4-megamoe.patch"] == ["sm_100 (B200, B300: the sm_100 family)"]


def test_the_status_table_shows_the_note_as_written():
    r = CliRunner().invoke(app, ["status", "vllm@v0.34.0", "--wide", "--project", str(ROOT)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert "gfx936 (DCU builds of vLLM with DTK)" in r.output and "(DCU,builds" not in r.output
