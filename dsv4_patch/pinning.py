"""`dsv4-patch pin STACK REF`: move a stack's pin through the same verification as apply, and
rewrite the few lines of patches/stacks.toml that hold it (comments and layout are kept)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from .config import Project, SourceSpec, StackConfig
from .errors import ConfigError, SourceError, UsageError
from .gitcmd import Git
from .sources import Cache, Progress, archive, gitsource


@dataclass
class PinResult:
    stack: str
    changes: dict[str, tuple[str | None, str]]
    source: str

    def to_dict(self) -> dict:
        return {"stack": self.stack, "source": self.source,
                "changes": {k: {"old": o, "new": n} for k, (o, n) in self.changes.items()}}


def release_pin(stack: StackConfig, spec: SourceSpec, version: str, cache: Cache, progress: Progress = None,
                *, sha256: str | None = None):
    """Import a release archive (verified, cached) and return (base, source values, stack values)
    that pin it: version, sha256 and wheel file name; tag, and the commit the archive records
    (or the tag when it records none)."""
    base = archive.materialize(stack, spec, cache, progress, version=version, sha256=sha256, expect_commit="")
    msg = Git(base.git_dir).out("log", "-1", "--format=%B", base.commit)
    recorded = re.search(r"^recorded-commit: (\w+)", msg, re.M)
    src = {"version": version, "sha256": re.search(r"^sha256: (\w+)", msg, re.M).group(1)}
    if spec.get("filename"):
        src["filename"] = archive.archive_filename(spec, version)
    if spec.get("tree"):  # a content id moves with the archive it names
        src["tree"] = archive.tree_id(base)
    return base, src, {"tag": f"v{version}", "commit": recorded.group(1) if recorded else f"v{version}"}


def _section_bounds(lines: list[str], header: str, nth: int = 0) -> tuple[int, int]:
    hits = [i for i, ln in enumerate(lines) if ln.strip() == header]
    if len(hits) <= nth:
        raise ConfigError(f"stacks.toml: no {header} table")
    start = hits[nth]
    end = next((j for j in range(start + 1, len(lines)) if lines[j].lstrip().startswith("[")), len(lines))
    return start, end


def set_keys(text: str, header: str, values: dict[str, str], nth: int = 0) -> str:
    """Set `key = "value"` lines inside one TOML table, keeping everything else byte for byte."""
    lines = text.splitlines(keepends=True)
    start, end = _section_bounds(lines, header, nth)
    for key, value in values.items():
        new = f'{key} = "{value}"'
        for j in range(start + 1, end):
            m = re.match(rf"^(\s*){re.escape(key)}\s*=\s*\"[^\"]*\"(.*)$", lines[j].rstrip("\n"))
            if m:
                lines[j] = f"{m.group(1)}{new}{m.group(2)}\n"
                break
        else:
            lines.insert(start + 1, new + "\n")
            end += 1
    return "".join(lines)


def pin_stack(project: Project, stack: StackConfig, ref: str, *, source: str | None, cache: Cache,
              progress: Progress = None, dry_run: bool = False):
    specs = [s for s in stack.sources if (source is None or s.kind == source)]
    if not specs:
        raise UsageError(f"stack {stack.name} has no {source} source")
    path = project.config_path
    text = path.read_text()
    changes: dict[str, tuple[str | None, str]] = {}
    errors = []
    for spec in specs:
        try:
            if spec.kind in ("sdist", "wheel"):
                version = ref[1:] if ref.startswith("v") and ref[1:2].isdigit() else ref
                _, src_vals, stack_vals = release_pin(stack, spec, version, cache, progress)
                for k, v in src_vals.items():
                    changes[f"sources.{spec.kind}.{k}"] = (spec.get(k), v)
                for k, v in stack_vals.items():
                    changes[k] = (stack.raw.get(k), v)
                text = set_keys(text, stack.sources_table, src_vals, nth=stack.sources.index(spec))
                text = set_keys(text, stack.table, stack_vals)
            elif spec.kind == "git":
                _, sha = gitsource.fetch_ref(stack, spec, cache, ref, progress)
                vals = {"commit": sha}
                if not re.fullmatch(r"[0-9a-f]{4,40}", ref):
                    vals["tag"] = ref
                for k, v in vals.items():
                    changes[k] = (stack.raw.get(k), v)
                text = set_keys(text, stack.table, vals)
            else:
                raise SourceError("a path source has no pin of its own")
            if not dry_run:
                tmp = path.with_suffix(".toml.tmp")
                tmp.write_text(text)
                tmp.replace(path)
            return PinResult(stack.label, changes, spec.describe())
        except SourceError as e:
            errors.append(f"{spec.describe()}: {e.one_line()}")
    raise SourceError(f"cannot pin {stack.name} to {ref}", hint="; ".join(errors))


def _toml_str(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def release_tables(stack: StackConfig, tag: str, commit: str, sources: list[dict],
                   patches: str | None = None) -> str:
    """The TOML text declaring `tag` as a further release of `stack`, with its own sources."""
    rel = f'stacks.{stack.name}.releases."{tag}"'
    lines = [f"[{rel}]", f"commit = {_toml_str(commit)}"]
    if patches:
        lines.append(f"patches = {_toml_str(patches)}")
    for src in sources:
        lines += ["", f"[[{rel}.sources]]"]
        for k, v in src.items():
            if isinstance(v, str):
                lines.append(f"{k} = {_toml_str(v)}")
            elif isinstance(v, list):
                lines.append(f"{k} = [{', '.join(_toml_str(x) for x in v)}]")
            elif isinstance(v, dict):
                lines.append(f"{k} = {{ {', '.join(f'{_toml_str(a)} = {_toml_str(b)}' for a, b in v.items())} }}")
    return "\n".join(lines) + "\n"


def add_release(project: Project, stack: StackConfig, tag: str, commit: str, sources: list[dict],
                *, patches: str | None = None, dry_run: bool = False) -> StackConfig:
    """Declare `tag` as a further release of `stack` in patches/stacks.toml (after the stack's
    last table, comments and layout kept) and return its config. The text is validated as the
    whole file before it is written; an existing release of that tag is an error.

    The patch files go to the returned config's patch_dir (patches/<stack>/releases/<tag> by
    default). `dsv4-patch release add` (releases.py) writes the same tables (release_tables) with
    the folder in one step."""
    from .config import parse_project

    primary = project.stack(stack.name)
    if tag in primary.releases or tag in (primary.release, primary.tag):
        raise ConfigError(f"{project.config_path}: {stack.name} already has release {tag}",
                          hint=f"pin it with `dsv4-patch pin {stack.name}@{tag} REF`, or remove its table first")
    path = project.config_path
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    prefix = f"[stacks.{primary.name}"
    last = max((i for i, ln in enumerate(lines) if ln.strip().lstrip("[").startswith(prefix[1:] + ".")
                or ln.strip() in (f"[stacks.{primary.name}]",)), default=len(lines) - 1)
    end = next((j for j in range(last + 1, len(lines)) if lines[j].lstrip().startswith("[")), len(lines))
    while end > last + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1  # blank lines and the next table's leading comments stay with the next table
    block = "\n" + release_tables(primary, tag, commit, sources, patches)
    if end < len(lines):
        block += "\n"
    if lines and not lines[end - 1].endswith("\n"):
        block = "\n" + block
    new_text = "".join(lines[:end]) + block + "".join(lines[end:])
    new = parse_project(project.root, new_text, path)  # one-line error, nothing written
    if not dry_run:
        tmp = path.with_suffix(".toml.tmp")
        tmp.write_text(new_text, encoding="utf-8")
        tmp.replace(path)
    return new.target(stack.name, tag)


def bumped_release_sources(stack: StackConfig, spec: SourceSpec | None, source_vals: dict | None) -> list[dict]:
    """The sources of a release made by bumping `stack`: its own sources, the one the bump went
    through (`spec`) carrying the new version/sha256/filename (`source_vals`)."""
    out = []
    for s in stack.sources:
        d = {"kind": s.kind, **s.options}
        if spec is not None and s is spec and source_vals:
            d.update(source_vals)
        out.append(d)
    return out


def declare_bumped_release(project: Project, stack: StackConfig, tag: str, pin: dict, spec: SourceSpec | None,
                           *, dry_run: bool = False) -> StackConfig:
    """After `bump STACK REF --into DIR`: declare TAG with the pin the bump found (`pin` as
    bump's Target.pin: {"stack": {"tag", "commit"}, "source": {...}}) and return its config,
    whose patch_dir is where the refreshed patch files go (patches/<stack>/releases/<tag>)."""
    commit = pin["stack"]["commit"]
    return add_release(project, stack, tag, commit, bumped_release_sources(stack, spec, pin.get("source")),
                       dry_run=dry_run)
