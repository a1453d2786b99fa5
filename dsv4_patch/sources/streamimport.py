"""An archive's members streamed into a bare repository by one `git fast-import`: no extraction to
disk, no `git add` of a work tree.

The tree is the one `git add -A` of a safe extraction gives (the same blob and tree ids: regular files
100644, or 100755 when any executable bit is set; symlinks 120000 holding the target; folders only
through their files). The member list passes the rules of `members.Layout` as it streams (duplicates)
and as a whole before the commit is written (links, file/folder clashes): a refused archive leaves no
commit, and the caller throws the staging repository away.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Iterator

from ..gitcmd import COMMITTER_DATE, COMMITTER_EMAIL, COMMITTER_NAME, Feed, Git
from .members import Layout, Member, unreadable


def raw_date(iso: str) -> bytes:
    """`2000-01-01T00:00:00+0000` as fast-import's raw `946684800 +0000`."""
    d = datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S%z")
    return b"%d %s" % (int(d.timestamp()), iso[-5:].encode())


def fi_path(path: str) -> bytes:
    """A path for a fast-import `M` line: the archive's own bytes, C-quoted when they must be."""
    b = os.fsencode(path)
    if b.startswith(b'"') or any(c < 0x20 or c == 0x7F for c in b):
        return b'"' + b"".join(b"\\%03o" % c if c < 0x20 or c in (0x22, 0x5C, 0x7F) else bytes([c]) for c in b) + b'"'
    return b


# Why: fast-import tries a delta of every blob against the one before it (unrelated files of a release:
# ~3 s of CPU on vLLM for no smaller pack, so --depth=0), and zlib level 1 instead of 6 makes the pack
# 44 MB instead of 41 MB for a third less CPU.
FAST_IMPORT = ("-c", "pack.compression=1", "fast-import", "--quiet", "--done", "--date-format=raw", "--depth=0")


class StreamImport:
    """with StreamImport(repo, archive_name) as imp: imp.add(member, chunks)...; imp.commit(...)"""

    def __init__(self, repo: Git, archive: str):
        self.repo = repo
        self.archive = archive
        self.layout = Layout(archive)
        self.entries: list[tuple[bytes, int, str]] = []  # (mode, blob mark, path)
        self.kept: dict[str, bytes] = {}
        self._feed: Feed | None = None

    def __enter__(self) -> "StreamImport":
        self._feed = self.repo.feed(*FAST_IMPORT).__enter__()
        self._feed.write(b"feature done\n")
        return self

    def __exit__(self, *exc) -> None:
        self._feed.__exit__(*exc)

    @property
    def count(self) -> int:
        return len(self.entries)

    def add(self, m: Member, chunks: Iterator[bytes], *, keep: bool = False) -> None:
        """Stream one member (its data read once, never held whole unless `keep`)."""
        self.layout.add(m)
        if m.kind == "dir":
            return
        mark = len(self.entries) + 1
        w = self._feed.write
        if m.kind == "link":
            data = os.fsencode(m.target)
            w(b"blob\nmark :%d\ndata %d\n%s\n" % (mark, len(data), data))
            self.entries.append((b"120000", mark, m.path))
            return
        w(b"blob\nmark :%d\ndata %d\n" % (mark, m.size))
        got, kept = 0, []
        for block in chunks:
            got += len(block)
            if got > m.size:
                break
            w(block)
            if keep:
                kept.append(block)
        if got != m.size:
            raise unreadable(self.archive, ValueError(f"member {m.name!r} holds {got} bytes, its header says {m.size}"))
        w(b"\n")
        if keep:
            self.kept[m.path] = b"".join(kept)
        self.entries.append((b"100755" if m.executable else b"100644", mark, m.path))

    def commit(self, ref: str, message: str, author: dict) -> str:
        """Write the one root commit (fixed identities and dates: a deterministic hash) and finish."""
        self.layout.check()
        who = b"%s <%s> %s" % (author["GIT_AUTHOR_NAME"].encode(), author["GIT_AUTHOR_EMAIL"].encode(),
                               raw_date(author["GIT_AUTHOR_DATE"]))
        me = b"%s <%s> %s" % (COMMITTER_NAME.encode(), COMMITTER_EMAIL.encode(), raw_date(COMMITTER_DATE))
        msg = message.encode()
        w = self._feed.write
        w(b"commit %s\nauthor %s\ncommitter %s\ndata %d\n%s\n" % (ref.encode(), who, me, len(msg), msg))
        w(b"".join(b"M %s :%d %s\n" % (mode, mark, fi_path(path)) for mode, mark, path in self.entries))
        w(b"\ndone\n")
        self._feed.close()
        return self.repo.out("rev-parse", "--verify", f"{ref}^{{commit}}")
