"""Classify one patch against a tree with `git apply` on a private index (no work tree touched).

    clean       git apply --check passes, every hunk at its recorded line
    offset      git apply --check passes, some hunk found at shifted lines (git never fuzzes)
    3way        plain apply fails, git apply --3way merges it without conflicts
    upstreamed  the change is already there: reverse-apply (git apply -R --check) passes,
                or the 3-way merge leaves the tree unchanged (empty result)
    obsolete    a file the patch modifies is gone and the 3-way merge cannot place the change
    conflict    the 3-way merge leaves conflicts (files and the failing hunks are named)
    outside     every file the patch touches lies outside a partial tree (a tree that carries only
                some of the repository, e.g. DeepGEMM's Python and headers without csrc/): nothing
                to check here, and not a conflict. A patch only partly outside is classified on its
                files inside the tree; the others are listed in `outside`.

The same calls are what a person would run by hand, so the verdict can be checked against git.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..gitcmd import Git, Result
from ..patchfile import PatchFile

APPLIES = ("clean", "offset", "3way")
OFFSET_RE = re.compile(r"Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)\.")
CONFLICTED_RE = re.compile(r"^Applied patch to '(.+)' with conflicts\.$", re.M)
FAILED_RE = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
MISSING_RE = re.compile(r"^error: (.+): does not exist in index$", re.M)


@dataclass
class HunkIssue:
    file: str
    header: str
    line: int  # line of the @@ header in the patch file (for problem-matcher annotations)
    expected: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Outcome:
    patch: str
    status: str  # clean | offset | 3way | upstreamed | obsolete | conflict | resolved | not-tried
    files: list[str] = field(default_factory=list)  # conflicted or vanished files
    hunks: list[HunkIssue] = field(default_factory=list)
    offsets: list[str] = field(default_factory=list)  # "path: hunk #2 at 1350 (offset 65)"
    evidence: str = ""  # why upstreamed / which resolution was used
    note: str = ""
    outside: list[str] = field(default_factory=list)  # files outside a partial tree (not checked)

    @property
    def applied(self) -> bool:
        return self.status in APPLIES or self.status == "resolved"

    @property
    def blocking(self) -> bool:
        return self.status in ("conflict", "obsolete")

    def to_dict(self) -> dict:
        return {"patch": self.patch, "status": self.status, "files": self.files,
                "hunks": [h.to_dict() for h in self.hunks], "offsets": self.offsets,
                "evidence": self.evidence, "note": self.note, "outside": self.outside}


_OBJECT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


class Index:
    """A private index file in repository `g`: the tree being rebased onto, patch by patch."""

    KEEP = 8  # index files kept for reloading (a vLLM tree's is 0.6 MB)

    def __init__(self, g: Git, path: Path):
        self.g = g
        self.path = Path(path)
        self.env = {"GIT_INDEX_FILE": str(path)}
        self._written: dict[str, bytes] = {}  # object id -> the index file read-tree wrote for it

    def load(self, treeish: str) -> None:
        """`git read-tree treeish`. An object id loaded lately is restored from the index file
        read-tree wrote for it (the same bytes: a bare read has no stat data): a conflicting
        patch reloads its pre-image once per hunk, and each read-tree of the vLLM tree is a
        ~30 ms process where a copy takes a millisecond."""
        written = self._written.pop(treeish, None)
        if written is not None:
            self.path.write_bytes(written)
        else:
            self.g.run("read-tree", treeish, env=self.env)
            if not _OBJECT_ID.match(treeish):
                return  # a ref or a rev: what it names may move
            written = self.path.read_bytes()
        self._written[treeish] = written  # the most recent last
        while len(self._written) > self.KEEP:
            del self._written[next(iter(self._written))]

    def only(self, treeish: str, paths: list[str]) -> bytes:
        """Just the files of `treeish` at `paths` (taken literally: a name may start with `:`),
        nothing else (none of them there: an empty index); returns the index file."""
        self.g.run("read-tree", "--empty", env=self.env)
        if paths:
            records = self.g.raw("ls-tree", "-r", "-z", "--full-tree", treeish, "--", *paths,
                                 env={"GIT_LITERAL_PATHSPECS": "1"})
            self.g.run("update-index", "-z", "--index-info", stdin=records, env=self.env)
        return self.path.read_bytes()

    def tree(self) -> str:
        return self.g.out("write-tree", env=self.env)

    def apply(self, raw: bytes, *args: str) -> Result:
        return self.g.run("apply", "--cached", *args, "-", stdin=raw, env=self.env, check=False)

    def present(self, paths: list[str]) -> set[str]:
        if not paths:
            return set()
        out = self.g.run("ls-files", "--cached", "-z", "--", *paths, env=self.env).out
        return set(filter(None, out.split("\0")))

    def blobs(self, paths: list[str]) -> dict[str, str]:
        """path -> blob id at stage 0 ('absent' when the file is not there)."""
        out = self.g.run("ls-files", "--stage", "-z", "--", *paths, env=self.env).out if paths else ""
        found = {}
        for rec in filter(None, out.split("\0")):
            meta, _, path = rec.partition("\t")
            found[path] = meta.split()[1]
        return {p: found.get(p, "absent") for p in paths}


def touched(patch: PatchFile) -> list[str]:
    return sorted({p for fd in patch.files for p in fd.paths})


def modified_targets(patch: PatchFile) -> list[str]:
    """Files the patch expects to exist (everything but the files it creates)."""
    return sorted({fd.old_path for fd in patch.files if fd.old_path})


def _offsets(patch: PatchFile, verbose: str) -> list[str]:
    # `git apply -v` prints "Checking patch <path>..." before the hunk lines of that file.
    out, current = [], ""
    for ln in verbose.splitlines():
        m = re.match(r"^Checking patch (.+)\.\.\.$", ln)
        if m:
            current = m.group(1)
            continue
        m = OFFSET_RE.match(ln)
        if m:
            out.append(f"{current}: hunk #{m.group(1)} at line {m.group(2)} (offset {m.group(3)})")
    return out


def hunk_patch(patch: PatchFile, fd, hunk) -> bytes:
    """A one-hunk patch: the file's diff header plus that hunk, cut from the patch bytes."""
    lines = patch.raw.split(b"\n")
    first_hunk = fd.hunks[0].line
    head = lines[fd.line - 1:first_hunk - 1]
    body = lines[hunk.line - 1:hunk.line + len(hunk.lines)]
    return b"\n".join(head + body) + b"\n"


