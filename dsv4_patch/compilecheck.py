"""Every Python file a patch touches must compile in the patched tree.

`git am` is happy with any text: a conflict resolved by "keeping both sides" can leave a duplicated
class header (an IndentationError) that applies, exports and lints cleanly. So `apply`, `check`
and `status --check` compile each `.py` file the series adds or changes, as it is in the patched
tree, with `compile(source, path, "exec")` of the Python the tool runs on (no byte code is
written). Only the touched files are read: the vLLM series touches ~25 of its ~2,000 modules.

What is checked and what is not:
- only paths ending in `.py` (a `.pyi`, `.pyx`, `.cu`, template or data file is never compiled);
- a file the series deletes, a symlink and a binary diff are skipped;
- a file whose upstream version (at the pin) does not compile with this Python either (a
  Python 2 module, a template named `.py`, syntax newer than the tool's Python) is skipped: the
  check reports only what the patches broke. A file the series creates is always checked.

A problem names the file and line in the patched tree and the last patch that touched the file:
`build/vllm/vllm/x.py:12: IndentationError: expected an indented block ... (patch NN-name.patch)`.
"""

from __future__ import annotations

import hashlib
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from .gitcmd import Git
from .patchfile import PatchFile

ZERO = "0" * 40
_INDEX = re.compile(r"^index ([0-9a-f]{7,40})\.\.([0-9a-f]{7,40})(?: \d{6})?$")
BASE_REF = "refs/dsv4/base"  # (tree.BASE_REF; not imported: tree imports this module's callers)


@dataclass
class Touched:
    """A `.py` file as the whole series leaves it."""
    path: str  # inside the upstream tree
    patch: str  # the last patch that changes it
    old_id: str | None  # its blob at the pin (None: the series creates it)
    new_id: str | None  # its blob after the series (from the last patch's `index` line), if given


@dataclass
class CompileProblem:
    path: str
    line: int
    kind: str  # SyntaxError, IndentationError, TabError, ValueError, ...
    message: str
    patch: str

    def where(self, tree: str) -> str:
        return f"{tree.rstrip('/')}/{self.path}" + (f":{self.line}" if self.line else "")

    def one_line(self, tree: str) -> str:
        return f"{self.where(tree)}: {self.kind}: {self.message} (patch {self.patch})"

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _blob_ids(patch: PatchFile) -> dict[int, tuple[str, str]]:
    """{line of the file's `diff --git`: (old blob id, new blob id)} from the `index` lines."""
    lines = patch.raw.decode("utf-8", "surrogateescape").split("\n")
    ids = {}
    for fd in patch.files:
        for ln in lines[fd.line: fd.line + 8]:  # header lines between `diff --git` and `---`/`@@`
            if ln.startswith(("diff --git ", "@@ ", "--- ")):
                break
            m = _INDEX.match(ln)
            if m:
                ids[fd.line] = (m.group(1), m.group(2))
                break
    return ids


def touched_python(patches: list[PatchFile]) -> list[Touched]:
    """The `.py` files the series leaves in the tree, each with the last patch that changed it."""
    found: dict[str, Touched] = {}
    for p in patches:
        ids = _blob_ids(p)
        for fd in p.files:
            old, new = ids.get(fd.line, (None, None))
            if fd.old_path and fd.old_path != fd.new_path and not fd.copy:
                found.pop(fd.old_path, None)  # renamed away
            path = fd.new_path
            if not path or not path.endswith(".py") or fd.binary or "120000" in (fd.new_mode, fd.old_mode):
                if path:
                    found.pop(path, None)
                continue
            first = found.get(path)
            old_id = first.old_id if first else (None if fd.old_path is None or old == ZERO else old)
            found[path] = Touched(path, p.name, old_id, new if new and new != ZERO else None)
    return list(found.values())


