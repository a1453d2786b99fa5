"""Release archives (tar.gz sdists, zip wheels) read as a list of members, and the rules that list must
pass before anything is imported.

The rules follow the spirit of Python's tarfile `data` filter, applied to the whole member list rather
than to a directory on disk (the import never writes the archive to disk):
- names: no absolute paths, no `..`, no drive letters, nothing in a `.git` folder (any case);
- kinds: regular files, folders and symlinks only (no hard links, devices, fifos); no owners, and of
  the mode only the executable bit (all git keeps);
- every path appears once, and is not both a folder and a file;
- no member lies under a symlink or a file of the tree: nothing is ever written through a link, so a
  chain like `sub/l -> ..`, `sub/l/s1 -> ..` cannot lead a member out of the tree;
- every symlink, resolved through the other symlinks of the tree (as the kernel would after a
  checkout), stays inside the tree and out of `.git` (any case); loops are refused.
Every unreadable archive (corrupt gzip, not a tar, truncated zip, bad CRC, a damaged tar header
after the first member, which tarfile alone takes for the archive's end) is one line of error.
"""

from __future__ import annotations

import fnmatch
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterator

from ..errors import SourceError

CHUNK = 1 << 20
MAX_LINK_HOPS = 40  # the kernel's limit on symlinks followed while resolving one path
# What the archive libraries raise on damaged input (gzip.BadGzipFile is an OSError).
UNREADABLE = (tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, zlib.error,
              ValueError, NotImplementedError, RuntimeError)


@dataclass(frozen=True)
class Member:
    name: str  # as the archive spells it (for messages)
    path: str  # where it lands in the tree: a relative posix path after strip/exclude/reroot
    kind: str  # "file", "link" or "dir"
    executable: bool = False
    target: str = ""  # symlink target
    size: int = 0


def refuse(archive: str, what: str) -> SourceError:
    return SourceError(f"{archive}: {what}", hint="refusing this archive")


def is_dot_git(part: str) -> bool:
    # `.GIT`, `.git.` and `.git ` are the same folder on case-insensitive or Windows file systems.
    return part.lower().rstrip(". ") == ".git"


def target_path(name: str, strip: str | None, reroot: dict, exclude: list[str], archive: str,
                include: list[str] = ()) -> str | None:
    """Where an archive member lands (relative posix path), or None to skip it; refuses escapes."""
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or (p.parts and p.parts[0].endswith(":")):
        raise refuse(archive, f"member {name!r} escapes the target directory")
    parts = [x for x in p.parts if x not in ("", ".")]
    if strip:
        if not parts or parts[0] != strip:
            return None
        parts = parts[1:]
    if not parts:
        return None
    rel = "/".join(parts)
    if include and not any(fnmatch.fnmatch(rel, pat) for pat in include):
        return None
    if any(fnmatch.fnmatch(rel, pat) for pat in exclude):
        return None
    if any(is_dot_git(x) for x in parts):
        raise refuse(archive, f"member {name!r} writes into .git")
    for old, new in reroot.items():
        if rel.startswith(old):
            return new + rel[len(old):]
    return rel


def unreadable(archive: str, e: BaseException) -> SourceError:
    kind = "zip archive" if archive.endswith((".whl", ".zip")) else "tar archive"
    return SourceError(f"{archive}: not a readable {kind} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'damaged'})",
                       hint="delete it from the cache and download it again, or check the pin")


def read_members(archive: Path, *, strip: str | None, reroot: dict, exclude: list[str],
                 include: list[str] = ()) -> Iterator[tuple[Member, Iterator[bytes]]]:
    """(member, its data in chunks) in archive order; consume a file's chunks before the next member.
    Folders and symlinks come with no chunks. Damaged input is a SourceError naming the archive."""
    name = archive.name
    try:
        if name.endswith((".tar.gz", ".tgz", ".tar")):
            yield from _tar(archive, name, lambda n: target_path(n, strip, reroot, exclude, name, include))
        else:
            yield from _zip(archive, name, lambda n: target_path(n, strip, reroot, exclude, name, include))
    except SourceError:
        raise
    except UNREADABLE as e:
        raise unreadable(name, e) from None


def _chunks(f, archive: str) -> Iterator[bytes]:
    try:
        with f:
            while block := f.read(CHUNK):
                yield block
    except UNREADABLE as e:
        raise unreadable(archive, e) from None


class _StrictTarInfo(tarfile.TarInfo):
    """tarfile takes a damaged header after the first member for the end of the archive and stops
    without a word (the rest of the release silently missing); GNU tar says "Skipping to next
    header" and exits 2. Only zero blocks (or the file's end) end an archive here."""

    @classmethod
    def fromtarfile(cls, tf):
        try:
            return super().fromtarfile(tf)
        except (tarfile.InvalidHeaderError, tarfile.TruncatedHeaderError) as e:
            raise tarfile.SubsequentHeaderError(f"damaged header block at offset {tf.offset} ({e})") from None


