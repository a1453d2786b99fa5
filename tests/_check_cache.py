"""The check-result cache: results of the expensive regression computations (a vLLM check script in
its venv, an SGLang probe interpreter), stored under a key that hashes everything the computation
reads, and read back whenever the very same computation is asked for again: by another test, by the
pytest that `dsv4-patch regress`/`bump`/`pin` start, by the newcomer session's own regress, and by
the next test run. A computation whose inputs cannot all be named (an unstamped venv, a tree with
local changes, a script outside the hashed sources, a check that imported other repo code) has no
key, or is not stored, and always runs.

Failures are never stored across runs (as Bazel, which runs a failed test again): the callers return
`Uncached` for a failed sub-check or test, and for what the machine did (a run killed by a signal,
out of memory or interrupted). A stored transient failure would replay until the key changed, and
on a pristine venv, where the patch's checks are expected to fail, a stored one would turn the
unpatched test green without running anything. A failure of the code (`Uncached(..., run=True)`)
is kept for the rest of the run that computed it, in the run's own folder (DSV4_TEST_RUN_DIR,
removed when the run ends): the same inputs asked for again in that run (by another test, or by the
pytest that the newcomer session's `regress` starts) get the same answer without a second
computation, as `DSV4_CHECK_MEMO=run` gives every result; the next run computes it again. What the
machine did is never kept, not even for the run. A randomized check's seed is in its key and in its entry.
The vLLM key describes a venv by what its site-packages holds at the overlaid paths, not only by the
build stamp (tests/regress/vllm/_vllm_venvs.py installed_files): an overlay lost after the stamp was
written is another key, so it runs and goes red instead of replaying an earlier pass.

What goes into a key is the caller's (tests/regress/vllm/_vllm_venvs.py, tests/regress/sglang/
conftest.py); the pieces they share are here. The folder is DSV4_CHECK_MEMO, which tests/conftest.py
sets once per run: the tool cache's `check-results/` by default, `run` for a folder that lives only
as long as the run (what `dsv4-patch regress --fresh` and `--record` ask for), `0` for none. `log`
in it says what was computed, what was read back and what was not stored.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import json
import os
import re
import site
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from dsv4_patch.build import venv_lock
from dsv4_patch.regress import RESULT_CACHE_ENV as MEMO_ENV  # `regress --fresh` sets it to `run`
from dsv4_patch.regress import RUN_DIR_ENV  # the run's own folder (tests/conftest.py), gone with the run

MEMO_FORMAT = 4  # bump when what a key covers changes: entries of another format are never read
KEEP_DAYS = 30  # results not read for this long are removed when a run starts (tests/conftest.py)
LOG_LIMIT = 1 << 20  # bytes of `log` kept: its newer half survives each prune past this
# Variables that SGLang, vLLM, their libraries, pytest (checks run in-tree tests with it) or the
# interpreter read, beside the ones a check names itself. PYTEST_XDIST_*/PYTEST_CURRENT_TEST differ
# per worker and test, and are read by no check.
KEYED_ENV = ("SGLANG_", "VLLM_", "PROBE_", "TRITON_", "TORCH", "PYTORCH_", "CUDA_", "HIP_", "ROCM_", "OMP_",
             "MKL_", "OPENBLAS_", "GOTO_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "PYTEST_", "LD_",
             "PYTHONHASHSEED", "PYTHONWARNINGS", "PYTHONOPTIMIZE")
UNKEYED_ENV = ("PYTEST_XDIST_", "PYTEST_CURRENT_TEST")
_HERE = Path(__file__).resolve().parent
# the code that shapes every run and key: an edit to it is a new cache
_OWN = (_HERE / "_check_cache.py", _HERE / "_forkserver.py")
_BOOKKEEPING = re.compile(r"\.dist-info/(?:REQUESTED|INSTALLER|direct_url\.json|RECORD)$")
# what prune may remove: results, and leftovers of their writers and of the log's trim
_RESULT = re.compile(r"^(?:[0-9a-f]{64}\.json|\.[0-9a-f]{64}\.json\.\d+\.tmp|\.log\.\d+\.tmp)$")
_sources: dict[tuple[str, ...], str] = {}
_dists: dict[tuple[str, int], dict[str, dict]] = {}  # _records: a site folder's RECORDs and what is derived from them


@dataclass(frozen=True)
class Uncached:
    """A result to return but not to store across runs, and why. `run`: the code's own failure, kept
    for the rest of this run (never what the machine did: a signal, out of memory)."""
    value: dict
    why: str
    run: bool = False


def _inductor_cache_default() -> str:
    """torch's own TORCHINDUCTOR_CACHE_DIR when the variable is unset
    (torch/_inductor/runtime/cache_dir_utils.py, default_cache_dir)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.abspath(os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)))


