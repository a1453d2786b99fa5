"""Read a raw engine log the way the gfx936 bring-up learned to: find the first blocker.

A run's log mixes the main process, engine-core and worker processes (each line prefixed with
`(VllmWorker rank=0 pid=...)`, `[rank0]:` ...), background threads, and shutdown. Two messages appear
in runs that succeed as well as in runs that fail, so they never are the cause
(docs/background.md, "Reading a raw log"):

- `Exception in thread Thread-1 (_report_usage_worker)` + `json.decoder.JSONDecodeError`: the usage
  report thread;
- `AssertionError: libcudart is not loaded in the current process, try setting VLLM_CUDART_SO_PATH`:
  vLLM's shutdown path on ROCm.

Rules for the first blocker: the earliest workload traceback or device fault, on the main
execution path (not a background thread, not shutdown noise, not after the results were printed).
Device faults (VMFault, device-side assertions) are never noise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Process prefixes vLLM/SGLang/torch put in front of every line of a child process.
PREFIX_RE = re.compile(r"^(?P<prefix>(?:\((?:[\w.-]+)(?: [\w.=-]+)*? ?pid=\d+\)|\[rank\d+\]:|\[\d{4}-\d\d-\d\d [^\]]*\]) ?)")  # one separator space: the rest is indentation
STAGE_RE = re.compile(r"^#{3} STAGE: (?P<name>.+?)\s*$")
ENGINE_READY_RE = re.compile(r"ENGINE_READY in (?P<s>[\d.]+)\s*s")
VERDICT_RE = re.compile(r"^DSV4_VERDICT: (?P<v>\w+)")
PY_EXIT_RE = re.compile(r"^PY_EXIT=(?P<rc>-?\d+)\s*$")
TRACEBACK_RE = re.compile(r"Traceback \(most recent call last\):")
THREAD_RE = re.compile(r"Exception in thread (?P<name>.+?):?\s*$")
IGNORED_RE = re.compile(r"^Exception ignored in")
EXC_LINE_RE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Fault|Failure|Warning)|[A-Za-z_][\w.]*\.[A-Z]\w*)(?::\s?(?P<msg>.*))?$")
# A diagnostic print of the kind the bring-up used: `logits_finite = False`, `nope_finite = False`.
FINITE_RE = re.compile(r"\b(?P<name>\w+_finite)\s*[=:]\s*False\b")

DEVICE_FAULT_PATTERNS = [
    (re.compile(r"Memory access fault by GPU", re.I), "GPU memory access fault"),
    (re.compile(r"VMFault|VM_L2_PROTECTION_FAULT", re.I), "VMFault"),
    (re.compile(r"[Dd]evice-side assert(?:ion)?"), "device-side assertion"),
    (re.compile(r"HSA_STATUS_ERROR_\w+"), "HSA runtime error"),
    (re.compile(r"hipError(?:IllegalAddress|LaunchFailure|Assert)\w*"), "HIP launch error"),
    (re.compile(r"an illegal memory access was encountered"), "illegal memory access"),
    (re.compile(r"unspecified launch failure"), "unspecified launch failure"),
    (re.compile(r"NCCL error|RCCL error|ncclUnhandledCudaError"), "collective communication error"),
]

NOISE_RULES = [
    # (predicate over the event text, why it is noise)
    (lambda thread, text: "_report_usage_worker" in (thread or "") or "usage_lib" in text,
     "usage-report background thread: appears in successful runs too"),
    (lambda thread, text: "libcudart is not loaded in the current process" in text,
     "ROCm shutdown path looking for libcudart: appears after results, not a cause"),
]


@dataclass
class LogEvent:
    kind: str  # "traceback" | "device_fault" | "nan_diagnostic"
    line: int  # 1-based line in the log
    summary: str  # "RuntimeError: PassManager::run failed", "VMFault: <line>"
    stage: str | None  # the last `### STAGE:` marker before it
    process: str = ""  # the line prefix ("(VllmWorker rank=0 pid=12)") or "" for the main process
    thread: str | None = None
    noise: str | None = None  # why this is not a cause, or None
    after_results: bool = False  # printed after the worker printed its verdict (shutdown)
    text: str = ""  # the full traceback / fault line

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "text"} | {"text": self.text[-4000:]}

    def describe(self) -> str:
        where = f" in stage {self.stage!r}" if self.stage else ""
        proc = f" [{self.process.strip()}]" if self.process else ""
        return f"{self.summary}{where}{proc} (log line {self.line})"


@dataclass
class LogScan:
    events: list[LogEvent] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)  # STAGE markers in order
    engine_ready_s: float | None = None
    printed_verdict: str | None = None  # what the worker printed (DSV4_VERDICT)
    py_exit: int | None = None  # PY_EXIT=... printed by the job script

    @property
    def last_stage(self) -> str | None:
        return self.stages[-1] if self.stages else None

    @property
    def device_faults(self) -> list[LogEvent]:
        return [e for e in self.events if e.kind == "device_fault"]

    @property
    def nan_diagnostics(self) -> list[LogEvent]:
        return [e for e in self.events if e.kind == "nan_diagnostic"]

    @property
    def noise(self) -> list[LogEvent]:
        return [e for e in self.events if e.noise]

    def first_blocker(self) -> LogEvent | None:
        """The earliest cause on the main path; shutdown-time causes only when nothing else exists."""
        causes = [e for e in self.events if e.kind in ("traceback", "device_fault") and not e.noise]
        main_path = [e for e in causes if not e.after_results and not _is_background(e)]
        for group in (main_path, [e for e in causes if not e.after_results], causes):
            if group:
                return min(group, key=lambda e: e.line)
        return None

    def to_dict(self) -> dict:
        blocker = self.first_blocker()
        return {
            "stages": self.stages,
            "engine_ready_s": self.engine_ready_s,
            "printed_verdict": self.printed_verdict,
            "py_exit": self.py_exit,
            "first_blocker": blocker.to_dict() if blocker else None,
            "events": [e.to_dict() for e in self.events],
        }


def _is_background(e: LogEvent) -> bool:
    # A thread other than the main one that is not an engine's own busy loop.
    return bool(e.thread) and "MainThread" not in (e.thread or "")


def split_prefix(line: str) -> tuple[str, str]:
    m = PREFIX_RE.match(line)
    return (m.group("prefix"), line[m.end():]) if m else ("", line)


def _noise_reason(thread: str | None, text: str) -> str | None:
    for pred, why in NOISE_RULES:
        if pred(thread, text):
            return why
    return None


def _read_traceback(lines: list[str], start: int, prefix: str) -> tuple[str, str, int]:
    """Collect a traceback of one process from `start`; returns (text, exception line, last index)."""
    body = [split_prefix(lines[start])[1]]
    seen_frame = False
    i = start + 1
    while i < len(lines) and i < start + 2000:
        pfx, rest = split_prefix(lines[i])
        if pfx.strip() != prefix.strip():
            i += 1  # another process interleaved a line; skip it
            continue
        body.append(rest)
        stripped = rest.strip()
        if rest.startswith((" ", "\t")):
            seen_frame = seen_frame or stripped.startswith("File ")
        elif seen_frame and stripped and EXC_LINE_RE.match(stripped):
            return "\n".join(body), stripped, i
        elif seen_frame and stripped and not stripped.startswith(("^", "~")):
            return "\n".join(body), stripped, i  # an exception line in an unusual shape
        i += 1
    return "\n".join(body), "(traceback without an exception line: the process died while printing)", i - 1


def scan_log(text: str) -> LogScan:
    scan = LogScan()
    lines = text.splitlines()
    stage: str | None = None
    results_printed = False
    i = 0
    while i < len(lines):
        prefix, rest = split_prefix(lines[i])
        line_no = i + 1
        if not prefix:
            m = STAGE_RE.match(rest)
            if m:
                stage = m.group("name")
                scan.stages.append(stage)
            m = VERDICT_RE.match(rest)
            if m:
                scan.printed_verdict = m.group("v")
                results_printed = True
            m = PY_EXIT_RE.match(rest)
            if m:
                scan.py_exit = int(m.group("rc"))
        m = ENGINE_READY_RE.search(rest)
        if m:
            scan.engine_ready_s = float(m.group("s"))
        for pat, what in DEVICE_FAULT_PATTERNS:
            if pat.search(rest):
                scan.events.append(LogEvent("device_fault", line_no, f"{what}: {rest.strip()[:200]}", stage,
                                            prefix, after_results=results_printed, text=rest))
                break
        m = FINITE_RE.search(rest)
        if m:
            scan.events.append(LogEvent("nan_diagnostic", line_no, f"{m.group('name')} = False", stage, prefix,
                                        after_results=results_printed, text=rest))
        if TRACEBACK_RE.search(rest):
            thread = None
            ignored = False
            if i > 0:
                prev_prefix, prev = split_prefix(lines[i - 1])
                tm = THREAD_RE.search(prev)
                if tm and prev_prefix.strip() == prefix.strip():
                    thread = tm.group("name")
                ignored = bool(IGNORED_RE.match(prev.strip()))
            tb, exc, end = _read_traceback(lines, i, prefix)
            noise = _noise_reason(thread, tb)
            if noise is None and ignored:
                noise = "'Exception ignored in ...' (garbage collection or interpreter exit): not on the main path"
            scan.events.append(LogEvent("traceback", line_no, exc, stage, prefix, thread, noise,
                                        results_printed, tb))
        i += 1
    return scan
