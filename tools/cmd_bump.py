"""`dsv4-patch bump`: rebase a stack onto a new upstream (registered by tools/applypatch.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from dsv4_patch.config import load_project
from dsv4_patch.errors import EXIT_ERROR, EXIT_USAGE, ConflictError, Dsv4Error

# dsv4_patch.bump is imported inside the command: registering `bump` (which `--help` and the
# script do on every start) must not cost the rebase engine's imports.

EXAMPLES = """Rebase STACK from its pin onto REF and say, per patch: clean, offset (found at shifted
lines), 3way (merged), conflict (files, hunks), upstreamed (already in REF: proposed for removal),
obsolete (its file vanished), resolved (a remembered resolution was reused), outside (every file
it touches lies outside a partial tree).

Semantic verdict, per patch: its intent tests (those of the copy the stack already carries for
REF in patches/STACK/releases/REF, else the tests its Drop-When names, else its Regression-Tests)
run on the pristine REF without it: fixed-upstream (they pass: upstream solved
it its own way; proposed for removal like an upstreamed patch), needed (an assertion fails),
or why no verdict was reached: outside (needs files a partial tree lacks), probe-error (a test
raised something other than an assertion), unimportable (the tests cannot import against REF),
untestable (skipped, with the reason), timeout (the intent run ran past DSV4_INTENT_TIMEOUT
before its tests finished), no-intent (no test named). --no-semantic skips them.

REF is a release version (0.28.0 or v0.28.0, from the package index, for sdist/wheel stacks),
a tag, a branch or a commit (git/path stacks). By default the run carries on past conflicts so
you see the whole picture; nothing in patches/ or stacks.toml changes until every patch applies.

Examples:

\b
  dsv4-patch bump vllm 0.28.0                  # rebase, refresh patches, move the pin, regress
  dsv4-patch bump vllm --latest --json         # newest release on the index
  dsv4-patch bump vllm 0.33.0 --into patches/vllm/bumps/v0.33.0 --no-regress
                                               # refreshed copy elsewhere; pin untouched
  dsv4-patch bump vllm 0.33.0 --stop-on-conflict
  dsv4-patch bump vllm --walk v0.27.1..v0.33.0 # every release between: where each patch stops
  dsv4-patch bump deepgemm 0.35.0 --no-regress # the DeepGEMM vendored in the vLLM 0.35.0 wheel
  dsv4-patch bump deepgemm vllm-0.33.0 --no-regress  # a [[stacks.deepgemm.targets]] entry: the other
                                               # 2.8.1 tree, vendored in the vLLM 0.33.0 wheel (partial)

Resolving a conflict (remembered for the next attempt):

\b
  dsv4-patch bump vllm 0.33.0                  # exit 3; trees in build/vllm.bump-conflicts/<patch>
  cd build/vllm.bump-conflicts/<patch>         # fix the conflict markers (plain git am state)
  dsv4-patch bump vllm 0.33.0 --record-resolution
      # stores patches/vllm/resolutions/<patch>/<key>.patch and bumps again, reusing it

A conflict tree you worked in survives the next round: reused where its patch blocks on the same
pre-image again, else left in place and named in the report (--force discards it). A tree made
after an earlier patch blocked lacks that patch's changes: the report says which.

When the stack carries another release whose series fits REF better (or REF is a carried
release), the report's Advice says so with the command to run (`dsv4-patch release add|move`).

