"""`dsv4-patch export STACK --upstream`: the stack as an mbox ready to send upstream.

Our patch files carry metadata trailers for this repository (Upstream-Status, Regression-Test,
Hardware, Drop-When; Patch-Filename inside built trees) and, today, the team's
`Signed-off-by: DeepSeek V4 patch maintainers <...>`. An upstream maintainer must see neither: a
DCO sign-off certifies a person, and the team is not one. This writes one mbox per release with
those lines removed, everything else kept byte for byte (subject, author, date, the rest of the
message, other people's `Signed-off-by:`, `Co-developed-by:`, `Reviewed-by:` ..., the diff), and
the sender's own `Signed-off-by: Name <email>` added where `git commit -s` adds it: at the end of
the closing trailer block (after a blank line when the message has none), not again when that
same line already closes it. The sender is the user's git identity (`gitcmd.user_identity`, the
one place it is read) or `--signoff-as`; without one nothing is written. It reads the committed
patch files (no tree needed).

Apply the result with `git am -k` (the subjects keep their own [tags], as in `apply`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .config import StackConfig
from .errors import Dsv4Error, PatchFormatError, UsageError
from .gitcmd import user_identity
from .lint import IDENT
from .patchfile import parse_patch_bytes
from .stack import load_stack

OUR_TRAILERS = ("Upstream-Status", "Regression-Test", "Hardware", "Drop-When", "Patch-Filename")
_OURS = re.compile(rb"^(?:" + b"|".join(k.encode() for k in OUR_TRAILERS) + rb"):")
# The team's sign-off the patch files carry (the From: of every patch): that exact identity only.
TEAM_IDENTITY = "DeepSeek V4 patch maintainers <dsv4-patch@users.noreply.github.com>"
_TEAM_SOB = re.compile(rb"^Signed-off-by:[ \t]*" + re.escape(TEAM_IDENTITY.encode()) + rb"[ \t\r]*$")
_SOB = re.compile(rb"^Signed-off-by:[ \t]*(.*?)[ \t\r]*$")
# git's trailer.c: a trailer line is a token of letters, digits and '-', optional blanks, ':';
# a line starting with a blank continues the previous trailer; "Signed-off-by: " and
# "(cherry picked from commit " are the prefixes git itself writes.
_TRAILER = re.compile(rb"^[A-Za-z0-9-]+[ \t]*:")
_GIT_PREFIXES = (b"Signed-off-by: ", b"(cherry picked from commit ")


@dataclass
class UpstreamExport:
    stack: str
    release: str | None
    label: str
    mbox: str  # where it was written ("-" for stdout)
    patches: list[str] = field(default_factory=list)
    removed_lines: int = 0  # our lines left out (metadata trailers, the team sign-off), all patches together
    signed_off_by: str = ""  # the sender's identity each message now ends with

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _message_bounds(raw: bytes) -> tuple[int, int]:
    """(start, end) of the commit message: after the mail headers, before the diff."""
    start = raw.index(b"\n\n") + 2
    diff = re.search(rb"^(?:---\n)?diff --git ", raw[start:], re.M)
    return start, start + diff.start() if diff else len(raw)


def signer_for(root: Path, signoff_as: str | None = None) -> str:
    """The sender's `Name <email>`: `signoff_as` when given (checked), else the user's git identity.

    Raises UsageError (exit 2) for a malformed --signoff-as and Dsv4Error (exit 1) when git has no
    user.name/user.email configured; either way before anything is written. The team identity is
    refused: it is no person."""
    if signoff_as is not None:
        who = signoff_as.strip()
        if not IDENT.match(who):
            raise UsageError(f"--signoff-as {signoff_as!r} is not 'Name <email>'",
                             hint='e.g. --signoff-as "Ada Lovelace <ada@example.com>"')
        how = "--signoff-as"
    else:
        ident = user_identity(root)
        if ident.signer is None:
            raise Dsv4Error(f"no git identity to sign the patches off with ({' and '.join(ident.missing)} not set); "
                            "nothing written",
                            hint='run `git config --global user.name "Your Name"` and '
                                 '`git config --global user.email you@example.com`, or pass --signoff-as "Name <email>"')
        who, how = ident.signer, "git config user.name/user.email"
        if not IDENT.match(who):
            raise Dsv4Error(f"git identity {who!r} (from {how}) is not 'Name <email>'; nothing written",
                            hint="fix user.name/user.email or pass --signoff-as \"Name <email>\"")
    if who == TEAM_IDENTITY:
        raise Dsv4Error(f"{how} is the team identity {TEAM_IDENTITY!r}, not a person; nothing written",
                        hint='a DCO sign-off certifies a person: sign as yourself (--signoff-as "Name <email>")')
    return who


def _is_trailer_block(par: list[bytes]) -> bool:
    """git's rule (trailer.c) for the last paragraph: all trailer lines, or at least one line git
    writes itself (Signed-off-by: ...) and trailers a quarter of its lines or more."""
    trailers = other = 0
    git_line = False
    for i, line in enumerate(par):
        line = line.rstrip(b"\r")
        if line[:1] in (b" ", b"\t") and i > 0:
            continue  # a continuation counts with the line it continues
        if line.startswith(_GIT_PREFIXES):
            git_line = True
            trailers += 1
        elif _TRAILER.match(line):
            trailers += 1
        else:
            other += 1
    return bool(trailers) and (other == 0 or (git_line and trailers * 3 >= other))


def _sign_off(msg: list[bytes], signer: str) -> list[bytes]:
    """The message lines with `Signed-off-by: signer` appended as `git commit -s` does."""
    sob = b"Signed-off-by: " + signer.encode("utf-8")
    last: list[bytes] = []
    for line in reversed(msg):
        if not line.strip():
            break
        last.insert(0, line)
    if last and _is_trailer_block(last):
        return msg if last[-1].rstrip(b"\r") == sob else msg + [sob]
    return msg + ([b""] if msg else []) + [sob]


def upstream_patch(raw: bytes, signer: str | None = None) -> tuple[bytes, int]:
    """One patch with our lines removed (metadata trailers, the team sign-off) and, when `signer`
    is given, the sender's sign-off added: (bytes, how many lines were removed).

    Blank lines the removal leaves doubled (an emptied trailer paragraph) collapse to one, as
    `git commit` cleans a message; the message ends with one newline before `---` and the diff."""
    start, end = _message_bounds(raw)
    kept, removed = [], 0
    for line in raw[start:end].split(b"\n"):
        if _OURS.match(line) or _TEAM_SOB.match(line):
            removed += 1
        else:
            kept.append(line)
    msg: list[bytes] = []
    for line in kept:
        if not line.strip() and (not msg or not msg[-1].strip()):
            continue
        msg.append(line)
    while msg and not msg[-1].strip():
        msg.pop()
    if signer is not None:
        msg = _sign_off(msg, signer)
    body = b"\n".join(msg) + b"\n" if msg else b""
    rest = raw[end:]
    sep = b"" if rest.startswith(b"---\n") else b"---\n"
    return raw[:start] + body + sep + rest, removed


def export_upstream(stack: StackConfig, dest: Path | None, signer: str) -> tuple[UpstreamExport, bytes]:
    """The mbox of one release's series, signed off by `signer` (see `signer_for`); unless dest is
    None, written to dest (all or nothing: a temporary file renamed into place)."""
    loaded = load_stack(stack)
    parts, names, removed = [], [], 0
    for p in loaded.patches:
        data, n = upstream_patch(p.raw, signer)
        again = parse_patch_bytes(data, p.name)  # still one well-formed patch, same change
        if again.diff_text != p.diff_text or again.metadata.regression_tests or again.metadata.upstream_status:
            raise PatchFormatError(f"{stack.patch_dir / p.name}: cannot separate its metadata from the message",
                                   hint="keep the metadata trailers on lines of their own at the end of the message")
        start, end = _message_bounds(data)
        bad = next((m[1].decode("utf-8", "replace") for m in map(_SOB.match, data[start:end].split(b"\n"))
                    if m and not IDENT.match(m[1].decode("utf-8", "replace"))), None)
        if bad is not None:
            raise PatchFormatError(f"{stack.patch_dir / p.name}: Signed-off-by: {bad!r} is not 'Name <email>'",
                                   hint="fix the trailer in the tree (`git rebase -i refs/dsv4/base`) and export")
        parts.append(data if data.endswith(b"\n") else data + b"\n")
        names.append(p.name)
        removed += n
    mbox = b"".join(parts)
    res = UpstreamExport(stack.name, stack.release, stack.label, str(dest) if dest else "-", names, removed, signer)
    if dest is not None:
        write_mbox(dest, mbox)
    return res, mbox


def write_mbox(dest: Path, mbox: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.write_bytes(mbox)
    tmp.replace(dest)
