"""The output directory: locking, staging, atomic swap and recovery.

Layout under OUT:
    OUT/<tree>/                 finished trees (e.g. vllm, vllm.base)
    OUT/.dsv4/lock              flock: concurrent runs on one OUT are serialized
    OUT/.dsv4/staging/<tree>-*  trees being built (removed at the next run if a process died)
    OUT/.dsv4/failed/<tree>     the last failed build, kept for inspection
    OUT/.dsv4/swap-<tree>.json  journal of an in-flight swap (completed at the next run)
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


class OutDir:
    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.meta = self.root / ".dsv4"

    @contextmanager
    def locked(self):
        self.meta.mkdir(parents=True, exist_ok=True)
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
        d = self.meta / "staging"
        d.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=d))

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
        journal.write_text(json.dumps({"target": str(target), "new": str(staging), "old": str(old)}))
        if target.exists():
            os.replace(target, old)
        os.replace(staging, target)
        journal.unlink()
        if old.exists():
            shutil.rmtree(old, ignore_errors=True)

    def recover(self) -> None:
        """Finish what a killed run left: complete or roll back swaps, drop stale staging."""
        for journal in self.meta.glob("swap-*.json"):
            j = json.loads(journal.read_text())
            target, new, old = Path(j["target"]), Path(j["new"]), Path(j["old"])
            if not target.exists():
                # Killed between the renames: the new tree is complete (it was staged fully).
                os.replace(new if new.exists() else old, target)
            if old.exists():
                shutil.rmtree(old, ignore_errors=True)
            journal.unlink()
        staging = self.meta / "staging"
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        for old in self.meta.glob("old-*"):
            shutil.rmtree(old, ignore_errors=True)
