#!/usr/bin/env python3
"""Pull-request check, the same locally and in GitHub Actions (ci/workflows/pr-check.yml):

    1. check           lint every stack
    2. apply           every stack builds at its pin (an unreachable upstream is a warning)
    3. export --check  the patch files are what the patched trees export (zero churn)
    4. regress         the bound regression tests, CPU only
    5. combined        BASE's patches + this PR's new/changed ones apply together (--base/--head)

Problems are printed as GitHub workflow commands (::error file=…,line=…::…) so they annotate
the patch lines in the PR. Exit 0 when every step passed, 1 otherwise.

    python ci/pr_check.py                                  # steps 1-4 on the working tree
    python ci/pr_check.py --base origin/main --head HEAD   # plus the combined-stack check
    python ci/pr_check.py --only combined --base main --head my-branch
    python ci/pr_check.py --release v0.33.0                # only the stacks' v0.33.0 releases

Every step covers every release of each stack (patches/stacks.toml) unless --release narrows it;
annotations name the release's own patch folder (patches/vllm/releases/v0.33.0/...).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ci.combined import check_combined  # noqa: E402
from dsv4_patch import api  # noqa: E402
from dsv4_patch.bump.report import annotation  # noqa: E402
from dsv4_patch.config import load_project  # noqa: E402
from dsv4_patch.errors import ConflictError, Dsv4Error, SourceError  # noqa: E402
from dsv4_patch.stack import load_stack  # noqa: E402

STEPS = ("check", "apply", "export", "regress", "combined")


def _hunk_line(cfg, patch_name: str, hunk_header: str | None) -> int:
    try:
        p = next(p for p in load_stack(cfg).patches if p.name == patch_name)
    except (StopIteration, Dsv4Error):
        return 1
    for fd in p.files:
        for h in fd.hunks:
            if hunk_header is None or h.header == hunk_header:
                return h.line
    return 1


def failure_lines(project, cfg, failure: dict, where: str) -> list[str]:
    rel = cfg.patch_dir.relative_to(project.root)
    f = f"{rel}/{failure['patch']}"
    hunks = failure.get("hunks") or [None]
    return [annotation("error", f, (h or {}).get("line") or _hunk_line(cfg, failure["patch"], h and h["header"]),
                       f"{failure['message']} [{where}]" + (f" at {h['header']}" if h else "")) for h in hunks]


def run(root: Path, steps: list[str], base: str | None, head: str | None, emit=print,
        releases: list[str] | None = None) -> int:
    project = load_project(root)
    targets = project.targets(None, releases)
    bad = 0
    if "check" in steps:
        for f in api.check(project, releases=releases):
            emit(annotation("error" if f.severity == "error" else "warning", f.file, f.line, f.message))
            bad += f.severity == "error"
    built = []
    if "apply" in steps or "export" in steps or "regress" in steps:
        for cfg in targets:
            try:
                api.apply(project, [cfg.selector])  # exactly this release
                built.append(cfg.selector)
            except ConflictError as e:
                bad += 1
                rep = e.report.to_dict() if e.report else {"patch": "series", "message": e.message, "hunks": []}
                for line in failure_lines(project, cfg, rep, "apply at the pin"):
                    emit(line)
            except SourceError as e:
                emit(f"::warning::{cfg.label}: upstream unavailable here, not built ({e.one_line()})")
    if "export" in steps:
        for name in built:
            res = api.export(project, name, check=True)
            name = project.target(name).label
            if res.stale:
                bad += 1
                for n in res.written + res.removed:
                    emit(annotation("error", f"{project.target(name).patch_dir.relative_to(project.root)}/{n}", 1,
                                    f"{n} is not what `dsv4-patch export {name}` writes: run it and commit"))
    if "regress" in steps and built:
        rep = api.regress(project, built)
        for r in rep.results:
            if r.outcome in ("failed", "missing"):
                bad += 1
                cfg = project.target(r.stack)  # a label: vllm or vllm@v0.33.0
                emit(annotation("error", f"{cfg.patch_dir.relative_to(project.root)}/{r.patch}", 1,
                                f"regression tests {r.outcome}: " + ", ".join(k for k, v in r.tests.items() if v != "passed")))
    if "combined" in steps:
        if not (base and head):
            emit("::warning::combined-stack check skipped: pass --base and --head")
        else:
            for c in check_combined(root, base, head, releases=releases):
                if not c.ok:
                    bad += 1
                    for line in failure_lines(project, project.target(c.stack), c.failure or
                                              {"patch": c.changed[0] if c.changed else "series", "message": c.message},
                                              f"on top of {base}"):
                        emit(line)
                else:
                    emit(f"::notice::{c.stack}: combined with {base}: {c.message}")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, default=ROOT)
    ap.add_argument("--only", action="append", choices=STEPS, help="run only these steps (repeatable)")
    ap.add_argument("--skip", action="append", choices=STEPS, default=[])
    ap.add_argument("--base", help="target branch ref (for the combined-stack check)")
    ap.add_argument("--head", help="PR head ref (for the combined-stack check)")
    ap.add_argument("--release", action="append", help="only this upstream release of the stacks (repeatable) "
                    "[default: every release]")
    a = ap.parse_args(argv)
    steps = [s for s in (a.only or STEPS) if s not in a.skip]
    try:
        return run(a.project, steps, a.base, a.head, releases=a.release)
    except Dsv4Error as e:
        print(f"::error::{e.one_line()}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
