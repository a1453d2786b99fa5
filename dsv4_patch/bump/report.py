"""Reports of a bump or a walk: markdown (PR body, docs), JSON, GitHub problem-matcher lines."""

from __future__ import annotations

import json
from pathlib import Path

from .classify import Outcome
from .rebase import BumpReport
from .walk import WalkReport

DETAIL_LINES = 12


def _detail(o: Outcome) -> str:
    if o.status == "outside":
        return "outside the partial tree: " + ", ".join(f"`{f}`" for f in o.outside)
    extra = f" (not checked, outside the partial tree: {', '.join(f'`{f}`' for f in o.outside)})" if o.outside else ""
    return _detail_in_tree(o) + extra


def _detail_in_tree(o: Outcome) -> str:
    if o.status == "offset":
        return "; ".join(o.offsets)
    if o.status in ("3way", "conflict", "obsolete"):
        note = "; ".join(x for x in o.note.split("; ") if not x.startswith("not checked, outside"))
        return ", ".join(f"`{f}`" for f in o.files) + (f" ({note})" if note else "")
    if o.status in ("upstreamed", "resolved"):
        return o.evidence
    return o.note


RESULT_WORDS = {
    "ok": "every carried patch applied and was verified (its regression tests passed, its intent tests "
          "show upstream still needs it)",
    "unverified": "every patch applied and was written, but not every carried patch was verified: "
                  "see Evidence; nothing here says they work on the new upstream",
    "failed": "every patch applied, but a regression test failed",
    "conflicts": "a patch does not apply: see Conflicts; nothing was written",
    "upstreamed": "a patch is already upstream (or fixed upstream its own way): nothing was written",
    "partial": "a partial tree: compared, nothing written",
    "current": "already at the newest: nothing to do, no test run",
    "carried": "the newest release is carried by a series of its own already: nothing to do for this "
               "one, no test run",
}


def _evidence(rep: BumpReport, patch: str) -> str:
    if rep.status != "ok":
        return "-"
    if patch not in rep.refreshed:
        return "dropped"
    row = next((r for r in (rep.regress or {}).get("patches", []) if r.get("patch") == patch), None)
    if row is not None and row.get("outcome") in ("failed", "missing"):
        # evidence against it: never "verified" beside a regression test that failed
        return f"regression {row['outcome']}"
    return "unverified" if patch in rep.unverified else "verified"


