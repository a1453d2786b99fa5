"""The command line: tools/applypatch.py (`dsv4-patch`) and its command modules.

Importing this package is the first code of the tool's own that runs (pip's `dsv4-patch` script
imports tools.applypatch; `python tools/applypatch.py` imports it before anything heavy). When the
process is the tool, a Ctrl-C from here until main() installs its own handler is one line and exit
130 (issue 28): the imports (typer, rich, the engine: ~0.25 s, seconds under load) change nothing
on disk, so there is nothing to undo. Before this line runs only the interpreter's own start-up
(~30 ms) is left to Python's KeyboardInterrupt.
"""

import os as _os  # (os and sys are loaded already: site imported them)
import sys as _sys

try:  # the C module: `signal` itself imports enum first (milliseconds, more under load)
    import _signal
except ImportError:  # pragma: no cover - another interpreter
    import signal as _signal

TOOL_NAMES = ("dsv4-patch", "applypatch.py")  # argv[0] of the tool: pip's script, or the file run directly


def _interrupted_while_starting(signum, frame):  # pragma: no cover - runs in the child the test signals
    _os.write(2, b"dsv4-patch: interrupted while starting; nothing was changed\n")
    _os._exit(130)


def guard_start_up() -> None:
    """Ctrl-C before main() is one line and exit 130, only in the tool's own process (not in an
    importer such as pytest) and only where SIGINT has Python's default handler (an ignored one
    stays ignored)."""
    if (_sys.argv and _os.path.basename(_sys.argv[0]) in TOOL_NAMES
            and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler):
        _signal.signal(_signal.SIGINT, _interrupted_while_starting)


guard_start_up()
