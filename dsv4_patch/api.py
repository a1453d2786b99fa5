"""The commands, by name: what the cli (tools/applypatch.py, tools/cmd_*.py) and the tests call.

cli (tools/) -> api -> commands (dsv4_patch/commands/, one module per command) -> domain (config,
stack, tree, exporter, lint, regress, bump, ...) -> adapters (gitcmd, sources). The functions live
in dsv4_patch/commands/ (and regress in regress_releases.py, which bump and `release` run too); this
module only names them, so that `api.apply(...)` stays the one entry.
"""

from __future__ import annotations

from .commands._shared import release_fields
from .commands.apply import abort_apply, apply, compile_problems, ensure_tree, stopped, tree_for_tests
from .commands.build import build
from .commands.check import check
from .commands.export import ExportRun, export, export_releases, export_upstream
from .commands.pin import pin
from .commands.record import record_levels
from .commands.regress import report_dict, upstream_ci
from .commands.status import StackStatus, status, vllm_deepgemm_pin
from .outdir import BASE_SUFFIX, out_dir
from .regress_releases import regress  # not in commands/: bump and `release` run it too

__all__ = ["BASE_SUFFIX", "ExportRun", "StackStatus", "abort_apply", "apply", "build", "check",
           "compile_problems", "ensure_tree", "export", "export_releases", "export_upstream", "out_dir", "pin",
           "record_levels", "regress", "release_fields", "report_dict", "status", "stopped", "tree_for_tests",
           "upstream_ci", "vllm_deepgemm_pin"]
