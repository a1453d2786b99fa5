"""The check-result cache: results of the expensive regression computations (a vLLM check script in
its venv, an SGLang probe interpreter), stored under a key that hashes everything the computation
reads, and read back whenever the very same computation is asked for again: by another test, by the
pytest that `dsv4-patch regress`/`bump`/`pin` start, by the newcomer session's own regress, and by
the next test run (what Bazel does with test results). A computation whose inputs cannot all be
named (an unstamped venv, a tree with local changes, a script outside the hashed sources) has no key
and always runs.

What goes into a key is the caller's (tests/regress/vllm/_vllm_venvs.py, tests/regress/sglang/
conftest.py); the pieces they share are here. The folder is DSV4_CHECK_MEMO, which tests/conftest.py
sets once per run: the tool cache's `check-results/` by default, `run` for a folder that lives only
as long as the run (what `dsv4-patch regress --fresh` and `--record` ask for), `0` for none. `log`
in it says what was computed and what was read back.
"""

from __future__ import annotations

import hashlib
import json
import os
import site
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from dsv4_patch.build import venv_lock
from dsv4_patch.regress import RESULT_CACHE_ENV as MEMO_ENV  # `regress --fresh` sets it to `run`

MEMO_FORMAT = 2  # bump when what a key covers changes: entries of another format are never read
KEEP_DAYS = 30  # results not read for this long are removed when a run starts (tests/conftest.py)
_sources: dict[tuple[str, ...], str] = {}
_dists: dict[tuple[str, str], str] = {}


def sources_digest(root: Path, tops: tuple[Path, ...]) -> str:
    """The paths (relative to root) and bytes of every .py under `tops`, once per process."""
    memo = tuple(str(t) for t in tops)
    if memo not in _sources:
        h = hashlib.sha256()
        for top in tops:
            for f in sorted(top.rglob("*.py")):
                if "__pycache__" not in f.parts:
                    h.update(f"{f.relative_to(root).as_posix()}\n".encode())
                    h.update(hashlib.sha256(f.read_bytes()).digest())
        _sources[memo] = h.hexdigest()
    return _sources[memo]


def dists_identity(sites: list[Path], skip: tuple[str, ...] = ()) -> dict[str, str]:
    """{dist-info folder name: digest of its RECORD's importable files} for every distribution in
    `sites`: a rebuilt install with another build of the same version is another install. RECORD
    lines of files outside the site folder (console scripts, whose shebang names the venv's path)
    and of byte code (made from the sources, or not, by `pip --no-compile`) are left out, so two
    installs of the same wheels at other paths, compiled or not, are the same. Distributions
    whose name starts with one of `skip` are left out. Once per process and folder state (an install
    or removal changes the folder's mtime)."""
    out: dict[str, str] = {}
    for sp in sites:
        try:
            state = f"{sp.stat().st_mtime_ns}"
        except OSError:
            continue
        memo = (str(sp), state)
        if memo not in _dists:
            found = {}
            for d in sorted(sp.glob("*.dist-info")):
                try:
                    lines = (d / "RECORD").read_text().splitlines()
                except OSError:
                    lines = []
                inside = "\n".join(ln for ln in lines if not ln.startswith("../") and ".pyc," not in ln)
                found[d.name] = hashlib.sha256(inside.encode()).hexdigest()
            _dists[memo] = json.dumps(found)
        out.update({k: v for k, v in json.loads(_dists[memo]).items() if not k.startswith(skip)})
    return out


def interpreter_identity(skip: tuple[str, ...] = ("dsv4_patch",)) -> dict:
    """This interpreter: its version, platform and the distributions it can import (this project's
    own left out: the computations run other code)."""
    import platform

    sites = [Path(p) for p in site.getsitepackages()]
    return {"python": sys.version, "platform": sys.platform, "machine": platform.machine(),
            "dists": dists_identity(sites, skip)}


def tree_identity(tree: Path) -> str:
    """HEAD's tree id of a clean git work tree ("" when it has local changes or is not one)."""
    from dsv4_patch.gitcmd import Git

    g = Git(tree)
    r = g.run("status", "--porcelain", "--untracked-files=no", check=False)
    head = g.run("rev-parse", "HEAD^{tree}", check=False)
    return head.out.strip() if r.rc == 0 and not r.out.strip() and head.rc == 0 else ""


def key_of(*parts) -> str:
    return hashlib.sha256(json.dumps([MEMO_FORMAT, *parts], sort_keys=True).encode()).hexdigest()


def memoized(key: str | None, what: str, compute: Callable[[], dict]) -> dict:
    """compute()'s JSON-able result, read back from the cache when `key` is stored there. Two asking
    for one key at once: one computes, the other waits and reads it (a lock per key)."""
    memo = folder()
    if not key or memo is None:
        return compute()
    t0 = time.monotonic()
    with venv_lock(memo / key):
        found = lookup(key, what, waited=time.monotonic() - t0)
        if found is not None:
            return found
        result = compute()
        store(key, what, result, took=time.monotonic() - t0)
        return result


def folder() -> Path | None:
    memo = os.environ.get(MEMO_ENV)
    return Path(memo) if memo and memo != "0" and Path(memo).is_dir() else None


def lookup(key: str | None, what: str, waited: float = 0.0) -> dict | None:
    """The stored result of `key`, or None (no key, no cache, not stored, or not readable whole)."""
    memo = folder()
    if not key or memo is None:
        return None
    path = memo / f"{key}.json"
    entry = read_entry(path)
    if entry is None:
        return None
    try:
        os.utime(path)  # last used: what pruning goes by
    except OSError:
        pass
    _log(memo, f"hit  {key[:12]} {what} (computed {entry['computed']}; waited {waited:.1f} s)")
    return entry["result"]


def store(key: str | None, what: str, result: dict, took: float = 0.0) -> None:
    """Keep `result` under `key` (written aside and renamed: a reader sees all of it or nothing)."""
    memo = folder()
    if not key or memo is None:
        return
    path = memo / f"{key}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"format": MEMO_FORMAT, "what": what, "result": result,
                               "computed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
    os.replace(tmp, path)
    _log(memo, f"ran  {key[:12]} {what} ({took:.1f} s)")


def read_entry(path: Path) -> dict | None:
    """A stored result, or None when there is none or it cannot be read whole (a torn or foreign
    file: the computation runs again and the entry is rewritten)."""
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(entry, dict) and entry.get("format") == MEMO_FORMAT and isinstance(entry.get("result"), dict)
    return entry if ok else None


def prune(memo: Path, now: float | None = None) -> None:
    """Remove results (and their lock files) not used for KEEP_DAYS."""
    cutoff = (now or time.time()) - KEEP_DAYS * 86400
    for f in [*memo.glob("*.json"), *memo.glob(".*.lock"), *memo.glob(".*.tmp")] if memo.is_dir() else ():
        try:
            if f.stat().st_mtime < cutoff:
                f.unlink()
        except OSError:
            pass  # another run's, removed or used meanwhile


def completed(result: dict, args) -> subprocess.CompletedProcess:
    """A stored {"rc", "stdout", "stderr"} as the CompletedProcess it was made from."""
    return subprocess.CompletedProcess(args, result["rc"], result["stdout"], result["stderr"])


def _log(memo: str, line: str) -> None:
    with open(Path(memo) / "log", "a") as f:
        f.write(f"{time.strftime('%H:%M:%S')} {os.getpid()} {line}\n")
