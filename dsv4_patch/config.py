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

    [stacks.vllm.releases."v0.33.0"]   # a further upstream release the stack is carried on
    commit = "4ba787ec9"
    patches = "vllm/releases/v0.33.0"  # its own series (the default)
    [[stacks.vllm.releases."v0.33.0".sources]]
    ...

The file is validated against the schema in config_schema.py; every error is one line naming
file:line and the key. A text that passed is remembered (configmemo.py), so pydantic is imported
only when stacks.toml changed. A release is a StackConfig of its own (same name, `release` set,
`primary` False): the engine builds, lints and exports it like any stack, into OUT/<name>@<tag>.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from . import configmemo
from .errors import ConfigError, UsageError
from .tomllines import locate

STACKS_FILE = Path("patches") / "stacks.toml"
RELEASES_DIR = "releases"  # a release's default patch folder: patches/<stack>/releases/<tag>
# A stack name becomes a folder name (OUT/<stack>), a branch (dsv4/<stack>) and an environment
# variable (DSV4_TREE_<STACK>): one path component, no dots (no '..', no hidden folders).
STACK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# A release key is a tag such as v0.33.0: one path component (OUT/<stack>@<tag>).
RELEASE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


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
    root: Path | None = None  # the project checkout
    release: str | None = None  # the release's key (a tag); the primary's is its tag or short commit
    primary: bool = True  # False for a [stacks.<name>.releases."<tag>"] release
    releases: dict[str, "StackConfig"] = field(default_factory=dict)  # primary only: the further releases

    @property
    def series_path(self) -> Path:
        return self.patch_dir / "series"

    @property
    def label(self) -> str:
        """How commands name it: `vllm` (the primary release) or `vllm@v0.33.0`; also the name of
        its tree under OUT/."""
        return self.name if self.primary else f"{self.name}@{self.release}"

    @property
    def selector(self) -> str:
        """Names exactly this release on the command line and in Project.targets (a bare stack
        name means all its releases): `vllm@v0.27.1`, `vllm@v0.33.0`."""
        return f"{self.name}@{self.release}"

    @property
    def env_key(self) -> str:
        """Suffix of the DSV4_TREE_/DSV4_BASE_ variables: VLLM, or VLLM__V0_33_0 for a release."""
        return env_key(self.name, None if self.primary else self.release)

    @property
    def table(self) -> str:
        """The TOML header of its table (pin and bump rewrite keys there)."""
        return f"[{self._path}]"

    @property
    def sources_table(self) -> str:
        return f"[[{self._path}.sources]]"

    @property
    def _path(self) -> str:
        return f"stacks.{self.name}" if self.primary else f'stacks.{self.name}.releases."{self.release}"'

    def all_releases(self) -> list["StackConfig"]:
        """The primary release first, then the further ones in file order."""
        return [self, *self.releases.values()]


def env_key(stack: str, release: str | None = None) -> str:
    key = stack.upper()
    if release:
        key += "__" + re.sub(r"[^A-Za-z0-9]", "_", release).upper()
    return key


