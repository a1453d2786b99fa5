"""The memo of stacks.toml texts that passed the schema, so that pydantic (~100 ms of imports) is
only imported when the file changed.

The memo holds no data: the project is always built from the file itself, and the memo only
lets the schema check be skipped for a text that passed it before. An entry is a file in the
tool's cache (`config-memo/<sha256 of fingerprint and text>.json`) holding an HMAC of the
schema fingerprint and the exact text, under a key only this user can read (`config-memo/key`,
mode 0600, owned by us). So an entry counts only for the very text it was made for, by this
user's tool, under this schema:

- a changed text, schema (config_schema.py), tool version or pydantic gives another name and
  another MAC, so an old entry is never found;
- an entry that is not the exact bytes remember() writes for the right MAC (it is compared, never
  parsed: any bytes, nested JSON included, are a miss), is not a regular file or is too long is
  ignored (and replaced after the text is validated again), as is everything when the key file
  is not ours or readable by others (a shared or copied cache);
- config.parse_project validates again when building the project from a remembered text fails
  in any way, so an error is always the schema's own.

Writing is best effort: a cache that cannot be written only means validating every time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import sys
from pathlib import Path

from . import __version__
from .cachedir import cache_root

MEMO_DIR = "config-memo"
FORMAT = 1
KEEP = 256  # entries kept; beyond that the oldest half goes
MAX_ENTRY = 4096  # bytes: an entry is ~100; anything longer is not ours
KEY_BYTES = 32


def _fingerprint() -> bytes:
    """What the verdict depends on besides the text: the schema's source, the tool and pydantic."""
    h = hashlib.sha256(f"{FORMAT}\0{__version__}\0".encode())
    h.update(Path(__file__).with_name("config_schema.py").read_bytes())
    h.update(_pydantic_version())
    return h.digest()


def _pydantic_version() -> bytes:
    """pydantic's version.py, found on sys.path without importing pydantic."""
    for entry in sys.path:
        try:
            return (Path(entry or ".") / "pydantic" / "version.py").read_bytes()
        except OSError:
            continue
    return b"no pydantic"


def _folder() -> Path:
    return cache_root() / MEMO_DIR


def _read_small(path: Path, limit: int) -> bytes | None:
    """The bytes of a regular file (no symlink) of at most `limit` bytes, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _key(folder: Path, create: bool) -> bytes | None:
    """This user's memo key: None when there is none (and `create` is False) or it is not
    trustworthy (not a regular file we own, readable or writable by others, wrong length)."""
    f = folder / "key"
    try:
        st = os.lstat(f)
    except FileNotFoundError:
        return _new_key(folder) if create else None
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    data = _read_small(f, KEY_BYTES)
    return data if data is not None and len(data) == KEY_BYTES else None


def _new_key(folder: Path) -> bytes | None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".key.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, os.urandom(KEY_BYTES))
    finally:
        os.close(fd)
    try:
        os.link(tmp, folder / "key")  # never a half-written key; a concurrent run's key wins
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return _key(folder, create=False)


def _entry(text: str) -> tuple[bytes, str]:
    blob = _fingerprint() + b"\0" + text.encode("utf-8", "surrogateescape")
    return blob, hashlib.sha256(blob).hexdigest()


def validated(text: str) -> bool:
    """True when this very text passed this very schema before (an entry with the right MAC)."""
    try:
        folder = _folder()
        key = _key(folder, create=False)
        if key is None:
            return False
        blob, name = _entry(text)
        raw = _read_small(folder / f"{name}.json", MAX_ENTRY)
        if raw is None:
            return False
        # compared as bytes with the entry remember() writes, never parsed: JSON nested a few
        # thousand deep (RecursionError) or a non-ASCII MAC (compare_digest's TypeError) is a miss
        return hmac.compare_digest(raw, _serialized(hmac.new(key, blob, "sha256").hexdigest()))
    except (OSError, ValueError, UnicodeError):
        return False


def _serialized(mac: str) -> bytes:
    """An entry's exact bytes (format 1: what json.dumps writes, as remember() always did)."""
    return json.dumps({"format": FORMAT, "mac": mac}).encode("ascii")


def remember(text: str) -> None:
    """Record that `text` passed the schema (best effort)."""
    try:
        folder = _folder()
        key = _key(folder, create=True)
        if key is None:
            return
        blob, name = _entry(text)
        f = folder / f"{name}.json"
        tmp = folder / f".{name}.tmp-{os.getpid()}"
        try:
            tmp.write_bytes(_serialized(hmac.new(key, blob, "sha256").hexdigest()))
            os.replace(tmp, f)  # readers see a whole entry or none
        finally:
            tmp.unlink(missing_ok=True)
        _prune(folder)
    except (OSError, UnicodeError):
        pass


def _prune(folder: Path) -> None:
    entries = list(folder.glob("*.json"))
    if len(entries) <= KEEP:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for old in entries[: len(entries) - KEEP // 2]:
        old.unlink(missing_ok=True)
