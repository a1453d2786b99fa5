"""`dsv4-patch e2e` and the matrix renderer for `status --matrix`: thin Typer glue over dsv4_patch.e2e.

Register in tools/applypatch.py with one line:

    app.command("e2e")(cmd_e2e.e2e)

Exit codes: 0 every case COHERENT (and --record, if asked, written); 1 a failed verdict (DEGRADED,
ERROR, CRASHED), a configuration error or a refused --record; 2 usage (bad option values; Typer uses 2
as well); 3 is not used by this command.

Test/debug hook: DSV4_E2E_WORKER="python /path/to/script.py" replaces `python -m dsv4_patch.e2e.worker`
(the test suite points it at tests/e2e/fake_engine_double.py).
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from dsv4_patch.errors import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Dsv4Error

# dsv4_patch.e2e is imported inside the functions: registering `e2e` must not cost the harness.

app = typer.Typer(help="End-to-end acceptance runs on real hardware (docs/e2e.md).")


@app.command("e2e")
def e2e(
    engine: Annotated[str, typer.Option("--engine", help="vllm or sglang")] = "vllm",
    model: Annotated[str, typer.Option("--model", help="local checkpoint directory (config.json, weights)")] = "",
    tp: Annotated[int, typer.Option("--tp", help="tensor-parallel size")] = 1,
    suite: Annotated[str, typer.Option("--suite", help="suite name in e2e/suites/ or a .toml path")] = "chat32",
    launcher: Annotated[str, typer.Option("--launcher", help="local or slurm")] = "local",
    slurm_config: Annotated[Optional[Path], typer.Option("--slurm-config", help="TOML with a [slurm] table")] = None,
    record: Annotated[bool, typer.Option("--record", help="write patches/<engine>/results/*.json (hardware level)")] = False,
    hardware: Annotated[Optional[str], typer.Option("--hardware", help="override the detected hardware for --record")] = None,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", help="override the suite (>= 2)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    out: Annotated[Path, typer.Option("--out", help="run directory (shared with compute nodes under Slurm)")] = Path("build/e2e"),
) -> None:
    """Run a suite on the patched engine and judge it stage by stage (COHERENT/DEGRADED/ERROR/CRASHED).

    Needs the engine built with the stack (`dsv4-patch build vllm --venv ...`), a local checkpoint
    and the hardware; docs/e2e.md has the details and the Slurm table.

    \b
    Examples:
      dsv4-patch e2e --engine vllm --model /models/DeepSeek-V4-Flash --tp 8 --suite chat32
      dsv4-patch e2e --engine sglang --model /models/DeepSeek-V4-Flash --suite swa-border --json
      dsv4-patch e2e --model /models/DeepSeek-V4-Pro --tp 8 --launcher slurm --slurm-config slurm.toml
      dsv4-patch e2e --model /models/DeepSeek-V4-Flash --tp 8 --record --hardware gfx936
                                    # writes patches/vllm/results/*.json: commit it

    Exit codes: 0 every case COHERENT (and --record written), 1 a failed verdict (DEGRADED, ERROR,
    CRASHED), a configuration error or a refused --record, 2 usage (bad option, no such --model).
    """
    from dsv4_patch.e2e.api import E2EOptions, run_e2e
    from dsv4_patch.e2e.results import summary_lines

    worker = os.environ.get("DSV4_E2E_WORKER")
    opts = E2EOptions(
        engine=engine, model=model, tp=tp, suite=suite, launcher=launcher, slurm_config=slurm_config, out=out,
        record=record, hardware=hardware, max_tokens=max_tokens,
        worker_prefix=shlex.split(worker) if worker else None,
    )
    try:
        result = run_e2e(opts)
    except Dsv4Error as e:
        typer.echo(f"error: {e.one_line()}", err=True)
        raise typer.Exit(e.exit_code if e.exit_code == EXIT_USAGE else EXIT_ERROR)
    if as_json:
        payload = result.report.to_dict() | {
            "files": {"json": str(result.json_path), "junit": str(result.junit_path), "summary": str(result.summary_path)},
            "recorded": str(result.recorded) if result.recorded else None,
            "record_refused": result.record_refused,
        }
        typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        for line in summary_lines(result.report):
            typer.echo(line)
        typer.echo(f"report: {result.json_path}  junit: {result.junit_path}")
        if result.recorded:
            typer.echo(f"recorded: {result.recorded} (commit it with the stack)")
    if result.record_refused:
        typer.echo(f"error: --record refused: {result.record_refused}", err=True)
    raise typer.Exit(EXIT_OK if result.ok else EXIT_ERROR)


def render_matrix(root: Path, stacks: list[str] | None = None, as_json: bool = False) -> str:
    """The verification matrix as text (or JSON) for `dsv4-patch status --matrix`.

    One row per patch (series order), one column per verification level; a cell lists the hardware on which
    the newest result passed, `!hw` where it failed, `~hw` where it was recorded for an older version of
    the patch file or at another pin, `?hw` where it passed but its test code changed since (run it again), and `-`
    where nothing was recorded.
    """
    from dsv4_patch.e2e.matrix import compute_matrix
    from dsv4_patch.e2e.record import LEVELS

    matrices = compute_matrix(root, stacks)
    if as_json:
        return json.dumps([m.to_dict() for m in matrices], indent=2)
    lines = []
    for m in matrices:
        lines.append(f"{m.stack}:")
        if not m.rows:
            lines.append("  (no patches in series)")
        width = max([len(r.name) for r in m.rows] + [5])
        if m.rows:
            lines.append("  " + "patch".ljust(width) + "  " + "  ".join(lv.ljust(11) for lv in LEVELS))
        for r in m.rows:
            cols = []
            for lv in LEVELS:
                marks = [{"passed": "", "failed": "!", "stale": "~", "stale-tests": "?"}[c.status] + c.hardware for c in r.cells_for(lv)]
                cols.append((",".join(marks) or "-").ljust(11))
            lines.append("  " + r.name.ljust(width) + "  " + "  ".join(cols))
        for r in m.rows:
            moved = [c for c in r.cells if c.changed_tests]
            if moved:
                files = sorted({f for c in moved for f in c.changed_tests})
                lines.append(f"  ? {r.name} ({', '.join(f'{c.level} {c.hardware}' for c in moved)}): "
                             f"test code changed since: {', '.join(files)}")
        for p in m.problems:
            lines.append(f"  problem: {p}")
    lines.append("legend: hw = passed there, !hw = failed, ~hw = recorded for an older version of the patch "
                 "or at another pin, "
                 "?hw = passed, but its test code changed since, - = not run")
    return "\n".join(lines)
