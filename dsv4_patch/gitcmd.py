"""The git adapter: every git call of the engine goes through `Git`.

Why each setting:
- GIT_CONFIG_NOSYSTEM / GIT_CONFIG_GLOBAL=/dev/null: the user's config never changes our output
  (diff algorithm, prefixes, rename detection, hooks path, autocrlf ...).
- core.hooksPath=/dev/null: upstream trees never run their git hooks.
- core.excludesFile=/dev/null: git reads ~/.config/git/ignore (or $XDG_CONFIG_HOME/git/ignore)
  even without a global config; a user file it matched would count as an ignored build output
  (deleted on rebuild) and a new file it hid would be missed by export.
- fixed committer identity and date: the same base and patch bytes give the same commit hashes.
- LC_ALL=C: messages we parse (conflicts, "patch failed") are not translated.
- the environment is built from scratch (`clean_env`), never merged over os.environ: the caller's
  GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE (set by git itself while a hook runs), GIT_CONFIG_COUNT /
  GIT_CONFIG_PARAMETERS (config injected through the environment) or GIT_TEMPLATE_DIR would
  otherwise change which repository we touch and how. (GitPython's `execute` merges os.environ
  back over the env it is given, so it is not used to run git.)
- core.symlinks/core.ignorecase/core.precomposeUnicode/core.fileMode pinned: an upstream symlink
  stays a link and a mode change stays a mode change whatever a repository's config says.
- the one exception: `user_identity` reads the user's own name and email from their normal config
  (the sign-off `export --upstream` adds for the person who sends the patches); nothing else does.
- pinned diff settings for format-patch (Electron's script/lib/git.py learned each of these from a
  churn bug): no renames flip-flop, no mnemonic/no-prefix, full index lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import Dsv4Error

COMMITTER_NAME = "dsv4-patch"
COMMITTER_EMAIL = "dsv4-patch@users.noreply.github.com"
COMMITTER_DATE = "2000-01-01T00:00:00+0000"

BASE_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.fsmonitor=false",
    "core.attributesfile=/dev/null",
    "core.excludesFile=/dev/null",  # not ~/.config/git/ignore: it would decide what is a build output
    "core.quotePath=true",
    "core.symlinks=true",
    "core.ignorecase=false",
    "core.precomposeUnicode=false",
    "core.fileMode=true",
    "core.sparseCheckout=false",
    "core.splitIndex=false",
    "core.untrackedCache=false",
    "protocol.file.allow=always",
    "submodule.recurse=false",
    "init.templateDir=",
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


class GitFailed(Dsv4Error):
    """A git call that should not fail did: one line (git's first error line), the rest in details."""

    def __init__(self, args, rc, out, err):
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        first = next((ln for ln in lines if ln.startswith(("fatal:", "error:"))), lines[0] if lines else "")
        super().__init__(f"git {' '.join(str(a) for a in args)[:200]} exited {rc}: {first[:300]}",
                         details=err.strip()[:2000] or None)
        self.args_ = args
        self.rc = rc
        self.out = out
        self.err = err


def no_git(e: OSError, argv: list[str]) -> Dsv4Error:
    """git could not be started at all (not on PATH, not executable, the folder gone): one line."""
    if e.filename not in (None, argv[0]):  # the working folder, not git
        return Dsv4Error(f"{e.filename}: {e.strerror or e}", hint="the folder git was to run in is not usable")
    what = "not found on PATH" if isinstance(e, FileNotFoundError) else f"cannot be run ({e.strerror or e})"
    return Dsv4Error(f"git: {what}", hint="install git and put it on PATH")


def _start(argv, **kw) -> subprocess.Popen:
    try:
        return subprocess.Popen(argv, **kw)
    except OSError as e:
        raise no_git(e, argv) from None


def _run(argv, **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, **kw)
    except OSError as e:
        raise no_git(e, argv) from None


@dataclass
class Result:
    rc: int
    out: str
    err: str


# Variables passed through from the caller: where programs and temp files are, nothing that
# tells git what to do (every GIT_* variable is dropped; the ones git needs are set below).
PASS_THROUGH = ("PATH", "HOME", "TMPDIR", "SYSTEMROOT", "SSL_CERT_FILE", "SSL_CERT_DIR",
                "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")


def clean_env(extra: dict | None = None) -> dict:
    env = {k: os.environ[k] for k in PASS_THROUGH if k in os.environ}
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


# The ONE place the user's own git identity is read. Everything else runs under `clean_env`, which
# hides the user's config on purpose (GIT_CONFIG_GLOBAL=/dev/null, no system config, our fixed
# committer). `export --upstream` signs the mbox off as the person who sends it (a DCO sign-off
# certifies a person, never the team), so it asks git for that person exactly as `git commit -s` and
# `git format-patch -s` do: `git var GIT_COMMITTER_IDENT`, reading the user's normal config (the
# repository's own config where `cwd` is in one, then ~/.gitconfig or $XDG_CONFIG_HOME/git/config or
# $GIT_CONFIG_GLOBAL, then the system file unless $GIT_CONFIG_NOSYSTEM) and $GIT_COMMITTER_NAME /
# $GIT_COMMITTER_EMAIL where the caller set them. Nothing else of the caller's GIT_* reaches git.
# user.useConfigOnly=true: git never guesses a name or an address from the passwd entry, the host
# name or $EMAIL; an identity nobody configured is no sign-off.
IDENTITY_PASS_THROUGH = PASS_THROUGH + ("XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
                                        "GIT_CONFIG_NOSYSTEM", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")
_IDENT_LINE = re.compile(r"^(?P<who>[^<>]*<[^<>]*>) \d+ [+-]\d{4}$")


@dataclass
class Identity:
    signer: str | None  # "Name <email>", as git writes it in a Signed-off-by: line
    missing: tuple[str, ...] = ()  # the config keys git found unset ("user.name", "user.email")


def user_identity(cwd: Path) -> Identity:
    """Who the user's git signs off as (see IDENTITY_PASS_THROUGH); `missing` names what is unset."""
    env = {k: os.environ[k] for k in IDENTITY_PASS_THROUGH if k in os.environ}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", LANG="C")
    argv = ["git", "-c", "user.useConfigOnly=true", "var", "GIT_COMMITTER_IDENT"]
    p = _run(argv, cwd=cwd, capture_output=True, env=env, stdin=subprocess.DEVNULL)
    out, err = p.stdout.decode("utf-8", "surrogateescape").strip(), p.stderr.decode("utf-8", "replace")
    if p.returncode == 0 and (m := _IDENT_LINE.match(out)):
        return Identity(m["who"])
    missing = tuple(k for k, says in (("user.name", ("no name was given", "empty ident name")),
                                      ("user.email", ("no email was given", "unable to auto-detect email")))
                    if any(s in err for s in says))
    if missing:
        return Identity(None, missing)
    raise GitFailed(argv[1:], p.returncode, out, err or f"unexpected output {out!r}")


class Git:
    """A git repository (work tree or bare) driven with argument lists, never a shell string."""

    def __init__(self, path: Path, *, extra_config: tuple[str, ...] = ()):
        self.path = Path(path)
        self._config = BASE_CONFIG + extra_config

    def _argv(self, args) -> list[str]:
        argv = ["git"]
        for c in self._config:
            argv += ["-c", c]
        return argv + [str(a) for a in args]

    def run(self, *args, check: bool = True, env: dict | None = None, stdin: bytes | None = None) -> Result:
        # subprocess.run kills the child if we are interrupted (SIGINT): no orphaned git.
        p = _run(self._argv(args), cwd=self.path, input=stdin, capture_output=True,
                           env=clean_env(env), stdin=None if stdin is not None else subprocess.DEVNULL)
        rc, out, err = p.returncode, p.stdout.decode("utf-8", "surrogateescape"), p.stderr.decode("utf-8", "replace")
        if check and rc != 0:
            raise GitFailed(list(args), rc, out, err)
        return Result(rc, out, err)

    def run_all(self, *calls: tuple) -> list[Result]:
        """Several git commands that only read, run at the same time (the no-op's status and
        for-each-ref: one waits for the disk while the other runs). Results in order; the first
        that failed raises GitFailed. Leaving early (an error, an interrupt) kills the rest."""
        procs = []
        try:
            for args in calls:
                procs.append((args, _start(self._argv(args), cwd=self.path, env=clean_env(),
                                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                     stderr=subprocess.PIPE)))
            results = []
            for args, p in procs:
                out, err = p.communicate()
                res = Result(p.returncode, out.decode("utf-8", "surrogateescape"), err.decode("utf-8", "replace"))
                if res.rc != 0:
                    raise GitFailed(list(args), res.rc, res.out, res.err)
                results.append(res)
            return results
        finally:
            for _, p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
                p.stdout.close()
                p.stderr.close()

    def out(self, *args, **kw) -> str:
        return self.run(*args, **kw).out.strip()

    def raw(self, *args, env: dict | None = None) -> bytes:
        """Stdout as bytes (patch text must not be re-encoded)."""
        p = _run(self._argv(args), cwd=self.path, capture_output=True, env=clean_env(env),
                           stdin=subprocess.DEVNULL)
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

    def format_patch_one(self, sha: str) -> bytes:
        """The patch of one commit (a separate call per commit: no stream to split)."""
        args = []
        for c in DIFF_CONFIG:
            args += ["-c", c]
        return self.raw(*args, "format-patch", *FORMAT_PATCH_FLAGS, "-1", sha)


def clone_local(g: Git, source: Path | str, dest: str = ".") -> None:
    """`git clone --no-checkout` (run by `g`, into `dest`) of a repository on this machine: hard
    links where it can, copies where it cannot (another file system, a read-only bind-mounted
    cache). Never an explicit `--local`: with it git dies where link(2) fails ("Invalid
    cross-device link") instead of copying (issue 28 item 6); a path clones locally anyway."""
    g.run("clone", "--quiet", "--no-checkout", str(source), dest)


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
        try:
            self._p = _start(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=self._log,
                             stderr=self._log, bufsize=1 << 20)
        except Dsv4Error:
            self._log.close()
            raise

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
