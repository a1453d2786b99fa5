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
