"""Commit a patch series without `git am`'s per-patch cost, making the commits `git am` makes.

`git am` re-reads, refreshes and rewrites the whole index (and the work tree) once per patch; at
200 patches over vLLM's 6,000+ files that is most of an apply. Here the commits are computed in
memory and written by one `git fast-import`, and the work tree is checked out once at the end.

Exactness comes from accepting only what can be checked, and declining everything else:
- the diff: each file's post-image is computed by applying its hunks where `git apply` tries
  them first (its `find_pos` hint, with the match-at-start/end rules), and it is accepted only
  when the pre-image is the blob the patch's `index` line names and the result hashes to the
  post-image blob it names (format-patch --full-index). Binary patches, renames, copies, mode
  changes, symlinks, submodules, quoted paths and anything unparsed are declined.
- the message and author: what `git am -k` records (mailinfo, then stripspace) for the plain
  mails format-patch writes (ASCII headers, no encoded words, no in-body headers, no CR);
  anything else is declined.
A declined patch is left to the caller, who applies it with `git am --3way`, the reference
behaviour (3-way fallback, conflict state, already-upstream), then resumes here.
tests/engine/test_incremental_fastpath.py checks the commits against `git am` itself.
"""

from __future__ import annotations

import calendar
import datetime
import hashlib
import re
from dataclasses import dataclass, field

from .gitcmd import Git

ZERO = "0" * 40
EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
REGULAR = ("100644", "100755")
_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_DATE = re.compile(rb"^(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), )?(\d{1,2}) (" + b"|".join(m.encode() for m in _MONTHS)
                   + rb") (\d{4}) (\d\d):(\d\d):(\d\d) ([+-])(\d\d)(\d\d)$")
_FROM = re.compile(rb"^([A-Za-z0-9](?:[A-Za-z0-9._-]| (?! ))*[A-Za-z0-9]) <([A-Za-z0-9][A-Za-z0-9._+-]*@[A-Za-z0-9.-]*[A-Za-z0-9])>$")
_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_INDEX = re.compile(rb"^index ([0-9a-f]{40})\.\.([0-9a-f]{40})(?: (\d{6}))?$")
_PLAIN_HEADERS = {b"from", b"date", b"subject", b"mime-version", b"content-type", b"content-transfer-encoding"}
_INBODY = (b"from:", b"subject:", b"date:", b">from", b"[patch]", b"from ")


class Declined(Exception):
    """This patch is not one the fast path can make exactly; `git am` must."""


@dataclass
class Mail:
    author: bytes  # "Name <email> <epoch> <tz>", as `git am` records it
    message: bytes
    diff: bytes


@dataclass
class FileEdit:
    path: str
    old_id: str  # ZERO for a new file
    new_id: str  # ZERO for a deleted file
    mode: str
    hunks: list[tuple[int, int, int, int, list[bytes], list[bytes], int]] = field(default_factory=list)
    # (oldpos, oldlen, newpos, newlen, pre-image lines, post-image lines, trailing context lines)


# ------------------------------------------------------------------ the mail (mailinfo -k + am)
def _unfold(lines: list[bytes]) -> list[bytes]:
    """mailinfo's read_one_header_line: rtrim, and a continuation's first byte becomes a space,
    then the continuation is rtrimmed (a blank one adds nothing, not even that space)."""
    out: list[bytes] = []
    for ln in lines:
        if ln[:1] in (b" ", b"\t") and out:
            out[-1] += (b" " + ln[1:]).rstrip(b" \t")
        else:
            out.append(ln.rstrip(b" \t"))
    return out


def _stripspace(text: bytes) -> bytes:
    """git's strbuf_stripspace without comments: rtrim lines, squeeze and drop blank runs."""
    out: list[bytes] = []
    empties = 0
    for ln in text.split(b"\n"):
        ln = ln.rstrip(b" \t")
        if not ln:
            empties += 1
            continue
        if empties and out:
            out.append(b"")
        empties = 0
        out.append(ln)
    return b"".join(ln + b"\n" for ln in out)


