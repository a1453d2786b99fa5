"""The output directory: where it is (out_dir: --out, else build/), locking, staging, atomic swap and
recovery.

Layout under OUT:
    OUT/<tree>/                 finished trees (e.g. vllm, vllm.base)
    OUT/.dsv4/lock              flock: concurrent runs on one OUT are serialized
    OUT/.dsv4/staging/<tree>-*  trees being built (removed at the next run if a process died)
    OUT/.dsv4/failed/<tree>     the last failed build, kept for inspection
    OUT/.dsv4/swap-<tree>.json  journal of an in-flight swap (completed at the next run)

The journal is written atomically (atomicio) before the first rename and removed after the
second; a damaged journal (left by an older version, or a disk fault) is removed with a one-line
note and the tree is restored from whatever complete copy is left.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from .atomicio import fsync_dir, write_atomic
from .errors import Dsv4Error

if TYPE_CHECKING:
    from .config import Project

DEFAULT_OUT = "build"  # OUT when --out is not given, under the project root
BASE_SUFFIX = ".base"  # OUT/<label>.base: the pristine tree beside OUT/<label>, the patched one

_OUT_OK: set[tuple[Path, Path]] = set()  # --out folders already checked (git ls-files is not free)


def out_dir(project: Project, out: Path | None) -> Path:
    """OUT: the given --out, refused where trees would replace what the checkout keeps
    (refuse_tracked_out: patches/, tracked paths, the root), or build/ of the project."""
    if not out:
        return project.root / DEFAULT_OUT
    if (project.root, Path(out)) not in _OUT_OK:
        refuse_tracked_out(project.root, Path(out))
        _OUT_OK.add((project.root, Path(out)))
    return Path(out)


def refuse_tracked_out(root: Path, out: Path) -> None:
    """A given --out must never be, contain or sit inside what the checkout keeps: the checkout
    root (or a folder above it), patches/, .git/, a tracked file, or a folder holding tracked files
    (docs/, tests/, ... and any folder below one). Trees are replaced wholesale there (--force
    or not), so the patch files or the checkout itself would go. UsageError (exit 2), one line.
    A folder of the checkout that holds no tracked file (build/, the default; trees/) is fine."""
    from .errors import UsageError
    from .gitcmd import Git

    root, out = Path(root).resolve(), Path(out).resolve()
    hint = "choose a folder outside the checkout's tracked files, e.g. build/ (the default) or /tmp/trees"

    def refuse(why: str) -> None:
        raise UsageError(f"--out {out}: {why}; --force does not change that", hint=hint)

    if out == root:
        refuse("is the checkout root")
    if root.is_relative_to(out):
        refuse(f"contains the checkout {root}")
    if not out.is_relative_to(root):
        return
    rel = out.relative_to(root).parts
    for kept in ("patches", ".git"):
        if rel[0] == kept:
            refuse(f"is {kept}/ of the checkout" if len(rel) == 1 else f"is inside {kept}/ of the checkout")
    r = Git(root).run("ls-files", "-z", "--full-name", "--", ".", check=False)
    if r.rc != 0:
        return  # not a git checkout: patches/ and the root are what it keeps
    top = Git(root).run("rev-parse", "--show-prefix", check=False).out.strip().strip("/")
    prefix = tuple(Path(top).parts) if top else ()
    target = prefix + rel
    for name in filter(None, r.out.split("\0")):
        parts = tuple(name.split("/"))
        if parts == target:
            refuse(f"is a tracked file of the checkout ({'/'.join(rel)})")
        if parts[:len(target)] == target:
            refuse(f"holds tracked files of the checkout ({'/'.join(parts[len(prefix):])})")
        # inside a tracked folder: a folder above `out` (below the root) holds a tracked file
        for k in range(len(prefix) + 1, len(target)):
            if parts[:k] == target[:k] and len(parts) > k:
                refuse(f"is inside {'/'.join(target[len(prefix):k])}/, a tracked folder of the checkout")


def current_umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc/self/status); else
    by setting and restoring it (os.umask has no read-only form)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class OutDir:
    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.meta = self.root / ".dsv4"
        self.notes: list[str] = []  # one line per thing recover() repaired
        self.swapped_in: dict[Path, Path] = {}  # target -> the folder recover() found (or put) there by a journaled swap

    def _ensure(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise Dsv4Error(f"{self.root}: --out names a file, not a folder", hint="choose a folder for the trees")
        try:
            self.meta.mkdir(parents=True, exist_ok=True)
            probe = self.meta / f".probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise Dsv4Error(f"{self.root}: cannot write the output folder ({e.strerror or e})",
                            hint="choose a writable --out") from None

    @contextmanager
    def locked(self):
        self._ensure()
        with open(self.meta / "lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                self.recover()
                yield self
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def tree(self, name: str) -> Path:
        return self.root / name

    def new_staging(self, name: str) -> Path:
        """A fresh folder for a tree; it becomes OUT/<name> (or the kept failed tree), so it gets the
        mode the umask gives a new folder, as `git clone` makes it (mkdtemp's is always 0700)."""
        d = self.meta / "staging"
        d.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=d))
        os.chmod(staging, 0o777 & ~current_umask())
        return staging

    def keep_failed(self, name: str, staging: Path) -> Path:
        dest = self.meta / "failed" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staging, dest)
        return dest

    def swap_in(self, name: str, staging: Path) -> None:
        """Replace OUT/<name> by `staging`. A journal makes the two renames recoverable."""
        target = self.tree(name)
        old = self.meta / f"old-{name}-{os.getpid()}"
        journal = self.meta / f"swap-{name}.json"
        write_atomic(journal, json.dumps({"target": str(target), "new": str(staging), "old": str(old)}))
        if target.exists():
            os.replace(target, old)
        os.replace(staging, target)
        fsync_dir(self.root)
        journal.unlink()
        if old.exists():
            shutil.rmtree(old, ignore_errors=True)

    def swapping(self, name: str, new: Path) -> bool:
        """Whether a swap journal (a run killed while it swapped) names `new` as the tree it puts
        in OUT/<name>; the next locked() completes it."""
        try:
            return json.loads((self.meta / f"swap-{name}.json").read_text()).get("new") == str(new)
        except (OSError, ValueError, AttributeError):
            return False

    def recover(self) -> None:
        """Finish what a killed run left: complete or roll back swaps, drop stale staging."""
        for journal in sorted(self.meta.glob("swap-*.json")):
            try:
                j = json.loads(journal.read_text())
                target, new, old = Path(j["target"]), Path(j["new"]), Path(j["old"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                self._damaged_journal(journal, e)
                continue
            if not target.exists():
                # Killed between the renames: the new tree is complete (it was staged fully).
                src = new if new.exists() else old
                if src.exists():
                    os.replace(src, target)
            if target.exists() and not new.exists():  # the new tree is in place (a --continue asks)
                self.swapped_in[target] = new
            if old.exists():
                shutil.rmtree(old, ignore_errors=True)
            journal.unlink()
        for tmp in self.meta.glob(".swap-*.json.tmp-*"):
            tmp.unlink(missing_ok=True)  # a journal whose write was cut short: no rename had started
        staging = self.meta / "staging"
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        for old in self.meta.glob("old-*"):
            shutil.rmtree(old, ignore_errors=True)

    def _damaged_journal(self, journal: Path, why: Exception) -> None:
        """Without the journal, put back the previous tree if the swap had moved it aside."""
        name = journal.name[len("swap-"):-len(".json")]
        target = self.tree(name)
        done = "left as it is"
        if not target.exists():
            olds = sorted(self.meta.glob(f"old-{name}-*"), key=lambda p: p.stat().st_mtime)
            if olds:
                os.replace(olds[-1], target)
                done = "restored from the previous tree"
        journal.unlink()
        self.notes.append(f"{journal}: damaged swap journal removed ({type(why).__name__}); {target} {done}")
