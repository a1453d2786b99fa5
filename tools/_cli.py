"""What every dsv4-patch command shares: the Typer app, the consoles, the common options, the
progress view, the plain-table fitting, one-line errors and --json. The commands are in
tools/cmd_*.py, each registering itself on `app` when imported; tools/applypatch.py imports them in
the order `--help` lists them and runs the app."""

from __future__ import annotations

import json
import sys
import re
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from dsv4_patch import __version__
from dsv4_patch.config import load_project
from dsv4_patch.errors import ConflictError, Dsv4Error
from tools import typer_fastpath

typer_fastpath.install()  # plain str/None parameters without pydantic: see tools/typer_fastpath.py

# Help text is click's plain formatter (rich_markup_mode=None: square brackets stay literal).
# Paragraphs after a line holding only \b are printed verbatim: the Examples blocks keep their
# lines at any width. Wide terminals get up to 160 columns before click re-wraps prose.
HELP_SETTINGS = {"max_content_width": 160, "help_option_names": ["-h", "--help"]}

app = typer.Typer(
    name="dsv4-patch",
    help="Build, export, lint, test and rebase the DeepSeek V4 patch stacks for vLLM, SGLang and DeepGEMM.\n\n"
    "\b\nTypical session:\n"
    "  dsv4-patch apply vllm             # build/vllm: the pin plus one commit per patch\n"
    "  cd build/vllm; edit; git commit   # or git commit --fixup + git rebase -i --autosquash refs/dsv4/base\n"
    "  dsv4-patch export vllm            # the commits back into patches/vllm/\n"
    "  dsv4-patch check && dsv4-patch regress vllm",
    no_args_is_help=True,
    add_completion=True,
    rich_markup_mode=None,
    context_settings=HELP_SETTINGS,
    epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 conflict. "
    "Shell completion: dsv4-patch --install-completion.",
)
out = Console(soft_wrap=True)  # one-line messages stay one line (grep, CI logs)
err = Console(stderr=True, soft_wrap=True)

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON on stdout.")
def _out_given(value: Optional[Path]) -> Optional[Path]:
    # Path("") is "." (the checkout root): an empty --out is a mistake, never a place to build
    if value is not None and str(value) == ".":
        argv = sys.argv[1:]
        given = [b for a, b in zip(argv, argv[1:]) if a in ("--out", "-o")]
        given += [a.split("=", 1)[1] for a in argv if a.startswith("--out=")]
        if "" in given:
            raise typer.BadParameter("an empty string is not a folder (give a path, e.g. --out build)")
    return value


OutOpt = typer.Option(None, "--out", "-o", help="Output folder for patched trees [default: build/ in the project "
                      "root (the folder holding patches/stacks.toml), wherever you run from]. Never the checkout root, "
                      "patches/ or a folder holding tracked files (exit 2, --force or not).", callback=_out_given)
ProjOpt = typer.Option(None, "--project", help="Checkout holding patches/stacks.toml [default: found from cwd].")
ReleaseOpt = typer.Option(None, "--release", "-r", metavar="TAG", help="Only this upstream release of the stacks (repeatable; "
                          "e.g. v0.33.0) [default: every release]. STACK@TAG names one directly.")


def progress(quiet: bool = False):
    """The engine's progress callback, rendered by the current command's view (VIEW)."""
    return None if quiet else VIEW.say


class ProgressView:
    """Renders the engine's progress messages. On a terminal: a rich progress bar for counted work
    ("k/n" in the message: patches applied, releases walked, modules imported) and a spinner with
    the elapsed time for the rest, each message also kept as a line above it. Elsewhere (CI logs,
    pipes): one plain `· message` line each."""

    COUNT = re.compile(r"(?<![\w./])(\d+)/(\d+)(?![\w./])")

    def __init__(self, console: Console):
        self.console = console
        self.bar = None
        self.task = None

    def say(self, msg: str) -> None:
        self.console.print(f"[dim]· {escape(msg)}[/dim]", highlight=False)
        if not self.console.is_terminal:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        if self.bar is None:
            self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=self.console, transient=True)
            self.bar.start()
        m = self.COUNT.search(msg)
        done, total = (int(m.group(1)), int(m.group(2))) if m else (0, None)
        if total is not None and not 0 <= done <= total > 0:
            total = None
        if self.task is not None and (total is None) != (self.bar.tasks[0].total is None):
            self.bar.remove_task(self.task)  # counted <-> uncounted: rich keeps a total once set
            self.task = None
        if self.task is None:
            self.task = self.bar.add_task("", total=total)
        self.bar.update(self.task, description=escape(msg[:60]), completed=done, total=total)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
            self.task = None