def _patchbreak(ln: bytes) -> bool:
    """mailinfo's patchbreak(): where the message ends and the patch begins."""
    if ln.startswith(b"diff -") or ln.startswith(b"Index: "):
        return True
    if ln.startswith(b"---") and len(ln) >= 4:  # (ln keeps its '\n', as git's line does)
        if ln[3:4] == b" " and ln[4:5] not in (b" ", b"\t", b"\n"):
            return True
        return ln[3:].strip(b" \t\n") == b"" and ln.endswith(b"\n")
    return False


def parse_mail(raw: bytes) -> Mail:
    head, sep, rest = raw.partition(b"\n\n")
    if not sep or b"\r" in head or b"\r" in rest.split(b"\ndiff --git ", 1)[0]:
        raise Declined("headers or message with CR")
    lines = head.split(b"\n")
    if not re.match(rb"^From [0-9a-f]{40} ", lines[0]):
        raise Declined("no mbox From line")
    hdr: dict[bytes, bytes] = {}
    for ln in _unfold(lines[1:]):
        key, colon, _ = ln.partition(b":")
        k = key.lower()
        if not colon or k not in _PLAIN_HEADERS or k in hdr:
            raise Declined(f"header {key[:40]!r}")
        if any((c < 0x20 and c != 0x09) or c > 0x7E for c in ln) or b"=?" in ln:
            raise Declined("non-ASCII or encoded header")
        hdr[k] = ln[len(key) + 1:].lstrip(b" \t")  # mailinfo's skip_header: all blanks after ':' go
    if hdr.get(b"content-type", b"text/plain; charset=UTF-8") != b"text/plain; charset=UTF-8" or \
            hdr.get(b"content-transfer-encoding", b"8bit") not in (b"8bit", b"7bit"):
        raise Declined("MIME encoding")
    subject, frm, date = hdr.get(b"subject", b""), hdr.get(b"from", b""), hdr.get(b"date", b"")
    m = _FROM.match(frm)
    if not subject.strip() or not m or not 3 <= len(m.group(1)) <= 60:
        raise Declined("subject or author")
    if m.group(1) == b"Mail System Internal Data":  # git am skips such a message (pine's folder data)
        raise Declined("a 'Mail System Internal Data' message")
    d = _DATE.match(date)
    if not d:
        raise Declined("date")
    day, mon, year, hh, mm, ss, sign, tzh, tzm = d.groups()
    fields = (int(year), _MONTHS[mon.decode()], int(day), int(hh), int(mm), int(ss))
    try:  # only dates git parses the same way for sure: a real calendar day and time, sane zone
        datetime.datetime(*fields)
    except ValueError:
        raise Declined("date") from None
    if not 1970 <= fields[0] <= 2099 or int(tzh) > 14 or int(tzm) > 59:
        raise Declined("date")
    off = (int(tzh) * 60 + int(tzm)) * 60 * (-1 if sign == b"-" else 1)
    epoch = calendar.timegm(fields) - off
    if epoch < 0:
        raise Declined("date before 1970")
    body: list[bytes] = []
    diff = b""
    pos = 0
    first = True
    while pos < len(rest):
        end = rest.find(b"\n", pos)
        end = len(rest) if end < 0 else end + 1
        ln = rest[pos:end]
        if _patchbreak(ln):
            diff = rest[pos:]
            break
        if first and ln.strip():
            if ln.lower().startswith(_INBODY):
                raise Declined("in-body header")
            first = False
        if ln.startswith((b"From ", b">From")) or b"\x0b" in ln or b"\x0c" in ln:
            raise Declined("mbox-like body line")
        body.append(ln)
        pos = end
    log = b"".join(body)
    try:
        log.decode("utf-8")
    except UnicodeDecodeError:
        raise Declined("message is not UTF-8") from None
    if off == 0:
        sign = b"+"  # git records "-0000" as +0000
    author = m.group(1) + b" <" + m.group(2) + b"> " + str(epoch).encode() + b" " + sign + tzh + tzm
    return Mail(author, _stripspace(subject + b"\n\n" + log), diff)


# ------------------------------------------------------------------ the diff
def _path(token: bytes, prefix: bytes) -> str:
    if token.startswith(b'"') or not token.startswith(prefix):
        raise Declined("quoted or unprefixed path")
    p = token[len(prefix):]
    if not p or b"\t" in p or b"\\" in p or p.endswith(b"/"):
        raise Declined("odd path")
    return p.decode("utf-8", "surrogateescape")