# Variables a library writes into this process's environment, set to its own default, the first time
# it needs them: torch's inductor (any torch.compile in a test) sets TORCHINDUCTOR_CACHE_DIR. A child
# started afterwards would get the value its own torch takes anyway, but a key that saw the variable
# differed between the xdist workers and from the pytest runs `regress` starts: the same check was
# computed once per process that asked for it (a warm run computed its pristine checks two and three
# times each). Left out.
LIBRARY_DEFAULTS = {"TORCHINDUCTOR_CACHE_DIR": _inductor_cache_default}


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` (this process's, for a check's or probe's process) less LIBRARY_DEFAULTS variables that
    hold their library's default: what the child would take without them."""
    return {k: v for k, v in env.items() if not (k in LIBRARY_DEFAULTS and v == LIBRARY_DEFAULTS[k]())}


def keyed_env(env: dict[str, str], named: set[str] = frozenset()) -> dict[str, str]:
    """The part of `env` a key covers: KEYED_ENV and the variables in `named`."""
    return {k: v for k, v in env.items()
            if (k.startswith(KEYED_ENV) and not k.startswith(UNKEYED_ENV)) or k in named}


def is_test_module(f: Path) -> bool:
    """A pytest test module (test_*.py): it picks which computation to ask for and judges what comes
    back, and feeds none of it (the runners build every input themselves), so no key covers it and an
    edit to a test re-runs no check. A vLLM check that imports one is not stored
    (_vllm_venvs.storable); the SGLang probes and runners are scripts of their own that import none."""
    return f.name.startswith("test_") and f.suffix == ".py"


def sources_digest(root: Path, tops: tuple[Path, ...]) -> str:
    """The paths (relative to root) and bytes of every .py under `tops` (folders or files) but the
    test modules in folders, once per process."""
    memo = tuple(str(t) for t in tops)
    if memo not in _sources:
        h = hashlib.sha256()
        for top in tops:
            for f in sorted(p for p in top.rglob("*.py") if not is_test_module(p)) if top.is_dir() else [top]:
                if "__pycache__" not in f.parts:
                    h.update(f"{f.relative_to(root).as_posix()}\n".encode())
                    h.update(hashlib.sha256(f.read_bytes()).digest())
        _sources[memo] = h.hexdigest()
    return _sources[memo]


def _record_line_counts(line: str) -> bool:
    """RECORD lines that say what an install holds: not files outside the site folder (console
    scripts, whose shebang names the venv's path), not byte code (made from the sources, or not, by
    `pip --no-compile`), not pip's bookkeeping in the dist-info (REQUESTED, INSTALLER, and
    direct_url.json with its absolute path); entry points and metadata stay (vLLM reads its
    plugins from entry points)."""
    path = line.split(",", 1)[0]
    return not (path.startswith("../") or path.endswith(".pyc") or _BOOKKEEPING.search(path))


def _records(sp: Path) -> dict[str, dict] | None:
    """{"records": {dist-info folder name: its RECORD's lines}} of a site folder (None: no such
    folder), read once per process and folder state (an install or removal changes the folder's
    mtime). dists_identity and recorded_hashes both derive from it and keep their results in the
    same entry."""
    try:
        memo = (str(sp), sp.stat().st_mtime_ns)
    except OSError:
        return None
    if memo not in _dists:
        found = {}
        for d in sorted(sp.glob("*.dist-info")):
            try:
                found[d.name] = (d / "RECORD").read_text().splitlines()
            except OSError:
                found[d.name] = []
        _dists[memo] = {"records": found}
    return _dists[memo]


def dists_identity(sites: list[Path], skip: tuple[str, ...] = (), only: tuple[str, ...] = ()) -> dict[str, str]:
    """{dist-info folder name: digest of its RECORD's importable files} for every distribution in
    `sites` (whose name starts with one of `only`, when given; none that start with one of `skip`): a
    rebuilt install with another build of the same version is another install; two installs of the
    same wheels at other paths, compiled or not, are the same."""
    out: dict[str, str] = {}
    for sp in sites:
        entry = _records(sp)
        if entry is None:
            continue
        if "digests" not in entry:
            entry["digests"] = {
                name: hashlib.sha256("\n".join(ln for ln in lines if _record_line_counts(ln)).encode()).hexdigest()
                for name, lines in entry["records"].items()}
        out.update({k: v for k, v in entry["digests"].items()
                    if not k.startswith(skip) and (not only or k.startswith(only))})
    return out


def recorded_hashes(site_dir: Path) -> dict[str, str]:
    """{path: sha256 hex} of every file the distributions in `site_dir` installed, as their RECORDs
    say (what installed_files in tests/regress/vllm/_vllm_venvs.py compares a venv's bytes with)."""
    entry = _records(site_dir)
    if entry is None:
        return {}
    if "hashes" not in entry:
        found: dict[str, str] = {}
        for lines in entry["records"].values():
            for line in lines:
                path, _, rest = line.partition(",")
                algo, _, digest = rest.partition(",")[0].partition("=")
                if algo == "sha256" and digest:
                    found[path] = base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
        entry["hashes"] = found
    return entry["hashes"]


def interpreter_identity(skip: tuple[str, ...] = ("dsv4_patch",), only: tuple[str, ...] = ()) -> dict:
    """This interpreter: its version, platform and the distributions it can import (this project's
    own left out: the computations run other code; `only` as for dists_identity)."""
    import platform

    sites = [Path(p) for p in site.getsitepackages()]
    return {"python": sys.version, "platform": sys.platform, "machine": platform.machine(),
            "dists": dists_identity(sites, skip, only)}


def tree_identity(tree: Path) -> str:
    """HEAD's tree id of a clean git work tree: "" when it is not one, or has local changes,
    untracked files included (a new module is importable; ignored files are not counted)."""
    from dsv4_patch.gitcmd import Git

    g = Git(tree)
    r = g.run("status", "--porcelain", "--untracked-files=all", check=False)
    head = g.run("rev-parse", "HEAD^{tree}", check=False)
    return head.out.strip() if r.rc == 0 and not r.out.strip() and head.rc == 0 else ""


def key_of(*parts) -> str:
    own = sources_digest(_HERE.parent, _OWN)
    return hashlib.sha256(json.dumps([MEMO_FORMAT, own, *parts], sort_keys=True).encode()).hexdigest()


def folder() -> Path | None:
    memo = os.environ.get(MEMO_ENV)
    return Path(memo) if memo and memo != "0" and Path(memo).is_dir() else None


def run_folder() -> Path | None:
    """Where this run keeps its code failures: a folder of the run's folder (gone with the run), or
    None outside a test run or with the cache off (`DSV4_CHECK_MEMO=0`: every check every time)."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if folder() is None or not run_dir or not Path(run_dir).is_dir():
        return None
    return Path(run_dir) / "check-failures"


def _lock_path(memo: Path, key: str) -> Path:
    """One of 256 lock files (by the key's first byte): never removed, so a lock is never deleted
    under its holder; two keys of one bucket wait for each other now and then."""
    return memo / "locks" / key[:2]


def hold(key: str | None):
    """A context manager holding `key`'s lock (nothing without a key or a cache)."""
    memo = folder()
    if not key or memo is None:
        return nullcontext()
    return venv_lock(_lock_path(memo, key))


def memoized(key: str | None, what: str, compute: Callable[[], dict | Uncached], meta: dict | None = None) -> dict:
    """compute()'s JSON-able result, read back from the cache when `key` is stored there. Two asking
    for one key at once: one computes, the other waits and reads it. `meta` is stored beside the
    result (a randomized check's seed, which its key covers too)."""
    t0 = time.monotonic()
    with hold(key):
        found = lookup(key, what, waited=time.monotonic() - t0)
        if found is not None:
            return found
        return store(key, what, compute(), took=time.monotonic() - t0, meta=meta)


def lookup(key: str | None, what: str, waited: float = 0.0) -> dict | None:
    """The stored result of `key`, or None (no key, no cache, not stored, or not readable whole)."""
    memo = folder()
    if not key or memo is None:
        return None
    path = memo / f"{key}.json"
    entry = read_entry(path)
    if entry is None:
        failed = run_folder()
        entry = read_entry(failed / f"{key}.json") if failed else None
        if entry is not None:
            _log(memo, f"hit  {key[:12]} {what} (a failure of this run, computed {entry['computed']})")
            return entry["result"]
        return None
    try:
        os.utime(path)  # last used: what pruning goes by
    except OSError:
        pass
    _log(memo, f"hit  {key[:12]} {what} (computed {entry['computed']}; waited {waited:.1f} s)")
    return entry["result"]


def store(key: str | None, what: str, result: dict | Uncached, took: float = 0.0, meta: dict | None = None) -> dict:
    """Keep `result` under `key` and return it; an Uncached one is returned and logged, and a code
    failure among them kept in this run's folder only (run_folder)."""
    memo = folder()
    if isinstance(result, Uncached):
        if key and memo is not None:
            failed = run_folder() if result.run else None
            if failed is not None:
                failed.mkdir(exist_ok=True)
                _write(failed / f"{key}.json", what, result.value, meta)
            _log(memo, f"not stored {key[:12]} {what}: {result.why}" + (" (kept for this run)" if failed else ""))
        return result.value
    if not key or memo is None:
        return result
    _write(memo / f"{key}.json", what, result, meta)
    _log(memo, f"ran  {key[:12]} {what} ({took:.1f} s)")
    return result


def _write(path: Path, what: str, result: dict, meta: dict | None) -> None:
    """An entry written aside and renamed: a reader sees all of it or nothing."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"format": MEMO_FORMAT, "what": what, "result": result, **(meta or {}),
                                   "computed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
    """Remove results not used for KEEP_DAYS and writers' leftovers as old (files named as this cache
    names them, nothing else); keep `log` under LOG_LIMIT. Lock files stay (see _lock_path)."""
    cutoff = (now or time.time()) - KEEP_DAYS * 86400
    for f in memo.iterdir() if memo.is_dir() else ():
        if not _RESULT.match(f.name):
            continue  # not this cache's: never removed (DSV4_CHECK_MEMO may name any folder)
        try:
            if f.stat().st_mtime < cutoff:
                f.unlink()
        except OSError:
            pass  # another run's, removed or used meanwhile
    log = memo / "log"
    try:
        if log.stat().st_size > LOG_LIMIT:
            data = log.read_bytes()[-LOG_LIMIT // 2:]
            tmp = log.with_name(f".log.{os.getpid()}.tmp")
            tmp.write_bytes(data[data.find(b"\n") + 1:])
            os.replace(tmp, log)
    except OSError:
        pass


def completed(result: dict, args) -> subprocess.CompletedProcess:
    """A stored {"rc", "stdout", "stderr"} as the CompletedProcess it was made from."""
    return subprocess.CompletedProcess(args, result["rc"], result["stdout"], result["stderr"])


def _log(memo: Path, line: str) -> None:
    with open(memo / "log", "a") as f:
        f.write(f"{time.strftime('%H:%M:%S')} {os.getpid()} {line}\n")