def _memo(blob: str) -> Path | None:
    """The marker of "the blob with this git id compiled with this Python" in the tool cache
    (compiled/), so a second `check` or no-op `apply` compiles (and reads) nothing it compiled
    before: ~15 ms a vLLM module."""
    from .sources.base import Cache

    tag = f"{sys.implementation.name}-{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    try:
        return Cache.default().root / "compiled" / tag / blob
    except (OSError, RuntimeError):  # no home folder: no memo
        return None


def known_good(blob: str | None) -> bool:
    """Whether the blob `blob` (a full git id) compiled with this Python before."""
    if not blob or len(blob) != 40:
        return False
    memo = _memo(blob)
    return memo is not None and memo.exists()


def _tree_marker(tree: Path) -> Path:
    return tree / ".git" / "dsv4" / f"compiled-{sys.implementation.name}-{sys.version_info.major}.{sys.version_info.minor}"


def remember_tree(tree: Path) -> None:
    """Mark the tree's HEAD as checked with this Python (the tool owns the tree's .git/dsv4/)."""
    head = Git(tree).rev("HEAD")
    if head:
        try:
            _tree_marker(tree).write_text(head + "\n")
        except OSError:
            pass


def tree_known_good(tree: Path) -> bool:
    """Whether the tree's HEAD passed this check before (remember_tree), or every `.py` file its
    commits change (refs/dsv4/base..HEAD, as blobs) compiled before with this Python: a no-op
    `apply` answers without parsing a patch. False (check it the long way) when anything is unknown."""
    marker = _tree_marker(tree)
    head = Git(tree).rev("HEAD")
    try:
        if head and marker.read_text().strip() == head:
            return True
    except OSError:
        pass
    r = Git(tree).run("diff-tree", "-r", "--no-renames", "-z", BASE_REF, "HEAD", check=False)
    if r.rc != 0:
        return False
    fields = r.out.split("\0")
    for meta, path in zip(fields[0::2], fields[1::2]):
        parts = meta.split()  # ":old_mode new_mode old_id new_id status"
        if len(parts) != 5 or not path.endswith(".py") or parts[4] == "D" or parts[1] == "120000":
            continue
        if not known_good(parts[3]):
            return False
    return True


def compile_error(path: str, data: bytes) -> tuple[int, str, str] | None:
    """(line, kind, message) when `data` does not compile as Python; None when it does (only that
    is remembered: a failure is compiled again, for its message)."""
    memo = _memo(hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())  # git's blob id
    if memo is not None and memo.exists():
        return None
    bad = _compile(path, data)
    if bad is None and memo is not None:
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            memo.touch()
        except OSError:
            pass  # a read-only cache: compiled again next time
    return bad


def _compile(path: str, data: bytes) -> tuple[int, str, str] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning (invalid escapes) is not a failure
            compile(data, path, "exec", dont_inherit=True)
    except SyntaxError as e:  # IndentationError and TabError are SyntaxErrors
        return e.lineno or 0, type(e).__name__, e.msg or str(e)
    except (ValueError, UnicodeError) as e:  # null bytes; an undecodable file
        return 0, type(e).__name__, str(e)
    except (RecursionError, MemoryError) as e:  # nesting too deep for the parser
        return 0, type(e).__name__, str(e) or "too deeply nested"
    return None


def _problem(t: Touched, data: bytes, upstream) -> CompileProblem | None:
    """A problem when `data` does not compile but the upstream file did (or the series made it);
    `upstream()` returns the pin's bytes, read only when needed."""
    bad = compile_error(t.path, data)
    if bad is None:
        return None
    if t.old_id is not None:
        before = upstream()
        if before is None or compile_error(t.path, before) is not None:
            return None  # not Python this interpreter reads at the pin either (Python 2, a template)
    line, kind, msg = bad
    return CompileProblem(t.path, line, kind, msg, t.patch)


def check_work_tree(tree: Path, patches: list[PatchFile]) -> list[CompileProblem]:
    """The touched `.py` files as they are on disk in a patched tree built by `apply`."""
    g = Git(tree)
    problems = []
    for t in touched_python(patches):
        f = tree / t.path
        if not f.is_file() or f.is_symlink():
            continue

        def upstream(t=t):
            r = g.run("cat-file", "blob", f"{BASE_REF}:{t.path}", check=False)
            return r.out.encode("utf-8", "surrogateescape") if r.rc == 0 else None

        p = _problem(t, f.read_bytes(), upstream)
        if p:
            problems.append(p)
    return problems


