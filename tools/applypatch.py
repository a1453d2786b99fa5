"""dsv4-patch: the command line. Thin: parse arguments, call dsv4_patch.api, render results.

Exit codes: 0 ok, 1 error (bad input, unreachable source, stale export, lint or test failure),
2 usage, 3 conflict (a patch does not apply, or is already upstream).
"""

from __future__ import annotations

import sys

if __package__ in (None, ""):  # `python tools/applypatch.py ...` from a checkout
    import os

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

import tools  # noqa: F401  first: a Ctrl-C during the imports below is one line, exit 130 (tools/__init__.py)

import json
import re
import shlex
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from dsv4_patch import __version__, api
from dsv4_patch.config import load_project
from dsv4_patch.errors import EXIT_CONFLICT, EXIT_ERROR, EXIT_UNVERIFIED, ConflictError, Dsv4Error, SourceError, UsageError
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


def _progress(quiet: bool = False):
    """The engine's progress callback, rendered by the current command's view (see _view)."""
    return None if quiet else _VIEW.say


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


_VIEW = ProgressView(err)


def _table(*columns: str, title: str | None = None):
    """Names are never cut: long cells fold onto more lines instead of ending in an ellipsis."""
    from rich.table import Table  # only the commands that print tables pay for it

    t = Table(title=title, show_edge=False, pad_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    return t


def _print_table(t) -> None:
    """--wide: every cell whole, however wide the lines get (the default fits the width: _fit_table)."""
    Console(soft_wrap=True, width=1000, force_terminal=out.is_terminal).print(t)


WideOpt = typer.Option(False, "--wide", help="The full table: every cell whole, however wide (the default fits "
                       "COLUMNS, else the terminal, else 100 columns; --json has everything).")


def _width() -> int:
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


def _pieces(text: str, width: int) -> list[str]:
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


def _fit_table(headers: list[str], rows: list[list[str]], width: int) -> list[str]:
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
        lines += _pieces(pre.rstrip(), width)
        lines += ["    " + p for p in _pieces(cells[n], width - 4)]
    return lines


def _print_lines(lines: list[str], width: int | None, indent: str = "    ", style: str | None = None) -> None:
    """Each line as it is when it fits `width` (None: --wide, never broken), else broken (see
    _pieces) with `indent` before the rest."""
    for line in lines:
        if width is None or len(line) <= width:
            out.print(line, highlight=False, markup=False, style=style)
            continue
        head = _pieces(line, width)[0]
        tail = line[len(head):].lstrip()
        for piece in [head] + ([indent + p for p in _pieces(tail, width - len(indent))] if tail else []):
            out.print(piece, highlight=False, markup=False, style=style)


def _fail(e: Dsv4Error, as_json: bool) -> None:
    _VIEW.stop()
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


def _project(project: Optional[Path]):
    return load_project(project)


def _emit(data, as_json: bool) -> bool:
    if as_json:
        print(json.dumps(data, indent=1, default=str))
    return as_json


@app.callback(invoke_without_command=True)
def _main(version: bool = typer.Option(False, "--version", help="Print the version and exit.")):
    if version:
        print(__version__)
        raise typer.Exit(0)


@app.command()
def status(
    stacks: Optional[List[str]] = typer.Argument(None, help="Stacks to show [default: all]."),
    check: bool = typer.Option(False, "--check", help="Also dry-run whether each stack applies at its pin."),
    no_semantic: bool = typer.Option(False, "--no-semantic", help="With --check: skip the intent tests on the pristine pin."),
    matrix: bool = typer.Option(False, "--matrix", help="Show the verification matrix (levels passed per patch)."),
    release: Optional[List[str]] = ReleaseOpt,
    wide: bool = WideOpt,
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
):
    """Stacks, pins and patches with their metadata.

    \b
    Examples:
      dsv4-patch status
      dsv4-patch status vllm --check        # does every patch still apply at the pin? and do its
                                            # intent tests fail on the pristine pin (semantic)?
      dsv4-patch status vllm@v0.33.0        # one release of a stack carried on several
      dsv4-patch status --matrix            # which verification levels each patch reached

    With --check, each .py file the series touches must also compile (Python the tool runs on).
    A patch is verified at the pin only when its intent tests fail on the pristine pin (`needed`:
    the test catches the problem the patch fixes); any other verdict (untestable, no-intent,
    probe-error, unimportable, timeout, and fixed-upstream: a test that passes without the patch
    proves nothing) leaves it unverified, as does `needed` while one of its intent tests passes on
    the pristine pin (that one cannot fail for the patch's reason). --no-semantic checks only that the stacks apply and says
    the patches were not verified.

    Exit codes: 0 ok, 1 error (with --check: a touched .py file does not compile), 2 usage,
    3 a stack does not apply at its pin (--check), 4 unverified: everything applies but a patch's
    intent tests gave no evidence at the pin (--check).
    """
    try:
        proj = _project(project)
        if matrix:
            from tools.cmd_e2e import render_matrix  # the harness owns the matrix

            print(render_matrix(proj.root, stacks, as_json=as_json))
            raise typer.Exit(0)
        rows = api.status(proj, stacks, releases=release, check_apply=check, semantic=not no_semantic,
                          progress=_progress(as_json))
    except Dsv4Error as e:
        _fail(e, as_json)
    _VIEW.stop()
    if _emit([{**r.to_dict(), **({"unverified": _unverified_at_pin(r)} if r.applies else {})} for r in rows], as_json):
        raise typer.Exit(_status_rc(rows))
    width = None if wide else _width()
    for r in rows:
        _print_lines([f"{r.label}  {r.upstream}  pin {r.tag or ''} {r.commit}"
                      + ("" if r.primary else f"  (further release; patches in {r.patch_dir})")], width, style="bold")
        _print_lines([f"  sources: {', '.join(r.sources)}"] + [f"  {k}: {v}" for k, v in r.info.items()], width)
        _print_lines([f"  warning: {w}" for w in r.warnings], width, style="yellow")
        if not r.patches:
            out.print("  (no patches)")
        elif wide:
            t = _table("#", "patch", "upstream status", "hardware", "regression tests", "drop when")
            for i, p in enumerate(r.patches, 1):
                t.add_row(str(i), escape(p["name"]), escape(p["upstream_status"] or "-"),
                          escape(", ".join(p["hardware"]) or "-"), str(len(p["regression_tests"])),
                          escape(p["drop_when"] or "-"))
            _print_table(t)
        else:  # short cells and the whole name; what does not fit a column is listed below
            _print_lines(_fit_table(["#", "upstream", "hardware", "tests", "patch"],
                                    [[str(i), (p["upstream_status"] or "-").split()[0], ", ".join(p["hardware"]) or "-",
                                      str(len(p["regression_tests"])), p["name"]] for i, p in enumerate(r.patches, 1)],
                                    width), width)
            _print_lines([f"  #{i} drop when: {p['drop_when']}" for i, p in enumerate(r.patches, 1) if p["drop_when"]],
                         width, indent="      ")
        if r.applies is not None:
            if r.applies["ok"]:
                out.print("  applies cleanly at the pin", style="green", highlight=False)
                _print_lines([f"  does not compile: {line}" for line in (r.compiles or {}).get("problems", [])],
                             width, style="red")
                _print_lines([f"  semantic at the pin: {sem['patch']}: {sem['verdict']} ({sem['reason']})"
                              for sem in r.semantic or []], width)
                weak = _unverified_at_pin(r)
                if r.semantic is None and r.patches:
                    _print_lines(["  not verified: intent tests not run (--no-semantic)"], width, style="yellow")
                elif weak:
                    _print_lines([f"  unverified: {p}: {why}" for p, why in weak.items()], width, style="yellow")
            else:
                f = r.applies["failure"]
                said = "not checked" if r.applies.get("unchecked") else "does not apply"
                _print_lines([f"  {said}: {f['message'] if isinstance(f, dict) else f}"], width, style="red")
    raise typer.Exit(_status_rc(rows))


def _unverified_at_pin(r) -> dict[str, str]:
    """patch -> why its intent tests at the pin are no evidence: any verdict but `needed`, or `needed`
    while one of them passes on the pristine pin (it cannot fail for the patch's reason)."""
    out = {s["patch"]: f"{s['verdict']} ({s['reason']})" for s in r.semantic or [] if s["verdict"] != "needed"}
    for s in r.semantic or []:
        if s["verdict"] == "needed" and s.get("passes_on_pristine"):
            out[s["patch"]] = (f"{', '.join(s['passes_on_pristine'])} passes on the pristine pin without the patch: "
                               "bind a test that fails without it, or skip that one under DSV4_INTENT as "
                               "'not an intent test'")
    return out


def _status_rc(rows) -> int:
    """3 when a stack does not apply, else 1 when one could not be checked (an error, not a verdict:
    git missing, the source unreachable) or a touched Python file does not compile, else 4 when a
    patch's intent tests gave no evidence at the pin, else 0."""
    if any(r.applies and not r.applies["ok"] and not r.applies.get("unchecked") for r in rows):
        return EXIT_CONFLICT
    if any(r.applies and r.applies.get("unchecked") for r in rows):  # git missing, source unreachable, ...
        return EXIT_ERROR
    if any(r.compiles and not r.compiles["ok"] for r in rows):
        return EXIT_ERROR
    return EXIT_UNVERIFIED if any(r.applies and _unverified_at_pin(r) for r in rows) else 0


@app.command()
def apply(
    stacks: Optional[List[str]] = typer.Argument(None, help="Stacks to build [default: all]."),
    out_dir: Optional[Path] = OutOpt,
    threeway: bool = typer.Option(True, "--3way/--no-3way", help="Fall back to a 3-way merge (git am --3way)."),
    source: Optional[str] = typer.Option(None, "--source", help="Use only this source kind (git, sdist, wheel, path)."),
    force: bool = typer.Option(False, "--force", help="Replace a tree that has local commits or edits."),
    strict: bool = typer.Option(False, "--strict", help="With no STACK named: an unreachable upstream is an error "
                                "(for CI jobs that must build every stack)."),
    resume: bool = typer.Option(False, "--continue", help="Finish an apply that stopped at a conflict, after you "
                                "resolved it in OUT/.dsv4/failed/<stack>; remembers the resolution."),
    abort: bool = typer.Option(False, "--abort", help="Drop the stopped attempt in OUT/.dsv4/failed/<stack>."),
    release: Optional[List[str]] = ReleaseOpt,
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
):
    """Build the patched tree of each stack: the pinned upstream plus one commit per patch.

    The tree lands in OUT/<stack> on branch dsv4/<stack>, with the base at refs/dsv4/base; a stack
    carried on further upstream releases also gets OUT/<stack>@<tag> for each of them. It is
    built in a staging folder and swapped in only on success. Re-running with nothing changed is a
    no-op. With no STACK named, every stack is built; one whose upstream cannot be reached here
    (DeepGEMM without GitHub or a mirror) is a warning saying what to set, and the run still exits
    0 (--strict makes it an error). Other stacks go on after a conflict; the exit code is the worst.

    When a patch does not apply, the attempt stays in OUT/.dsv4/failed/<stack>, stopped in `git am`
    with conflict markers. Resolve them there, run `apply STACK --continue`, then `export STACK`.
    The resolution is remembered in patches/<stack>/resolutions/ (commit it): the next apply that
    meets the same patch on the same upstream files uses it without stopping.

    \b
    Examples:
      dsv4-patch apply                      # every stack, into build/ of the project
      dsv4-patch apply vllm --out /scratch/trees
      dsv4-patch apply vllm --release v0.33.0   # only build/vllm@v0.33.0 (same as vllm@v0.33.0)
      DSV4_DEEPGEMM_GIT_MIRROR=/mirrors/DeepGEMM.git dsv4-patch apply deepgemm
      dsv4-patch apply --strict             # CI: every stack must build
      dsv4-patch apply sglang --source wheel --json

    \b
    Resolving a conflict:
      dsv4-patch apply vllm                 # exit 3: build/.dsv4/failed/vllm has the markers
      $EDITOR build/.dsv4/failed/vllm/<file>
      dsv4-patch apply vllm --continue      # commits it, applies the rest, moves it to build/vllm
      dsv4-patch export vllm                # the patch file now carries the resolution

    Every .py file the series touches must compile in the built tree (with the Python the tool
    runs on; one whose upstream version does not compile either is skipped); otherwise the tree is
    built and the error names file:line and the patch: fix it there, commit, export.

    Exit codes: 0 ok (an unreachable upstream is a warning unless --strict), 1 error (also: a
    touched .py file does not compile), 2 usage, 3 conflict (a patch does not apply, or is already
    upstream).
    """
    try:
        proj = _project(project)
        targets = proj.targets(stacks, release)
        api.out_dir(proj, out_dir)  # a --out on the checkout's tracked paths: one error, not one per target
        if (resume or abort) and not stacks:
            raise UsageError("--continue and --abort need the STACK whose apply stopped",
                             hint="e.g. dsv4-patch apply vllm --continue")
        if (resume or abort) and not release and not any("@" in s for s in stacks):
            # a bare stack name selects all its releases: continue (abort) the ones that stopped
            targets = api.stopped(proj, targets, out=out_dir) or targets
        if abort:
            for cfg in targets:
                gone = api.abort_apply(proj, cfg.label, out=out_dir)
                if not as_json:
                    out.print(f"{cfg.label}: dropped {gone}", highlight=False, markup=False)
            _emit([{**api.release_fields(cfg), "status": "aborted"} for cfg in targets], as_json)
            raise typer.Exit(0)
    except Dsv4Error as e:
        _fail(e, as_json)
    rows, worst = [], 0
    for cfg in targets:
        name = cfg.label
        try:
            r = api.apply(proj, [cfg.selector], out=out_dir, threeway=threeway, source=source, force=force,
                          progress=_progress(as_json), resume=resume)[0]
            _VIEW.stop()
            rows.append(r.to_dict() | api.release_fields(cfg))
            if not as_json:
                verb = "unchanged" if r.status == "noop" else "built"
                out.print(f"[green]{escape(name)}[/green]: {verb} {escape(str(r.tree))} ({len(r.commits)} patch{'' if len(r.commits) == 1 else 'es'} on "
                          f"{r.base[:12]} from {escape(r.source)}, {r.seconds:.2f} s)"
                          f"{' — ' + escape(r.note) if r.note else ''}", highlight=False)
        except SourceError as e:
            _VIEW.stop()
            optional = not stacks and not strict
            rows.append({**api.release_fields(cfg), "status": "unavailable" if optional else "error",
                         "error": e.message, "details": e.details})
            if not as_json:
                tag = "[yellow]warning:[/yellow] " if optional else "[red]error:[/red] "
                what = "unavailable, not built" if optional else "cannot be built"
                err.print(f"{tag}{escape(name)}: {what}: {escape(e.one_line())}"
                          + (" (pass --strict to make this an error)" if optional else ""), highlight=False)
                if e.details:
                    err.print(e.details, highlight=False, markup=False)
            worst = worst if optional else max(worst, e.exit_code)
        except Dsv4Error as e:
            _VIEW.stop()
            rows.append({**api.release_fields(cfg), "status": "conflict" if isinstance(e, ConflictError) else "error",
                         "error": e.message, "hint": e.hint, "exit_code": e.exit_code,
                         "failure": e.report.to_dict() if getattr(e, "report", None) is not None else None})
            if not as_json:
                try:
                    _fail(e, False)
                except typer.Exit:
                    pass
            worst = max(worst, e.exit_code)
    _emit(rows, as_json)
    raise typer.Exit(worst)


@app.command()
def export(
    stack: str = typer.Argument(..., help="Stack whose trees to export (STACK@TAG: one release)."),
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 and show the difference if stale."),
    tree: Optional[Path] = typer.Option(None, "--tree", help="Patched tree [default: OUT/<stack>, OUT/<stack>@<tag>]."),
    remove: Optional[List[str]] = typer.Option(None, "--remove", help="Delete this patch file if the tree no longer has its commit (repeat per file)."),
    upstream: bool = typer.Option(False, "--upstream", help="Write an mbox to send upstream from the patch files: "
                                  "our metadata trailers and the team sign-off removed, other people's trailers "
                                  "kept, and YOUR Signed-off-by (git config user.name/user.email) added."),
    mbox: Optional[Path] = typer.Option(None, "--mbox", help="With --upstream: the mbox file, '-' for stdout "
                                        "[default: OUT/upstream/<stack>[@<tag>].mbox]."),
    signoff_as: Optional[str] = typer.Option(None, "--signoff-as", metavar="'NAME <EMAIL>'",
                                             help="With --upstream: sign off as this person instead of "
                                             "git config user.name/user.email."),
    force: bool = typer.Option(False, "--force", help="Overwrite patch files that changed since the tree was built "
                               "from them (a hand edit, a pull of patches/)."),
    release: Optional[List[str]] = ReleaseOpt,
    out_dir: Optional[Path] = OutOpt,
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
):
    """Write patches/<stack>/*.patch and series from the commits on top of refs/dsv4/base.

    Zero churn: apply → export is byte-identical. Add a patch by committing in the tree; edit one
    with `git commit --fixup` and `git rebase -i --autosquash refs/dsv4/base` there; then export.
    Uncommitted edits and new untracked files are refused (commit them first): they would not
    reach the patch files. A patch whose commit you dropped is deleted only when named with
    --remove; a tree mid-am/rebase (a failed build), a partial tree or a tree of another pin is
    refused. A patch file that changed since the tree was built from it (edited by hand, pulled)
    is named and not overwritten unless --force. A stack carried on several upstream
    releases exports each release whose tree exists: OUT/<stack>@<tag> into its own folder
    (patches/<stack>/releases/<tag>). --json prints one object for one release, else a list.

    --upstream writes, per release, the series as one mbox for the upstream project: the
    Upstream-Status, Regression-Test, Hardware, Drop-When and Patch-Filename lines and the team's
    Signed-off-by left out, everything else byte for byte, and the sender's own
    `Signed-off-by: Name <email>` added as `git commit -s` adds it. A DCO sign-off certifies a
    person: you sign before sending. The identity is your git config user.name/user.email (the
    one place the tool reads your git config) or --signoff-as "Name <email>"; with neither
    configured it stops with one line and writes nothing. Apply it upstream with `git am -k`.

    \b
    Examples:
      dsv4-patch export vllm
      dsv4-patch export vllm --check        # CI gate: are the files on disk up to date?
      dsv4-patch export vllm --remove old-fix.patch   # after dropping its commit in the tree
      dsv4-patch export vllm@v0.33.0        # only the v0.33.0 tree (same as --release v0.33.0)
      dsv4-patch export sglang --upstream --mbox /tmp/sglang.mbox && git -C ~/sglang am -k /tmp/sglang.mbox
      dsv4-patch export vllm@v0.33.0 --upstream --signoff-as "Ada Lovelace <ada@example.com>"

    Exit codes: 0 ok, 1 error (with --check: stale, or a release's tree missing; uncommitted work,
    no tree; with --upstream: no user.name/user.email configured), 2 usage (a malformed
    --signoff-as, or --signoff-as without --upstream).
    """
    if upstream:
        return _export_upstream(stack, release, mbox, out_dir, as_json, project, signoff_as)
    if signoff_as is not None:
        _fail(UsageError("--signoff-as goes with --upstream", hint="add --upstream"), as_json)
    try:
        runs = api.export_releases(_project(project), stack, releases=release, out=out_dir, tree=tree, check=check,
                                   remove=tuple(remove or ()), force=force)
    except Dsv4Error as e:
        _fail(e, as_json)
    stale = any(r.result and r.result.stale for r in runs)
    rows = [r.to_dict() | ({} if check else {"diff": ""}) for r in runs]
    if not _emit(rows[0] if len(rows) == 1 else rows, as_json):
        for r in runs:
            res, label, rel = r.result, r.config.label, _rel_dir(r.config)
            if res is None and check:  # a release nobody looked at is no pass for the gate
                err.print(f"{label}: not checked, {r.skipped}", highlight=False, markup=False)
            elif res is None:
                out.print(f"{label}: skipped, {r.skipped}", highlight=False, markup=False)
            elif not res.stale:
                out.print(f"{label}: patches are up to date", highlight=False, markup=False)
            elif check:
                err.print(f"{label}: patch files are stale (run `dsv4-patch export {label}`)", highlight=False,
                          markup=False)
                print(res.diff, end="")
            else:
                for n in res.written:
                    out.print(f"wrote {rel}/{n}", highlight=False, markup=False)
                for n in res.removed:
                    out.print(f"removed {rel}/{n}", highlight=False, markup=False)
                if res.series_changed:
                    out.print(f"wrote {rel}/series", highlight=False, markup=False)
    unchecked = any(r.result is None for r in runs)
    raise typer.Exit(EXIT_ERROR if (check and (stale or unchecked)) else 0)


def _rel_dir(cfg) -> str:
    try:
        return str(cfg.patch_dir.relative_to(cfg.root))
    except (ValueError, TypeError):
        return str(cfg.patch_dir)


def _export_upstream(stack, release, mbox, out_dir, as_json, project, signoff_as=None):
    try:
        rows, data = api.export_upstream(_project(project), stack, releases=release, out=out_dir,
                                         mbox=None if mbox is None or str(mbox) == "-" else mbox,
                                         to_stdout=mbox is not None and str(mbox) == "-", signoff_as=signoff_as)
    except Dsv4Error as e:
        _fail(e, as_json)
    if data is not None:  # --mbox -: the mbox itself is the output
        sys.stdout.buffer.write(data)
        raise typer.Exit(0)
    if not _emit([r.to_dict() for r in rows] if len(rows) != 1 else rows[0].to_dict(), as_json):
        for r in rows:
            out.print(f"{r.label}: wrote {r.mbox} ({len(r.patches)} patches, {r.removed_lines} of our lines "
                      f"left out, signed off by {r.signed_off_by}; apply with `git am -k`)", highlight=False,
                      markup=False)
    raise typer.Exit(0)


@app.command()
def check(
    stacks: Optional[List[str]] = typer.Argument(None, help="Stacks to lint [default: all]."),
    release: Optional[List[str]] = ReleaseOpt,
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
):
    """Lint the stacks: series vs folder, patch format and metadata (Signed-off-by included), test
    ids, whitespace, path safety; every release of each stack. stacks.toml is checked against its
    schema first (an error there is one line naming file:line and the key). Each .py file a series
    touches must compile as the series leaves it: read from the built tree (build/<stack>) or
    computed from a cached pin; never fetched (without either, a `note:` line says so). A
    Regression-Test that a result file (`regress --record`) shows passing on the pristine pin, for
    today's pin, patch bytes and test code, is an error: it cannot fail for the patch's reason.

    Needs no upstream tree. Each finding is one line `file:line: error: message`.

    \b
    Examples:
      dsv4-patch check
      dsv4-patch check sglang --json
      dsv4-patch check vllm --release v0.33.0

    Exit codes: 0 clean, 1 findings (or an error), 2 usage.
    """
    try:
        findings = api.check(_project(project), stacks, releases=release)
    except Dsv4Error as e:
        _fail(e, as_json)
    errors = [f for f in findings if f.severity == "error"]
    if not _emit([f.to_dict() for f in findings], as_json):
        for f in findings:
            err.print(str(f), highlight=False, markup=False)
        if not errors:
            out.print("check: all stacks clean")
    raise typer.Exit(EXIT_ERROR if errors else 0)


OUTCOME_COLORS = {"passed": "green", "failed": "red", "missing": "red", "not-verified": "yellow",
                  "partial": "yellow", "no-tests": "yellow"}


@app.command()
def regress(
    stacks: Optional[List[str]] = typer.Argument(None, help="Stacks to test [default: all]."),
    bisect: bool = typer.Option(False, "--bisect", help="Apply one patch at a time; name the first that fails."),
    marker: Optional[str] = typer.Option(None, "-m", help="Only tests with this pytest marker expression (e.g. sm100)."),
    out_dir: Optional[Path] = OutOpt,
    release: Optional[List[str]] = ReleaseOpt,
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
    pytest_args: str = typer.Option("", "--pytest-args", help="Extra pytest arguments, e.g. \"-x -k mla\"."),
    record: str = typer.Option("", "--record", help="Record levels for `status --matrix`, e.g. apply,integration; "
                               "a test level also records each bound test's outcome on the pristine pin (one more "
                               "pytest run), which `check` reads."),
    hardware: str = typer.Option("cpu", "--hardware", help="Where this run happened (with --record)."),
    fresh: bool = typer.Option(False, "--fresh", help="Compute every check again: read no result an earlier run "
                               "stored (--record implies it)."),
    require_verified: bool = typer.Option(False, "--require-verified", help="Exit 4 unless every patch was verified "
                                          "(passed, or partial), not only when nothing failed."),
    wide: bool = WideOpt,
    level: str = typer.Option("bound", "--level", metavar="LEVEL",
                              help="bound: the tests bound to each patch (Regression-Test:). upstream-ci: what the "
                              "upstream's own CI says of each patch: its pre-commit hooks that run offline (pinned "
                              "versions, only findings the patch introduces) and its in-tree tests the patch adds "
                              "or changes under its pinned pytest (docs/upstream-ci.md). Record it with "
                              "--record upstream-ci."),
):
    """Run the regression tests bound to each patch (Regression-Test:) against the patched trees.

    Tests get the trees from DSV4_TREE_<STACK> (patched) and DSV4_BASE_<STACK> (pin) through the
    `dsv4_tree` fixture. Each further release of a stack runs in a pytest run of its own, with
    those variables pointing at its trees, DSV4_RELEASE_<STACK> naming it, and
    DSV4_TREE_<STACK>__<TAG> (e.g. DSV4_TREE_VLLM__V0_33_0) as well. pytest's own output goes to
    stderr; a table per patch ends the run, as wide as COLUMNS (else the terminal, else 100
    columns), then one entry per test that did not pass; --wide prints every cell whole.
    A patch is: passed (every bound test passed), failed, missing (no such test id), not-verified
    (every bound test skipped: the reason is shown) or partial (some skipped). A module the tests
    need that is not installed (pytest itself, triton, ...) is named with the command that installs it.
    The first run of the vLLM tests builds two overlay venvs (~5.7 GB, see README) in
    DSV4_VENV_CACHE [default: venvs/ in the tool cache, ~/.cache/dsv4-patch/venvs].
    The project's tests keep the result of each expensive check (a vLLM check script, an SGLang
    probe) under a key of everything it reads, in check-results/ of the tool cache
    (DSV4_PATCH_CACHE [default: ~/.cache/dsv4-patch]), and read it back when nothing it reads
    changed: an edit re-runs only the checks it reaches. --fresh (and --record) computes every
    one again.
    The tests' tmp_path folders live in the run's own scratch folder and are deleted with it; to
    keep them for a look afterwards, pass --pytest-args "--basetemp=DIR" (pytest empties DIR
    when it starts, and regress starts one pytest per release and per --bisect step: name one
    stack and one release to keep everything that run made).

    \b
    Examples:
      dsv4-patch regress vllm
      dsv4-patch regress deepgemm -m sm100   # on a B200
      dsv4-patch regress sglang --bisect
      dsv4-patch regress vllm --release v0.33.0
      dsv4-patch regress vllm --record apply,integration --hardware cpu   # then commit patches/vllm/results
      dsv4-patch regress vllm --fresh        # every check computed again
      dsv4-patch regress --level upstream-ci vllm@v0.33.0   # the upstream's own lint and tests, per patch
      dsv4-patch regress --level upstream-ci --record upstream-ci   # then commit patches/*/results

    Evidence: a patch is verified when its bound tests ran and passed (passed; partial: some
    passed, the rest skipped with a reason, e.g. a CPU run's GPU tests). not-verified (every one
    skipped) and no-tests are no evidence: listed, but the plain command still exits 0 (GPU tests
    skip on a CPU machine); --require-verified makes them exit 4, as bump and the scheduled CI do.

    Exit codes: 0 nothing failed (not-verified patches included, unless --require-verified), 1 a
    test failed or is missing (or an error, e.g. pytest not installed), 2 usage, 3 a stack does not
    apply, 4 with --require-verified: nothing failed but a patch was not verified.
    """
    try:
        proj = _project(project)
        if level == "upstream-ci":
            if bisect or marker or pytest_args:
                raise UsageError("--level upstream-ci takes no --bisect, -m or --pytest-args",
                                 hint="it runs the upstream's own hooks and in-tree tests of every patch")
            rep = api.upstream_ci(proj, stacks, releases=release, out=out_dir, fresh=fresh or bool(record),
                                  progress=_progress(as_json))
        elif level != "bound":
            raise UsageError(f"unknown --level {level!r}", hint="use bound (the default) or upstream-ci")
        else:
            rep = api.regress(proj, stacks, releases=release, out=out_dir, bisect=bisect, marker=marker,
                              pytest_args=tuple(shlex.split(pytest_args)), log=sys.stderr, progress=_progress(as_json),
                              fresh=fresh or bool(record))
        # A run whose tests could not import what they need says nothing about the patches: no record.
        unrecorded = record and rep.missing_modules
        recorded = api.record_levels(proj, rep, record.split(","), hardware, out=out_dir) if record and not unrecorded else []
    except Dsv4Error as e:
        _fail(e, as_json)
    _VIEW.stop()
    for path in recorded:
        err.print(f"recorded {path}", highlight=False, markup=False)
    if not _emit(api.report_dict(proj, rep), as_json):
        if wide:
            t = _table("stack", "patch", "outcome", "tests", title=f"regress ({rep.seconds:.1f} s)")
            for r in rep.results:
                c = OUTCOME_COLORS.get(r.outcome, "white")
                label = r.outcome + (f": {r.reason}" if r.reason and r.outcome != "passed" else "")
                t.add_row(escape(r.stack), escape(r.patch), f"[{c}]{escape(label)}[/{c}]",
                          escape(", ".join(f"{n.split('::')[-1]}={o}" for n, o in r.tests.items())))
            if rep.results or not rep.no_patches:
                _print_table(t)
        elif rep.results or not rep.no_patches:
            _regress_summary(rep, _width())
        for label in rep.no_patches:
            out.print(f"{label}: 0 patches in series, nothing to test", highlight=False, markup=False)
        for module, cmd in rep.missing_modules.items():
            out.print(f"[red]missing module:[/red] {escape(module)} is not installed; install it with: {escape(cmd)}",
                      highlight=False)
        if rep.first_bad:
            out.print(f"[red]first failing patch:[/red] {escape(rep.first_bad[0])}/{escape(rep.first_bad[1])}",
                      highlight=False)
    if unrecorded:  # after the table (or --json's one object): stderr says why, one line
        module, cmd = next(iter(rep.missing_modules.items()))
        e = Dsv4Error(f"not recorded: the tests could not import {module} (missing here: "
                      + ", ".join(rep.missing_modules) + ")", hint=f"install it with: {cmd}, then record again")
        err.print(f"[red]error:[/red] {escape(e.one_line())}", highlight=False)
        raise typer.Exit(e.exit_code)
    if rep.ok and require_verified and not getattr(rep, "verified", True):
        err.print("[yellow]unverified:[/yellow] " + escape("; ".join(f"{p} ({why})" for p, why in rep.unverified.items())),
                  highlight=False)
        raise typer.Exit(EXIT_UNVERIFIED)
    raise typer.Exit(0 if rep.ok else EXIT_ERROR)


def _regress_summary(rep, width: int) -> None:
    """The default regress table: counts and whole patch names within `width`, then one entry per
    test that did not pass (its id and why), so nothing needs a wide column."""
    from collections import Counter

    outcomes = Counter(r.outcome for r in rep.results)
    _print_lines([f"regress ({rep.seconds:.1f} s): {len(rep.results)} patch{'' if len(rep.results) == 1 else 'es'}: "
                  + ", ".join(f"{n} {o}" for o, n in outcomes.items())], width, style="bold")
    rows = []
    for r in rep.results:
        ran = {n: o for n, o in r.tests.items() if o != "deselected"}
        rows.append([r.stack, r.outcome, f"{sum(o == 'passed' for o in ran.values())}/{len(ran)}", r.patch])
    _print_lines(_fit_table(["stack", "outcome", "passed", "patch"], rows, width), width)
    said = False
    for r in rep.results:
        bad = {n: o for n, o in r.tests.items() if o not in ("passed", "deselected")}
        if not bad:
            continue
        if not said:
            _print_lines(["tests that did not pass (--wide: the full table; --json: everything):"], width)
            said = True
        _print_lines([f"  {r.stack} {r.patch}"], width)
        for n, o in bad.items():  # the test id whole on its line, the outcome and reason below it
            _print_lines([f"    {n}"], width, indent="      ")
            why = " ".join(r.reasons.get(n, "").split())
            _print_lines([f"      {o}" + (f": {why}" if why else "")], width, indent="        ")


@app.command()
def pin(
    stack: str = typer.Argument(..., help="Stack to re-pin (STACK@TAG: one of its further releases)."),
    ref: str = typer.Argument(..., help="Tag, commit or release version (e.g. v0.28.0)."),
    source: Optional[str] = typer.Option(None, "--source", help="Source kind to verify through (git, sdist, wheel)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Verify, check and show the change; write nothing."),
    force: bool = typer.Option(False, "--force", help="Move the pin even where patches stop applying."),
    no_check: bool = typer.Option(False, "--no-check", help="Do not check whether the stack applies at REF."),
    as_json: bool = JsonOpt,
    project: Optional[Path] = ProjOpt,
):
    """Move a stack's pin to REF through the same verification as apply (sha256, commit id).

    First checks that every patch still applies at REF (the rebase `bump` does, into a private
    temporary folder) and names each one that does not. A pin the stack does not apply at is
    refused unless --force; `dsv4-patch bump STACK REF` moves it and refreshes the patches.

    \b
    Examples:
      dsv4-patch pin vllm v0.28.0 --dry-run       # what would change, and does the stack apply there?
      dsv4-patch pin vllm v0.28.0                 # from the PyPI sdist: records version and sha256
      dsv4-patch pin vllm v0.27.1 --source git    # records the full commit hash
      dsv4-patch pin vllm@v0.33.0 v0.33.0 --source git   # a further release's own pin

    Exit codes: 0 ok, 1 error (REF not found, unreachable), 2 usage, 3 patches do not apply at REF
    (nothing written; with --dry-run or --force reported after the change).
    """
    try:
        res = api.pin(_project(project), stack, ref, source=source, progress=_progress(as_json), dry_run=dry_run,
                      check_applies=not no_check, force=force)
    except Dsv4Error as e:
        _fail(e, as_json)
    _VIEW.stop()
    verdict = getattr(res, "applies", None)
    broken = verdict is not None and verdict.checked and not verdict.ok
    if not _emit(res.to_dict() | {"applies": verdict.to_dict() if verdict else None}, as_json):
        for k, (old, new) in res.changes.items():
            out.print(f"{stack}.{k}: {old} -> {new}", highlight=False, markup=False)
        out.print(("would update" if dry_run else "updated") + " patches/stacks.toml", highlight=False)
        if verdict is not None:
            tag = "[yellow]warning:[/yellow] " if (broken or not verdict.checked) else ""
            out.print(f"{tag}{escape(verdict.summary())}", highlight=False)
            if broken:
                out.print(f"  `dsv4-patch bump {escape(stack)} {escape(ref)}` rebases and refreshes them", highlight=False)
    raise typer.Exit(EXIT_CONFLICT if broken else 0)


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
        res = api.build(_project(project), stack, venv, from_source=from_source, out=out_dir,
                        deepgemm_src=deepgemm_src, progress=_progress(as_json))
    except Dsv4Error as e:
        _fail(e, as_json)
    _VIEW.stop()
    ok = getattr(res, "imports_ok", True)
    if not _emit(res.to_dict() | {"imports_ok": ok}, as_json):
        for i, line in enumerate(res.summary()):
            out.print((f"{stack}: " if i == 0 else "") + line, highlight=False, markup=False)
        if not ok:
            err.print(f"[red]error:[/red] {stack}: patched modules do not import in {escape(str(res.venv))} "
                      "(the lines above say why)", highlight=False)
    raise typer.Exit(0 if ok else EXIT_ERROR)


SHORT_HELP = {"bump": "Rebase a stack onto a new upstream release or commit; one verdict per patch.",
              "e2e": "End-to-end acceptance run on real hardware, judged stage by stage.",
              "release": "Add, move or retire a release a stack is carried on (one command each)."}


def _register_optional(argv: list[str] | None) -> None:
    """`e2e` and `bump` live in their own modules. Run as the command, they are imported only when
    they can be invoked or listed (their command, or top-level help), so `apply`'s no-op stays
    fast; imported as a library (argv None: tests, other tools) every command is registered."""
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
            mod._say = _progress
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
            _VIEW.stop()
    except Interrupted:
        sys.stderr.write("dsv4-patch: interrupted; the previous tree is intact and the next run cleans up\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
