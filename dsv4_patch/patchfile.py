"""A patch file: a `git format-patch` mbox parsed into header, description, metadata and diff.

Metadata lives in the commit message body as DEP-3 / Yocto style fields, one per line:

    Upstream-Status: Pending | Submitted <url> | Backport <commit> | Inappropriate [reason]
    Regression-Test: tests/regress/test_x.py::test_y      (one or more)
    Hardware: gfx936                                      (optional, one or more)
    Drop-When: <condition under which the patch can be removed>   (optional)
"""

from __future__ import annotations

import base64
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import PatchFormatError

MBOX_FROM = re.compile(rb"^From [0-9a-f]{40} ", re.M)
# The separator line git format-patch writes; only this starts a second patch in one file
# (a body line "From <sha> ..." is text).
MBOX_MAGIC = re.compile(rb"^From [0-9a-f]{40} Mon Sep 17 00:00:00 2001$", re.M)
PATCH_NAME = re.compile(r"[A-Za-z0-9._-]+\.patch")


def patch_name_problem(name: str) -> str | None:
    """Why `name` cannot be a patch file name (None when it can): one path component of
    [A-Za-z0-9._-] ending in .patch, not hidden, never `series`."""
    if not PATCH_NAME.fullmatch(name):
        return "must be one file name of letters, digits, '.', '_' or '-' ending in .patch"
    if name.startswith("."):
        return "must not start with '.'"
    return None


def is_mbox_from_line(line: str) -> bool:
    """git mailsplit's test for a line that starts a new message ("From " ... hh:mm:ss yyyy)."""
    if len(line) < 19 or not line.startswith("From "):  # git counts the newline: < 20
        return False
    colon = line.rfind(":", 5, len(line) - 1)
    if colon < 5 + 4 or colon + 4 > len(line):
        return False
    s = line
    try:  # hh:mm:ss around the last colon (git checks colon[-4], [-2], [-1], [1], [2])
        ok = all(s[colon + k].isdigit() for k in (-4, -2, -1, 1, 2))
    except IndexError:
        return False
    year = re.match(r"\s*(\d+)", s[colon + 3:])  # strtol skips leading blanks
    return ok and bool(year) and int(year.group(1)) > 90


def message_problem(line: str) -> str | None:
    """Why a commit message line would not survive format-patch -> git am (None when it does)."""
    if is_mbox_from_line(line):
        return "git am reads it as the start of another mail"
    if line.startswith("---") and (line[3:].strip() == "" or (line[3:4] == " " and not line[4:5].isspace())):
        return "git am reads it as the end of the message"
    if line.startswith("diff -") or line.startswith("Index: "):
        return "git am reads it as the start of the diff"
    return None
STATUS_RE = re.compile(
    r"^(?P<kind>Pending|Submitted|Backport|Inappropriate|Accepted)(?:\s+(?P<arg>.*))?$"
)
FIELD_RE = re.compile(r"^(Upstream-Status|Regression-Test|Hardware|Drop-When|Patch-Filename):[ \t]*(.*)$")
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def hardware_items(value: str) -> list[str]:
    """`Hardware:` targets, separated by commas or spaces; a parenthesized note stays with the
    target before it, as written: `gfx936 (DCU builds of vLLM with DTK), B200` is two items, the
    first with its note (split at every space, it was seven, shown as `gfx936,(DCU,builds,...`)."""
    items: list[str] = []
    cur, depth = "", 0

    def flush(word: str) -> None:
        word = word.strip()
        if word.startswith("(") and items:
            items[-1] += " " + word
        elif word:
            items.append(word)

    for ch in value:
        if depth == 0 and (ch == "," or ch.isspace()):
            flush(cur)
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")" and depth > 0)
        cur += ch
    flush(cur)  # an unclosed note is kept as written
    return items


@dataclass(frozen=True)
class UpstreamStatus:
    kind: str  # Pending, Submitted, Backport, Inappropriate, Accepted
    arg: str = ""  # url / commit / reason

    def __str__(self) -> str:
        return f"{self.kind} {self.arg}".strip()


DROP_WHEN_TEST_RE = re.compile(r"tests/[\w./-]+\.py(?:::[\w\[\]./-]+)*")


