"""Fixtures for engine tests: a synthetic upstream, a project pinned to it, a private cache."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from synth import META, Upstream, author_commit, make_project, numbered  # noqa: E402

from dsv4_patch.config import load_project  # noqa: E402
from dsv4_patch.exporter import export_stack  # noqa: E402
from dsv4_patch.sources import Cache  # noqa: E402
from dsv4_patch.tree import build_tree  # noqa: E402


class Env:
    """One synthetic upstream + one project + helpers to author patches through the real tool."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.up = Upstream(tmp / "upstream")
        self.up.write("src/a.py", numbered(60))
        self.up.write("src/b.txt", numbered(30, "b"))
        self.base = self.up.commit("base")
        self.root = make_project(tmp / "proj", self.up.path, self.base)
        self.cache = Cache(tmp / "cache")
        self.out = self.root / "build"

    @property
    def stack(self):
        return load_project(self.root).stack("demo")

    def repin(self, commit: str) -> None:
        toml = self.root / "patches" / "stacks.toml"
        toml.write_text(toml.read_text().replace(f'commit = "{self.base}"', f'commit = "{commit}"'))
        self.base = commit

    def apply(self, **kw):
        return build_tree(self.stack, self.out, cache=self.cache, **kw)

    def author(self, files: dict, subject: str, body: str = "Why and how.\n\n" + META, **kw) -> None:
        """Add one patch: commit in the patched tree, then export (the maintainer workflow)."""
        tree = self.apply(force=True).tree
        author_commit(tree, files, subject, body, **kw)
        export_stack(self.stack, tree)

    def export(self, check=False):
        return export_stack(self.stack, self.out / "demo", check=check)

    def patch_bytes(self) -> dict[str, bytes]:
        d = self.root / "patches" / "demo"
        return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


@pytest.fixture
def env(tmp_path) -> Env:
    return Env(tmp_path)


__all__ = ["Env", "numbered", "META"]