def failing_hunks(scratch: Index, pre: str, patch: PatchFile, files: list[str],
                  whole: PatchFile | None = None) -> list[HunkIssue]:
    """The hunks of `files` that neither apply nor 3-way merge on their own (the real conflicts);
    when every hunk merges alone (they conflict only together) the hunks that fail plainly.
    `whole`: the patch file `patch` was cut from (its bytes hold the line numbers).

    Each hunk is tried on `scratch` holding only the patch's files as they are in `pre`: a one-hunk
    patch reads nothing else of the index, and git apply then reads a few entries, not the whole
    tree's (6,700 of them in vLLM), once per hunk and once more per 3-way merge."""
    plain, hard = [], []
    small = scratch.only(pre, touched(patch))
    for fd in patch.files:
        if not set(fd.paths) & set(files):
            continue
        for h in fd.hunks:
            one = hunk_patch(whole or patch, fd, h)
            scratch.path.write_bytes(small)  # as it was before the last hunk's 3-way merge
            if scratch.apply(one, "--check").rc == 0:
                continue
            issue = HunkIssue(fd.path, h.header, h.line, h.expected_upstream)
            plain.append(issue)
            if scratch.apply(one, "--3way").rc != 0:  # --check changed nothing
                hard.append(issue)
    return hard or plain


def in_tree(path: str, partial: list[str] | None) -> bool:
    return partial is None or any(path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") for p in partial)


def inside_part(patch: PatchFile, partial: list[str] | None) -> tuple[PatchFile | None, list[str]]:
    """(the patch cut to its files inside the partial tree, or None when none is; the files outside).
    The cut keeps the mail header and each inside file's diff bytes as they are."""
    outside = sorted({p for fd in patch.files for p in fd.paths if not in_tree(p, partial)})
    if not outside:
        return patch, []
    keep = [fd for fd in patch.files if all(in_tree(p, partial) for p in fd.paths)]
    if not keep:
        return None, outside
    lines = patch.raw.split(b"\n")
    starts = [fd.line for fd in patch.files]
    end_of_diff = next((i for i in range(len(lines) - 1, -1, -1) if lines[i] == b"-- "), len(lines))
    head = lines[:starts[0] - 1]
    body = []
    for fd in keep:
        nxt = [s for s in starts if s > fd.line]
        body += lines[fd.line - 1:(min(nxt) - 1) if nxt else end_of_diff]
    raw = b"\n".join(head + body) + b"\n"
    return dataclasses.replace(patch, raw=raw, files=keep), outside


def classify(idx: Index, scratch: Index, patch: PatchFile, partial: list[str] | None = None) -> Outcome:
    """Classify `patch` on the index's tree and, when it applies, leave its result in the index
    (so the next patch is classified on top of it). On failure the index is left unchanged.
    With `partial` (the paths a partial tree carries) only the patch's files inside are checked."""
    if partial is not None:
        inside, outside = inside_part(patch, partial)
        if inside is None:
            return Outcome(patch.name, "outside", outside=outside,
                           note="every target lies outside the partial tree: " + ", ".join(outside))
        o = _classify(idx, scratch, inside, whole=patch)
        o.outside = outside
        if outside:
            o.note = "; ".join(filter(None, [o.note, "not checked, outside the partial tree: " + ", ".join(outside)]))
        return o
    return _classify(idx, scratch, patch)


def _classify(idx: Index, scratch: Index, patch: PatchFile, whole: PatchFile | None = None) -> Outcome:
    raw = patch.raw
    pre = idx.tree()
    check = idx.apply(raw, "--check", "-v")
    if check.rc == 0:
        idx.apply(raw)
        offs = _offsets(patch, check.err)
        return Outcome(patch.name, "offset" if offs else "clean", offsets=offs)
    if idx.apply(raw, "-R", "--check").rc == 0:
        return Outcome(patch.name, "upstreamed", files=touched(patch),
                       evidence="reverse-apply: `git apply -R --check` passes (its post-image is already there)")
    three = idx.apply(raw, "--3way")
    if three.rc == 0:
        if idx.tree() == pre:
            return Outcome(patch.name, "upstreamed", files=touched(patch),
                           evidence="empty result: the 3-way merge changes nothing")
        # the files whose plain apply failed are the ones the merge was needed for
        return Outcome(patch.name, "3way", files=sorted({m[0] for m in FAILED_RE.findall(check.err)}))
    idx.load(pre)  # a failed --3way leaves unmerged entries behind
    gone = sorted(set(modified_targets(patch)) - idx.present(modified_targets(patch)))
    if gone:
        return Outcome(patch.name, "obsolete", files=gone,
                       note="target file(s) vanished: " + ", ".join(gone))
    files = sorted(set(CONFLICTED_RE.findall(three.err)) | {m[0] for m in FAILED_RE.findall(check.err)})
    hunks = failing_hunks(scratch, pre, patch, files, whole)  # on `scratch`: idx still holds pre
    return Outcome(patch.name, "conflict", files=files, hunks=hunks)
