"""Where a bump goes: REF (version, tag, commit, branch) or --latest resolved to a base tree, and
the list of releases a walk steps through."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..config import SourceSpec, StackConfig
from ..errors import SourceError, UsageError
from ..gitcmd import Git
from ..sources import BaseTree, Cache, Progress, archive, gitsource
from ..sources.base import say
from ..pinning import release_pin

VERSION_RE = re.compile(r"^v?(\d+(?:\.\d+)*(?:\.post\d+)?)$")


@dataclass
class Target:
    base: BaseTree
    spec: SourceSpec
    label: str  # what the user sees: v0.28.0, a tag, or a short sha
    pin: dict[str, dict[str, str]] = field(default_factory=dict)  # "stack" | "source" -> keys to set
    what: str = ""  # what the tree is (a `[[stacks.X.targets]]` entry's `what`)
    partial: list[str] | None = None  # the only repository paths a partial tree carries


def named_targets(cfg: StackConfig) -> list[SourceSpec]:
    """`[[stacks.X.targets]]`: trees a bump may go onto that are no source of the pin."""
    out = []
    for t in cfg.raw.get("targets", []):
        opts = {k: v for k, v in t.items() if k != "kind"}
        out.append(SourceSpec(str(t.get("kind", "")), opts))
    return out


def _named_target(cfg: StackConfig, spec: SourceSpec, cache: Cache, progress: Progress) -> Target:
    """A `[[stacks.X.targets]]` entry imported (pinned sha256), its version checked."""
    ref = str(spec.get("ref"))
    if spec.kind not in ("sdist", "wheel"):
        raise SourceError(f"target {ref} of {cfg.name}: kind {spec.kind!r} is not an archive",
                          hint="targets take the sdist/wheel source keys")
    base = archive.materialize(cfg, spec, cache, progress)
    vf = spec.get("version_file")
    if vf:
        r = Git(base.git_dir).run("show", f"{base.commit}:{vf}", check=False)
        m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", r.out, re.M) if r.rc == 0 else None
        got = m.group(1) if m else None
        if got != ref:
            raise SourceError(f"{spec.get('filename') or spec.describe()}: {vf} says version {got or 'nothing'}, "
                              f"the target is {ref}", hint="refusing a tree that is not the release it claims")
    source = f"{base.source} ({', '.join(spec.get('include', [])) or 'whole archive'})"
    partial = list(spec.get("partial", [])) or None
    return Target(BaseTree(base.git_dir, base.commit, source, base.note), spec, ref, {},
                  what=str(spec.get("what", "")), partial=partial)


def version_key(v: str) -> tuple:
    """Release order (0.9 < 0.10; x.y.z.postN after x.y.z). Pre-releases are not walked."""
    parts = []
    for p in v.split("."):
        m = re.fullmatch(r"(\d+)|post(\d+)", p)
        parts.append((1, int(m.group(2))) if m and m.group(2) else (0, int(p)) if m else (-1, 0))
    return tuple(parts)


def _release_version(spec: SourceSpec, filename: str) -> str | None:
    pkg = re.escape(str(spec.get("package")))
    if spec.kind == "sdist":
        m = re.fullmatch(rf"{pkg}-(.+)\.tar\.gz", filename)
    else:  # same wheel tag as the pinned file
        tail = re.escape(str(spec.get("filename", "")).split(f"-{spec.get('version')}-", 1)[-1])
        m = re.fullmatch(rf"{pkg}-(.+?)-{tail}", filename)
    if not m or not VERSION_RE.match(m.group(1)):
        return None  # rc, dev, other wheel tags
    return m.group(1)


def releases(spec: SourceSpec, cache: Cache, progress: Progress = None) -> list[tuple[str, str | None]]:
    """(version, sha256) of every final release on the index, oldest first. Without the index,
    the archives already in the cache (their sha256 computed locally)."""
    try:
        files = archive.list_files(str(spec.get("package")))
        rel = {v: f.get("hashes", {}).get("sha256") for f in files if not f.get("yanked")
               and (v := _release_version(spec, f["filename"]))}
    except SourceError as e:
        say(progress, f"index unreachable ({e.one_line()}); using cached archives only")
        rel = {}
        for f in (cache.root / "archives").glob("*"):
            v = _release_version(spec, f.name)
            if v:
                rel[v] = archive.sha256_of(f)
        if not rel:
            raise
    return sorted(rel.items(), key=lambda kv: version_key(kv[0]))


def _archive_target(cfg: StackConfig, spec: SourceSpec, version: str, sha256: str | None, cache: Cache,
                    progress: Progress) -> Target:
    base, src, stack = release_pin(cfg, spec, version, cache, progress, sha256=sha256)
    return Target(base, spec, f"v{version}", {"stack": stack, "source": src})


def _git_target(cfg: StackConfig, spec: SourceSpec, ref: str, cache: Cache, progress: Progress) -> Target:
    if spec.kind == "path":
        from ..sources import pathsource

        here = pathsource.materialize(cfg, spec, cache, progress)
        sha = Git(here.git_dir).rev(ref)
        if not sha:
            raise SourceError(f"{here.source} has no commit {ref}")
        base = BaseTree(here.git_dir, sha, here.source)
    else:
        g, sha = gitsource.fetch_ref(cfg, spec, cache, ref, progress)
        base = BaseTree(g.path, sha, f"git:{gitsource.resolve_url(cfg, spec)}")
    stack = {"commit": sha}
    if not re.fullmatch(r"[0-9a-f]{4,40}", ref) and ref != "HEAD":
        stack["tag"] = ref
    return Target(base, spec, ref if "tag" in stack else sha[:12], {"stack": stack})


def resolve(cfg: StackConfig, ref: str | None, cache: Cache, *, latest: bool = False,
            source: str | None = None, progress: Progress = None) -> Target:
    """The first source of the stack that can provide REF (or the newest release / tracked branch)."""
    if not ref and not latest:
        raise UsageError("name a REF or pass --latest")
    for spec in named_targets(cfg):
        if ref is not None and str(spec.get("ref")).removeprefix("v") == ref.removeprefix("v"):
            return _named_target(cfg, spec, cache, progress)
    specs = [s for s in cfg.sources if source is None or s.kind == source]
    errors = []
    for spec in specs:
        try:
            if spec.kind in ("sdist", "wheel"):
                rels = releases(spec, cache, progress) if latest or VERSION_RE.match(ref or "") else []
                if latest:
                    version, sha = rels[-1]
                else:
                    m = VERSION_RE.match(ref or "")
                    if not m:
                        raise SourceError(f"{ref!r} is not a release version")
                    version = m.group(1)
                    sha = dict(rels).get(version)
                    if sha is None:
                        raise SourceError(f"the index has no {spec.kind} of version {version}")
                return _archive_target(cfg, spec, version, sha, cache, progress)
            target_ref = (cfg.track or "HEAD") if latest else ref
            return _git_target(cfg, spec, target_ref, cache, progress)
        except SourceError as e:
            errors.append(f"{spec.describe()}: {e.one_line()}")
    raise SourceError(f"no source of {cfg.name} can provide {ref or '--latest'}", details="\n".join(errors),
                      hint="; ".join(errors))


def walk_points(cfg: StackConfig, span: str, cache: Cache, *, step: int = 1, source: str | None = None,
                progress: Progress = None) -> list[Target]:
    """Every release A <= v <= B (archive stacks) or every `step`-th first-parent commit of A..B
    (git/path stacks; A and B included)."""
    a, sep, b = span.partition("..")
    if not sep or not a or not b:
        raise UsageError(f"--walk wants A..B, got {span!r}", hint="e.g. --walk v0.27.1..v0.33.0")
    specs = [s for s in cfg.sources if source is None or s.kind == source]
    errors = []
    for spec in specs:
        try:
            if spec.kind in ("sdist", "wheel"):
                ma, mb = VERSION_RE.match(a), VERSION_RE.match(b)
                if not (ma and mb):
                    raise SourceError(f"{span} is not a range of versions")
                lo, hi = version_key(ma.group(1)), version_key(mb.group(1))
                if lo > hi:
                    raise UsageError(f"--walk {span}: the range is backwards ({a} is newer than {b})",
                                     hint=f"use --walk {b}..{a}")
                pts = [(v, s) for v, s in releases(spec, cache, progress) if lo <= version_key(v) <= hi]
                if not pts:
                    raise SourceError(f"the index has no release in {span}")
                return [_archive_target(cfg, spec, v, s, cache, progress) for v, s in pts]
            first = _git_target(cfg, spec, a, cache, progress)
            last = _git_target(cfg, spec, b, cache, progress)
            g = Git(first.base.git_dir)
            shas = g.out("rev-list", "--reverse", "--first-parent", f"{first.base.commit}..{last.base.commit}").split()
            if not shas and first.base.commit != last.base.commit and g.run(
                    "merge-base", "--is-ancestor", last.base.commit, first.base.commit, check=False).rc == 0:
                raise UsageError(f"--walk {span}: the range is backwards ({b} is an ancestor of {a})",
                                 hint=f"use --walk {b}..{a}")
            picked = shas[step - 1::step] if step > 1 else shas
            if shas and (not picked or picked[-1] != shas[-1]):
                picked.append(shas[-1])
            return [first] + [Target(BaseTree(first.base.git_dir, s, first.base.source), spec, s[:12],
                                     {"stack": {"commit": s}}) for s in picked]
        except SourceError as e:
            errors.append(f"{spec.describe()}: {e.one_line()}")
    raise SourceError(f"no source of {cfg.name} can walk {span}", hint="; ".join(errors))