def _tar(archive: Path, name: str, place):
    with open(archive, "rb") as raw, tarfile.open(fileobj=raw, mode="r|*", tarinfo=_StrictTarInfo) as tf:
        for m in tf:
            rel = place(m.name)
            if rel is None:
                continue
            if m.isdir():
                yield Member(m.name, rel, "dir"), iter(())
            elif m.issym():
                yield Member(m.name, rel, "link", target=m.linkname), iter(())
            elif m.isfile():
                yield Member(m.name, rel, "file", bool(m.mode & 0o111), size=m.size), _chunks(tf.extractfile(m), name)
            else:
                kind = "hard link" if m.islnk() else "device/fifo/special"
                raise refuse(name, f"member {m.name!r} is a {kind}")


def _zip(archive: Path, name: str, place):
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            rel = place(info.filename)
            if rel is None:
                continue
            mode = info.external_attr >> 16
            if info.is_dir() or stat.S_ISDIR(mode):
                yield Member(info.filename, rel, "dir"), iter(())
            elif stat.S_ISLNK(mode):
                try:
                    target = zf.read(info).decode("utf-8")
                except UnicodeDecodeError:
                    raise refuse(name, f"symlink {info.filename!r} has a target that is not UTF-8") from None
                yield Member(info.filename, rel, "link", target=target), iter(())
            elif stat.S_IFMT(mode) in (0, stat.S_IFREG):  # 0: made where files have no mode (Windows)
                yield Member(info.filename, rel, "file", bool(mode & 0o111), size=info.file_size), _chunks(zf.open(info), name)
            else:
                raise refuse(name, f"member {info.filename!r} is a device/fifo/special file")


class Layout:
    """The tree the members build, checked as they are added (duplicates) and as a whole (check())."""

    def __init__(self, archive: str):
        self.archive = archive
        self.files: dict[str, str] = {}  # path -> member name
        self.links: dict[str, tuple[str, str]] = {}  # path -> (member name, target)
        self.dirs: dict[str, str] = {}

    def add(self, m: Member) -> None:
        if m.kind == "dir":
            if m.path in self.files or m.path in self.links:
                raise refuse(self.archive, f"member {m.name!r} is both a folder and a file")
            self.dirs.setdefault(m.path, m.name)
            return
        prev = self.files.get(m.path) or (self.links[m.path][0] if m.path in self.links else None)
        if prev is not None:
            what = f"member {m.name!r} appears twice" if prev == m.name else f"members {prev!r} and {m.name!r} both land on {m.path}"
            raise refuse(self.archive, what)
        if m.path in self.dirs:
            raise refuse(self.archive, f"member {m.name!r} is both a folder and a file")
        if m.kind == "link":
            if not m.target or "\0" in m.target:
                raise refuse(self.archive, f"symlink {m.path} has an empty target" if not m.target else f"symlink {m.path} has a NUL in its target")
            self.links[m.path] = (m.name, m.target)
        else:
            self.files[m.path] = m.name

    def check(self) -> None:
        """Nothing under a link or a file; every link resolves inside the tree."""
        every = {**self.dirs, **self.files, **{p: n for p, (n, _) in self.links.items()}}
        for path in sorted(every):
            parts = path.split("/")
            for i in range(1, len(parts)):
                anc = "/".join(parts[:i])
                if anc in self.links:
                    raise refuse(self.archive, f"member {every[path]!r} lies under the symlink {anc} "
                                               "(a member is never written through a link)")
                if anc in self.files:
                    raise refuse(self.archive, f"member {every[path]!r} lies under the file {anc}")
        for path in sorted(self.links):
            problem = self._resolve(path)
            if problem:
                raise refuse(self.archive, f"symlink {path} -> {self.links[path][1]} {problem}")

    def _resolve(self, path: str) -> str | None:
        """Resolve `path`'s target through the tree's links; a reason when it leaves the tree or loops."""
        target = self.links[path][1]
        if target.startswith("/"):
            return "points outside the tree"
        todo = list(reversed(path.split("/")[:-1] + target.split("/")))
        cur: list[str] = []
        hops = 0
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if not cur:
                    return "points outside the tree"
                cur.pop()
                continue
            if is_dot_git(part):  # even a link that stays in the tree: git's own folder is no file of it
                return "points into .git"
            cur.append(part)
            hop = self.links.get("/".join(cur))
            if hop is not None:
                hops += 1
                if hops > MAX_LINK_HOPS:
                    return "is a loop (or a chain of more than 40 links)"
                if hop[1].startswith("/"):
                    return "points outside the tree"
                cur.pop()
                todo.extend(reversed(hop[1].split("/")))
        return None
