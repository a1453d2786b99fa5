"""Helpers for bump tests: a synthetic history that gives every bump verdict once."""

from __future__ import annotations

from pathlib import Path

from synth import Env, numbered


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


class BumpEnv(Env):
    """Base: a.py (60 lines), b.txt (30), c.txt, d.txt. Patches (in order):
    p1 a.py:10 (untouched upstream -> clean), p2 b.txt:20 (lines inserted above -> offset),
    p3 a.py:40 (upstream edits line 37 -> 3way), p4 a.py:50 (upstream edits the same line -> conflict),
    p5 d.txt:5 (upstream makes the same change -> upstreamed), p6 c.txt (deleted upstream -> obsolete)."""

    def __init__(self, tmp: Path):
        super().__init__(tmp)
        self.up.write("src/c.txt", numbered(20, "c"))
        self.up.write("src/d.txt", numbered(20, "d"))
        self.base = self.up.commit("base with c, d")
        self.repin_to(self.base)

    def repin_to(self, commit: str) -> None:
        toml = self.root / "patches" / "stacks.toml"
        import re

        toml.write_text(re.sub(r'commit = "[0-9a-f]+"', f'commit = "{commit}"', toml.read_text(), count=1))
        self.base = commit

    def author_all(self, which=("p1", "p2", "p3", "p4", "p5", "p6")) -> None:
        a, b, c, d = numbered(60), numbered(30, "b"), numbered(20, "c"), numbered(20, "d")
        if "p1" in which:
            a = edit(a, "line 10\n", "line 10 p1\n")
            self.author({"src/a.py": a}, "[DSV4] p1 clean")
        if "p2" in which:
            b = edit(b, "b 20\n", "b 20 p2\n")
            self.author({"src/b.txt": b}, "[DSV4] p2 offset")
        if "p3" in which:
            a = edit(a, "line 40\n", "line 40 p3\n")
            self.author({"src/a.py": a}, "[DSV4] p3 threeway")
        if "p4" in which:
            a = edit(a, "line 50\n", "line 50 p4\n")
            self.author({"src/a.py": a}, "[DSV4] p4 conflict")
        if "p5" in which:
            d = edit(d, "d 5\n", "d 5 p5\n")
            self.author({"src/d.txt": d}, "[DSV4] p5 upstreamed")
        if "p6" in which:
            c = edit(c, "c 7\n", "c 7 p6\n")
            self.author({"src/c.txt": c}, "[DSV4] p6 obsolete")

    def upstream_next(self, *, conflict=True, upstreamed=True, obsolete=True) -> str:
        """The next upstream commit, touching what each verdict needs."""
        a = numbered(60)
        a = edit(a, "line 37\n", "line 37 upstream\n")
        if conflict:
            a = edit(a, "line 50\n", "line 50 upstream\n")
        self.up.write("src/a.py", a)
        self.up.write("src/b.txt", numbered(5, "new") + numbered(30, "b"))
        if upstreamed:
            self.up.write("src/d.txt", edit(numbered(20, "d"), "d 5\n", "d 5 p5\n"))
        if obsolete:
            (self.up.path / "src/c.txt").unlink()
        return self.up.commit("upstream moves on")
