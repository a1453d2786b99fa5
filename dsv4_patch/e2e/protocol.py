"""The files the harness and the worker exchange, and the markers the worker prints.

The harness writes `request.json`, starts the worker (locally or inside a Slurm job), and reads back
`result.json` plus the raw log. The worker must stay importable without the rest of the package's
dependencies (it runs inside the engine's environment on the cluster), so this module uses only the
standard library.

Worker exit codes (as the gfx936 bring-up's probe did, 2 means "ran, but the output is degraded"):
    0  every stage ran and the worker's own verdict is COHERENT
    1  a stage failed (an exception; the stage and traceback are in result.json)
    2  generation finished but the worker judged the output DEGRADED
    3  the request file is unusable
The harness never trusts these alone: it re-judges the tokens (a worker that exits 0 with J08's tokens
is DEGRADED) and cross-checks the scheduler.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

REQUEST_SCHEMA = "dsv4-e2e-request/1"
RESULT_SCHEMA = "dsv4-e2e-worker-result/1"

# Stage names, in order; printed as `### STAGE: <name>` (the gfx936 bring-up's probe format).
STAGES = ("env", "config", "import", "engine_init", "generate")
DONE_MARKER = "### STAGE: done"

WORKER_OK = 0
WORKER_STAGE_FAILED = 1
WORKER_DEGRADED = 2
WORKER_BAD_REQUEST = 3

DEFAULT_MAX_TOKENS = 32
MIN_MAX_TOKENS = 2  # the first token comes from prefill; decoding starts at the second


@dataclass
class RequestSpec:
    """One logical request of a suite: a chat (one or more user turns) or a prompt of a target length."""

    id: str
    turns: list[str] = field(default_factory=list)  # user messages; assistant replies are the model's
    system: str | None = None
    prompt_tokens: int | str | None = None  # target templated length: 65 or "sliding_window+1"
    filler: str = " 1"  # unit repeated to reach prompt_tokens


@dataclass
class WorkerRequest:
    engine: str  # vllm | sglang
    model: str
    tp: int
    case: str
    requests: list[RequestSpec]
    max_tokens: int = DEFAULT_MAX_TOKENS
    ignore_eos: bool = True
    batch: str = "sequential"  # sequential | together (all requests in one generate call)
    repeat: int = 1
    check_finite: bool = False  # ask the engine for sampled-token logprobs and check them
    engine_args: dict = field(default_factory=dict)
    variables: dict = field(default_factory=dict)  # values for prompt_tokens expressions
    max_repeat_run: int = 8
    schema: str = REQUEST_SCHEMA

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict) -> "WorkerRequest":
        if d.get("schema") != REQUEST_SCHEMA:
            raise ValueError(f"request schema {d.get('schema')!r}, expected {REQUEST_SCHEMA!r}")
        d = dict(d)
        d["requests"] = [RequestSpec(**r) for r in d.get("requests", [])]
        return cls(**d)

    @classmethod
    def load(cls, path: Path) -> "WorkerRequest":
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def read_result(path: Path) -> tuple[dict | None, str | None]:
    """(result, problem): a missing or unreadable result file is evidence, not an exception."""
    p = Path(path)
    if not p.exists():
        return None, f"no result file at {p} (the worker died before writing it)"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return None, f"result file {p} is unreadable: {e}"
    if not isinstance(data, dict) or data.get("schema") != RESULT_SCHEMA:
        return None, f"result file {p} has schema {data.get('schema') if isinstance(data, dict) else None!r}, expected {RESULT_SCHEMA!r}"
    return data, None