def _cat_blobs(repo: Path, ids: set[str]) -> dict[str, bytes]:
    """The blobs of `ids` that `repo` holds (the others are left out)."""
    if not ids or not repo.exists():
        return {}
    want = sorted(ids)
    r = Git(repo).run("cat-file", "--batch", stdin=("\n".join(want) + "\n").encode(), check=False)
    if r.rc != 0:
        return {}
    out = r.out.encode("utf-8", "surrogateescape")
    blobs, pos = {}, 0
    for sha in want:
        nl = out.find(b"\n", pos)
        if nl < 0:
            break
        head = out[pos:nl].split()
        if len(head) != 3 or head[1] != b"blob":  # "<sha> missing"
            pos = nl + 1
            continue
        n = int(head[2])
        blobs[sha] = out[nl + 1:nl + 1 + n]
        pos = nl + 1 + n + 1
    return blobs


def _planned(base: tuple[Path, str], patches: list[PatchFile]) -> dict[str, bytes]:
    """Post-images computed in memory from the pin (nothing is written to `base`'s repository):
    {path: bytes after the last patch the fast path could make exactly}."""
    from .fastapply import plan_series

    repo, commit = base
    try:
        planned, _ = plan_series(Git(repo), commit, [p.raw for p in patches])
    except Exception:  # noqa: BLE001 - an unreadable base gives no contents; the caller says "not compiled"
        return {}
    content: dict[str, bytes] = {}
    for pl in planned:
        for path, _mode, data in pl.changes:
            if data is None:
                content.pop(path, None)
            else:
                content[path] = data
    if len(planned) < len(patches):
        # a declined patch: later contents are unknown; drop what the rest of the series touches
        for p in patches[len(planned):]:
            for fd in p.files:
                for path in fd.paths:
                    content.pop(path, None)
    return content


def check_objects(patches: list[PatchFile], repos: list[Path], base: tuple[Path, str] | None
                  ) -> tuple[list[CompileProblem], list[str]]:
    """The touched `.py` files as the series leaves them, read from git objects only (no work
    tree): their post-image blobs where one of `repos` holds them (a tree built by apply, a pristine
    tree whose objects status --check made), else computed in memory from `base` (repo, commit).
    Returns (problems, paths that could not be read: not compiled)."""
    touched = [t for t in touched_python(patches) if not known_good(t.new_id)]
    if not touched:
        return [], []
    content: dict[str, bytes] = {}
    want = {t.new_id for t in touched if t.new_id}
    blobs: dict[str, bytes] = {}
    for repo in repos:
        if want - set(blobs):
            blobs.update(_cat_blobs(repo, want - set(blobs)))
    for t in touched:
        if t.new_id in blobs:
            content[t.path] = blobs[t.new_id]
    if len(content) < len(touched) and base is not None:
        made = _planned(base, patches)
        for t in touched:
            if t.path not in content and t.path in made:
                content[t.path] = made[t.path]
    olds = {t.old_id for t in touched if t.old_id}
    upstream_blobs: dict[str, bytes] | None = None

    def upstream(t: Touched) -> bytes | None:
        nonlocal upstream_blobs
        if upstream_blobs is None:  # read once, only when something failed to compile
            upstream_blobs = {}
            for repo in ([base[0]] if base else []) + list(repos):
                if olds - set(upstream_blobs):
                    upstream_blobs.update(_cat_blobs(repo, olds - set(upstream_blobs)))
        return upstream_blobs.get(t.old_id)

    problems, unread = [], []
    for t in touched:
        if t.path not in content:
            unread.append(t.path)
            continue
        p = _problem(t, content[t.path], lambda t=t: upstream(t))
        if p:
            problems.append(p)
    return problems, unread
