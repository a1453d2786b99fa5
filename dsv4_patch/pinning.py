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
                text = set_keys(text, f"[[stacks.{stack.name}.sources]]", src_vals, nth=stack.sources.index(spec))
                text = set_keys(text, f"[stacks.{stack.name}]", stack_vals)
            elif spec.kind == "git":
                _, sha = gitsource.fetch_ref(stack, spec, cache, ref, progress)
                vals = {"commit": sha}
                if not re.fullmatch(r"[0-9a-f]{4,40}", ref):
                    vals["tag"] = ref
                for k, v in vals.items():
                    changes[k] = (stack.raw.get(k), v)
                text = set_keys(text, f"[stacks.{stack.name}]", vals)
            else:
                raise SourceError("a path source has no pin of its own")
            if not dry_run:
                tmp = path.with_suffix(".toml.tmp")
                tmp.write_text(text)
                tmp.replace(path)
            return PinResult(stack.name, changes, spec.describe())
        except SourceError as e:
            errors.append(f"{spec.describe()}: {e.one_line()}")
    raise SourceError(f"cannot pin {stack.name} to {ref}", hint="; ".join(errors))