@dataclass
class Metadata:
    upstream_status: UpstreamStatus | None = None
    regression_tests: list[str] = field(default_factory=list)
    hardware: list[str] = field(default_factory=list)
    drop_when: str | None = None

    @property
    def drop_when_tests(self) -> list[str]:
        """The test ids `Drop-When:` names (pytest node ids under tests/): the tests that decide, at a
        bump, whether upstream fixed the problem its own way."""
        return DROP_WHEN_TEST_RE.findall(self.drop_when or "")

    def to_dict(self) -> dict:
        return {
            "upstream_status": str(self.upstream_status) if self.upstream_status else None,
            "regression_tests": list(self.regression_tests),
            "hardware": list(self.hardware),
            "drop_when": self.drop_when,
        }


@dataclass
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    header: str
    lines: list[str]  # raw lines incl. the leading ' ', '+', '-' or '\\'
    line: int = 0  # 1-based line of the @@ header in the patch file

    @property
    def expected_upstream(self) -> list[str]:
        """The pre-image lines this hunk expects to find upstream (context and removed lines)."""
        return [ln[1:] for ln in self.lines if ln[:1] in (" ", "-")]

    @property
    def added(self) -> list[str]:
        return [ln[1:] for ln in self.lines if ln[:1] == "+"]


@dataclass
class FileDiff:
    old_path: str | None  # None for a new file
    new_path: str | None  # None for a deleted file
    old_mode: str | None = None
    new_mode: str | None = None
    rename: bool = False
    binary: bool = False
    hunks: list[Hunk] = field(default_factory=list)
    symlink_target: str | None = None  # content of a new symlink (mode 120000)
    line: int = 0  # 1-based line of "diff --git" in the patch file
    copy: bool = False  # "copy from/to": the source path is not changed
    binary_data: list[tuple[int, str]] | None = None  # (line, text) after "GIT binary patch"
    binary_line: int = 0  # line of "GIT binary patch" / "Binary files ... differ"

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""

    @property
    def paths(self) -> list[str]:
        return [p for p in {self.old_path, self.new_path} if p]


@dataclass
class PatchFile:
    name: str
    raw: bytes
    author: str
    date: str
    subject: str
    description: str  # body without metadata fields
    metadata: Metadata
    files: list[FileDiff]
    filename_trailer: str | None = None  # Patch-Filename: set by `apply`, stripped by `export`

    @property
    def diff_text(self) -> str:
        text = self.raw.decode("utf-8", "surrogateescape")
        idx = text.find("\ndiff --git ")
        return text[idx + 1 :] if idx >= 0 else ""


def _decode_header(value: str | None, where: str = "header") -> str:
    from email.errors import HeaderParseError  # a base64 word of the wrong length: not a ValueError
    from email.header import decode_header, make_header  # email: only when patches are parsed (not a no-op)

    if value is None:
        return ""
    try:
        return str(make_header(decode_header(value))).replace("\n", "").replace("\r", "")
    except (ValueError, LookupError, UnicodeError, AssertionError, HeaderParseError) as e:
        raise PatchFormatError(f"{where}: malformed RFC 2047 encoded word ({type(e).__name__})",
                               hint="re-export the patch; git writes =?UTF-8?q?...?= words that decode") from None


