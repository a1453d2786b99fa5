"""Bounded fuzz of the stacks.toml loader (hypothesis, derandomized: the same inputs every run).

Property: for any bytes, load_project either succeeds, with every stack name a plain name and
every patch folder inside patches/, or raises ConfigError whose message is one printable line;
it never raises anything else and never writes a file. About 400 inputs, a few seconds."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsv4_patch.config import STACK_NAME, load_project
from dsv4_patch.errors import ConfigError

GOOD = b'''[stacks.demo]
upstream = "https://example.invalid/demo"
commit = "abc123"
patches = "demo"

[[stacks.demo.sources]]
kind = "sdist"
package = "demo"
version = "1.0"
sha256 = "''' + b"0" * 64 + b'''"
reroot = { "a/" = "b/" }

[stacks.demo.releases."v2"]
commit = "def456"

[[stacks.demo.releases."v2".sources]]
kind = "git"
url = "https://example.invalid/demo.git"
'''

KEYS = ["stacks", "stack", "upstream", "commit", "tag", "track", "patches", "sources", "kind", "url", "path",
        "package", "version", "sha256", "sha265", "filename", "reroot", "exclude", "synced", "releases", "ref",
        "mirror_env", "commit_file", "strip"]
NAMES = ["demo", "x", "/abs/evil", "../up", "a.b", "..", "v2", "v0.33.0", "a/b", "", "é", "CON", "-x", "a__b"]
VALUES = ['"demo"', '"../../x"', '"/etc"', '"."', "5", "1.5", "true", '["a", 1]', '{ "a/" = "b/" }', '""',
          '"git"', '"sdist"', '"wheel"', '"path"', '"svn"', "[]", '"link/.."', '"demo/releases/v2"', '"\\u0000"']


def _name(s: str) -> str:
    return s if s and all(c.isalnum() or c in "_-" for c in s) else '"' + s.replace('"', "") + '"'


lines = st.one_of(
    st.builds(lambda a, b: f"[{a}.{_name(b)}]", st.sampled_from(["stacks", "stack"]), st.sampled_from(NAMES)),
    st.builds(lambda b, c: f"[[stacks.{_name(b)}.{c}]]", st.sampled_from(NAMES), st.sampled_from(["sources", "x"])),
    st.builds(lambda b, r: f'[stacks.{_name(b)}.releases.{_name(r)}]', st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.builds(lambda k, v: f"{k} = {v}", st.sampled_from(KEYS), st.sampled_from(VALUES)),
    st.text(max_size=20),
)
documents = st.lists(lines, max_size=25).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass"))


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(GOOD)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        blob = draw(st.binary(min_size=1, max_size=3) | st.sampled_from([b"\x00", b"\xe9", b"\"", b"[", b"\n", b"=",
                                                                         b"..", b"/"]))
        if op == "insert":
            data[at:at] = blob
        elif op == "delete":
            del data[at:at + len(blob)]
        else:
            data[at:at + len(blob)] = blob
    return bytes(data)


def _snapshot(root: Path) -> dict[str, bytes | None]:
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(d) / n
            out[str(p.relative_to(root))] = p.read_bytes() if p.is_file() and not p.is_symlink() else None
    return out


def _check(data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="dsv4-fuzz-") as td:
        root = Path(td)
        (root / "patches").mkdir()
        (root / "patches/stacks.toml").write_bytes(data)
        before = _snapshot(root)
        try:
            project = load_project(root)
        except ConfigError as e:
            msg = e.one_line()
            assert msg and "\n" not in msg and "\r" not in msg, msg
            assert all(c.isprintable() for c in msg), repr(msg)
        else:
            patches = (root / "patches").resolve()
            for cfg in project.targets():
                assert STACK_NAME.fullmatch(cfg.name)
                assert patches in cfg.patch_dir.resolve().parents
        assert _snapshot(root) == before  # nothing written, nothing removed


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_generated_documents_load_or_fail_in_one_line(data):
    _check(data)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_good_file_loads_or_fails_in_one_line(data):
    _check(data)


def test_the_unmutated_file_loads():
    with tempfile.TemporaryDirectory() as td:
        (Path(td) / "patches").mkdir()
        (Path(td) / "patches/stacks.toml").write_bytes(GOOD)
        assert [c.label for c in load_project(Path(td)).targets()] == ["demo", "demo@v2"]
