"""The git adapter: every git call of the engine goes through `Git`.

Why each setting:
- GIT_CONFIG_NOSYSTEM / GIT_CONFIG_GLOBAL=/dev/null: the user's config never changes our output
  (diff algorithm, prefixes, rename detection, hooks path, autocrlf ...).
- core.hooksPath=/dev/null: upstream trees never run their git hooks.
- fixed committer identity and date: the same base and patch bytes give the same commit hashes.
- LC_ALL=C: messages we parse (conflicts, "patch failed") are not translated.
- pinned diff settings for format-patch (Electron's script/lib/git.py learned each of these from a
  churn bug): no renames flip-flop, no mnemonic/no-prefix, full index lines.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import git as gitpython

COMMITTER_NAME = "dsv4-patch"
COMMITTER_EMAIL = "dsv4-patch@users.noreply.github.com"
COMMITTER_DATE = "2000-01-01T00:00:00+0000"

BASE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.fsmonitor=false",
    "core.attributesfile=/dev/null",
    "core.quotePath=true",
    "commit.gpgsign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "init.defaultBranch=main",
    "advice.detachedHead=false",
    "am.keepcr=true",
    "rerere.enabled=false",
)

DIFF_CONFIG = (
    "diff.renames=true",
    "diff.algorithm=myers",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.context=3",
    "diff.interHunkContext=0",
    "diff.indentHeuristic=true",
    "diff.suppressBlankEmpty=false",
    "format.signature=",
    "format.numbered=false",
)

FORMAT_PATCH_FLAGS = (
    "--keep-subject",
    "--no-stat",
    "--no-signature",
    "--zero-commit",
    "--full-index",
    "--binary",
    "--stdout",
)


class GitFailed(Exception):
    def __init__(self, args, rc, out, err):
        super().__init__(f"git {' '.join(args)} exited {rc}: {err.strip()[:500]}")
        self.args_ = args
        self.rc = rc
        self.out = out
        self.err = err


@dataclass
class Result:
    rc: int
    out: str
    err: str


def clean_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_COMMITTER_NAME=COMMITTER_NAME,
        GIT_COMMITTER_EMAIL=COMMITTER_EMAIL,
        GIT_COMMITTER_DATE=COMMITTER_DATE,
        LC_ALL="C",
        LANG="C",
    )
    if extra:
        env.update(extra)
    return env


class Git:
    """A git repository (work tree or bare) driven with argument lists, never a shell string."""

    def __init__(self, path: Path, *, extra_config: tuple[str, ...] = ()):
        self.path = Path(path)
        self._git = gitpython.Git(str(self.path))
        self._config = BASE_CONFIG + extra_config

    def _argv(self, args) -> list[str]:
        argv = ["git"]
        for c in self._config:
            argv += ["-c", c]
        return argv + [str(a) for a in args]

    def run(self, *args, check: bool = True, env: dict | None = None, stdin: bytes | None = None) -> Result:
        if stdin is None:
            rc, out, err = self._git.execute(
                self._argv(args),
                with_extended_output=True,
                with_exceptions=False,
                env=clean_env(env),
                strip_newline_in_stdout=False,
            )
        else:
            p = subprocess.run(self._argv(args), cwd=self.path, input=stdin, capture_output=True, env=clean_env(env))
            rc, out, err = p.returncode, p.stdout.decode("utf-8", "surrogateescape"), p.stderr.decode("utf-8", "replace")
        if check and rc != 0:
            raise GitFailed(list(args), rc, out, err)
        return Result(rc, out, err)

    def out(self, *args, **kw) -> str:
        return self.run(*args, **kw).out.strip()

    def raw(self, *args, env: dict | None = None) -> bytes:
        """Stdout as bytes (patch text must not be re-encoded)."""
        p = subprocess.run(self._argv(args), cwd=self.path, capture_output=True, env=clean_env(env))
        if p.returncode != 0:
            raise GitFailed(list(args), p.returncode, "", p.stderr.decode("utf-8", "replace"))
        return p.stdout

    def rev(self, ref: str) -> str | None:
        r = self.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
        return r.out.strip() if r.rc == 0 else None

    def feed(self, *args, env: dict | None = None) -> "Feed":
        """A git command fed through its stdin while it runs (`git fast-import` of a whole release,
        which need not fit in memory). Use as a context manager: leaving it early kills git."""
        return Feed(list(args), self._argv(args), self.path, clean_env(env))

    def format_patch(self, revrange: str) -> bytes:
        args = []
        for c in DIFF_CONFIG:
            args += ["-c", c]
        return self.raw(*args, "format-patch", *FORMAT_PATCH_FLAGS, revrange)


def init_repo(path: Path, *, bare: bool = False) -> Git:
    path.mkdir(parents=True, exist_ok=True)
    g = Git(path)
    g.run("init", "-q", *(["--bare"] if bare else []), ".")
    return g


class Feed:
    """A running git process: write() to its stdin, close() to wait for it (GitFailed on failure)."""

    def __init__(self, args: list, argv: list[str], cwd: Path, env: dict):
        self._args = args
        self._log = tempfile.TemporaryFile()  # its output: a file, so a chatty git never blocks us
        self._p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=self._log,
                                   stderr=self._log, bufsize=1 << 20)

    def write(self, data: bytes) -> None:
        try:
            self._p.stdin.write(data)
        except BrokenPipeError:
            self.close()  # git stopped reading: its exit status and message say why
            raise

    def close(self) -> Result:
        try:
            self._p.stdin.close()
        except BrokenPipeError:
            pass
        rc = self._p.wait()
        self._log.seek(0)
        err = self._log.read().decode("utf-8", "replace")
        if rc != 0:
            raise GitFailed(self._args, rc, "", err)
        return Result(rc, "", err)

    def __enter__(self) -> "Feed":
        return self

    def __exit__(self, kind, value, tb) -> None:
        if self._p.poll() is None:
            self._p.kill()  # an error or an interrupt before close(): nothing half-written survives us
            self._p.wait()
        try:
            self._p.stdin.close()
        except OSError:  # the unflushed rest of what we wrote has no reader any more
            pass
        self._log.close()
