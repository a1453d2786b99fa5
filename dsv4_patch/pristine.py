"""A bound test must fail on the unpatched tree: the pristine outcome of each `Regression-Test`.

A `Regression-Test:` id is evidence for its patch only if it fails without the patch. Two places
tell when one does not:

- `status --check` runs each patch's intent tests on the pristine pin (bump/semantic.py); an id that
  passes there makes the stack unverified (exit 4) even when another id fails (`needed`);
- `regress --record` runs the bound ids that ran on the patched tree once more with the pristine
  pin standing in for the patched tree (DSV4_INTENT=1, as the intent run: bump/semantic.run_on_pristine) and writes the outcome of
  each id into the result file (`pristine`, below). `check` reads it back, never running a test:
  an id recorded as passing on the pristine pin, for the same pin, the same patch bytes and the same
  test code as today, is an error naming the patch file, the trailer line and the id. Without such a
  record `check` cannot tell and says nothing.

A test that is no evidence by design (one about the unpatched tree, a guard that the patch leaves
a path alone) skips under DSV4_INTENT with a reason containing "not an intent test": recorded as
`not-intent`, never refused.

The block in a result file (dsv4-patch-result/1, optional):

    "pristine": {
      "pin": "<the stack's commit in stacks.toml>",
      "code": {"tests/regress/x/test_y.py": "<sha256>", ...},       # test code (e2e/testcode.py)
      "patches": {"<name>.patch": {"sha256": "<of the patch file>",
                                   "tests": {"<Regression-Test id>": "passed" | "failed" | ...}}}
    }

Outcomes per id: passed (every test the id names passed), failed (one failed by assertion), error
(one raised something else), skipped, not-intent, missing (nothing collected), timeout.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

KEY = "pristine"
NOT_INTENT = "not an intent test"  # bump/semantic.NOT_INTENT (not imported: check stays light)
RESULTS_DIR = "results"  # e2e/record.RESULTS_DIR


def outcome(node: str, results: dict[str, dict]) -> str:
    """The pristine outcome of one bound id from the intent plugin's records (bump/intent_results.py):
    the id itself, its parametrized cases, everything under a file or class id."""
    hits = [v for k, v in results.items() if k == node or k.startswith(node + "[") or k.startswith(node + "::")]
    if not hits:
        if results.get("<timeout>"):
            return "timeout"
        module = node.split("::", 1)[0]
        if any(v.get("when") == "collect" and (k == module or k == "<session>") for k, v in results.items()):
            return "error"
        return "missing"
    kinds = [h.get("outcome") for h in hits]
    if "timeout" in kinds:
        return "timeout"
    if any(h.get("outcome") == "failed" and h.get("assertion") for h in hits):
        return "failed"
    if "failed" in kinds:
        return "error"
    if any(h.get("outcome") == "skipped" and NOT_INTENT in h.get("why", "") for h in hits):
        return "not-intent"
    if "skipped" in kinds:
        return "skipped"
    return "passed"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def block(root: Path, pin: str, patches, results: dict[str, dict], ran: set[str] | None = None) -> dict:
    """The `pristine` block of a result file: each patch's bound ids (those in `ran`, when given) and
    their outcomes on the pristine pin, with the pin, the patch bytes and the test code they are for."""
    from .e2e.testcode import files_of_tests, fingerprint

    out: dict[str, dict] = {}
    nodes: list[str] = []
    for p in patches:
        ids = [n for n in p.metadata.regression_tests if ran is None or n in ran]
        if ids:
            out[p.name] = {"sha256": sha256(p.raw), "tests": {n: outcome(n, results) for n in ids}}
            nodes += ids
    return {"pin": pin, "code": fingerprint(root, files_of_tests(root, nodes)), "patches": out}


# ---------------------------------------------------------------- the reading side (`check`)
@dataclass
class PassOnPristine:
    patch: str  # file name
    node: str  # the Regression-Test id
    result: Path  # the result file that says so


def _code_now(root: Path, node: str, cache: dict) -> dict[str, str]:
    if node not in cache:
        from .e2e.testcode import files_of_tests, fingerprint

        cache[node] = fingerprint(root, files_of_tests(root, [node]))
    return cache[node]


def recorded_passes(root: Path, patch_dir: Path, pin: str, patches) -> list[PassOnPristine]:
    """Each (patch, bound id) a result file under `patch_dir/results` records as passing on the
    pristine pin `pin`, for today's bytes of the patch file and today's test code of the id (every
    file of it as recorded). Files that do not parse, or carry no such block, are no evidence."""
    from .e2e.record import same_pin

    folder = Path(patch_dir) / RESULTS_DIR
    if not folder.is_dir():
        return []
    by_name = {p.name: p for p in patches}
    digests: dict[str, str] = {}
    code_cache: dict[str, dict] = {}
    found: dict[tuple[str, str], PassOnPristine] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # `status --matrix` reports it; no evidence here
        blk = data.get(KEY) if isinstance(data, dict) else None
        if not isinstance(blk, dict) or not isinstance(blk.get("patches"), dict):
            continue
        if not same_pin(str(blk.get("pin", "")), pin):  # `pin --source git` spells the same commit in full
            continue
        code = blk.get("code") if isinstance(blk.get("code"), dict) else {}
        for name, rec in blk["patches"].items():
            p = by_name.get(name)
            if p is None or not isinstance(rec, dict) or not isinstance(rec.get("tests"), dict):
                continue
            if rec.get("sha256") != digests.setdefault(name, sha256(p.raw)):
                continue  # other patch bytes: says nothing about this one
            for node, got in rec["tests"].items():
                if got != "passed" or node not in p.metadata.regression_tests:
                    continue
                now = _code_now(root, node, code_cache)
                if not now or any(code.get(f) != h for f, h in now.items()):
                    continue  # the test code changed since (or was not recorded): cannot tell
                found.setdefault((name, node), PassOnPristine(name, node, path))
    return list(found.values())


def trailer_line(raw: bytes, node: str) -> int:
    """The 1-based line of `Regression-Test: <node>` in a patch file (0 when not found)."""
    for i, line in enumerate(raw.decode("utf-8", "surrogateescape").splitlines(), 1):
        key, _, value = line.partition(":")
        if key.strip() == "Regression-Test" and value.strip() == node:
            return i
    return 0
