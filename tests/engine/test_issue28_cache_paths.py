"""Issue 28: the tool's cache never gives a traceback.

- A config-memo entry (a cache: config-memo/<hash>.json) that is deeply nested JSON, or holds a
  non-ASCII MAC, was parsed and raised RecursionError / TypeError out of `load_project`: every
  command died. Any bytes in an entry are now just "not remembered" (and the entry is rewritten).
- A cache folder that cannot be made (DSV4_PATCH_CACHE under a file, or a file) gave an OSError
  traceback from the first command that made a folder in it (apply, pin: the git mirror): now one
  line naming the path and the variable to set, exit 1 (sources/base.py Cache.dir).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsv4_patch import configmemo
from dsv4_patch.config import load_project

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "applypatch.py"

ENTRIES = {
    "nested array": b"[" * 3000,
    "nested object": b'{"a":' * 3000 + b"1" + b"}" * 3000,
    "non-ASCII mac": '{"format": 1, "mac": "\u00e9"}'.encode(),
    "lone surrogate": b'{"format": 1, "mac": "\\ud800"}',
    "huge exponent": b'{"format": 1e400, "mac": 5}',
    "not UTF-8": b"\xff\xfe{",
}


def cli(env, *args, cache: str):
    return subprocess.run([sys.executable, str(TOOL), *args, "--project", str(env.root)], capture_output=True,
                          text=True, env={**os.environ, "DSV4_PATCH_CACHE": cache})


@pytest.mark.parametrize("bad", sorted(ENTRIES))
def test_any_bytes_in_a_memo_entry_are_a_miss_and_the_entry_is_rebuilt(env, monkeypatch, bad):
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(env.cache.root))
    text = (env.root / "patches/stacks.toml").read_text()
    load_project(env.root)  # validated and remembered: the key and the entry exist
    assert configmemo.validated(text)
    entry = configmemo._folder() / f"{configmemo._entry(text)[1]}.json"
    entry.write_bytes(ENTRIES[bad])
    assert configmemo.validated(text) is False
    assert [c.label for c in load_project(env.root).targets()] == ["demo"]  # validated again
    assert configmemo.validated(text)  # and remembered again


def test_a_nested_memo_entry_is_no_traceback_from_the_cli(env):
    cache = str(env.cache.root)
    assert cli(env, "status", cache=cache).returncode == 0
    text = (env.root / "patches/stacks.toml").read_text()
    os.environ["DSV4_PATCH_CACHE"] = cache
    try:
        entry = configmemo._folder() / f"{configmemo._entry(text)[1]}.json"
    finally:
        del os.environ["DSV4_PATCH_CACHE"]
    entry.write_bytes(ENTRIES["nested array"])
    p = cli(env, "status", cache=cache)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr


def _unmakeable(env, how: str) -> Path:
    (env.root.parent / "a-file").write_text("not a folder\n")
    return env.root.parent / "a-file" / ("cache" if how == "under a file" else "")


@pytest.mark.parametrize("how", ["under a file", "a file"])
@pytest.mark.parametrize("cmd", [("apply", "demo"), ("pin", "demo", "HEAD")])
def test_a_cache_that_cannot_be_made_is_one_line_naming_it(env, how, cmd):
    """A `git` source keeps its mirror in the cache (a `path` source needs none)."""
    toml = env.root / "patches/stacks.toml"
    toml.write_text(toml.read_text().replace('kind = "path"\npath =', 'kind = "git"\nurl ='))
    bad = _unmakeable(env, how)
    p = cli(env, *[env.base if a == "HEAD" else a for a in cmd], cache=str(bad))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("·")]
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.returncode == 1 and len(lines) == 1, p.stderr
    assert str(bad).rstrip("/") in lines[0] and "DSV4_PATCH_CACHE" in lines[0], lines[0]
    assert not (env.out / "demo").exists()