@dataclass
class Project:
    root: Path
    stacks: dict[str, StackConfig]

    @property
    def config_path(self) -> Path:
        return self.root / STACKS_FILE

    def rel(self, p: Path | str) -> str:
        """`p` as messages show it: relative to the project root where it lies inside, else as given."""
        p = Path(p)
        return p.relative_to(self.root).as_posix() if p.is_relative_to(self.root) else str(p)

    def stack(self, name: str) -> StackConfig:
        """A stack's primary release by name; `name@tag` names one of its releases."""
        if "@" in name:
            return self.target(name)
        try:
            return self.stacks[name]
        except KeyError:
            known = ", ".join(sorted(self.stacks)) or "none"
            raise UsageError(  # a wrong argument: exit 2
                f"{self.config_path}: no stack named {name!r}", hint=f"known stacks: {known}"
            ) from None

    def select(self, names: list[str] | None) -> list[StackConfig]:
        return [self.stack(n) for n in names] if names else list(self.stacks.values())

    def target(self, label: str, release: str | None = None) -> StackConfig:
        """`vllm`, `vllm@v0.33.0` or ("vllm", "v0.33.0") -> that release's config. The primary
        release answers to its own tag too (`vllm@v0.27.1`)."""
        name, _, rel = label.partition("@")
        if rel and release and rel != release:
            raise UsageError(f"{label}: names release {rel} but --release says {release}")
        rel = rel or release
        cfg = self.stack(name)
        if not rel:
            return cfg
        for r in cfg.all_releases():
            if rel == r.release or (r.primary and rel in (r.tag, r.commit)):
                return r
        known = ", ".join(r.release for r in cfg.all_releases())
        raise UsageError(f"stack {name} has no release {rel!r}", hint=f"its releases: {known} (patches/stacks.toml)")

    def targets(self, names: list[str] | None = None, releases: list[str] | None = None) -> list[StackConfig]:
        """Every release of the named stacks (all stacks by default), or only those --release names.

        `vllm@v0.33.0` names one release directly. With --release and no stack named, the stacks
        that lack that release are left out; a release no selected stack has is a usage error."""
        out: list[StackConfig] = []
        for n in names or list(self.stacks):
            if "@" in n:
                out.append(self.target(n))
                continue
            cfg = self.stack(n)
            if not releases:
                out += cfg.all_releases()
                continue
            for rel in releases:
                try:
                    out.append(self.target(n, rel))
                except UsageError:
                    if names:
                        raise
        if releases and not out:
            raise UsageError(f"no stack has release {releases[0]!r}",
                             hint="releases: " + ", ".join(r.label for c in self.stacks.values() for r in c.all_releases()))
        seen, uniq = set(), []
        for c in out:
            if c.label not in seen:
                seen.add(c.label)
                uniq.append(c)
        return uniq


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


