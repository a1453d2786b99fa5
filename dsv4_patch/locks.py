"""The per-stack lock: export, apply, bump and pin of one stack run one at a time.

An flock on the stack's patch folder itself (no lock file is written into the checkout). Where a
file system cannot lock a folder opened read-only (NFS emulates flock with POSIX locks, which need
a file open for writing), a lock file in the tool's cache stands in, named by the folder's path.
It is re-entrant within a process (pin builds a tree, which takes the lock again) and excludes
other threads as well as other processes.
"""

from __future__ import annotations

import hashlib
import threading
from contextlib import contextmanager
from pathlib import Path

from .flock import lock_folder_fd, unlock_fd

_held: dict[str, list] = {}  # path -> [RLock, fd, depth]
_registry = threading.Lock()


def _lock_path(patch_dir: Path) -> str:
    p = Path(patch_dir).resolve()
    while not p.is_dir():  # a stack whose folder does not exist yet: its nearest parent
        p = p.parent
    return str(p)


def _fallback_file(key: str) -> Path:
    from .sources import Cache

    return Cache.default().root / "locks" / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".lock")


def _acquire(key: str) -> int:
    return lock_folder_fd(Path(key), lambda: _fallback_file(key))


@contextmanager
def stack_lock(stack):
    """Hold the lock of `stack` (a StackConfig) for the duration of the block."""
    key = _lock_path(stack.patch_dir)
    with _registry:
        entry = _held.setdefault(key, [threading.RLock(), None, 0])
    rlock = entry[0]
    with rlock:
        if entry[2] == 0:
            entry[1] = _acquire(key)
        entry[2] += 1
        try:
            yield
        finally:
            entry[2] -= 1
            if entry[2] == 0:
                fd, entry[1] = entry[1], None
                unlock_fd(fd)