VIEW = ProgressView(err)


def table(*columns: str, title: str | None = None):
    """Names are never cut: long cells fold onto more lines instead of ending in an ellipsis."""
    from rich.table import Table  # only the commands that print tables pay for it

    t = Table(title=title, show_edge=False, pad_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    return t


def print_table(t) -> None:
    """--wide: every cell whole, however wide the lines get (the default fits the width: fit_table)."""
    Console(soft_wrap=True, width=1000, force_terminal=out.is_terminal).print(t)


WideOpt = typer.Option(False, "--wide", help="The full table: every cell whole, however wide (the default fits "
                       "COLUMNS, else the terminal, else 100 columns; --json has everything).")


def table_width() -> int:
    """The width tables fit: COLUMNS, else the terminal's, else 100 (pipes, CI logs)."""
    import os

    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) > 0:
        return max(int(cols), 40)
    try:
        return max(os.get_terminal_size(sys.stdout.fileno()).columns, 40)
    except (OSError, ValueError):
        return 100


_BREAKS = re.compile(r"(?<=[-_./:\[,= ])")  # after these a long name or test id may go on the next line


def pieces(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width`, broken only after - _ . / : [ , = or a space (a run of
    other characters wider than the line, alone, is cut)."""
    if len(text) <= width:
        return [text]
    lines, cur = [], ""
    for tok in _BREAKS.split(text):
        if cur and len(cur) + len(tok.rstrip()) > width:
            lines.append(cur.rstrip())
            cur = ""
        while len(tok) > width:
            lines.append(tok[:width])
            tok = tok[width:]
        cur += tok
    if cur.strip():
        lines.append(cur.rstrip())
    return lines


def fit_table(headers: list[str], rows: list[list[str]], width: int) -> list[str]:
    """A plain table no wider than `width`: every column but the last as wide as its longest cell,
    the last (the patch name) whole after them, or, when a name does not fit there, every name on
    a line of its own below its row (broken after '-' only when wider than the whole line)."""
    n = len(headers) - 1
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(n)]
    pres = ["  " + "  ".join(c.ljust(w) for c, w in zip(cells[:n], widths)) + "  " for cells in [headers, *rows]]
    if all(len(pre) + len(cells[n]) <= width for pre, cells in zip(pres, [headers, *rows])):
        return [(pre + cells[n]).rstrip() for pre, cells in zip(pres, [headers, *rows])]
    lines = []
    for pre, cells in zip(pres, [headers, *rows]):
        lines += pieces(pre.rstrip(), width)
        lines += ["    " + p for p in pieces(cells[n], width - 4)]
    return lines


def print_lines(lines: list[str], width: int | None, indent: str = "    ", style: str | None = None) -> None:
    """Each line as it is when it fits `width` (None: --wide, never broken), else broken (see
    pieces) with `indent` before the rest."""
    for line in lines:
        if width is None or len(line) <= width:
            out.print(line, highlight=False, markup=False, style=style)
            continue
        head = pieces(line, width)[0]
        tail = line[len(head):].lstrip()
        for piece in [head] + ([indent + p for p in pieces(tail, width - len(indent))] if tail else []):
            out.print(piece, highlight=False, markup=False, style=style)


def fail(e: Dsv4Error, as_json: bool) -> None:
    VIEW.stop()
    if as_json:
        payload = {"error": e.message, "hint": e.hint, "exit_code": e.exit_code}
        if isinstance(e, ConflictError) and e.report is not None:
            payload["failure"] = e.report.to_dict()
        print(json.dumps(payload, indent=1))
    else:
        err.print(f"[red]error:[/red] {escape(e.one_line())}", highlight=False)  # [stacks.x] is text, not markup
        report = getattr(e, "report", None)
        if report is not None and getattr(report, "hunks", None):
            for h in report.hunks[:3]:
                err.print(f"  {h.file} {h.header}\n  upstream lines it expected:", highlight=False)
                for line in h.expected[:12]:
                    err.print(f"    | {line}".replace("\0", "\\0"), highlight=False, markup=False)  # a NUL shows
        elif e.details and not isinstance(e, ConflictError):
            err.print(e.details, highlight=False, markup=False)
    raise typer.Exit(e.exit_code)


def load(project: Optional[Path]):
    return load_project(project)


def emit(data, as_json: bool) -> bool:
    if as_json:
        print(json.dumps(data, indent=1, default=str))
    return as_json


@app.callback(invoke_without_command=True)
def _main(version: bool = typer.Option(False, "--version", help="Print the version and exit.")):
    if version:
        print(__version__)
        raise typer.Exit(0)
