"""The declared schema of `patches/stacks.toml` (pydantic models) and one-line error messages
that name file:line, the table and the key.

Every table rejects keys it does not declare (a typo such as `sha265` or `[stack.x]` is an
error, not a silently ignored line) and every value has one type (strict: `commit = 123` is an
error, not the string "123"). Documented in docs/patch-format.md ("stacks.toml").

Importing this module imports pydantic (about 100 ms): config.py imports it only when a
stacks.toml it has not seen validated before is read (see config._validated).
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .tomllines import locate  # noqa: F401 (where it lived before: config_schema.locate)

# The kinds of [[stacks.<name>.sources]] entry (dsv4_patch/sources/: one adapter module per kind,
# sdist and wheel sharing archive.py). Here, not in config.py: config imports this module (lazily,
# for pydantic's cost), never the other way round.
SOURCE_KINDS = ("git", "sdist", "wheel", "path")

NO_STACK_HINT = "add a [stacks.<name>] table; docs/patch-format.md describes the file"


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class GitSource(_Table):
    kind: Literal["git"]
    url: str | None = None
    mirror_env: str | None = None


class ArchiveSource(_Table):
    kind: Literal["sdist", "wheel"]
    package: str = Field(min_length=1)
    version: str = Field(min_length=1)
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    filename: str | None = None
    commit_file: str | None = None
    strip: str | None = None
    reroot: dict[str, str] = {}
    exclude: list[str] = []
    include: list[str] = []  # only the members matching these (e.g. a folder a wheel vendors)
    what: str | None = None  # what the tree is, for reports (a vendored copy's name, e.g.)
    # content id: the git tree id of the imported tree, checked at every import (tells apart two
    # archives that carry different trees under one version label)
    tree: str | None = Field(None, pattern=r"^[0-9a-f]{40}$")


class PathSource(_Table):
    kind: Literal["path"]
    path: str = Field(min_length=1)
    ref: str | None = None


Source = Annotated[Union[GitSource, ArchiveSource, PathSource], Field(discriminator="kind")]


class ReleaseTable(_Table):
    """[stacks.<name>.releases."<tag>"]: a further upstream release the stack is carried on."""
    tag: str | None = None  # default: the table's key
    commit: str = Field(min_length=1)
    patches: str | None = None  # default: <stack's patches>/releases/<tag>
    sources: list[Source] = Field(min_length=1)
    synced: dict[str, str] | None = None  # default: the primary release's


class BumpTarget(ArchiveSource):
    """[[stacks.<name>.targets]]: a tree `bump` may go onto that is no source of the pin (bump/targets.py)."""
    ref: str = Field(min_length=1)  # what `dsv4-patch bump <name> REF` names
    version_file: str | None = None  # its `__version__` must equal `ref`
    partial: list[str] | None = None  # the only repository paths the tree carries


class StackTable(_Table):
    upstream: str = Field(min_length=1)
    tag: str | None = None
    commit: str = Field(min_length=1)
    track: str | None = None
    patches: str | None = None
    sources: list[Source] = Field(min_length=1)
    synced: dict[str, str] = {}
    releases: dict[str, ReleaseTable] = {}
    targets: list[BumpTarget] = []


class StacksFile(_Table):
    stacks: dict[str, StackTable] = Field(min_length=1)


def _fields(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def _source_model(kind: object) -> type[BaseModel] | None:
    return {"git": GitSource, "sdist": ArchiveSource, "wheel": ArchiveSource, "path": PathSource}.get(kind)


def _clean_loc(loc: tuple) -> tuple:
    """pydantic puts the union tag into the location (…, 'sources', 0, 'sdist', 'sha265'): drop it."""
    out = []
    for i, part in enumerate(loc):
        if isinstance(part, str) and i >= 2 and loc[i - 2] == "sources" and isinstance(loc[i - 1], int) \
                and part in SOURCE_KINDS:
            continue
        out.append(part)
    return tuple(out)


def _model_at(loc: tuple, data: dict) -> type[BaseModel]:
    """The model of the table that holds the last element of `loc`."""
    parent = loc[:-1]
    if "sources" in parent:
        i = parent.index("sources")
        try:
            node = data
            for part in parent[: i + 2]:
                node = node[part]
            return _source_model(node.get("kind")) or GitSource
        except (KeyError, IndexError, TypeError, AttributeError):
            return GitSource
    if len(parent) >= 4 and parent[2] == "releases":
        return ReleaseTable
    if len(parent) >= 2:
        return StackTable
    return StacksFile


def table_name(loc: tuple) -> str:
    """('stacks', 'vllm', 'sources', 0, 'sha265') -> '[[stacks.vllm.sources]] #1'."""
    parts, index = [], None
    for part in loc[:-1]:
        if isinstance(part, int):
            index = part
            break
        parts.append(part if re.fullmatch(r"[A-Za-z0-9_-]+", str(part)) else f'"{part}"')
    if not parts:
        return "top level"
    if index is not None:
        return f"[[{'.'.join(parts)}]] #{index + 1}"
    return f"[{'.'.join(parts)}]"


def _type_name(v: object) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "an array",
            dict: "a table"}.get(type(v), type(v).__name__)


def _short(v: object) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def explain(err: dict, data: dict) -> tuple[tuple, str, str | None]:
    """(location, message, hint) for one pydantic error, in the words of the TOML file."""
    loc = _clean_loc(tuple(err["loc"]))
    key = str(loc[-1]) if loc else ""
    kind, value = err["type"], err.get("input")
    where = table_name(loc)
    if kind == "extra_forbidden":
        allowed = _fields(_model_at(loc, data))
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = (f"did you mean {close[0]!r}? " if close else "") + f"allowed: {', '.join(allowed)}"
        return loc, f"{where}: unknown key {key!r}", hint
    if kind == "missing":
        if loc == ("stacks",):
            return loc, "declares no stack", NO_STACK_HINT
        return loc, f"{where}: missing required key {key!r}", None
    if kind == "union_tag_invalid":
        tag = err.get("ctx", {}).get("tag")
        return loc + ("kind",), f"{table_name(loc + ('kind',))}: kind {_short(tag)} is not a source kind", \
            f"use one of {', '.join(SOURCE_KINDS)}"
    if kind == "union_tag_not_found":
        return loc, f"{table_name(loc + ('kind',))}: missing required key 'kind'", f"use one of {', '.join(SOURCE_KINDS)}"
    if kind == "too_short":
        if key == "sources":
            return loc, f"{where}: 'sources' lists no source", "add a [[...sources]] table (kind = git | sdist | wheel | path)"
        if key == "stacks":
            return loc, "declares no stack", NO_STACK_HINT
        return loc, f"{where}: {key!r} must not be empty", None
    if kind == "string_pattern_mismatch" and key == "sha256":
        return loc, f"{where}: sha256 {_short(value)} is not 64 lower-case hex digits", None
    if kind == "string_pattern_mismatch" and key == "tree":
        return loc, f"{where}: tree {_short(value)} is not a git tree id (40 lower-case hex digits)", None
    expected = {"string_type": "a string", "int_type": "an integer", "bool_type": "a boolean",
                "list_type": "an array", "dict_type": "a table", "model_type": "a table",
                "model_attributes_type": "a table"}.get(kind)
    if expected:
        if key == "sources" and kind == "list_type":
            return loc, f"{where}: 'sources' must be an array of tables ([[...sources]]), not {_type_name(value)} {_short(value)}", None
        return loc, f"{where}: {key!r} must be {expected}, not {_type_name(value)} {_short(value)}", None
    return loc, f"{where}: {key!r}: {err['msg']}", None


def first_error(e: ValidationError, data: dict) -> tuple[tuple, str, str | None]:
    """The error to show: an unknown key first (`[stack.x]` also makes 'stacks' missing, but
    the typo is what the user must fix)."""
    errs = e.errors(include_url=False)
    errs.sort(key=lambda x: x["type"] != "extra_forbidden")
    return explain(errs[0], data)
