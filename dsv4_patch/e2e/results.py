"""A suite run's report: JSON, JUnit XML (one testcase per case and per generation), and a short
human summary that shows the tokens and text next to the verdict (a person still reads the text:
COHERENT is a mechanical verdict)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .stages import CaseRun
from .verdict import Verdict, worst

REPORT_SCHEMA = "dsv4-e2e-report/1"


@dataclass
class SuiteReport:
    suite: str
    description: str
    cases: list[CaseRun]
    comparison: list[str] = field(default_factory=list)  # A/B mismatches between variants
    started: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    @property
    def verdict(self) -> Verdict:
        v = worst(c.judgement.verdict for c in self.cases)
        if self.comparison and v is Verdict.COHERENT:
            return Verdict.DEGRADED
        return v

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.COHERENT

    def hardware(self) -> str | None:
        names = {c.result.get("hardware") for c in self.cases if c.result and c.result.get("hardware")}
        return names.pop() if len(names) == 1 else None

    def to_dict(self) -> dict:
        return {
            "schema": REPORT_SCHEMA,
            "suite": self.suite,
            "description": self.description,
            "started": self.started,
            "verdict": self.verdict.value,
            "comparison": self.comparison,
            "hardware": self.hardware(),
            "cases": [c.to_dict() for c in self.cases],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)


def compare_variants(cases: list[CaseRun], tokens: int) -> list[str]:
    """A/B: every generation label must have the same first `tokens` ids in every variant."""
    if len(cases) < 2:
        return []
    base = cases[0]
    base_ids = {g["label"]: g.get("token_ids", [])[:tokens] for g in base.generations()}
    out = []
    for other in cases[1:]:
        ids = {g["label"]: g.get("token_ids", [])[:tokens] for g in other.generations()}
        for label in sorted(set(base_ids) | set(ids)):
            a, b = base_ids.get(label), ids.get(label)
            if a != b:
                where = next((i for i, (x, y) in enumerate(zip(a or [], b or [])) if x != y), None)
                at = f" first differ at position {where}" if where is not None else ""
                out.append(f"{label}: {base.case} and {other.case} disagree{at} ({a!r} vs {b!r})")
    return out


def to_junit_xml(report: SuiteReport) -> str:
    suite = ET.Element("testsuite", name=f"e2e.{report.suite}", timestamp=report.started)
    tests = failures = errors = 0
    for c in report.cases:
        cls = f"e2e.{report.suite}.{c.case}"
        rows = [("run", c.judgement.verdict, c.judgement.reasons, c.outcome.wall_s)]
        rows += [(g.label, g.verdict, [str(r) for r in g.reasons], 0.0) for g in c.judgement.generations]
        for name, verdict, reasons, secs in rows:
            tests += 1
            tc = ET.SubElement(suite, "testcase", classname=cls, name=name, time=f"{secs:.3f}")
            if verdict is Verdict.DEGRADED:
                failures += 1
                ET.SubElement(tc, "failure", message=f"{verdict.value}: {'; '.join(reasons)[:500]}", type=verdict.value).text = "\n".join(reasons)
            elif verdict in (Verdict.ERROR, Verdict.CRASHED):
                errors += 1
                msg = c.judgement.first_blocker or "; ".join(reasons)
                ET.SubElement(tc, "error", message=f"{verdict.value}: {msg[:500]}", type=verdict.value).text = "\n".join(reasons)
    for line in report.comparison:
        tests += 1
        failures += 1
        tc = ET.SubElement(suite, "testcase", classname=f"e2e.{report.suite}", name="variants-agree")
        ET.SubElement(tc, "failure", message=line[:500], type="DEGRADED").text = line
    if not report.comparison and len(report.cases) > 1:
        tests += 1
        ET.SubElement(suite, "testcase", classname=f"e2e.{report.suite}", name="variants-agree")
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def summary_lines(report: SuiteReport, max_text: int = 200) -> list[str]:
    out = [f"suite {report.suite}: {report.verdict.value}  ({report.description})"]
    for c in report.cases:
        j = c.judgement
        sched = c.outcome.scheduler
        sig = f"PY_EXIT={c.outcome.exit_code if c.outcome.exit_code is not None else '?'}"
        if sched is not None:
            sig += f"  scheduler={sched.state} {sched.exit_text} (job {sched.job_id}, {sched.source})"
        out.append(f"  case {c.case}: {j.verdict.value}  stage reached: {j.stage_reached or '-'}  {sig}")
        if j.first_blocker:
            out.append(f"    first blocker: {j.first_blocker}")
        for r in j.reasons[:8]:
            out.append(f"    - {r}")
        for g in c.generations()[:8]:
            ids = g.get("token_ids", [])
            shown = ", ".join(map(str, ids[:12])) + (", ..." if len(ids) > 12 else "")
            out.append(f"    {g.get('label')}: TOKEN_IDS [{shown}] ({len(ids)}) finish={g.get('finish_reason')}")
            out.append(f"      OUTPUT_REPR {g.get('text', '')[:max_text]!r}")
        noise = c.scan.noise
        if noise:
            out.append(f"    ignored as noise: {len(noise)} message(s), e.g. {noise[0].summary[:100]!r}")
        out.append(f"    files: {c.workdir}")
    for line in report.comparison:
        out.append(f"  A/B mismatch: {line}")
    return out