Evidence: the result is `ok` only when every carried patch was verified: its regression tests
ran and passed on the rebased tree (`partial`, some skipped with a reason, counts) and its intent
tests failed on the pristine REF (`needed`). Otherwise it is `unverified` (exit 4): the patches
are refreshed and the pin moved as for ok, and the report's Evidence section names each patch
without evidence and why (its tests all skipped, none bound, --no-regress / --no-semantic, intent
verdict untestable / no-intent / probe-error / unimportable / timeout). The intent run is bounded
by DSV4_INTENT_TIMEOUT (seconds, default 600, for one stack's whole run): a patch whose intent tests
did not finish gets `timeout`. With --latest, a stack already at the newest release is `current`
(exit 0), and a series whose newest release has a series of its own already is `carried` (exit 0:
`vllm@v0.33.0` when v0.34.0 is carried is not carried there a second time); both are decided
before any tree is built or test run.

Exit codes: 0 ok (every carried patch verified), already at the newest, or carried by another series, 1 error (or a
regression test failed), 2 usage, 3 conflicts remain / upstreamed or fixed-upstream patches not
dropped / a partial tree (compared, nothing written) / a walk found a patch that stops applying,
4 unverified (everything applied and was written, but a carried patch has no evidence)."""


def _say(quiet: bool):
    return None if quiet else (lambda m: print(f"· {m}", file=sys.stderr, flush=True))


def _fail(e: Dsv4Error, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"error": e.message, "hint": e.hint, "exit_code": e.exit_code}, indent=1))
    else:
        print(f"error: {e.one_line()}", file=sys.stderr)
        if e.details and not isinstance(e, ConflictError):
            print(e.details, file=sys.stderr)
    raise typer.Exit(e.exit_code)


def bump(
    stack: str = typer.Argument(..., help="Stack to rebase (vllm, sglang, deepgemm, ...)."),
    ref: Optional[str] = typer.Argument(None, help="Target: release version, tag, branch or commit."),
    latest: bool = typer.Option(False, "--latest", help="Newest release on the index / tip of the tracked branch."),
    walk: Optional[str] = typer.Option(None, "--walk", metavar="A..B", help="Step through every release (or commit) from A to B."),
    step: int = typer.Option(1, "--step", min=1, help="With --walk on a git stack: every N-th commit."),
    stop_on_conflict: bool = typer.Option(False, "--stop-on-conflict", help="Stop at the first blocking patch."),
    no_regress: bool = typer.Option(False, "--no-regress", help="Skip the regression tests of the new tree."),
    no_semantic: bool = typer.Option(False, "--no-semantic", help="Skip the intent tests on the pristine REF (semantic verdicts)."),
    drop_upstreamed: bool = typer.Option(False, "--drop-upstreamed", help="Drop patches found already upstream (upstreamed or fixed-upstream)."),
    into: Optional[Path] = typer.Option(None, "--into", help="Write refreshed patches here; leave patches/ and the pin alone."),
    record_resolution: bool = typer.Option(False, "--record-resolution", help="Store the resolutions made in the conflict trees, then bump again."),
    force: bool = typer.Option(False, "--force", help="Discard conflict trees of earlier rounds that hold work not recorded."),
    report: Optional[Path] = typer.Option(None, "--report", help="Also write the markdown report here (JSON beside it)."),
    annotate: bool = typer.Option(False, "--annotate", help="Print GitHub problem-matcher lines (::error file=…,line=…)."),
    source: Optional[str] = typer.Option(None, "--source", help="Use only this source kind."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder for trees [default: ./build]."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON on stdout."),
    project: Optional[Path] = typer.Option(None, "--project", help="Checkout holding patches/stacks.toml."),
):
    from dsv4_patch.bump import BumpOptions, bump as run_bump, record_resolutions, walk as run_walk
    from dsv4_patch.bump.report import annotations, bump_markdown, walk_markdown, write_bump

    try:
        proj = load_project(project)
        if sum(bool(x) for x in (ref, latest, walk)) != 1:
            print("error: give exactly one of REF, --latest, --walk A..B (see --help)", file=sys.stderr)
            raise typer.Exit(EXIT_USAGE)
        say = _say(as_json)
        cfg = proj.stack(stack)
        patch_dir = str(cfg.patch_dir.relative_to(proj.root)) if cfg.patch_dir.is_relative_to(proj.root) else str(cfg.patch_dir)
        if walk:
            rep = run_walk(proj, stack, walk, step=step, source=source, progress=say)
            if as_json:
                print(json.dumps(rep.to_dict(), indent=1))
            else:
                print(walk_markdown(rep))
                for name, where in rep.first_stop.items():
                    print(f"{name}: " + (f"first stops applying at {where}" if where else "applies at every step"))
            if annotate:
                for s in rep.steps:
                    for line in annotations(s.outcomes, patch_dir, s.label):
                        print(line)
            raise typer.Exit(rep.exit_code)
        recorded = record_resolutions(proj, stack, out=out_dir) if record_resolution else []
        for r in recorded:
            print(f"{r['patch']}: " + (f"recorded {r['recorded']}" if r["recorded"] else f"not recorded: {r['why']}"),
                  file=sys.stderr)
        opts = BumpOptions(stop_on_conflict=stop_on_conflict, regress=not no_regress, into=into,
                           drop_upstreamed=drop_upstreamed, source=source, out=out_dir, semantic=not no_semantic,
                           force=force)
        rep = run_bump(proj, stack, ref, latest=latest, opts=opts, progress=say)
        md, js = write_bump(rep, (out_dir or proj.root / "build") / f"{stack}.bump-report.md")
        if report:  # where it says: the markdown at PATH, the JSON beside it (PATH.json if PATH ends so)
            md, js = write_bump(rep, report)
        if as_json:
            print(json.dumps({**rep.to_dict(), "recorded": recorded, "report": str(md)}, indent=1, default=str))
        else:
            print(bump_markdown(rep))
            print(f"report: {md} and {js}", file=sys.stderr)
        if annotate:
            for line in annotations(rep.outcomes, patch_dir, rep.new["label"], rep.semantic, rep.unverified):
                print(line)
        raise typer.Exit(rep.exit_code)
    except Dsv4Error as e:
        _fail(e, as_json)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(EXIT_ERROR)


bump.__doc__ = EXAMPLES
