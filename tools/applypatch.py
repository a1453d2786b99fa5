"""dsv4-patch: the command line, started here. The commands are tools/cmd_*.py (each parses its
arguments, calls dsv4_patch.api and renders the result), what they share is tools/_cli.py; imports
run applypatch -> cmd_* -> _cli, never back (a cmd_* importing this module would register e2e, bump
and release on the shared app twice).

Exit codes: 0 ok, 1 error (bad input, unreachable source, stale export, lint or test failure),
2 usage, 3 conflict (a patch does not apply, or is already upstream).
"""

from __future__ import annotations

import sys

if __package__ in (None, ""):  # `python tools/applypatch.py ...` from a checkout
    import os

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

import tools  # noqa: F401  first: a Ctrl-C during the imports below is one line, exit 130 (tools/__init__.py)

from pathlib import Path

import typer

from tools._cli import VIEW, app, progress
# The commands, in the order `--help` lists them: each registers itself on `app` (tools/_cli.py).
from tools import cmd_status, cmd_apply, cmd_export, cmd_check, cmd_regress, cmd_pin, cmd_build  # noqa: F401,I001


SHORT_HELP = {"bump": "Rebase a stack onto a new upstream release or commit; one verdict per patch.",
              "e2e": "End-to-end acceptance run on real hardware, judged stage by stage.",
              "release": "Add, move or retire a release a stack is carried on (one command each)."}


def _register_optional(argv: list[str] | None) -> None:
    """`e2e`, `bump` and `release` are imported only when they can be invoked or listed (their
    command, or top-level help), so `apply`'s no-op stays fast; imported as a library (argv None:
    tests, other tools) every command is registered."""
    first = None if argv is None else next((a for a in argv if not a.startswith("-")), None)
    for name, module, func in (("e2e", "tools.cmd_e2e", "e2e"), ("bump", "tools.cmd_bump", "bump"),
                               ("release", "tools.cmd_release", "app")):
        if first not in (None, name):
            continue
        try:
            mod = __import__(module, fromlist=[func])
        except ImportError:  # a partial checkout: the command is simply absent
            continue
        if name == "bump" and hasattr(mod, "_say"):
            # bump's progress (a cold --walk downloads for minutes) renders through the same view
            mod._say = progress
        if isinstance(getattr(mod, func), typer.Typer):  # a command group (`release add|move|retire`)
            app.add_typer(getattr(mod, func), name=name, short_help=SHORT_HELP.get(name))
            continue
        app.command(name, short_help=SHORT_HELP.get(name))(getattr(mod, func))


_register_optional(sys.argv[1:] if Path(sys.argv[0]).name in ("dsv4-patch", "applypatch.py") else None)


class Interrupted(BaseException):
    """Raised by the SIGINT handler. Not a KeyboardInterrupt, so Click does not turn it into
    "Aborted!" exit 1; subprocess.run kills the git child it is waiting for on the way out."""


def _on_sigint(signum, frame):
    raise Interrupted()


def main() -> None:
    import signal

    for stream in (sys.stdout, sys.stderr):  # an ASCII-only stdout gets '?' for a dash, not a traceback
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    # until here a Ctrl-C is tools/__init__.py's (one line, 130: nothing started); from here it
    # unwinds the command (subprocess.run kills its git child), and once the command has ended it
    # is ignored (exit with the command's code, no traceback from the teardown)
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        try:
            app()
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave a traceback
            VIEW.stop()
    except Interrupted:
        sys.stderr.write("dsv4-patch: interrupted; the previous tree is intact and the next run cleans up\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
