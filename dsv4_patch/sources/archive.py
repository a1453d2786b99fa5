"""`sdist` / `wheel` sources: a release archive from a PEP 503/691 index, imported as one commit.

- Downloaded directly from the index's file URL (never `pip download`, which builds sdist metadata).
- sha256 verified against the pin before anything is read.
- Never extracted: the members stream into one `git fast-import` (streamimport.py), after the rules
  of members.py (no member escapes the tree or lies under a link, every link resolves inside the
  tree, no duplicates, no devices, fifos or hard links, no ownership kept).
- Optionally re-rooted (the SGLang wheel's `sglang/...` is the repo's `python/sglang/...`) and cut
  to the members matching `include` (DeepGEMM as vendored in the vLLM wheel: only
  `vllm/third_party/deep_gemm/*`); an archive in which `include` matches nothing is refused.
- Imported as one deterministic commit (fixed author, committer and dates), so the same archive
  always gives the same commit hash; the blob ids equal the upstream repo's, so patches made on
  the git repo apply and 3-way merge here. The tree is the one `git add -A` of a safe extraction
  gives (tested against `tar -x` + `git add`), so imports cached before streaming stay valid.
- Where the archive records its commit id (vLLM's `__commit_id__`), it must match the pin.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path

from ..config import SourceSpec, StackConfig
from ..errors import SourceError
from ..flock import folder_lock
from ..gitcmd import Git, init_repo
from .base import BaseTree, Cache, Progress, say
from .members import read_members
from .streamimport import StreamImport

IMPORT_AUTHOR = {
    "GIT_AUTHOR_NAME": "dsv4-patch import",
    "GIT_AUTHOR_EMAIL": "dsv4-patch@users.noreply.github.com",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
}
IMPORT_FORMAT = "1"  # bump when the import recipe changes (invalidates cached imports)


def index_url() -> str:
    return (os.environ.get("DSV4_PYPI_INDEX") or os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple").rstrip("/")


def archive_filename(spec: SourceSpec, version: str | None = None) -> str:
    version = version or str(spec.get("version"))
    if spec.get("filename") and version == str(spec.get("version")):
        return spec.get("filename")
    if spec.kind == "sdist":
        return f"{spec.get('package')}-{version}.tar.gz"
    if spec.get("filename"):  # same wheel tag, other version
        return spec.get("filename").replace(f"-{spec.get('version')}-", f"-{version}-", 1)
    raise SourceError(f"wheel source of {spec.get('package')} needs 'filename'", hint="set the wheel file name in stacks.toml")


def list_files(package: str) -> list[dict]:
    """The index's file list for a package (PEP 691 JSON; each has filename, url, hashes)."""
    url = f"{index_url()}/{package}/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            data = json.load(r)
    except Exception as e:  # noqa: BLE001 - any network failure is one line for the user
        raise SourceError(f"cannot read {url}: {e}", hint="set DSV4_PYPI_INDEX to a reachable index") from None
    return data.get("files", [])


def find_file(package: str, filename: str) -> dict:
    for f in list_files(package):
        if f["filename"] == filename:
            return f
    raise SourceError(f"{index_url()}/{package}/ lists no {filename}", hint="check version/filename in stacks.toml")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download(package: str, filename: str, sha256: str | None, cache: Cache, progress: Progress = None) -> tuple[Path, str]:
    """The archive in the cache, verified; returns (path, note)."""
    dest = cache.dir("archives") / filename
    if dest.exists():
        if sha256 is None or sha256_of(dest) == sha256:
            return dest, "cached"
        dest.unlink()  # a corrupt cache entry is replaced, never trusted
    info = find_file(package, filename)
    sha256 = sha256 or info.get("hashes", {}).get("sha256")
    t0 = time.monotonic()
    say(progress, f"downloading {filename}")
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(info["url"], timeout=120) as r:
            shutil.copyfileobj(r, out, 1 << 20)
        got = sha256_of(Path(tmp))
        if sha256 and got != sha256:
            raise SourceError(
                f"{filename}: sha256 {got} does not match the pin {sha256}",
                hint="the archive changed upstream or in transit; check the pin before trusting it",
            )
        os.replace(tmp, dest)
    except SourceError:
        raise
    except Exception as e:  # noqa: BLE001
        raise SourceError(f"download of {filename} failed: {e}", hint="check network access to the index") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    mb = dest.stat().st_size / 1e6
    return dest, f"downloaded {mb:.1f} MB in {time.monotonic() - t0:.1f} s"


def recorded_commit(text: bytes | None) -> str | None:
    """The commit id setuptools-scm wrote into the archive's version file, if any."""
    if text is None:
        return None
    # setuptools-scm writes `__commit_id__ = commit_id = 'g6e448d0ea'` (after a type annotation line)
    m = re.search(r"^__commit_id__\s*=\s*(?:\w+\s*=\s*)*['\"]g?([0-9a-f]{6,40})['\"]", text.decode("utf-8", "replace"), re.M)
    return m.group(1) if m else None


