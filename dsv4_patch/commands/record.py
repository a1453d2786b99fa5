"""`regress --record`: result files for `status --matrix`, with the pristine outcomes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Project, StackConfig
from ..errors import Dsv4Error, UsageError
from ..outdir import BASE_SUFFIX, out_dir
from .export import export

if TYPE_CHECKING:
    from ..regress import RegressReport


def record_levels(project: Project, report: RegressReport, levels: list[str], hardware: str,
                  *, out: Path | None = None, by: str = "dsv4-patch regress --record") -> list[Path]:
    """Write one result file per (stack, level) for `status --matrix`, from a regress run.

    A test level is recorded as failed when a bound test failed (or is missing); otherwise as
    passed for exactly the patches whose bound tests all passed. A patch whose tests skipped has
    not been verified: it is left out of the passed record and named, with the skip reason, in its
    note (a level where nothing ran writes no file). `apply` is passed when the tree exports
    byte-identical to the patch files."""
    from ..e2e.record import LEVELS, make_result, write_result
    from ..e2e.testcode import fingerprint, files_of_tests

    bad = [lv for lv in levels if lv not in LEVELS]
    if bad:
        raise UsageError(f"unknown level {bad[0]!r}", hint=f"use {', '.join(LEVELS)}")
    written = []
    for label in sorted({r.stack for r in report.results}):
        cfg = project.target(label)  # results name a release by label: vllm, vllm@v0.33.0
        # A patch none of whose bound tests ran here (all left out by -m, e.g. -m gpu) is not part
        # of this result: the file names only the patches whose tests ran.
        rows = [r for r in report.results if r.stack == label and r.outcome != "no-tests"]
        if not rows:
            continue
        failed = [r for r in rows if r.outcome in ("failed", "missing")]
        pristine, pristine_why = (_pristine_block(project, cfg, rows, out) if any(lv != "apply" for lv in levels)
                                  else (None, ""))
        verified = [r.patch for r in rows if r.outcome == "passed"]
        unverified = {r.patch: f"{r.outcome}: {r.reason or 'bound tests skipped'}"
                      for r in rows if r.outcome in ("not-verified", "partial")}
        for level in levels:
            ok, evidence = not failed, {"patches": {r.patch: r.outcome for r in rows},
                                        "pytest_rc": report.pytest_rc, "seconds": round(report.seconds, 1)}
            note, keep = "", None
            if level == "apply":
                exp = export(project, label, out=out, check=True)
                ok, evidence = not exp.stale, {"export_stale": exp.stale, "applied_patches": len(rows)}
            elif ok:
                # A pass speaks only for the patches whose tests ran; the others are named as not verified.
                if not verified:
                    continue
                keep = set(verified)
                if unverified:
                    evidence["not_verified"] = unverified
                    note = "not verified here: " + "; ".join(f"{p} ({why})" for p, why in unverified.items())
            state = (out_dir(project, out) / cfg.label / ".git" / "dsv4" / "state.json")
            base = json.loads(state.read_text())["base"] if state.exists() else ""
            tests = None
            if level != "apply":  # the test code this result speaks for: status --matrix flags it once edited
                tests = fingerprint(project.root, files_of_tests(project.root, [n for r in rows for n in r.tests]))
            if level != "apply" and pristine_why:
                note = "; ".join(filter(None, [note, pristine_why]))
            data = make_result(cfg.name, cfg.patch_dir, level, hardware, ok, evidence, upstream_commit=base, pin=cfg.commit, by=by,
                               note=note, tests=tests)
            if level != "apply" and pristine is not None:
                data["pristine"] = pristine  # each bound id's outcome without the patch: what `check` reads
            keep = keep if keep is not None else {r.patch for r in rows}  # only the patches whose tests ran
            data["patches"] = [p for p in data["patches"] if p["name"] in keep]
            written.append(write_result(cfg.patch_dir, data))
    return written


def _pristine_block(project: Project, cfg: StackConfig, rows, out: Path | None) -> tuple[dict | None, str]:
    """(the `pristine` block of the result files, why there is none): the bound ids that ran on the
    patched tree, run once more on the pristine pin standing in for it (pristine.py)."""
    from .. import pristine
    from ..bump.semantic import run_on_pristine
    from ..stack import load_stack
    from ..tree import build_tree

    patches = [p for p in load_stack(cfg).patches if p.name in {r.patch for r in rows}]
    ran = {n for r in rows for n, o in r.tests.items() if o != "deselected"}
    ran &= {n for p in patches for n in p.metadata.regression_tests}  # upstream-ci rows name checks, not ids
    if not ran:
        return None, ""
    try:
        base = build_tree(cfg, out_dir(project, out), name=cfg.label + BASE_SUFFIX, upto=0, force=True)
        results = run_on_pristine(project.root, cfg, base.tree, sorted(ran))
    except Dsv4Error as e:
        return None, f"pristine outcomes not recorded: {e.one_line()}"
    return pristine.block(project.root, cfg.commit, patches, results, ran), ""
