"""`dsv4-patch build`: a venv of the pinned wheel with the patched Python files."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from dsv4_patch import api
from dsv4_patch.errors import EXIT_ERROR, Dsv4Error
from tools import _cli as cli
from tools._cli import JsonOpt, OutOpt, ProjOpt, app, err, out


@app.command()
def build(
    stack: str = typer.Argument(..., help="Stack to build (vllm or sglang; STACK@TAG: a further release)."),
    venv: Path = typer.Option(..., "--venv", help="Virtual environment to create or update."),
    from_source: bool = typer.Option(False, "--from-source", help="Run the upstream's own build (compiled changes)."),
    deepgemm_src: Optional[Path] = typer.Option(None, "--deepgemm-src", help="Patched DeepGEMM tree for vLLM source builds."),
    out_dir: Optional[Path] = OutOpt,
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
):
    """Install the pinned release into VENV and overlay the patched Python files.

    Each overlaid file's original must equal the wheel's copy; stacks that change compiled
    sources need --from-source. For vLLM on CPU, torch is the CPU build (DSV4_BUILD_TORCH,
    default 2.13.0) and the CUDA-only torchvision/torchaudio/torchcodec are removed. Every
    patched module is then imported in VENV: a build whose modules do not import fails.
    Cached by (pin, patch bytes); one build per VENV at a time (a lock beside it).
    pip installs without byte-compiling (most of a first build's time otherwise): each module is
    compiled on its first import, into VENV. Where VENV will be read-only or run with
    PYTHONDONTWRITEBYTECODE=1 (container images), compile it once: `VENV/bin/python -m compileall -q VENV`.

    \b
    Examples:
      dsv4-patch build vllm --venv .venv-vllm
      .venv-vllm/bin/python -c "import vllm.v1.attention.ops.rocm_aiter_mla_sparse"
      dsv4-patch build vllm --venv /scratch/venvs/vllm --from-source --deepgemm-src build/deepgemm

    Exit codes: 0 ok, 1 error (pip failed, a patched module does not import), 2 usage,
    3 the stack does not apply.
    """
    try:
        res = api.build(cli.load(project), stack, venv, from_source=from_source, out=out_dir,
                        deepgemm_src=deepgemm_src, progress=cli.progress(as_json))
    except Dsv4Error as e:
        cli.fail(e, as_json)
    cli.VIEW.stop()
    ok = getattr(res, "imports_ok", True)
    if not cli.emit(res.to_dict() | {"imports_ok": ok}, as_json):
        for i, line in enumerate(res.summary()):
            out.print((f"{stack}: " if i == 0 else "") + line, highlight=False, markup=False)
        if not ok:
            err.print(f"[red]error:[/red] {stack}: patched modules do not import in {escape(str(res.venv))} "
                      "(the lines above say why)", highlight=False)
    raise typer.Exit(0 if ok else EXIT_ERROR)
