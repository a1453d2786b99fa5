"""Stack configuration: `patches/stacks.toml` read into typed objects.

    [stacks.vllm]
    upstream = "https://github.com/vllm-project/vllm"
    tag = "v0.27.1"
    commit = "6e448d0ea..."        # full hash once a git source resolved it
    track = "main"                  # branch followed by `bump --latest`
    patches = "vllm"                # folder under patches/

    [[stacks.vllm.sources]]         # tried in order; the first that works is used
    kind = "sdist"                  # git | sdist | wheel | path
    ...
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .errors import ConfigError, UsageError

STACKS_FILE = Path("patches") / "stacks.toml"
SOURCE_KINDS = ("git", "sdist", "wheel", "path")


@dataclass
class SourceSpec:
    kind: str
    options: dict

    def get(self, key: str, default=None):
        return self.options.get(key, default)

    def describe(self) -> str:
        where = self.get("url") or self.get("path") or (
            f"{self.get('package')}=={self.get('version')}" if self.get("package") else ""
        )
        return f"{self.kind}:{where}"


@dataclass
class StackConfig:
    name: str
    upstream: str
    tag: str | None
    commit: str
    track: str | None
    patch_dir: Path
    sources: list[SourceSpec]
    synced: dict[str, str] = field(default_factory=dict)  # tree path -> repo file it must equal
    raw: dict = field(default_factory=dict)

    @property
    def series_path(self) -> Path:
        return self.patch_dir / "series"


@dataclass
class Project:
    root: Path
    stacks: dict[str, StackConfig]

    @property
    def config_path(self) -> Path:
        return self.root / STACKS_FILE

    def stack(self, name: str) -> StackConfig:
        try:
            return self.stacks[name]
        except KeyError:
            known = ", ".join(sorted(self.stacks)) or "none"
            raise UsageError(  # a wrong argument: exit 2
                f"{self.config_path}: no stack named {name!r}", hint=f"known stacks: {known}"
            ) from None

    def select(self, names: list[str] | None) -> list[StackConfig]:
        return [self.stack(n) for n in names] if names else list(self.stacks.values())


def find_root(start: Path | None = None) -> Path:
    env = os.environ.get("DSV4_PATCH_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / STACKS_FILE).is_file():
            return d
    raise ConfigError(
        f"no {STACKS_FILE} found in {here} or above",
        hint="run inside a dsv4-patch checkout or set DSV4_PATCH_ROOT",
    )


def _parse_stack(root: Path, name: str, d: dict, path: Path) -> StackConfig:
    for key in ("upstream", "commit"):
        if not d.get(key):
            raise ConfigError(f"{path}: [stacks.{name}] needs {key!r}")
    sources = []
    for i, s in enumerate(d.get("sources", [])):
        kind = s.get("kind")
        if kind not in SOURCE_KINDS:
            raise ConfigError(
                f"{path}: [[stacks.{name}.sources]] #{i + 1} has kind {kind!r}",
                hint=f"use one of {', '.join(SOURCE_KINDS)}",
            )
        sources.append(SourceSpec(kind, {k: v for k, v in s.items() if k != "kind"}))
    if not sources:
        raise ConfigError(f"{path}: [stacks.{name}] lists no sources", hint="add a [[stacks.%s.sources]] table" % name)
    return StackConfig(
        name=name,
        upstream=d["upstream"],
        tag=d.get("tag"),
        commit=str(d["commit"]).lower(),
        track=d.get("track"),
        patch_dir=root / "patches" / d.get("patches", name),
        sources=sources,
        synced=dict(d.get("synced", {})),
        raw=d,
    )


def load_project(root: Path | None = None) -> Project:
    root = find_root() if root is None else Path(root).resolve()
    path = root / STACKS_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found", hint="run inside a dsv4-patch checkout") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}", hint="fix the TOML syntax") from None
    stacks = {n: _parse_stack(root, n, d, path) for n, d in data.get("stacks", {}).items()}
    return Project(root=root, stacks=stacks)