def bump_markdown(rep: BumpReport) -> str:
    lines = [f"# Bump {rep.stack}: {rep.old['label']} → {rep.new['label']}", "",
             f"- old base: `{rep.old['commit'][:12]}` ({rep.old['source']})",
             f"- new base: `{rep.new['commit'][:12]}` ({rep.new['source']})",
             f"- result: **{rep.result}** (exit {rep.exit_code}): {RESULT_WORDS.get(rep.result, rep.result)}"
             + (f"; rebased tree `{rep.tree}`" if rep.tree else ""), ""]
    if rep.seed:
        lines.insert(-1, f"- seed of its tests: `DSV4_SEED={rep.seed}` (set it to re-run their randomized checks on the same inputs)")
    if rep.status in ("current", "carried"):
        if rep.new.get("carried_as"):
            lines.insert(-1, f"- carried as: `{rep.new['carried_as']}`")
        return "\n".join(lines) + "\n"
    if rep.new.get("what"):
        lines.insert(3, f"- new tree: {rep.new['what']}")
    if rep.new.get("partial") is not None:
        lines.insert(4, "- partial tree: carries only " + ", ".join(f"`{p}`" for p in rep.new["partial"])
                     + "; nothing is exported from it or pinned to it")
    lines += ["| # | patch | result | semantic | evidence | detail |", "| --- | --- | --- | --- | --- | --- |"]
    for i, o in enumerate(rep.outcomes, 1):
        sem = rep.verdict(o.patch)
        lines.append(f"| {i} | `{o.patch}` | {o.status} | {sem.verdict if sem else 'not run'} | "
                     f"{_evidence(rep, o.patch)} | {_detail(o) or '-'} |")
    if not rep.outcomes:
        lines.append("| - | (0 patches in series: nothing to carry forward) | - | - | - | - |")
    if rep.unverified:
        lines += ["", f"## Evidence: **unverified** ({len(rep.unverified)} of {len(rep.refreshed)} carried "
                  "patches)", "",
                  "A patch is verified only when its regression tests ran and passed on the rebased tree and "
                  "its intent tests failed on the pristine new upstream (`needed`). Not verified:", ""]
        for patch, why in rep.unverified.items():
            lines.append(f"- `{patch}`: **unverified**: " + "; ".join(why))
    if rep.semantic:
        lines += ["", "## Semantic verdicts (intent tests on the pristine new upstream, without the patch)", ""]
        for s in rep.semantic:
            lines.append(f"- `{s.patch}`: **{s.verdict}** — {s.reason}")
            for node, t in s.tests.items():
                lines.append(f"  - `{node}`: {t['outcome']}" + (f" ({t['why']})" if t.get("why") else ""))
    blocking = [o for o in rep.outcomes if o.blocking]
    if blocking:
        lines += ["", "## Conflicts", ""]
        for o in blocking:
            lines.append(f"### `{o.patch}` ({o.status})")
            if rep.conflict_trees.get(o.patch):
                lines.append(f"Resolve in `{rep.conflict_trees[o.patch]}` (left mid-`git am --3way`), then "
                             f"`dsv4-patch bump {rep.stack} {rep.new['label']} --record-resolution`.")
            lines += _tree_notes(rep, o.patch)
            for h in o.hunks:
                lines += ["", f"- `{h.file}` `{h.header}` (patch line {h.line}); upstream lines it expected:", "",
                          "```", *h.expected[:DETAIL_LINES], *(["…"] if len(h.expected) > DETAIL_LINES else []), "```"]
            lines.append("")
    left = (rep.trees or {}).get("left") or []
    if left:
        lines += ["", "## Conflict trees left in place (they hold work not recorded)", ""]
        lines += [f"- `{x['tree']}` ({x['patch']}): {x['why']}" + (f"; work: {', '.join(x['work'])}" if x["work"] else "")
                  + " — record it (`--record-resolution`) or pass `--force` to discard it" for x in left]
    if rep.hints:
        lines += ["", "## Advice", ""] + [f"- {h}" for h in rep.hints]
    up = [o for o in rep.outcomes if o.status == "upstreamed" or (rep.verdict(o.patch) and rep.verdict(o.patch).fixed)]
    if up:
        lines += ["", "## Proposed for removal (already upstream)", ""]
        lines += [f"- `{o.patch}`: " + "; ".join(filter(None, [
            o.evidence, f"fixed-upstream: {rep.verdict(o.patch).reason}" if rep.verdict(o.patch) and rep.verdict(o.patch).fixed else ""]))
            for o in up]
        if rep.status == "upstreamed":
            lines.append("\nNothing was written: rerun with `--drop-upstreamed` to drop them.")
    if rep.written_to:
        lines += ["", f"Refreshed patches written to `{rep.written_to}`: " + ", ".join(f"`{n}`" for n in rep.refreshed)]
    if rep.pin:
        lines.append("Pin moved: " + json.dumps(rep.pin))
    lines += ["", "## Range-diff (old stack → new stack)", "", "```", rep.range_diff.rstrip() or "(empty)", "```"]
    lines += ["", "## Regression", ""]
    if rep.regress is None:
        why = {"ok": " (--no-regress)", "partial": " (a partial tree is never exported from)",
               "upstreamed": " (nothing was written)"}.get(rep.status, " (conflicts remain)")
        lines.append("not run" + why)
    else:
        word = ("failed" if not rep.regress.get("ok") else
                "verified" if rep.regress.get("verified", False) else "unverified (a patch's tests all skipped, or none)")
        lines.append(f"result: **{word}**" + (f" — {rep.regress['error']}" if rep.regress.get("error") else ""))
        lines += ["", "| patch | outcome | tests |", "| --- | --- | --- |"]
        for p in rep.regress.get("patches", []):
            tests = ", ".join(f"{k.rsplit('::', 1)[-1]}={v}" for k, v in p["tests"].items())
            lines.append(f"| `{p['patch']}` | {p['outcome']} | {tests} |")
    return "\n".join(lines) + "\n"


def _tree_notes(rep: BumpReport, patch: str) -> list[str]:
    trees = rep.trees or {}
    out = []
    if trees.get("kept", {}).get(patch):
        out.append("Kept from the last round with your work in it: " + ", ".join(trees["kept"][patch]) + ".")
    before = trees.get("skipped_before", {}).get(patch)
    if before:
        out.append("This tree lacks the earlier blocked patch(es) " + ", ".join(f"`{b}`" for b in before)
                   + ": their changes are not in it.")
    return out


