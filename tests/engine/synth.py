"""Synthetic upstreams and projects for engine tests (no real upstream code involved)."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

from dsv4_patch.config import load_project
from dsv4_patch.exporter import export_stack
from dsv4_patch.sources import Cache
from dsv4_patch.tree import build_tree

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Up Stream", "GIT_AUTHOR_EMAIL": "up@example.com",
    "GIT_COMMITTER_NAME": "Up Stream", "GIT_COMMITTER_EMAIL": "up@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
}


def git(cwd: Path, *args: str, env: dict | None = None, input: bytes | None = None) -> str:
    e = {**os.environ, **GIT_ENV, **(env or {})}
    p = subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, env=e, input=input,
                       capture_output=True)
    if p.returncode != 0:
        raise RuntimeError(f"git {args}: {p.stderr.decode()}")
    return p.stdout.decode("utf-8", "surrogateescape")


class Upstream:
    """A throwaway upstream git repository."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        git(path, "init", "-q")

    def write(self, rel: str, content: str | bytes, mode: int | None = None) -> None:
        p = self.path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode() if isinstance(content, str) else content)
        if mode is not None:
            os.chmod(p, mode)

    def commit(self, msg: str = "upstream change") -> str:
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--allow-empty", "-m", msg)
        return git(self.path, "rev-parse", "HEAD").strip()


def numbered(n: int, tag: str = "line") -> str:
    return "".join(f"{tag} {i}\n" for i in range(1, n + 1))


def make_project(root: Path, upstream: Path, commit: str, stack: str = "demo", extra: str = "") -> Path:
    (root / "patches" / stack).mkdir(parents=True, exist_ok=True)
    (root / "patches" / "stacks.toml").write_text(textwrap.dedent(f"""
        [stacks.{stack}]
        upstream = "https://example.invalid/{stack}"
        commit = "{commit}"
        patches = "{stack}"

        [[stacks.{stack}.sources]]
        kind = "path"
        path = "{upstream}"
        """) + extra)
    (root / "patches" / stack / "series").write_text("# demo series\n")
    return root


def author_commit(tree: Path, files: dict[str, str | bytes | None], subject: str, body: str = "",
                  date: str = "2026-02-01T00:00:00+0000") -> str:
    """Edit a work tree and commit as a patch author would (None deletes a file)."""
    for rel, content in files.items():
        p = tree / rel
        if content is None:
            p.unlink()
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode() if isinstance(content, str) else content)
    git(tree, "add", "-A")
    msg = subject + ("\n\n" + body if body else "")
    git(tree, "commit", "-q", "-m", msg, env={"GIT_AUTHOR_NAME": "Pat Cher", "GIT_AUTHOR_EMAIL": "pat@example.com",
                                             "GIT_AUTHOR_DATE": date})
    return git(tree, "rev-parse", "HEAD").strip()


META = "Upstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n"


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

    def rebuild(self, **kw):
        """A tree built from the patch files alone (an existing tree, even an adopted one, goes)."""
        import shutil

        shutil.rmtree(self.out / "demo", ignore_errors=True)
        return self.apply(**kw)

    def author(self, files: dict, subject: str, body: str = "Why and how.\n\n" + META, **kw) -> None:
        """Add one patch: commit in the patched tree, then export (the maintainer workflow)."""
        tree = self.apply(force=True).tree
        author_commit(tree, files, subject, body, **kw)
        export_stack(self.stack, tree)

    def export(self, check=False, remove=()):
        return export_stack(self.stack, self.out / "demo", check=check, remove=remove)

    def patch_bytes(self) -> dict[str, bytes]:
        d = self.root / "patches" / "demo"
        return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def refuse_folder_flocks(monkeypatch) -> None:
    """What NFS does: an exclusive flock on a folder opened read-only fails (EBADF); on files it works."""
    import fcntl

    real = fcntl.flock

    def no_dir_locks(fd, op):
        fd = fd if isinstance(fd, int) else fd.fileno()
        if os.path.isdir(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(9, "Bad file descriptor")
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", no_dir_locks)