def _read_text(path: Path) -> str:
    """The file as text, or a one-line error for bytes a TOML file cannot hold."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found", hint="run inside a dsv4-patch checkout") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a file", hint="patches/stacks.toml must be a TOML file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    nul = data.find(b"\0")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise ConfigError(f"{path}:{line}: NUL byte in the file",
                          hint="stacks.toml is UTF-8 text; remove the byte")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path}:{line}: byte 0x{data[e.start]:02x} is not UTF-8",
                          hint="TOML files are UTF-8: save stacks.toml as UTF-8") from None


def _toml_error(path: Path, e: "tomllib.TOMLDecodeError") -> ConfigError:
    msg = str(e)
    m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
    if m:
        msg = msg[: m.start()].strip()
        return ConfigError(f"{path}:{m.group(1)}:{m.group(2)}: {msg}", hint="fix the TOML syntax")
    m = re.search(r"\(at end of document\)", msg)
    if m:
        return ConfigError(f"{path}: {msg[: m.start()].strip()} at the end of the file", hint="fix the TOML syntax")
    return ConfigError(f"{path}: {' '.join(msg.split())}", hint="fix the TOML syntax")


def _patch_dir(root: Path, value: str, where: str, line, path: Path) -> Path:
    """patches/<value>, refused unless it names a folder inside patches/ (no absolute path, no
    '..', no symlink out of it). `line()` finds the line for the error (only then: it is slow)."""
    p = PurePosixPath(value)
    bad = (not value or "\\" in value or p.is_absolute() or ".." in p.parts or value.strip("/.") == ""
           or any(part.startswith(".") for part in p.parts))
    base = (root / "patches").resolve()
    if not bad:
        full = (root / "patches" / p).resolve()
        bad = full == base or base not in full.parents
    if bad:
        raise ConfigError(f"{path}:{line()}: {where}: patches = {value!r} must name a folder inside patches/",
                          hint="use a relative path such as \"vllm\" or \"vllm/releases/v0.33.0\", without '..'")
    return root / "patches" / p


def _sources(d: dict) -> list[SourceSpec]:
    return [SourceSpec(s["kind"], {k: v for k, v in s.items() if k != "kind"}) for s in d["sources"]]


def _parse_stack(root: Path, name: str, d: dict, path: Path, text: str) -> StackConfig:
    if not STACK_NAME.fullmatch(name):
        raise ConfigError(f"{path}:{locate(text, ('stacks', name))}: stack name {name!r} is not a plain name",
                          hint="use letters, digits, '-' and '_': it names folders, branches and variables")
    patches = d.get("patches", name)
    cfg = StackConfig(
        name=name,
        upstream=d["upstream"],
        tag=d.get("tag"),
        commit=d["commit"].lower(),
        track=d.get("track"),
        patch_dir=_patch_dir(root, patches, f"[stacks.{name}]", lambda: locate(text, ("stacks", name, "patches")), path),
        sources=_sources(d),
        synced=dict(d.get("synced", {})),
        raw={k: v for k, v in d.items() if k != "releases"},
        root=root,
    )
    cfg.release = cfg.tag or cfg.commit[:12]
    for rel, r in d.get("releases", {}).items():
        where = f'[stacks.{name}.releases."{rel}"]'
        def line(rel=rel) -> int:
            return locate(text, ("stacks", name, "releases", rel))

        if not RELEASE_NAME.fullmatch(rel) or ".." in rel:
            raise ConfigError(f"{path}:{line()}: {where}: release {rel!r} is not a plain tag",
                              hint="use a tag such as v0.33.0: letters, digits, '.', '-', '_' and '+'")
        if rel in (cfg.release, cfg.tag):
            raise ConfigError(f"{path}:{line()}: {where}: {rel} is the primary release of {name} (tag = {cfg.tag!r})",
                              hint="a release table is for a further release; remove it or change its key")
        rel_patches = r.get("patches", f"{patches.rstrip('/')}/{RELEASES_DIR}/{rel}")
        cfg.releases[rel] = StackConfig(
            name=name,
            upstream=cfg.upstream,
            tag=r.get("tag", rel),
            commit=r["commit"].lower(),
            track=cfg.track,
            patch_dir=_patch_dir(root, rel_patches, where,
                                 lambda rel=rel, line=line: locate(text, ("stacks", name, "releases", rel, "patches"))
                                 or line(), path),
            sources=_sources(r),
            synced=dict(r["synced"] if r.get("synced") is not None else cfg.synced),
            raw={"upstream": cfg.upstream, "release": rel, **r},
            root=root,
            release=rel,
            primary=False,
        )
    return cfg


def parse_project(root: Path, text: str, path: Path) -> Project:
    """Validate the text of stacks.toml and build the project (nothing is read or written, but
    the memo of validated texts in the tool's cache)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _toml_error(path, e) from None
    if configmemo.validated(text):
        try:
            return _build_project(root, data, text, path)
        except Exception:  # noqa: BLE001 - a memo that lied: validate, so the error is the schema's own
            pass
    _validate(data, text, path)
    configmemo.remember(text)
    return _build_project(root, data, text, path)


def _validate(data: dict, text: str, path: Path) -> None:
    from pydantic import ValidationError

    from . import config_schema as schema

    try:
        schema.StacksFile.model_validate(data)
    except ValidationError as e:
        loc, msg, hint = schema.first_error(e, data)
        line = locate(text, loc)
        raise ConfigError(f"{path}:{line}: {msg}" if line else f"{path}: {msg}", hint=hint) from None


def _build_project(root: Path, data: dict, text: str, path: Path) -> Project:
    stacks = {n: _parse_stack(root, n, d, path, text) for n, d in data["stacks"].items()}
    owners: dict[Path, str] = {}
    for cfg in stacks.values():
        for r in cfg.all_releases():
            other = owners.setdefault(r.patch_dir.resolve(), r.label)
            if other != r.label:
                raise ConfigError(f"{path}: {r.label} and {other} share the patch folder {r.patch_dir}",
                                  hint="each stack and release needs its own folder (export would overwrite the other's)")
    return Project(root=root, stacks=stacks)


def load_project(root: Path | None = None) -> Project:
    root = find_root() if root is None else Path(root).resolve()
    path = root / STACKS_FILE
    return parse_project(root, _read_text(path), path)
