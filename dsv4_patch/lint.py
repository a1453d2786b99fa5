"""`dsv4-patch check`: lint the stacks without touching any upstream tree.

Each finding names the file (and line where there is one) and what to do.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from .config import Project, StackConfig
from .errors import PatchFormatError
from .patchfile import FileDiff, PatchFile, load_patch
from .series import read_series

REQUIRED = ("Upstream-Status", "Regression-Test")
SIGNOFF = re.compile(r"^Signed-off-by:[ \t]*(.*)$", re.M)
IDENT = re.compile(r"^[^<>\s][^<>]*? <[^<>@\s]+@[^<>\s]+>$")
IDENT_PARTS = re.compile(r"^(?P<name>[^<>]*?)\s*<(?P<email>[^<>\s]+)>$")


def signoff_problem(patch: PatchFile) -> str | None:
    """What is wrong with the patch file's `Signed-off-by:` lines, None when nothing is.

    A patch file need not carry one: our trailers say only what is true, and a person's sign-off is
    added when a person sends the patch (`export --upstream` signs it off as the sender; a DCO
    sign-off certifies a person). Where the file does carry sign-offs (the team's, today), each is
    `Name <email>`, they sit in the closing trailer block, and the author is among them."""
    found = SIGNOFF.findall(patch.description)
    if not found:
        return None
    bad = next((v for v in found if not IDENT.match(v.strip())), None)
    if bad is not None:
        return f"Signed-off-by: {bad.strip()!r} is not 'Name <email>'"
    last = patch.description.strip().split("\n\n")[-1]
    if not SIGNOFF.search(last):
        return "Signed-off-by: is not in the closing trailer block (git and DCO checks read only the last paragraph)"
    author = (patch.author or "").strip()
    if not any(_same_identity(author, v.strip()) for v in found):
        return (f"the author {author!r} has not signed off (Signed-off-by: {found[-1].strip()!r}); "
                "DCO checks want the author's own sign-off: make the From: identity and the trailer the same")
    return None


def _same_identity(a: str, b: str) -> bool:
    """`Name <email>` pairs are the same person as DCO checks see it: same name, same email (any case)."""
    ma, mb = IDENT_PARTS.match(a), IDENT_PARTS.match(b)
    if not ma or not mb:
        return False
    return ma["name"].strip() == mb["name"].strip() and ma["email"].lower() == mb["email"].lower()


@dataclass
class Finding:
    file: str  # path relative to the project root
    line: int
    message: str
    severity: str = "error"
    stack: str = ""  # set by api.check: the stack and release the finding is for
    release: str = ""

    def __str__(self) -> str:
        loc = f"{self.file}:{self.line}" if self.line else self.file
        return f"{loc}: {self.severity}: {self.message}"

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def node_exists(root: Path, node: str) -> str | None:
    """None when the pytest node id names an existing file/function/class; else why not."""
    parts = node.split("::")
    path = root / parts[0]
    if not path.is_file():
        return f"no file {parts[0]}"
    if len(parts) == 1:
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError as e:
        return f"{parts[0]} does not parse: {e}"
    scope: list[ast.stmt] = tree.body
    for name in parts[1:]:
        name = name.split("[", 1)[0]  # parametrized ids: test_x[case]
        hit = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name), None)
        if hit is None and any(isinstance(n, ast.ImportFrom) and name in {a.asname or a.name for a in n.names}
                               for n in scope):
            return None  # a test collected from another module (same assertions, this folder's fixtures)
        if hit is None:
            return f"{parts[0]} has no {name}"
        scope = hit.body if isinstance(hit, ast.ClassDef) else []
    return None


def is_dot_git(part: str) -> bool:
    """A path component that names the .git folder on some file system we run on: `.GIT`, `.git.` and
    `.git ` are that folder on case-insensitive or Windows ones. The archive import's rule
    (sources/members.py is_dot_git, which the tests hold to this one); not imported from there, which
    would load the archive readers into every apply."""
    return part.lower().rstrip(". ") == ".git"


def unsafe_path(path: str) -> str | None:
    if "\0" in path:  # no file system takes one (and git's arguments cannot carry it)
        return "path with a NUL byte"
    p = posixpath.normpath(path)
    if path.startswith("/"):
        return "absolute path"
    if p == ".." or p.startswith("../") or "/../" in f"/{path}/":
        return "path with '..'"
    if any(is_dot_git(part) for part in p.split("/")):  # any component; `.GIT`, `.git.`, `.git ` too
        return "path under .git/"
    return None


def symlink_escapes(fd: FileDiff) -> bool:
    t = fd.symlink_target
    if t is None:
        return False
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(fd.path), t))
    return t.startswith("/") or joined == ".." or joined.startswith("../")


def _path_findings(fd: FileDiff) -> list[str]:
    out = [f"{why}: {p}" for p in fd.paths if (why := unsafe_path(p))]
    if symlink_escapes(fd):
        out.append(f"symlink {fd.path} -> {fd.symlink_target} points outside the tree")
    return out


def _whitespace_findings(fd: FileDiff) -> list[tuple[int, str]]:
    out = []
    added = [ln for h in fd.hunks for ln in h.lines if ln.startswith("+")]
    crlf = bool(added) and all(ln.endswith("\r") for ln in added)  # a CRLF file keeps its \r
    for h in fd.hunks:
        for k, ln in enumerate(h.lines):
            if not ln.startswith("+") or fd.binary:
                continue
            body = ln[1:-1] if crlf else ln[1:]
            if body != body.rstrip(" \t\r"):
                out.append((h.line + 1 + k, f"added trailing whitespace in {fd.path}"))
    return out


def lint_patch(project: Project, stack: StackConfig, patch: PatchFile) -> list[Finding]:
    rel = project.rel(stack.patch_dir / patch.name)
    f: list[Finding] = []
    if not patch.description:
        f.append(Finding(rel, 0, "no description: say what broke, how it was found and how it was verified"))
    if patch.metadata.upstream_status is None:
        f.append(Finding(rel, 0, "missing Upstream-Status: (Pending | Submitted <url> | Backport <commit> | Inappropriate [reason])"))
    if not patch.metadata.regression_tests:
        f.append(Finding(rel, 0, "missing Regression-Test: <pytest node id> (the test that fails without this patch)"))
    if patch.filename_trailer is not None:
        f.append(Finding(rel, 0, f"carries a Patch-Filename: {patch.filename_trailer!r} line; apply adds it and "
                                 "export removes it, a patch file must not hold it (delete the line)"))
    why = signoff_problem(patch)
    if why:
        fix = ("reset the author in the tree (`git commit --amend --reset-author` as the signer, or fix the trailer) and export"
               if why.startswith("the author") else "fix the trailer in the tree (`git rebase -i refs/dsv4/base`) and export")
        f.append(Finding(rel, 0, why + "; " + fix))
    for node in patch.metadata.regression_tests:
        why = node_exists(project.root, node)
        if why:
            f.append(Finding(rel, 0, f"Regression-Test {node}: {why}"))
    for node in patch.metadata.drop_when_tests:  # the tests that decide it at a bump
        why = node_exists(project.root, node)
        if why:
            f.append(Finding(rel, 0, f"Drop-When names {node}: {why}"))
    for fd in patch.files:
        for msg in _path_findings(fd):
            f.append(Finding(rel, fd.line, msg + " (patches may only touch paths inside the upstream tree)"))
        for line, msg in _whitespace_findings(fd):
            f.append(Finding(rel, line, msg + " (remove it and re-export)"))
    return f


def _synced_findings(project: Project, stack: StackConfig, patches: list[PatchFile]) -> list[Finding]:
    """A file a patch adds must equal its single source of truth in this repo, byte for byte."""
    out = []
    for tree_path, repo_file in stack.synced.items():
        src = project.root / repo_file
        makers = [(p, fd) for p in patches for fd in p.files if fd.new_path == tree_path]
        if not makers:
            continue  # the patch is not written yet; nothing to compare
        p, fd = makers[0]
        rel = project.rel(stack.patch_dir / p.name)
        if fd.old_path is not None or len(makers) > 1:
            out.append(Finding(rel, fd.line, f"{tree_path} must be added by exactly one patch (it is synced with {repo_file})"))
            continue
        lines = [ln for h in fd.hunks for ln in h.lines]
        content = "".join(ln[1:] + "\n" for ln in lines if ln.startswith("+"))
        if lines and lines[-1].startswith("\\"):
            content = content[:-1]
        if not src.is_file():
            out.append(Finding(repo_file, 0, f"missing; {rel} adds {tree_path} which must equal it"))
        elif src.read_bytes() != content.encode("utf-8", "surrogateescape"):
            out.append(Finding(rel, fd.line, f"{tree_path} differs from {repo_file}; regenerate the patch from the kernels/ file"))
    return out


def pristine_findings(project: Project, stack: StackConfig, patches: list[PatchFile]) -> list[Finding]:
    """A Regression-Test that a recorded result shows passing on the pristine pin (same pin, same
    patch bytes, same test code: pristine.py) proves nothing about its patch. Read from the result
    files only (no test runs); where none says so, nothing is reported (check cannot tell)."""
    from .pristine import recorded_passes, trailer_line

    out = []
    by_name = {p.name: p for p in patches}
    for hit in recorded_passes(project.root, stack.patch_dir, stack.commit, patches):
        out.append(Finding(
            project.rel(stack.patch_dir / hit.patch), trailer_line(by_name[hit.patch].raw, hit.node),
            f"Regression-Test {hit.node} passes on the pristine pin without the patch ({project.rel(hit.result)}): "
            "it is no evidence; bind a test that fails without the patch, or make this one skip under DSV4_INTENT "
            "with a reason containing 'not an intent test' and record again (`dsv4-patch regress --record`)"))
    return out


def compile_findings(project: Project, stack: StackConfig, patches: list[PatchFile], sources) -> list[Finding]:
    """Each `.py` file the series touches must compile as the series leaves it (compilecheck.py).

    `sources()` gives (repositories that may hold the post-image blobs, (repo, commit) of the pin
    or None): read only when the series touches a `.py` file. A file found in neither is not
    compiled; one note per release says so (a `note` finding is no failure)."""
    from .compilecheck import check_objects, known_good, python_version, touched_python

    if all(known_good(t.new_id) for t in touched_python(patches)):
        return []  # nothing touched, or every file as the series leaves it compiled before
    repos, base = sources()
    problems, unread = check_objects(patches, repos, base)
    tree = f"build/{stack.label}"
    out = [Finding(f"{tree}/{pr.path}", pr.line,
                   f"{pr.kind}: {pr.message} (patch {pr.patch}; Python {python_version()} cannot compile it: "
                   f"fix it in {tree}, commit, `dsv4-patch export {stack.label}`)")
           for pr in problems]
    if unread:
        out.append(Finding(project.rel(stack.series_path), 0,
                           f"{len(unread)} Python file{'s' if len(unread) > 1 else ''} the series touches not compiled "
                           f"(no local copy of the pin; `dsv4-patch apply {stack.label}` once makes one)", "note"))
    return out


def lint_stack(project: Project, stack: StackConfig, sources=None) -> list[Finding]:
    """The stack's findings; with `sources` (see compile_findings) the touched `.py` files are
    also compiled."""
    findings: list[Finding] = []
    series_rel = project.rel(stack.series_path)
    try:
        entries = read_series(stack.series_path)
    except PatchFormatError as e:
        return [Finding(series_rel, 0, e.one_line())]
    seen: dict[str, int] = {}
    for e in entries:
        if e.name in seen:
            findings.append(Finding(series_rel, e.line, f"duplicate entry {e.name} (first on line {seen[e.name]})"))
        seen.setdefault(e.name, e.line)
    on_disk = {p.name for p in stack.patch_dir.glob("*.patch")}
    for name in sorted(on_disk - set(seen)):
        findings.append(Finding(project.rel(stack.patch_dir / name), 0, "orphan patch: not listed in series (add it or delete it)"))
    patches, complete = [], True
    for e in entries:
        if e.name in {p.name for p in patches}:
            continue
        path = stack.patch_dir / e.name
        if not path.exists():
            findings.append(Finding(series_rel, e.line, f"{e.name} is listed but missing (restore it or drop the line)"))
            complete = False
            continue
        try:
            patch = load_patch(path)
        except PatchFormatError as err:
            findings.append(Finding(project.rel(path), 0, err.one_line()))
            complete = False
            continue
        patches.append(patch)
        findings += lint_patch(project, stack, patch)
    findings += _synced_findings(project, stack, patches)
    findings += pristine_findings(project, stack, patches)
    if sources is not None and complete:  # a series with a gap is not the tree apply would build
        findings += compile_findings(project, stack, patches, sources)
    return findings
