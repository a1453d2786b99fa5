"""`dsv4-patch release add|move|retire`: the releases a stack is carried on, one command each.

    add STACK TAG [--from R]   carry the series of release R (default: the newest carried release
                               older than TAG) onto upstream TAG: a bump of R into a staging
                               folder, then `[stacks.S.releases."TAG"]` and patches/S/releases/TAG
                               written together (the pin through the stack's own sources: sdist
                               sha256 from the package index, commit from its commit_file)
    move STACK FROM TO         re-pin one carried release: a bump of FROM; its table and folder
                               are renamed to TO (the primary: a plain `bump STACK TO`)
    retire STACK TAG           remove a further release's table and folder (never the primary);
                               git history keeps both

Nothing is half-written: the rebase happens in the bump's own trees and a staging folder; the
patch folder is renamed into place and stacks.toml replaced in one step each, the folder put
back if the file cannot be written. A conflict stops before either (exit 3) with the bump's
conflict trees, which survive the next round (bump/conflicts.py).

Carried commits' messages: a `Regression-Test:` id that names the old release's test module
(`.../v0_33/test_v0_33_x.py`) is rewritten to the new release's where that test exists, and
flagged where it does not; prose naming the old version is flagged, line by line (never rewritten:
"measured on 0.27.1" stays true).
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from .carried_messages import VERSION_RE, refresh_message, version_forms
from .config import RELEASES_DIR, Project, StackConfig, load_project, parse_project
from .errors import EXIT_CONFLICT, EXIT_ERROR, EXIT_OK, EXIT_UNVERIFIED, ConfigError, Dsv4Error, UsageError
from .gitcmd import Git
from .locks import stack_lock
from .sources import Cache, Progress
from .sources.base import say
from . import tomllines


@dataclass
class ReleaseOptions:
    source: str | None = None
    out: Path | None = None
    regress: bool = True
    semantic: bool = True
    drop_upstreamed: bool = False
    force: bool = False  # bump: discard conflict trees with work; retire: a folder with changes
    dry_run: bool = False


@dataclass
class ReleaseResult:
    action: str  # add | move | retire
    stack: str
    tag: str
    source_release: str | None = None  # add: the series carried; move: FROM
    status: str = "ok"  # ok | conflicts | upstreamed | partial | failed | dry-run
    folder: str = ""
    table: str = ""
    toml_block: str = ""
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    outcomes: list[dict] = field(default_factory=list)  # per patch: textual verdict
    conflict_trees: dict[str, str] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)  # refreshed trailers and flagged lines
    notes: list[str] = field(default_factory=list)
    history: str = ""  # retire: where git keeps what was removed
    regress: dict | None = None
    bump_report: str = ""
    seconds: float = 0.0

    @property
    def result(self) -> str:
        """`status`, except that a written add/move is `failed` when its regression tests failed and
        `unverified` when they gave no evidence (not run, all skipped, none bound), as for bump."""
        if self.status != "ok" or self.action == "retire":
            return self.status
        if self.regress is None:
            return "unverified"
        if not self.regress.get("ok", False):
            return "failed"
        return "ok" if self.regress.get("verified", True) else "unverified"

    @property
    def exit_code(self) -> int:
        r = self.result
        if r in ("ok", "dry-run"):
            return EXIT_OK
        if r == "unverified":
            return EXIT_UNVERIFIED
        return EXIT_CONFLICT if r in ("conflicts", "upstreamed", "partial") else EXIT_ERROR

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["from"] = d.pop("source_release")
        d["result"] = self.result
        d["exit_code"] = self.exit_code
        d["seconds"] = round(self.seconds, 2)
        return d


# --- which release, which key --------------------------------------------------------------------

def release_key(primary: StackConfig, tag: str) -> str:
    """The table key for TAG: `v0.34.0` for a bare version of an archive stack (as bump names it)."""
    m = VERSION_RE.match(tag)
    if m and any(s.kind in ("sdist", "wheel") for s in primary.sources):
        return f"v{m.group(1)}"
    return tag


def _order(tag: str) -> tuple | None:
    from .bump.targets import version_key

    m = VERSION_RE.match(tag or "")
    return version_key(m.group(1)) if m else None


def _carried(primary: StackConfig, tag: str) -> StackConfig | None:
    return next((r for r in primary.all_releases() if tag in (r.release, r.tag)), None)


def nearest(primary: StackConfig, tag: str) -> StackConfig:
    """The newest carried release older than TAG; without versions to compare, the last one."""
    rels = primary.all_releases()
    key = _order(tag)
    if key is not None:
        older = [(k, r) for r in rels if (k := _order(r.tag or r.release or "")) is not None and k < key]
        if older:
            return max(older, key=lambda kr: kr[0])[1]
    return rels[-1]


# --- carried messages (carried_messages.py) --------------------------------------------------------

def refresh_commits(tree: Path, old: str, new: str, root: Path) -> list[str]:
    """Rewrite the messages of the commits between refs/dsv4/base and HEAD (refresh_message);
    trees, authors and dates are kept. Returns the report lines."""
    from .tree import BASE_REF

    g = Git(tree)
    base = g.rev(BASE_REF)
    shas = g.out("rev-list", "--reverse", f"{BASE_REF}..HEAD").split()
    parent, moved, notes = base, False, []
    for sha in shas:
        msg = g.raw("log", "-1", "--format=%B", sha).decode("utf-8", "surrogateescape")
        name = g.out("log", "-1", "--format=%s", sha)
        new_msg, lines = refresh_message(msg, name, old, new, root)
        notes += lines
        if new_msg == msg and not moved:
            parent = sha
            continue
        an, ae, ad = g.out("log", "-1", "--format=%an%x00%ae%x00%aI", sha).split("\x00")
        parent = g.run("commit-tree", f"{sha}^{{tree}}", "-p", parent, stdin=new_msg.encode("utf-8", "surrogateescape"),
                       env={"GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": ad}).out.strip()
        moved = True
    if moved:
        g.run("reset", "--quiet", "--soft", parent)
    return notes


def message_summary(lines: list[str]) -> list[str]:
    """refresh_commits' lines, one per patch: how many ids moved, how many name the old tests, which
    message lines name the old version."""
    by: dict[str, dict] = {}
    for ln in lines:
        m = re.match(r"^(.*?): (?:(Regression-Test|Intent-Test) (\S+) (->|names)|message line (\d+) names)", ln)
        if not m:
            continue
        d = by.setdefault(m.group(1), {"moved": 0, "kept": 0, "prose": []})
        if m.group(5):
            d["prose"].append(m.group(5))
        elif m.group(4) == "->":
            d["moved"] += 1
        else:
            d["kept"] += 1
    out = []
    for patch, d in by.items():
        parts = ([f"{d['moved']} test id(s) moved to the new release's tests"] if d["moved"] else []) + \
                ([f"{d['kept']} test id(s) still name the old release's tests (no counterpart)"] if d["kept"] else []) + \
                ([f"message line(s) {', '.join(d['prose'])} name the old version"] if d["prose"] else [])
        out.append(f"{patch}: " + "; ".join(parts))
    return out


# --- add / move / retire ---------------------------------------------------------------------------

def _bump_into(project: Project, cfg: StackConfig, ref: str, staging: Path, opts: ReleaseOptions,
               cache: Cache | None, progress: Progress):
    from .bump import BumpOptions, bump

    bo = BumpOptions(regress=False, into=staging, drop_upstreamed=opts.drop_upstreamed, source=opts.source,
                     out=opts.out, semantic=opts.semantic, force=opts.force)
    return bump(project, cfg.selector, ref, opts=bo, cache=cache, progress=progress)


def _sources_after(cfg: StackConfig, pin: dict, index: int | None) -> list[dict]:
    out = []
    for i, s in enumerate(cfg.sources):
        d = {"kind": s.kind, **s.options}
        if i == index and pin.get("source"):
            d.update(pin["source"])
        out.append(d)
    return out


def _stop(res: ReleaseResult, rep, project: Project) -> ReleaseResult:
    res.status = rep.status if rep.status != "ok" else "failed"
    res.conflict_trees = dict(rep.conflict_trees)
    return res


def _retell(md: str, rep, again: str) -> str:
    """The bump's report as the release command's: its retry command is this command's, not a bump
    (which would refresh and re-pin the release the series came from)."""
    return md.replace(f"`dsv4-patch bump {rep.stack} {rep.new['label']} --record-resolution`", f"`{again} --record-resolution`")


def _summary(outcomes) -> str:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in counts.items()) or "no patches"


def _rerender(tree: Path, staging: Path, cfg: StackConfig) -> None:
    from .bump.rebase import write_into
    from .exporter import render_patches

    write_into(staging, cfg, render_patches(tree))


def _regress(project: Project, selector: str, opts: ReleaseOptions, progress: Progress) -> dict:
    from .regress_releases import regress

    try:
        return regress(load_project(project.root), [selector], out=opts.out, progress=progress).to_dict()
    except Dsv4Error as e:
        return {"ok": False, "error": e.one_line()}


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def add(project: Project, stack: str, tag: str, *, source_release: str | None = None,
        opts: ReleaseOptions | None = None, cache: Cache | None = None, progress: Progress = None) -> ReleaseResult:
    t0 = time.monotonic()
    opts = opts or ReleaseOptions()
    if "@" in stack:
        raise UsageError(f"release add takes a stack name, not {stack!r}", hint="name the series to carry with --from")
    primary = project.stack(stack)
    key = release_key(primary, tag)
    if _carried(primary, key) or _carried(primary, tag):
        r = _carried(primary, key) or _carried(primary, tag)
        raise UsageError(f"{project.config_path}: {stack} already carries {key} ({project.rel(r.patch_dir)})",
                         hint=f"re-pin it with `dsv4-patch release move {stack} {r.release} NEW`, or retire it first")
    src = project.target(stack, source_release) if source_release else nearest(primary, key)
    folder = primary.patch_dir / RELEASES_DIR / key
    res = ReleaseResult("add", stack, key, src.release, folder=project.rel(folder),
                        table=f'[stacks.{stack}.releases."{key}"]')
    if folder.exists():
        raise ConfigError(f"{project.rel(folder)} exists but no [stacks.{stack}.releases.\"{key}\"] table declares it",
                          hint="move it away (or delete it) and run again; nothing was changed")
    staging = folder.with_name(f".{key}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        say(progress, f"{stack}: carrying the {src.release} series onto {key}")
        rep = _bump_into(project, src, tag, staging, opts, cache, progress)
        res.outcomes = [o.to_dict() for o in rep.outcomes]
        res.notes += rep.hints
        from .bump.report import bump_markdown

        again = f"dsv4-patch release add {stack} {tag} --from {src.release}"
        res.bump_report = _retell(bump_markdown(rep), rep, again)
        if rep.status != "ok":
            return _stop(res, rep, project)
        tree = Path(rep.tree)
        res.messages = refresh_commits(tree, src.release or "", key, project.root)
        res.notes = [n for n in res.notes if ": its message names " not in n]
        _rerender(tree, staging, src)
        pin = rep.new.get("pin") or {}
        commit = (pin.get("stack") or {}).get("commit") or rep.new["commit"]
        sources = _sources_after(src, pin, rep.new.get("source_index"))
        from .pinning import release_tables

        header, _, rest = release_tables(primary, key, commit, sources).partition("\n")
        block = (f"{header}\n# Carried from the {src.release} series by `dsv4-patch release add` "
                 f"({_summary(rep.outcomes)}).\n{rest}")  # inside the table: retire removes it with it
        res.toml_block = block
        text = project.config_path.read_text(encoding="utf-8")
        new_text = tomllines.insert_after(text, ("stacks", stack), block)
        parse_project(project.root, new_text, project.config_path)  # one-line error, nothing written
        if opts.dry_run:
            res.status = "dry-run"
            return res
        with stack_lock(primary):
            staging.rename(folder)
            try:
                _write_text(project.config_path, new_text)
            except BaseException:
                folder.rename(staging)
                raise
        res.written = [project.rel(project.config_path), res.folder]
        if opts.regress:
            say(progress, f"{stack}: regression tests of {stack}@{key}")
            res.regress = _regress(project, f"{stack}@{key}", opts, progress)
        return res
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        res.seconds = time.monotonic() - t0


def move(project: Project, stack: str, frm: str, to: str, *, opts: ReleaseOptions | None = None,
         cache: Cache | None = None, progress: Progress = None) -> ReleaseResult:
    t0 = time.monotonic()
    opts = opts or ReleaseOptions()
    primary = project.stack(stack.partition("@")[0])
    cfg = project.target(primary.name, frm)
    key = release_key(primary, to)
    res = ReleaseResult("move", primary.name, key, cfg.release, folder=project.rel(cfg.patch_dir))
    other = _carried(primary, key)
    if other is not None and other is not cfg:
        raise UsageError(f"{primary.name} already carries {key} ({project.rel(other.patch_dir)})",
                         hint=f"retire one first: `dsv4-patch release retire {primary.name} {key}`")
    if cfg.primary:  # the primary's pin lives in [stacks.S]: a plain bump moves it
        from .bump import BumpOptions, bump

        if opts.dry_run:
            raise UsageError("release move of the primary release has no --dry-run",
                             hint=f"`dsv4-patch bump {primary.name} {to} --into DIR` shows the result without writing")
        rep = bump(project, primary.name, to, opts=BumpOptions(regress=opts.regress, source=opts.source, out=opts.out,
                                                               semantic=opts.semantic, force=opts.force,
                                                               drop_upstreamed=opts.drop_upstreamed),
                   cache=cache, progress=progress)
        res.outcomes = [o.to_dict() for o in rep.outcomes]
        res.notes += rep.hints
        res.regress = rep.regress
        res.status = rep.status
        res.conflict_trees = dict(rep.conflict_trees)
        res.written = [rep.written_to] if rep.written_to else []
        res.seconds = time.monotonic() - t0
        return res
    old_dir = cfg.patch_dir
    default = cfg.raw.get("patches") in (None, f"{_rel_patches(primary)}/{RELEASES_DIR}/{cfg.release}")
    new_dir = primary.patch_dir / RELEASES_DIR / key if default else old_dir
    res.folder = project.rel(new_dir)
    res.table = f'[stacks.{primary.name}.releases."{key}"]'
    if new_dir != old_dir and new_dir.exists():
        raise ConfigError(f"{project.rel(new_dir)} exists", hint="move it away and run again; nothing was changed")
    staging = new_dir.with_name(f".{key}.staging")
    backup = old_dir.with_name(f".{cfg.release}.moving")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        rep = _bump_into(project, cfg, to, staging, opts, cache, progress)
        res.outcomes = [o.to_dict() for o in rep.outcomes]
        res.notes += rep.hints
        from .bump.report import bump_markdown

        res.bump_report = _retell(bump_markdown(rep), rep, f"dsv4-patch release move {primary.name} {cfg.release} {to}")
        if rep.status != "ok":
            return _stop(res, rep, project)
        tree = Path(rep.tree)
        res.messages = refresh_commits(tree, cfg.release or "", key, project.root)
        res.notes = [n for n in res.notes if ": its message names " not in n]
        _rerender(tree, staging, cfg)
        if (old_dir / "resolutions").is_dir():  # keyed by pre-image: still good where they fit
            shutil.copytree(old_dir / "resolutions", staging / "resolutions")
        pin = rep.new.get("pin") or {}
        text = project.config_path.read_text(encoding="utf-8")
        prefix = ("stacks", primary.name, "releases", cfg.release)
        new_text = tomllines.rename_tables(text, prefix, key) if key != cfg.release else text
        from .pinning import set_keys

        new_table = f'[stacks.{primary.name}.releases."{key}"]'
        vals = {"commit": (pin.get("stack") or {}).get("commit") or rep.new["commit"]}
        if "tag" in cfg.raw:
            vals["tag"] = key
        if "patches" in cfg.raw and default:
            vals["patches"] = f"{_rel_patches(primary)}/{RELEASES_DIR}/{key}"
        new_text = set_keys(new_text, new_table, vals)
        idx = rep.new.get("source_index")
        if idx is not None and pin.get("source"):
            new_text = set_keys(new_text, f"[[stacks.{primary.name}.releases.\"{key}\".sources]]", pin["source"], nth=idx)
        parse_project(project.root, new_text, project.config_path)
        lines = new_text.splitlines()
        mine = [i for a, b in tomllines.table_spans(new_text, ("stacks", primary.name, "releases", key)) for i in range(a, b)]
        olds = [x for x in (cfg.release, (version_forms(cfg.release) or (None,))[0], cfg.commit[:9]) if x]
        stale = [lines[i].strip() for i in mine if lines[i].lstrip().startswith("#") and any(x in lines[i] for x in olds)]
        res.notes += [f"stacks.toml: a comment in the moved table still names {cfg.release}: {ln}" for ln in stale]
        if (old_dir / "results").is_dir():
            res.notes.append(f"{project.rel(old_dir / 'results')} (results of {cfg.release}) stays in git history, "
                             f"not carried: they are not evidence for {key}")
        if opts.dry_run:
            res.status = "dry-run"
            return res
        with stack_lock(primary):
            old_dir.rename(backup)
            try:
                staging.rename(new_dir)
                try:
                    _write_text(project.config_path, new_text)
                except BaseException:
                    new_dir.rename(staging)
                    raise
            except BaseException:
                backup.rename(old_dir)
                raise
            shutil.rmtree(backup)
        res.written = [project.rel(project.config_path), res.folder]
        if new_dir != old_dir:
            res.removed = [project.rel(old_dir)]
        if opts.regress:
            res.regress = _regress(project, f"{primary.name}@{key}", opts, progress)
        return res
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        res.seconds = time.monotonic() - t0


def _rel_patches(primary: StackConfig) -> str:
    return primary.raw.get("patches", primary.name).rstrip("/")


def retire(project: Project, stack: str, tag: str, *, opts: ReleaseOptions | None = None) -> ReleaseResult:
    t0 = time.monotonic()
    opts = opts or ReleaseOptions()
    primary = project.stack(stack.partition("@")[0])
    cfg = project.target(primary.name, tag)
    if cfg.primary:
        raise UsageError(f"{cfg.release} is the primary release of {primary.name} ([stacks.{primary.name}]): "
                         "it is not retired", hint=f"move it with `dsv4-patch release move {primary.name} {cfg.release} NEW`")
    folder = cfg.patch_dir
    rel = project.rel(folder)
    res = ReleaseResult("retire", primary.name, cfg.release, folder=rel, table=cfg.table)
    g = Git(project.root)
    inside = (project.root / ".git").exists() and folder.is_relative_to(project.root)
    dirty = g.out("status", "--porcelain", "--untracked-files=all", "--", rel) if inside and folder.exists() else ""
    if dirty and not opts.force:
        raise Dsv4Error(f"{rel}: changes git does not hold ({len(dirty.splitlines())} path(s): "
                        f"{dirty.splitlines()[0].strip()} ...)", hint="commit them first (git keeps the retired release), or pass --force")
    last = g.out("log", "-1", "--format=%h", "--", rel) if inside else ""
    res.history = (f"{rel} and its table are in git history: `git show {last}:{rel}/series`; restore with "
                   f"`git checkout {last} -- {rel}` and the table from `git show {last}:patches/stacks.toml`"
                   if last else f"{rel} was never committed: nothing of it is in git history")
    text = project.config_path.read_text(encoding="utf-8")
    new_text = tomllines.remove_tables(text, ("stacks", primary.name, "releases", cfg.release))
    parse_project(project.root, new_text, project.config_path)
    if opts.dry_run:
        res.status = "dry-run"
        res.seconds = time.monotonic() - t0
        return res
    backup = folder.with_name(f".{cfg.release}.retiring")
    with stack_lock(primary):
        if folder.exists():
            folder.rename(backup)
        try:
            _write_text(project.config_path, new_text)
        except BaseException:
            if backup.exists():
                backup.rename(folder)
            raise
        shutil.rmtree(backup, ignore_errors=True)
    res.written = [project.rel(project.config_path)]
    res.removed = [rel]
    out = Path(opts.out) if opts.out else project.root / "build"
    if (out / cfg.label).exists():
        res.notes.append(f"its tree {project.rel(out / cfg.label)} is left alone (it may hold work): "
                         "delete it when done")
    res.seconds = time.monotonic() - t0
    return res
