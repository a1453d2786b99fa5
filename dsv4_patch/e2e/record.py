"""Result files for the verification matrix: `patches/<stack>/results/*.json`, committed with the stack.

One file records one level run on one kind of hardware for the patches of one stack, each patch
named with the sha256 of its file at the time: a result says nothing about a patch edited since
(the matrix shows it as stale). Schema `dsv4-patch-result/1`:

    {
      "schema": "dsv4-patch-result/1",
      "stack": "vllm",
      "level": "hardware",              # apply | unit | integration | upstream-ci | compile | gpu | hardware
      "hardware": "gfx936",             # gfx936, B200, H200, cpu ...
      "status": "passed",               # passed | failed
      "date": "2026-12-01T10:00:00+00:00",
      "by": "who ran it (free text)",
      "upstream_commit": "6e448d0ea",
      "pin": "6e448d0ea",               # optional: the release's pin (stacks.toml `commit`) when recorded;
                                        # at another pin the matrix shows the result as stale
      "patches": [{"name": "0001-....patch", "sha256": "..."}],
      "evidence": {"suite": "chat32", "verdict": "COHERENT", "engine_version": "...", "model": "...",
                   "tp": 8, "job_id": "...", "first_tokens": [...], "text": "..."},
      "note": "",
      "tests": {"tests/regress/vllm/test_x.py": "<sha256>"},  # optional: the test code (testcode.py)
      "pristine": {"pin": ..., "code": {...}, "patches": {...}}  # optional: each bound id without
    }                                                            # its patch (pristine.py, `check`)

Only `e2e --record` (hardware) writes these here; other levels' runners can write the same schema.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..errors import ConfigError
from ..series import read_series

RESULT_FILE_SCHEMA = "dsv4-patch-result/1"
LEVELS = ("apply", "unit", "integration", "upstream-ci", "compile", "gpu", "hardware")
STATUSES = ("passed", "failed")
RESULTS_DIR = "results"


@dataclass
class LevelResult:
    path: Path
    stack: str
    level: str
    hardware: str
    status: str
    date: str
    patches: dict[str, str]  # name -> sha256
    evidence: dict = field(default_factory=dict)
    by: str = ""
    note: str = ""
    tests: dict[str, str] | None = None  # test file -> sha256 when recorded (testcode.py); None in older results
    pin: str = ""  # the release's pin (stacks.toml commit) when recorded; "" in older results


def patch_fingerprints(patch_dir: Path) -> list[dict]:
    """[{name, sha256}] of the stack's patches in series order."""
    out = []
    for entry in read_series(patch_dir / "series"):
        f = patch_dir / entry.name
        if not f.is_file():
            raise ConfigError(f"{patch_dir / 'series'}:{entry.line}: {entry.name} is listed but missing")
        out.append({"name": entry.name, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()})
    return out


def same_pin(a: str, b: str) -> bool:
    """Two spellings of one pin: equal, or commit ids one of which abbreviates the other
    (`pin --source git` writes the full id of the commit stacks.toml named by 7 digits)."""
    hexa = re.fullmatch(r"[0-9a-f]{7,64}", a) and re.fullmatch(r"[0-9a-f]{7,64}", b)
    return a == b or bool(hexa and (a.startswith(b) or b.startswith(a)))


def validate(data: dict, where: str) -> list[str]:
    problems = []
    if data.get("schema") != RESULT_FILE_SCHEMA:
        problems.append(f"{where}: schema {data.get('schema')!r}, expected {RESULT_FILE_SCHEMA!r}")
    if data.get("level") not in LEVELS:
        problems.append(f"{where}: level {data.get('level')!r} is not one of {', '.join(LEVELS)}")
    if data.get("status") not in STATUSES:
        problems.append(f"{where}: status {data.get('status')!r} is not passed or failed")
    for key in ("stack", "hardware", "date"):
        if not isinstance(data.get(key), str) or not data.get(key):
            problems.append(f"{where}: needs a non-empty {key!r}")
    patches = data.get("patches")
    if not isinstance(patches, list) or not all(
        isinstance(p, dict) and isinstance(p.get("name"), str) and re.fullmatch(r"[0-9a-f]{64}", str(p.get("sha256", "")))
        for p in patches
    ):
        problems.append(f"{where}: patches must be a list of {{name, sha256}}")
    return problems


def load_results(patch_dir: Path) -> tuple[list[LevelResult], list[str]]:
    """Every result file of a stack; unreadable or invalid files are reported, never guessed at."""
    results, problems = [], []
    for p in sorted((patch_dir / RESULTS_DIR).glob("*.json")):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            problems.append(f"{p}: {e}")
            continue
        if not isinstance(data, dict):
            problems.append(f"{p}: not a JSON object")
            continue
        bad = validate(data, str(p))
        if bad:
            problems.extend(bad)
            continue
        results.append(LevelResult(
            path=p, stack=data["stack"], level=data["level"], hardware=data["hardware"], status=data["status"],
            date=data["date"], patches={x["name"]: x["sha256"] for x in data["patches"]},
            evidence=data.get("evidence", {}), by=data.get("by", ""), note=data.get("note", ""),
            tests=data["tests"] if isinstance(data.get("tests"), dict) else None,
            pin=data["pin"] if isinstance(data.get("pin"), str) else "",
        ))
    return results, problems


def make_result(stack: str, patch_dir: Path, level: str, hardware: str, passed: bool, evidence: dict,
                upstream_commit: str = "", by: str = "", note: str = "", date: str | None = None,
                tests: dict[str, str] | None = None, pin: str = "") -> dict:
    data = {
        "schema": RESULT_FILE_SCHEMA,
        "stack": stack,
        "level": level,
        "hardware": hardware,
        "status": "passed" if passed else "failed",
        "date": date or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "by": by,
        "upstream_commit": upstream_commit,
        "patches": patch_fingerprints(patch_dir),
        "evidence": evidence,
        "note": note,
    }
    if pin:
        data["pin"] = pin  # a result speaks for the release it ran on: another pin makes it stale (matrix.py)
    if tests is not None:
        data["tests"] = dict(sorted(tests.items()))  # the test code it speaks for (testcode.py)
    problems = validate(data, "new result")
    if problems:
        raise ConfigError(problems[0])
    return data


def write_result(patch_dir: Path, data: dict) -> Path:
    out = patch_dir / RESULTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    stamp = re.sub(r"[^0-9T]", "", data["date"])[:15]
    suite = re.sub(r"[^\w.-]", "_", str(data.get("evidence", {}).get("suite", "")))
    hardware = re.sub(r"[^\w.-]", "_", data["hardware"])
    base = f"{stamp}-{data['level']}-{hardware}" + (f"-{suite}" if suite else "")
    path = out / f"{base}.json"
    n = 2
    while path.exists():
        path = out / f"{base}-{n}.json"
        n += 1
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