def _unquote_git_path(p: str) -> str:
    """Undo git's C-style quoting of a path ("a/with space\\tx")."""
    if not (p.startswith('"') and p.endswith('"')):
        return p
    body = p[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    return body.encode("latin-1").decode("utf-8", "surrogateescape")


def _strip_prefix(p: str) -> str | None:
    p = _unquote_git_path(p.strip())
    if p == "/dev/null":
        return None
    if p[:2] in ("a/", "b/"):
        return p[2:]
    return p


def _quoted_end(s: str) -> int:
    """The index after the closing quote of the C-quoted string that opens `s` (escapes skipped)."""
    i = 1
    while i < len(s):
        if s[i] == "\\":
            i += 2
        elif s[i] == '"':
            return i + 1
        else:
            i += 1
    raise ValueError(s)


def _split_diff_git(rest: str) -> tuple[str, str]:
    """Split the 'a/x b/y' part of a 'diff --git' line (paths may be quoted, either or both: a rename
    from a plain name to one git quotes has `a/old "b/n\\303\\251w"`)."""
    if rest.startswith('"'):
        end = _quoted_end(rest)
        if rest[end : end + 1] != " ":
            raise ValueError(rest)
        return rest[:end], rest[end + 1 :]
    if rest.endswith('"') and ' "' in rest:  # a plain name has no '"': the first ' "' starts the second
        idx = rest.index(' "')
        return rest[:idx], rest[idx + 1 :]
    # unquoted: both halves are equal length when the path does not change (common case)
    half = (len(rest) - 1) // 2
    if rest[half] == " " and rest[:half][2:] == rest[half + 1 :][2:]:
        return rest[:half], rest[half + 1 :]
    idx = rest.find(" b/")
    if idx < 0:
        raise ValueError(rest)
    return rest[:idx], rest[idx + 1 :]


def parse_diff(text: str, name: str, line_offset: int = 0) -> list[FileDiff]:
    files: list[FileDiff] = []
    cur: FileDiff | None = None
    hunk: Hunk | None = None
    remaining_old = remaining_new = 0
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        ln = lines[i]
        lineno = line_offset + i + 1
        if hunk is not None and (remaining_old > 0 or remaining_new > 0):
            tag = ln[:1]
            if tag == " " or (ln == "" and i < len(lines) - 1):
                remaining_old -= 1
                remaining_new -= 1
                hunk.lines.append(ln if ln else " ")
            elif tag == "-":
                remaining_old -= 1
                hunk.lines.append(ln)
            elif tag == "+":
                remaining_new -= 1
                hunk.lines.append(ln)
            elif tag == "\\":
                hunk.lines.append(ln)
            else:
                raise PatchFormatError(
                    f"{name}:{lineno}: hunk ends early (expected {remaining_old} more old / "
                    f"{remaining_new} more new lines)",
                    hint="regenerate the patch with `dsv4-patch export`",
                )
            i += 1
            continue
        if hunk is not None and ln.startswith("\\"):
            hunk.lines.append(ln)
            i += 1
            continue
        hunk = None
        if ln.startswith("diff --git "):
            try:
                a, b = _split_diff_git(ln[len("diff --git ") :])
            except (ValueError, IndexError):  # unclosed quote, no " b/" half, a cut-short line
                raise PatchFormatError(f"{name}:{lineno}: unreadable 'diff --git' line") from None
            cur = FileDiff(old_path=_strip_prefix(a), new_path=_strip_prefix(b), line=lineno)
            files.append(cur)
        elif cur is None:
            pass  # text before the first diff (e.g. the '---' separator)
        elif ln.startswith("new file mode "):
            cur.new_mode = ln.split()[-1]
            cur.old_path = None
        elif ln.startswith("deleted file mode "):
            cur.old_mode = ln.split()[-1]
            cur.new_path = None
        elif ln.startswith("old mode "):
            cur.old_mode = ln.split()[-1]
        elif ln.startswith("new mode "):
            cur.new_mode = ln.split()[-1]
        elif ln.startswith("rename from "):
            cur.rename = True
            cur.old_path = _unquote_git_path(ln[len("rename from ") :])
        elif ln.startswith("rename to "):
            cur.rename = True
            cur.new_path = _unquote_git_path(ln[len("rename to ") :])
        elif ln.startswith("copy from "):
            cur.copy = True
            cur.old_path = _unquote_git_path(ln[len("copy from ") :])
        elif ln.startswith("copy to "):
            cur.new_path = _unquote_git_path(ln[len("copy to ") :])
        elif ln.startswith("GIT binary patch"):
            cur.binary, cur.binary_line, cur.binary_data = True, lineno, []
            j = i + 1
            while j < len(lines) and not lines[j].startswith("diff --git "):
                cur.binary_data.append((line_offset + j + 1, lines[j]))
                j += 1
            i = j
            continue
        elif ln.startswith("Binary files "):
            cur.binary, cur.binary_line = True, lineno
        elif ln.startswith("--- "):
            p = _strip_prefix(ln[4:])
            if p is not None:
                cur.old_path = p
        elif ln.startswith("+++ "):
            p = _strip_prefix(ln[4:])
            if p is not None:
                cur.new_path = p
        elif ln.startswith("@@ "):
            m = HUNK_RE.match(ln)
            if not m:
                raise PatchFormatError(f"{name}:{lineno}: malformed hunk header {ln!r}")
            o, ol, n, nl = m.group(1), m.group(2), m.group(3), m.group(4)
            hunk = Hunk(int(o), 1 if ol is None else int(ol), int(n), 1 if nl is None else int(nl), ln, [], lineno)
            if hunk.old_len == 0 and hunk.new_len == 0:
                raise PatchFormatError(f"{name}:{lineno}: hunk header {ln!r} counts no lines",
                                       hint="regenerate the patch with `dsv4-patch export`")
            remaining_old, remaining_new = hunk.old_len, hunk.new_len
            cur.hunks.append(hunk)
        i += 1
    if hunk is not None and (remaining_old > 0 or remaining_new > 0):
        raise PatchFormatError(f"{name}: last hunk is truncated", hint="the file was cut short; re-export it")
    for f in files:
        if f.binary:
            check_binary(f, name)
        if f.new_mode == "120000" and f.hunks:
            added = [a for h in f.hunks for a in h.added]
            f.symlink_target = added[0] if added else None
    return files


BINARY_HINT = "re-export it with `dsv4-patch export` (git format-patch --binary)"


def _binary_error(name: str, line: int, fd: FileDiff, why: str) -> PatchFormatError:
    return PatchFormatError(f"{name}:{line}: corrupt binary patch for {fd.path}: {why}", hint=BINARY_HINT)


def _binary_line_bytes(name: str, line: int, fd: FileDiff, text: str) -> bytes:
    """One data line of a git binary hunk: a length character (A-Z = 1..26, a-z = 27..52 bytes)
    then that many bytes in git's base85 (5 characters per 4 bytes, the last group padded)."""
    c = text[:1]
    if "A" <= c <= "Z":
        n = ord(c) - ord("A") + 1
    elif "a" <= c <= "z":
        n = ord(c) - ord("a") + 27
    else:
        raise _binary_error(name, line, fd, f"bad length character {c!r}")
    body = text[1:]
    if len(body) != (n + 3) // 4 * 5:
        raise _binary_error(name, line, fd, f"length character {c!r} says {n} bytes but the line holds {len(body)} characters")
    try:
        return base64.b85decode(body)[:n]
    except ValueError:
        raise _binary_error(name, line, fd, "not base85 data") from None


def check_binary(fd: FileDiff, name: str) -> None:
    """Decode every block (`literal N` / `delta N` + base85 lines of zlib data) and check its size:
    git am reports a corrupt payload but still exits 0 with the file missing."""
    if fd.binary_data is None:
        raise PatchFormatError(
            f"{name}:{fd.binary_line}: binary change of {fd.path} without data ('Binary files ... differ')",
            hint="re-export it with `dsv4-patch export` (it writes the data with --binary)")
    rows = fd.binary_data
    k, blocks = 0, 0
    while k < len(rows):
        line, text = rows[k]
        if not text:
            k += 1
            continue
        m = re.fullmatch(r"(literal|delta) (\d+)", text)
        if not m or blocks == 2:
            raise _binary_error(name, line, fd, f"expected 'literal N' or 'delta N', found {text[:40]!r}")
        size, start = int(m.group(2)), line
        k += 1
        data = b""
        while k < len(rows) and rows[k][1]:
            data += _binary_line_bytes(name, rows[k][0], fd, rows[k][1])
            k += 1
        if not data:
            raise _binary_error(name, start, fd, f"'{text}' has no data (truncated?)")
        z = zlib.decompressobj()
        try:
            out = z.decompress(data)
        except zlib.error as e:
            raise _binary_error(name, start, fd, f"the data does not inflate ({e})") from None
        if not z.eof or z.unused_data:
            raise _binary_error(name, start, fd, "the data is truncated or has trailing bytes")
        if len(out) != size:
            raise _binary_error(name, start, fd, f"'{text}' but the data holds {len(out)} bytes")
        blocks += 1
    if blocks == 0:
        raise _binary_error(name, fd.binary_line, fd, "no 'literal'/'delta' block (truncated?)")


def parse_metadata(body: str, name: str) -> tuple[Metadata, str, str | None]:
    """Split the commit message body into metadata fields and the free-text description."""
    meta = Metadata()
    desc: list[str] = []
    filename = None
    for ln in body.split("\n"):
        m = FIELD_RE.match(ln)
        if not m:
            desc.append(ln)
            continue
        key, value = m.group(1), m.group(2).strip()
        if key == "Upstream-Status":
            sm = STATUS_RE.match(value)
            if not sm:
                raise PatchFormatError(
                    f"{name}: bad Upstream-Status {value!r}",
                    hint="use Pending | Submitted <url> | Backport <commit> | Inappropriate [reason]",
                )
            meta.upstream_status = UpstreamStatus(sm.group("kind"), (sm.group("arg") or "").strip())
        elif key == "Regression-Test":
            meta.regression_tests.extend(v for v in value.split() if v)
        elif key == "Hardware":
            meta.hardware.extend(hardware_items(value))
        elif key == "Drop-When":
            meta.drop_when = value
        elif key == "Patch-Filename":
            filename = value
    return meta, "\n".join(desc).strip(), filename


def parse_patch_bytes(raw: bytes, name: str) -> PatchFile:
    if not raw.strip():
        raise PatchFormatError(f"{name}: empty patch file", hint="delete it and its series entry")
    if not MBOX_FROM.match(raw):
        raise PatchFormatError(
            f"{name}:1: not a git format-patch mbox (no 'From <sha> ...' line)",
            hint="create patches with `dsv4-patch export`, not `git diff`",
        )
    if len(MBOX_MAGIC.findall(raw)) > 1:
        raise PatchFormatError(f"{name}: holds more than one patch", hint="one patch per file; re-export")
    text = raw.decode("utf-8", "surrogateescape")
    head, sep, rest = text.partition("\n\n")
    if not sep:
        raise PatchFormatError(f"{name}: no blank line after the mail headers")
    if "\n" not in head:
        raise PatchFormatError(f"{name}:2: no mail headers (From:, Date:, Subject:) after the first line",
                               hint="re-export it with `dsv4-patch export`")
    from email.parser import HeaderParser

    headers = HeaderParser().parsestr(head.split("\n", 1)[1] + "\n")
    subject = _decode_header(headers.get("Subject"), f"{name}: Subject")
    if not subject:
        raise PatchFormatError(f"{name}:1: no Subject header", hint="every patch needs a one-line subject")
    # Body runs to the '---' separator format-patch writes before the diff.
    m = re.search(r"^---$", rest, re.M)
    if m:
        body, diff_part = rest[: m.start()], rest[m.end() :]
    else:
        idx = rest.find("\ndiff --git ")
        body, diff_part = (rest, "") if idx < 0 else (rest[:idx], rest[idx:])
    author = _decode_header(headers.get("From"), f"{name}: From")
    if not author:
        raise PatchFormatError(f"{name}:2: no From: header (the patch author)", hint="re-export it with `dsv4-patch export`")
    meta, desc, filename = parse_metadata(body, name)
    diff_offset = text[: len(text) - len(diff_part)].count("\n")
    files = parse_diff(diff_part, name, diff_offset)
    if not files:
        raise PatchFormatError(f"{name}: no 'diff --git' section", hint="a patch must change at least one file")
    if not str(headers.get("Date") or "").strip():  # (a Header object where the bytes are not ASCII)  # git am would date the commit now: a new commit id each apply
        raise PatchFormatError(f"{name}:2: no Date: header (git am would stamp the commit with the current time, "
                               "so every apply would make other commit ids)", hint="re-export it with `dsv4-patch export`")
    return PatchFile(
        name=name,
        raw=raw,
        author=author,
        date=headers.get("Date", ""),
        subject=subject,
        description=desc,
        metadata=meta,
        files=files,
        filename_trailer=filename,
    )


def load_patch(path: Path) -> PatchFile:
    why = patch_name_problem(path.name)
    if why:
        raise PatchFormatError(f"{path}: patch file name {why}", hint="rename it and its series line")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PatchFormatError(f"{path}: listed in series but missing", hint="restore it or drop it from series") from None
    except IsADirectoryError:
        raise PatchFormatError(f"{path}: is a folder, not a patch file", hint="a series line names one .patch file") from None
    except OSError as e:
        raise PatchFormatError(f"{path}: cannot read ({e.strerror or e})") from None
    return parse_patch_bytes(raw, path.name)