def materialize(stack: StackConfig, spec: SourceSpec, cache: Cache, progress: Progress = None, *,
                offline: bool = False, version: str | None = None, sha256: str | None = None,
                expect_commit: str | None = None) -> BaseTree:
    package = spec.get("package")
    if not package:
        raise SourceError(f"stack {stack.name}: {spec.kind} source needs 'package'")
    version = version or str(spec.get("version"))
    pinned = version == str(spec.get("version"))
    sha256 = sha256 or (spec.get("sha256") if pinned else None)
    if pinned and not sha256:
        raise SourceError(f"stack {stack.name}: {spec.kind} source has no sha256", hint="run `dsv4-patch pin` to record it")
    filename = archive_filename(spec, version)
    strip = spec.get("strip") or (filename[: -len(".tar.gz")] if spec.kind == "sdist" else None)
    reroot = dict(spec.get("reroot", {}))
    exclude = list(spec.get("exclude", []))
    include = list(spec.get("include", []))
    if sha256 is None:
        # An unpinned release (bump, pin): name the import by the archive's real hash, so one
        # archive is imported once whichever command asked first.
        cached = cache.root / "archives" / filename
        if cached.exists():
            sha256 = sha256_of(cached)
        elif not offline:
            sha256 = find_file(package, filename).get("hashes", {}).get("sha256")
    recipe = [IMPORT_FORMAT, sha256, filename, strip, reroot, exclude] + ([include] if include else [])
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:24]
    repo_path = cache.dir("imports") / f"{key}.git"
    desc = f"{spec.kind}:{package}=={version}"
    want_tree = spec.get("tree") if pinned else None
    if done := _imported(repo_path, desc):
        return _check_tree(done, want_tree, filename)
    if offline:
        raise SourceError(f"{filename} has not been imported yet", hint="run `dsv4-patch apply` online once")
    # The download is atomic on its own (written aside, renamed): it stays outside the lock, so a
    # slow one never holds up other imports; two processes racing cold may both download.
    archive, note = download(package, filename, sha256, cache, progress)
    # Another process (a second checkout, a parallel test worker) may be importing the same
    # archive: wait for it and take its import. A finished import is never replaced, because a
    # reader may be cloning from it without any lock. One import at a time (a few seconds each)
    # keeps the lock inside the imports folder, with no lock file left beside the imports.
    with folder_lock(repo_path.parent, lambda: cache.root / "locks" / "imports.lock"):
        if done := _imported(repo_path, desc):
            return _check_tree(done, want_tree, filename)
        if _ref_written(repo_path):  # a finished import git failed to read just now: keep it for its readers
            raise SourceError(
                f"{repo_path}: git could not read this finished import",
                hint=f"run the command again; if `git -C {repo_path} fsck` reports errors, delete that folder and run again")
        sha256 = sha256 or sha256_of(archive)
        work = Path(tempfile.mkdtemp(prefix="import-", dir=cache.dir("tmp")))
        commit_file = spec.get("commit_file")
        try:
            say(progress, f"importing {filename}")
            staging = work / "repo.git"
            with StreamImport(init_repo(staging, bare=True), filename) as imp:
                for m, chunks in read_members(archive, strip=strip, reroot=reroot, exclude=exclude, include=include):
                    imp.add(m, chunks, keep=m.path == commit_file)
                if imp.count == 0 and include:
                    raise SourceError(f"{filename}: no member matches include {include}",
                                      hint="this archive does not carry that folder; check the version or 'include'")
                if imp.count == 0:
                    raise SourceError(f"{filename}: no files under {strip or '/'}", hint="check 'strip'/'reroot' in stacks.toml")
                want = expect_commit if expect_commit is not None else (stack.commit if pinned else None)
                got = None
                if commit_file:
                    got = recorded_commit(imp.kept.get(commit_file))
                    if got is None:
                        raise SourceError(f"{filename}: {commit_file} records no __commit_id__")
                    if want and HEXLIKE.fullmatch(want) and not (want.startswith(got) or got.startswith(want)):
                        raise SourceError(
                            f"{filename} was built from commit {got}, the pin says {want}",
                            hint="refusing a mismatched archive; fix the pin or the archive",
                        )
                recorded = f"recorded-commit: {got}\n" if got else ""
                sha = imp.commit("refs/dsv4/import", f"Import {filename}\n\nsha256: {sha256}\nsource: {desc}\n{recorded}",
                                 IMPORT_AUTHOR)
            _check_tree(BaseTree(staging, sha, desc), want_tree, filename)  # a wrong tree is never cached
            if repo_path.exists():  # an import that never got its ref: no reader can be using it
                shutil.rmtree(repo_path)
            os.replace(staging, repo_path)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return BaseTree(repo_path, sha, desc, note=note)


def tree_id(base: BaseTree) -> str:
    """The git tree id of an imported tree: its content id (same files, same id)."""
    return Git(base.git_dir).out("rev-parse", f"{base.commit}^{{tree}}").strip()


def _check_tree(base: BaseTree, want: str | None, filename: str) -> BaseTree:
    """A source's `tree` (content id) must be the imported tree's: two archives may carry different
    trees under one version label (vLLM 0.33.0 and 0.34.0 both vendor a DeepGEMM "2.8.1")."""
    if want and (got := tree_id(base)) != want:
        raise SourceError(f"{filename}: the imported tree is {got}, the pin's content id (tree) is {want}",
                          hint="refusing a tree that is not the pinned one; check the archive or the pin's 'tree'")
    return base


def _ref_written(repo_path: Path) -> bool:
    """Whether the import's ref is on disk, read without git (which may fail for other reasons)."""
    if (repo_path / "refs" / "dsv4" / "import").is_file():
        return True
    packed = repo_path / "packed-refs"
    return packed.is_file() and " refs/dsv4/import\n" in packed.read_text(errors="replace")


def _imported(repo_path: Path, desc: str) -> BaseTree | None:
    if (repo_path / "HEAD").exists():
        sha = Git(repo_path).rev("refs/dsv4/import")
        if sha:
            return BaseTree(repo_path, sha, desc, note="cached import")
    return None


HEXLIKE = re.compile(r"[0-9a-f]{6,40}")
