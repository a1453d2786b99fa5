"""The per-stack lock: export, apply, bump and pin of one stack run one at a time.

An flock on the stack's patch folder itself (no lock file is written into the checkout). Where a
file system cannot lock a folder opened read-only (NFS emulates flock with POSIX locks, which need
a file open for writing), a lock file in the tool's cache stands in, named by the folder's path.
It is re-entrant within a process (pin builds a tree, which takes the lock again) and excludes
other threads as well as other processes.

A child the holder starts (bump's intent tests and regression tests: pytest, whose tests may build
a tree of the same stack) inherits the lock itself, not a promise: the holder passes the locked
descriptor to the child (`child_spawn()`: the descriptors for `pass_fds`, and DSV4_STACK_LOCKS
naming them with the folder's device and inode and the holder's pid). An flock belongs to the open
file description, which the child then shares, so the child's own `stack_lock` of that stack
re-locks the same description (an immediate success) instead of waiting for its parent, which waits
for it: the deadlock of a bump whose child pytest built a tree of the bumped stack. Nothing else
gets in: the variable counts only in a descendant of the holder that has the very descriptor
(open, the same folder, and a non-blocking flock on it succeeds because its description holds the
lock); any other process (the variable copied into it, a child not handed the descriptor) waits as
before. The child never unlocks the inherited description (that would release its parent's lock);
it lets go of it when it exits. Where flock is emulated per process (NFS), the inherited
description does not count as held there: the child waits, as before this existed.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path

from .flock import lock_folder_fd, unlock_fd

INHERIT_ENV = "DSV4_STACK_LOCKS"  # {"pid": holder, "locks": {key: [fd, st_dev, st_ino]}}: passed by an ancestor

_held: dict[str, list] = {}  # path -> [RLock, fd, depth]
_inherited: dict[str, int] = {}  # path -> a descriptor our parent passed us, holding that lock (never unlocked)
_registry = threading.Lock()


def _lock_path(patch_dir: Path) -> str:
    p = Path(patch_dir).resolve()
    while not p.is_dir():  # a stack whose folder does not exist yet: its nearest parent
        p = p.parent
    return str(p)


def _fallback_file(key: str) -> Path:
    from .sources import Cache

    return Cache.default().root / "locks" / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".lock")


def _passed_fd(key: str) -> int | None:
    """The descriptor a parent holding `key`'s lock handed us, if this process really has it:
    open, the same file the parent locked, and its description locked by the parent (a
    non-blocking flock on it succeeds at once). None: take the lock the ordinary way."""
    if key in _inherited:
        return _inherited[key]
    try:
        given = json.loads(os.environ.get(INHERIT_ENV) or "{}")
        fd, dev, ino = given.get("locks", {}).get(key) or (None, 0, 0)
        holder = int(given.get("pid", 0))
    except (ValueError, TypeError, AttributeError):
        return None
    if not isinstance(fd, int) or not _is_ancestor(holder):
        return None
    try:
        st = os.fstat(fd)
    except OSError:  # not open here: the variable reached us without the descriptor
        return None
    if (st.st_dev, st.st_ino) != (dev, ino):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EBADF, errno.ENOLCK, errno.EINVAL):
            return None  # not the locked description (or flock emulated per process): wait as usual
        raise
    _inherited[key] = fd
    return fd


def _is_ancestor(pid: int) -> bool:
    """Whether `pid` is this process or one of its ancestors (the chain of parents in /proc; where
    there is no /proc, only the direct parent)."""
    me = os.getpid()
    if pid <= 0:
        return False
    if pid in (me, os.getppid()):
        return True
    cur = os.getppid()
    for _ in range(64):
        try:
            stat = Path(f"/proc/{cur}/stat").read_text()
        except OSError:
            return False
        cur = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: the parent's pid
        if cur == pid:
            return True
        if cur <= 1:
            return False
    return False


def _acquire(key: str) -> tuple[int, bool]:
    """(descriptor, inherited)"""
    fd = _passed_fd(key)
    if fd is not None:
        return fd, True
    return lock_folder_fd(Path(key), lambda: _fallback_file(key)), False


@contextmanager
def stack_lock(stack):
    """Hold the lock of `stack` (a StackConfig) for the duration of the block."""
    key = _lock_path(stack.patch_dir)
    with _registry:
        entry = _held.setdefault(key, [threading.RLock(), None, 0, False])
    rlock = entry[0]
    with rlock:
        if entry[2] == 0:
            entry[1], entry[3] = _acquire(key)
        entry[2] += 1
        try:
            yield
        finally:
            entry[2] -= 1
            if entry[2] == 0:
                fd, entry[1] = entry[1], None
                if not entry[3]:  # an inherited description stays locked: it is our parent's lock
                    unlock_fd(fd)


def child_spawn() -> tuple[dict[str, str], tuple[int, ...]]:
    """What a child started now needs to share the stack locks this process holds: the environment
    entry (INHERIT_ENV) and the descriptors for subprocess's `pass_fds`. Empty when none is held."""
    locks: dict[str, list[int]] = {}
    with _registry:
        held = [(k, e[1]) for k, e in _held.items() if e[2] > 0 and e[1] is not None]
    for key, fd in held + list(_inherited.items()):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        locks[key] = [fd, st.st_dev, st.st_ino]
    # always set: a variable this process inherited must not reach a child it passes no descriptor
    return ({INHERIT_ENV: json.dumps({"pid": os.getpid(), "locks": locks}) if locks else ""},
            tuple(sorted({v[0] for v in locks.values()})))