def _lines(blob: bytes) -> list[bytes]:
    """Split keeping each line's '\\n' (only '\\n' ends a line, as in git apply)."""
    parts = blob.split(b"\n")
    out = [p + b"\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def parse_diff(diff: bytes) -> list[FileEdit]:
    lines = diff.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    i = 0
    while i < len(lines) and not lines[i].startswith(b"diff --git "):
        if lines[i].startswith((b"--- ", b"+++ ", b"@@")):
            raise Declined("text before the first diff --git")
        i += 1
    edits: list[FileEdit] = []
    while i < len(lines):
        ln = lines[i]
        if not ln.startswith(b"diff --git "):
            if all(not x.strip() for x in lines[i:]):
                break
            raise Declined("trailing text")
        a, _, b = ln[len(b"diff --git "):].partition(b" ")
        path = _path(a, b"a/")
        if _path(b, b"b/") != path:
            raise Declined("rename or unparsed diff --git line")
        i += 1
        new_mode = deleted_mode = None
        idx = None
        while i < len(lines) and not lines[i].startswith((b"@@ ", b"diff --git ")):
            x = lines[i]
            if x.startswith(b"new file mode "):
                new_mode = x[14:].decode()
            elif x.startswith(b"deleted file mode "):
                deleted_mode = x[18:].decode()
            elif x.startswith(b"index "):
                idx = _INDEX.match(x)
                if not idx:
                    raise Declined("index line without full ids")
            elif x == b"--- " + (b"/dev/null" if new_mode else b"a/" + path.encode("utf-8", "surrogateescape")):
                pass
            elif x == b"+++ " + (b"/dev/null" if deleted_mode else b"b/" + path.encode("utf-8", "surrogateescape")):
                pass
            else:
                raise Declined(f"extended header {x[:30]!r}")  # mode change, rename, binary, ...
            i += 1
        if not idx:
            raise Declined("no index line")
        old_id, new_id, mode = idx.group(1).decode(), idx.group(2).decode(), (idx.group(3) or b"").decode()
        mode = new_mode or deleted_mode or mode
        if mode not in REGULAR or (new_mode and old_id != ZERO) or (deleted_mode and new_id != ZERO) \
                or (not new_mode and old_id == ZERO) or (not deleted_mode and new_id == ZERO) or old_id == new_id:
            raise Declined("mode or ids")
        fe = FileEdit(path, old_id, new_id, mode)
        while i < len(lines) and lines[i].startswith(b"@@ "):
            m = _HUNK.match(lines[i])
            if not m:
                raise Declined("hunk header")
            o, ol, n, nl = (int(g) if g is not None else 1 for g in m.groups())
            i += 1
            pre: list[bytes] = []
            post: list[bytes] = []
            trailing = 0
            ro, rn = ol, nl
            while ro > 0 or rn > 0:
                if i >= len(lines):
                    raise Declined("truncated hunk")
                x = lines[i]
                tag, body = x[:1], x[1:] + b"\n"
                if tag == b" " or x == b"":
                    body = x[1:] + b"\n" if x else b"\n"
                    pre.append(body)
                    post.append(body)
                    ro, rn, trailing = ro - 1, rn - 1, trailing + 1
                elif tag == b"-":
                    pre.append(body)
                    ro, trailing = ro - 1, 0
                elif tag == b"+":
                    post.append(body)
                    rn, trailing = rn - 1, 0
                else:
                    raise Declined("hunk body")
                i += 1
                if i < len(lines) and lines[i].startswith(b"\\"):
                    # "\ No newline at end of file": the line before has no '\n'. Only the marker
                    # format-patch writes, after a side's last line: git apply reads any other as a
                    # corrupt patch, or strips a newline mid-hunk (not provably the same result).
                    if lines[i] != b"\\ No newline at end of file" or \
                            (ro if tag == b"-" else rn if tag == b"+" else ro or rn):
                        raise Declined("a '\\ No newline' marker git apply may read otherwise")
                    if tag in (b" ", b""):
                        pre[-1] = pre[-1][:-1]
                        post[-1] = post[-1][:-1]
                    elif tag == b"-":
                        pre[-1] = pre[-1][:-1]
                    else:
                        post[-1] = post[-1][:-1]
                    i += 1
            if ro or rn:
                raise Declined("hunk counts")
            fe.hunks.append((o, ol, n, nl, pre, post, trailing))
        if not fe.hunks and not (new_mode and new_id == EMPTY_BLOB):
            raise Declined("file diff without hunks")
        edits.append(fe)
    if not edits or len({e.path for e in edits}) != len(edits):
        raise Declined("no file, or one file twice")
    return edits



def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def apply_hunks(pre_image: bytes, fe: FileEdit) -> bytes:
    """The hunks applied where `git apply` tries each first; Declined unless each matches there.

    git's first try for a hunk is its new-side line number (the image already holds the earlier
    hunks); a hunk starting at line 0/1 must match at the start, one without trailing context at
    the end. Line numbers that disagree with the hunks before them are declined, so that first
    try is the same position under either rule.
    """
    img = _lines(pre_image)
    delta = 0
    for oldpos, oldlen, newpos, newlen, pre, post, trailing in fe.hunks:
        if oldlen == 0 or newlen == 0:  # only a whole new file or a whole deletion
            if not ((oldlen == 0 and oldpos == 0 and newpos == 1 and not img)
                    or (newlen == 0 and newpos == 0 and oldpos == 1)):
                raise Declined(f"{fe.path}: a zero-context hunk")
            at = 0
        else:
            at = oldpos - 1 + delta
            if newpos - 1 != at:
                raise Declined(f"{fe.path}: hunk line numbers disagree")
        if img[at:at + len(pre)] != pre or (trailing == 0 and at + len(pre) != len(img)) \
                or (oldpos <= 1 and at != 0):
            raise Declined(f"{fe.path}: a hunk does not match where git tries it first")
        img[at:at + len(pre)] = post
        delta += len(post) - len(pre)
    return b"".join(img)


# ------------------------------------------------------------------ the series
@dataclass
class Planned:
    mail: Mail
    changes: list[tuple[str, str, bytes | None]]  # (path, mode, post-image or None to delete)


class _Tree:
    """What the series needs to know of a commit's tree (only the paths it touches, and the
    folders above the files it creates), plus the edits of the patches planned so far."""

    def __init__(self, g: Git, commit: str, paths: set[str]):
        self.g = g
        self.entries: dict[str, tuple[str, str]] = {}  # path -> (mode, blob id); files only
        self.base_dirs: set[str] = set()  # queried paths that are folders at `commit`
        wanted = sorted(paths)
        for i in range(0, len(wanted), 1000):  # (argv stays small)
            out = g.run("ls-tree", "-z", "--full-tree", commit, "--", *wanted[i:i + 1000],
                        env={"GIT_LITERAL_PATHSPECS": "1"}).out
            for rec in out.split("\0"):
                if not rec:
                    continue
                meta, _, path = rec.partition("\t")
                mode, typ, sha = meta.split()
                if typ == "tree":
                    self.base_dirs.add(path)
                else:
                    self.entries[path] = (mode, sha)
        self.content: dict[str, bytes] = {}

    def prefetch(self, paths: set[str]) -> None:
        ids = sorted({self.entries[p][1] for p in paths if p in self.entries and self.entries[p][0] in REGULAR})
        if not ids:
            return
        out = self.g.run("cat-file", "--batch", stdin=("\n".join(ids) + "\n").encode()).out.encode(
            "utf-8", "surrogateescape")
        blobs: dict[str, bytes] = {}
        pos = 0
        while pos < len(out):
            nl = out.index(b"\n", pos)
            sha, typ, size = out[pos:nl].split()
            n = int(size)
            blobs[sha.decode()] = out[nl + 1:nl + 1 + n]
            pos = nl + 1 + n + 1
        for p in paths:
            if p in self.entries and self.entries[p][1] in blobs:
                self.content.setdefault(p, blobs[self.entries[p][1]])

    def plan(self, fe: FileEdit) -> tuple[str, str, bytes | None]:
        cur = self.entries.get(fe.path)
        if fe.old_id == ZERO:
            parts = fe.path.split("/")
            under = fe.path + "/"
            if cur or fe.path in self.base_dirs or any(e.startswith(under) for e in self.entries) \
                    or any("/".join(parts[:k]) in self.entries for k in range(1, len(parts))):
                raise Declined(f"{fe.path}: new file where a path exists")
            pre = b""
        else:
            if not cur or cur != (fe.mode, fe.old_id) or fe.path not in self.content:
                raise Declined(f"{fe.path}: pre-image is not the blob the patch names")
            pre = self.content[fe.path]
        post = apply_hunks(pre, fe)
        if fe.new_id == ZERO:
            if post:
                raise Declined(f"{fe.path}: deletion leaves content")
            return fe.path, fe.mode, None
        if blob_id(post) != fe.new_id:
            raise Declined(f"{fe.path}: result is not the post-image blob the patch names")
        return fe.path, fe.mode, post

    def commit_edits(self, changes: list[tuple[str, str, bytes | None]]) -> None:
        for path, mode, data in changes:
            if data is None:
                self.entries.pop(path, None)
                self.content.pop(path, None)
            else:
                self.entries[path] = (mode, blob_id(data))
                self.content[path] = data
        # a folder emptied by a deletion stays in `base_dirs`: a new file of that name is then
        # declined (left to git am), never wrongly accepted


def plan_series(g: Git, start: str, mails: list[bytes]) -> tuple[list[Planned], str | None]:
    """The longest prefix of `mails` the fast path makes exactly, and why it stopped (or None)."""
    parsed: list[tuple[Mail, list[FileEdit]]] = []
    why = None
    for raw in mails:
        try:
            mail = parse_mail(raw)
            parsed.append((mail, parse_diff(mail.diff)))
        except Declined as e:
            why = str(e)
            break
    if not parsed:
        return [], why
    touched = {fe.path for _, edits in parsed for fe in edits}
    parents = {"/".join(parts[:k]) for p in touched for parts in [p.split("/")] for k in range(1, len(parts))}
    tree = _Tree(g, start, touched | parents)
    tree.prefetch(touched)
    planned: list[Planned] = []
    for mail, edits in parsed:
        try:
            changes = [tree.plan(fe) for fe in edits]
        except Declined as e:
            why = str(e)
            break
        tree.commit_edits(changes)
        planned.append(Planned(mail, changes))
    return planned, why


def _quote(path: str) -> bytes:
    return path.encode("utf-8", "surrogateescape")  # _path declined what fast-import would need quoted


def write_commits(g: Git, start: str, planned: list[Planned], ref: str, marks: str) -> list[str]:
    """One `git fast-import` writes every planned commit on `ref` (from `start`); their shas."""
    if not planned:
        return []
    committer = g.out("var", "GIT_COMMITTER_IDENT").encode()
    out = [b"reset " + ref.encode() + b"\nfrom " + start.encode() + b"\n"]
    for n, pl in enumerate(planned, 1):
        out.append(b"commit %s\nmark :%d\nauthor %s\ncommitter %s\ndata %d\n%s\n"
                   % (ref.encode(), n, pl.mail.author, committer, len(pl.mail.message), pl.mail.message))
        for path, mode, data in pl.changes:
            if data is None:
                out.append(b"D " + _quote(path) + b"\n")
            else:
                out.append(b"M %s inline %s\ndata %d\n%s\n" % (mode.encode(), _quote(path), len(data), data))
        out.append(b"\n")
    out.append(b"done\n")
    g.run("fast-import", "--quiet", "--done", "--force", f"--export-marks={marks}", stdin=b"".join(out))
    shas = {}
    with open(marks) as fh:
        for line in fh:
            mark, sha = line.split()
            shas[int(mark[1:])] = sha
    return [shas[n] for n in range(1, len(planned) + 1)]


def commit_series(g: Git, start: str, mails: list[bytes], ref: str, marks: str, *,
                  all_or_nothing: bool = False) -> tuple[list[str], str | None]:
    """Commit the longest exact prefix of `mails` on top of `start`: (commit shas, why it stopped).
    all_or_nothing: write nothing unless every mail can be made (the caller would discard a part)."""
    if not mails:
        return [], None
    planned, why = plan_series(g, start, mails)
    if all_or_nothing and len(planned) < len(mails):
        return [], why
    return write_commits(g, start, planned, ref, marks), why