def walk_markdown(rep: WalkReport) -> str:
    lines = [f"# Walk {rep.stack} {rep.span}", "",
             "| patch | " + " | ".join(s.label for s in rep.steps) + " | first stops |",
             "| --- | " + " | ".join("---" for _ in rep.steps) + " | --- |"]
    stops = rep.first_stop
    for i, name in enumerate(rep.patches):
        cells = [s.outcomes[i].status for s in rep.steps]
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {stops[name] or 'never'} |")
    lines += ["", f"{len(rep.steps)} steps in {rep.seconds:.1f} s", ""]
    for s in rep.steps:
        bad = [o for o in s.outcomes if o.status not in ("clean",)]
        if not bad:
            continue
        lines.append(f"## {s.label} (`{s.commit[:12]}`)")
        for o in bad:
            lines.append(f"- `{o.patch}`: {o.status} — {_detail(o) or '-'}")
            lines += [f"  - hunk `{h.header}` in `{h.file}` (patch line {h.line})" for h in o.hunks]
        lines.append("")
    return "\n".join(lines) + "\n"


def _esc_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _esc_prop(s: str) -> str:
    return _esc_data(s).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, file: str, line: int, message: str) -> str:
    """One GitHub Actions workflow command (`::error file=…,line=…::…`)."""
    return f"::{level} file={_esc_prop(file)},line={max(1, line)}::{_esc_data(message)}"


def annotations(outcomes: list[Outcome], patch_dir: str, where: str, semantic=None,
                unverified: dict[str, list[str]] | None = None) -> list[str]:
    """Problem-matcher lines pointing at the failing hunk headers of the patch files (and, given
    the semantic verdicts, a warning on each patch found fixed upstream; given `unverified`, a
    warning on each carried patch that nothing verified)."""
    out = []
    for patch, why in (unverified or {}).items():
        out.append(annotation("warning", f"{patch_dir.rstrip('/')}/{patch}", 1,
                              f"{patch}: unverified on {where}: " + "; ".join(why)))
    for s in semantic or []:
        if s.fixed:
            out.append(annotation("warning", f"{patch_dir.rstrip('/')}/{s.patch}", 1,
                                  f"{s.patch}: fixed upstream in {where} ({s.reason}); propose removal"))
    for o in outcomes:
        f = f"{patch_dir.rstrip('/')}/{o.patch}"
        if o.status == "conflict":
            for h in o.hunks or []:
                out.append(annotation("error", f, h.line, f"{o.patch}: conflict on {where} in {h.file} at {h.header}"))
            if not o.hunks:
                out.append(annotation("error", f, 1, f"{o.patch}: conflict on {where} in {', '.join(o.files)}"))
        elif o.status == "obsolete":
            out.append(annotation("error", f, 1, f"{o.patch}: obsolete on {where}: {o.note}"))
        elif o.status == "upstreamed":
            out.append(annotation("warning", f, 1, f"{o.patch}: already upstream in {where} ({o.evidence}); propose removal"))
        elif o.status == "outside":
            out.append(annotation("notice", f, 1, f"{o.patch}: not checked on {where}: {o.note}"))
        elif o.status == "not-tried":
            out.append(annotation("warning", f, 1, f"{o.patch}: not tried on {where} ({o.note})"))
    return out


def write_bump(rep: BumpReport, path_md: Path) -> tuple[Path, Path]:
    """The markdown at `path_md`, the JSON beside it (`x.md` -> `x.json`); a path that already ends
    in .json gets the JSON, the markdown beside it (`x.json` -> `x.md`), so neither overwrites the
    other. Returns (markdown, json)."""
    path_md = Path(path_md)
    if path_md.suffix == ".json":
        path_md, pj = path_md.with_suffix(".md"), path_md
    else:
        pj = path_md.with_suffix(".json") if path_md.suffix else path_md.with_name(path_md.name + ".json")
    path_md.parent.mkdir(parents=True, exist_ok=True)
    path_md.write_text(bump_markdown(rep))
    pj.write_text(json.dumps(rep.to_dict(), indent=1, default=str))
    return path_md, pj
