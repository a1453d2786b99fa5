"""dsv4-patch engine: patch stacks for DeepSeek V4 on vLLM, SGLang and DeepGEMM.

Layering (imports run one way): tools/ (the CLI: applypatch.py, cmd_*.py) -> dsv4_patch.api -> dsv4_patch.commands
(one module per command) -> domain modules (config, series, patchfile, tree, exporter, lint, regress,
bump) -> adapters (gitcmd, sources).
Nothing in this package prints or knows about Typer.
"""

__version__ = "0.1.0"
