"""One writer at a time: exclusive flocks for what several processes may make at once.

Entries of the shared tool cache (release imports, venvs), a stack's patch folder (locks.py), a
test run's shared scratch: every checkout and every process that needs one may make it, so a second writer
must wait for the first and then use its result, not rebuild the entry under a reader that is
already cloning or importing from it.

The locks are flocks on a fresh descriptor each time: not re-entrant. A process that takes a lock
it already holds waits for itself forever (locks.py keeps a count per stack to make the stack
lock re-entrant on top of this, and hands the locked descriptor to the children that must share
it: a child that opens the folder afresh would wait for its parent forever)."""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable


def _flock(fd: int) -> int:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def lock_folder_fd(folder: Path, fallback: Callable[[], Path]) -> int:
    """An flock on `folder` itself (no file is written into it); where the file system cannot lock a
    folder opened read-only (NFS emulates flock with POSIX locks, which need a file open for
    writing), on the file `fallback()` names instead. Returns the locked descriptor."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return _flock(fd)
    except OSError:  # EBADF / ENOLCK / EINVAL
        path = Path(fallback())
        path.parent.mkdir(parents=True, exist_ok=True)
        return _flock(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


def unlock_fd(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@contextmanager
def folder_lock(folder: Path, fallback: Callable[[], Path]):
    """Hold `folder`'s lock (see lock_folder_fd) for the duration of the block."""
    fd = lock_folder_fd(folder, fallback)
    try:
        yield
    finally:
        unlock_fd(fd)


@contextmanager
def file_lock(lock_file: Path):
    """Hold `lock_file` (created, with its folder) for the duration of the block."""
    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
