"""Where a key or table sits in the text of a TOML file (1-based line numbers for errors).

tomllib gives no positions, so the lines are found again in the text. Used only on the way to an
error message: finding a line parses every line of the file.
"""

from __future__ import annotations

import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_KEY = re.compile(r"""^\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*[=.]""")


def _header_path(line: str) -> tuple[tuple, bool] | None:
    """('stacks', 'vllm', 'releases', 'v0.33.0'), is_array for a [table] / [[array]] header line."""
    s = line.strip()
    if not s.startswith("["):
        return None
    try:
        node = tomllib.loads(s)
    except tomllib.TOMLDecodeError:
        return None
    path, is_array = [], False
    while isinstance(node, dict) and len(node) == 1:
        k, node = next(iter(node.items()))
        path.append(k)
        if isinstance(node, list):
            is_array, node = True, node[0] if node else {}
    return tuple(path), is_array


def locate(text: str, loc: tuple) -> int:
    """1-based line of the key (or, failing that, the table) that `loc` names; 0 if unknown."""
    counts: dict[tuple, int] = {}
    current: tuple = ()
    best, best_len = 0, -1
    for no, line in enumerate(text.splitlines(), 1):
        hp = _header_path(line)
        if hp is not None:
            path, is_array = hp
            if is_array:
                counts[path] = counts.get(path, -1) + 1
                path = path + (counts[path],)
            else:
                # [a.b] after [[a]] entries: a nested table of the last array element
                path = _with_indices(path, counts)
            current = path
            cand = path
        else:
            m = _KEY.match(line)
            if not m:
                continue
            raw = m.group(1)
            try:
                key = next(iter(tomllib.loads(f"{raw} = 0")))
            except (tomllib.TOMLDecodeError, StopIteration):
                key = raw
            cand = current + (key,)
        n = _prefix(cand, loc)
        # a key or table that holds `loc`, or the first one inside it (an unknown table)
        if (n == len(cand) or n == len(loc)) and n > best_len:
            best, best_len = no, n
    return best


def _with_indices(path: tuple, counts: dict[tuple, int]) -> tuple:
    out: tuple = ()
    for part in path:
        out = out + (part,)
        if out in counts:
            out = out + (counts[out],)
    return out


def _prefix(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# --- line-preserving edits (release add / move / retire) ----------------------------------------

def header_of(line: str) -> tuple | None:
    """The key path of a `[table]` / `[[array]]` header line (None for any other line)."""
    hp = _header_path(line)
    return hp[0] if hp else None


def _blocks(lines: list[str], prefix: tuple) -> list[tuple[int, int]]:
    """(start, end) of every table whose header path starts with `prefix`. A block ends at the
    next header; the comments right above that header (after the block's last blank line) and
    the blank lines before them belong to the next table and stay."""
    out = []
    heads = [i for i, ln in enumerate(lines) if header_of(ln) is not None]
    for n, i in enumerate(heads):
        path = header_of(lines[i])
        if path[:len(prefix)] != prefix:
            continue
        end = heads[n + 1] if n + 1 < len(heads) else len(lines)
        while end > i + 1 and lines[end - 1].lstrip().startswith("#"):
            end -= 1  # the next table's leading comments
        out.append((i, end))
    return out


def table_spans(text: str, prefix: tuple) -> list[tuple[int, int]]:
    """0-based [start, end) line spans of the tables under `prefix` (see _blocks)."""
    return _blocks(text.splitlines(keepends=True), prefix)


def remove_tables(text: str, prefix: tuple) -> str:
    """Drop every table under `prefix` (its header, keys and comments inside), nothing else; at
    most one blank line is left where they were."""
    lines = text.splitlines(keepends=True)
    drop = set()
    for a, b in _blocks(lines, prefix):
        drop.update(range(a, b))
    kept = [ln for i, ln in enumerate(lines) if i not in drop]
    out: list[str] = []
    for ln in kept:  # no run of blank lines longer than one where a block went
        if not ln.strip() and out and not out[-1].strip():
            continue
        out.append(ln)
    return "".join(out)


def rename_tables(text: str, prefix: tuple, new_last: str) -> str:
    """Rename the last key of `prefix` in every header under it (`[stacks.vllm.releases."v0.33.0"]`
    and its `.sources` arrays -> `"v0.34.0"`), keeping each line's other bytes."""
    lines = text.splitlines(keepends=True)
    old_last = prefix[-1]
    for i, ln in enumerate(lines):
        path = header_of(ln)
        if path is None or path[:len(prefix)] != prefix:
            continue
        for quoted in (f'"{old_last}"', f"'{old_last}'", old_last):
            head, sep, tail = ln.partition("]")
            if quoted in head:
                lines[i] = head.replace(quoted, f'"{new_last}"', 1) + sep + tail
                break
        if header_of(lines[i])[:len(prefix)] != prefix[:-1] + (new_last,):
            raise ValueError(f"cannot rename the header {ln.strip()}")
    return "".join(lines)


def insert_after(text: str, prefix: tuple, block: str) -> str:
    """Insert `block` (TOML text) after the last table under `prefix` (the stack), before the
    next table's leading comments and blank lines."""
    lines = text.splitlines(keepends=True)
    blocks = _blocks(lines, prefix)
    end = blocks[-1][1] if blocks else len(lines)
    while end > 0 and not lines[end - 1].strip():
        end -= 1
    body = "\n" + block.rstrip("\n") + "\n"
    if end < len(lines):
        body += "\n"
    if lines[:end] and not lines[end - 1].endswith("\n"):
        body = "\n" + body
    rest = lines[end:]
    while rest and not rest[0].strip():
        rest = rest[1:]
    return "".join(lines[:end]) + body + "".join(rest)
