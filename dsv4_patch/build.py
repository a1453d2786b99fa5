"""Overlay build: the pinned release from its wheel, with the stack's patched Python files on top.

    build_overlay(base_tree, patched_tree, venv, package="vllm", version="0.27.1")

1. creates (or reuses) `venv` and installs `<package>==<version>` from the registry (for vLLM on a
   CPU machine, `torch==<DSV4_BUILD_TORCH or 2.13.0>` first, so pip keeps the local CPU build and
   never pulls a multi-GB CUDA torch);
2. lists the files the stack changes (`git diff --name-status refs/dsv4/base HEAD` in the patched
   tree, or a directory diff when the trees are not git trees made by `apply`);
3. refuses when the stack changes compiled sources (csrc/, *.cu, *.cuh, *.hip, *.cpp,
   CMakeLists.txt, cmake/): those need `--from-source`;
4. checks that each file it will replace or delete is, in the installed wheel, byte-equal to the
   pinned base tree (so the overlay lands on the code the patches were made against);
5. writes the patched files into site-packages (added files added, deleted files removed). A file is
   unlinked before it is written, so a venv cloned with hard links never shares the change.

The result is keyed by (package, version, sha256 of the overlaid paths and bytes) in a stamp file
in the venv; the same key later is a no-op. A different overlay first restores the previous one's
files from the base tree. `from_source=True` runs `pip install <patched_tree>` instead (vLLM takes
a patched DeepGEMM through DEEPGEMM_SRC_DIR).

No printing here: `progress(message)` is called when given. Errors are Dsv4Error subclasses with
one-line messages.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .errors import Dsv4Error
from .flock import file_lock
from .gitcmd import Git

STAMP = ".dsv4-build.json"
DEFAULT_TORCH = "2.13.0"
COMPILED_SUFFIXES = (".cu", ".cuh", ".hip", ".cpp", ".cc", ".c", ".h", ".hpp")
COMPILED_DIRS = ("csrc/", "cmake/")
COMPILED_NAMES = ("CMakeLists.txt",)
# PyPI's builds of these pull CUDA libraries that cannot load beside the CPU torch (vLLM's import
# then fails with `operator torchvision::nms does not exist`) and vLLM does not need them on CPU:
# removed after installing, as the regression harness does.
PRUNE = {"vllm": ("torchvision", "torchaudio", "torchcodec")}

Progress = Callable[[str], None] | None


class BuildError(Dsv4Error):
    pass


@dataclass
class BuildResult:
    venv: Path
    python: Path
    package: str
    version: str
    mode: str  # "overlay" or "source"
    key: str
    cached: bool
    overlaid: list[str] = field(default_factory=list)  # modified files written into site-packages
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # changed files the wheel does not ship (tests, docs)
    site_packages: Path | None = None
    seconds: float = 0.0
    pruned: list[str] = field(default_factory=list)  # distributions removed after install (see PRUNE)
    imports: dict[str, str] = field(default_factory=dict)  # patched module -> "ok" or why it failed

    @property
    def imports_ok(self) -> bool:
        """No patched module fails where its unpatched original imports."""
        return all(v == "ok" or v.startswith(UNPATCHED_TOO) for v in self.imports.values())

    def summary(self) -> list[str]:
        """Lines a person reads (the CLI prints them)."""
        lines = [f"{self.package} {self.version} in {self.venv} ({self.mode}"
                 + (", up to date" if self.cached else "") + f", {self.seconds:.1f} s)"]
        if self.mode == "overlay":
            lines.append(f"  overlaid {len(self.overlaid)} modified, {len(self.added)} added, "
                         f"{len(self.removed)} removed file(s); {len(self.skipped)} changed file(s) not in the wheel")
        if self.pruned:
            lines.append(f"  removed {', '.join(self.pruned)} (CUDA builds that do not load beside the CPU torch)")
        bad = {m: why for m, why in self.imports.items() if why != "ok" and not why.startswith(UNPATCHED_TOO)}
        here = {m: why[len(UNPATCHED_TOO):] for m, why in self.imports.items() if why.startswith(UNPATCHED_TOO)}
        good = len(self.imports) - len(bad) - len(here)
        lines.append(f"  patched modules that import: {good}/{len(self.imports)}"
                     + (f" ({len(here)} cannot be imported on this machine, patched or not)" if here else ""))
        lines += [f"  does not import: {m}: {why}" for m, why in bad.items()]
        lines += [f"  not importable here, unpatched either: {m}: {why}" for m, why in here.items()]
        lines.append(f"  python: {self.python}")
        return lines

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("venv", "python", "site_packages"):
            d[k] = str(d[k]) if d[k] is not None else None
        return d


def _say(progress: Progress, msg: str) -> None:
    if progress is not None:
        progress(msg)


def _run(argv: list[str], *, what: str, env: dict | None = None, cwd: Path | None = None) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    except OSError as e:
        raise BuildError(f"{what}: cannot run {argv[0]}: {e}") from None
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()
        last = tail[-1] if tail else f"exit {r.returncode}"
        raise BuildError(f"{what} failed: {last}", details=(r.stdout or "") + (r.stderr or ""))
    return r.stdout


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def is_compiled_source(path: str) -> bool:
    p = path.replace("\\", "/")
    name = p.rsplit("/", 1)[-1]
    return (
        name in COMPILED_NAMES
        or p.endswith(COMPILED_SUFFIXES)
        or any(p.startswith(d) or f"/{d}" in p for d in COMPILED_DIRS)
    )


# --- what the stack changes ----------------------------------------------------------------------

def changed_files(base_tree: Path, patched_tree: Path) -> list[tuple[str, str]]:
    """[(status, path)] with status A, M or D, sorted by path. Renames count as D + A."""
    git = Git(patched_tree)
    if git.rev("refs/dsv4/base") is not None:
        r = git.run("diff", "--name-status", "--no-renames", "-z", "refs/dsv4/base", "HEAD", check=False)
        if r.rc != 0:
            raise BuildError(f"{patched_tree}: git diff refs/dsv4/base HEAD failed: {r.err.strip()}")
        parts = [p for p in r.out.split("\0") if p]
        out = [(parts[i][0], parts[i + 1]) for i in range(0, len(parts), 2)]
        return sorted((((s if s in "AMD" else "M"), p) for s, p in out), key=lambda t: t[1])
    return _dir_diff(base_tree, patched_tree)


def _files_under(root: Path) -> dict[str, Path]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for f in filenames:
            p = Path(dirpath) / f
            out[p.relative_to(root).as_posix()] = p
    return out


def _dir_diff(base_tree: Path, patched_tree: Path) -> list[tuple[str, str]]:
    a, b = _files_under(base_tree), _files_under(patched_tree)
    out = []
    for rel in sorted(set(a) | set(b)):
        if rel not in b:
            out.append(("D", rel))
        elif rel not in a:
            out.append(("A", rel))
        elif a[rel].stat().st_size != b[rel].stat().st_size or a[rel].read_bytes() != b[rel].read_bytes():
            out.append(("M", rel))
    return out


def overlay_key(package: str, version: str, patched_tree: Path, changes: list[tuple[str, str]]) -> str:
    h = hashlib.sha256(f"{package}=={version}\n".encode())
    for status, path in changes:
        h.update(f"{status} {path}\n".encode())
        if status != "D":
            h.update(hashlib.sha256((patched_tree / path).read_bytes()).digest())
    return h.hexdigest()


# --- the venv ------------------------------------------------------------------------------------

def _read_stamp(venv: Path) -> dict | None:
    try:
        return json.loads((venv / STAMP).read_text())
    except (OSError, ValueError):
        return None


def _write_stamp(venv: Path, data: dict) -> None:
    tmp = venv / (STAMP + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, venv / STAMP)


def _installed(py: Path, package: str) -> tuple[str | None, Path | None, set[str]]:
    """(installed version, site-packages dir, files the distribution installed, relative to it)."""
    code = (
        "import json, sys, sysconfig\n"
        "from importlib import metadata\n"
        "sp = sysconfig.get_paths()['purelib']\n"
        "try:\n"
        f"    d = metadata.distribution({package!r})\n"
        "    files = [str(f) for f in (d.files or [])]\n"
        "    print(json.dumps([d.version, str(d.locate_file('')), files]))\n"
        "except metadata.PackageNotFoundError:\n"
        "    print(json.dumps([None, sp, []]))\n"
    )
    out = _run([str(py), "-c", code], what=f"inspecting {package} in {py}")
    version, sp, files = json.loads(out.strip().splitlines()[-1])
    return version, Path(sp), set(files)


def ensure_venv(venv: Path, python: str | None, progress: Progress = None) -> Path:
    py = venv_python(venv)
    if py.exists():
        return py
    _say(progress, f"creating venv {venv}")
    venv.parent.mkdir(parents=True, exist_ok=True)
    _run([python or "python3", "-m", "venv", str(venv)], what=f"creating venv {venv}")
    return py


def install_release(py: Path, package: str, version: str, *, cache_dir: Path | None,
                    progress: Progress = None) -> None:
    # --no-compile: pip would byte-compile every module of torch, vLLM and their dependencies (about
    # 3 GB of them), most of which a deployment never imports; each module is compiled on its first
    # import instead, into the venv as usual (the install took 2:15 with it on a 2-core machine).
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile"]
    if cache_dir is not None:
        pip += ["--cache-dir", str(cache_dir)]
    if package == "vllm":
        torch = os.environ.get("DSV4_BUILD_TORCH", DEFAULT_TORCH)
        if torch:
            _say(progress, f"pip install torch=={torch}")
            _run(pip + [f"torch=={torch}"], what=f"pip install torch=={torch}")
    _say(progress, f"pip install {package}=={version}")
    _run(pip + [f"{package}=={version}"], what=f"pip install {package}=={version}")


def prune(py: Path, names: tuple[str, ...], progress: Progress = None) -> list[str]:
    """Uninstall those of `names` that are installed; returns the ones removed."""
    if not names:
        return []
    code = "import importlib.util as u, sys; print(' '.join(n for n in sys.argv[1:] if u.find_spec(n)))"
    present = _run([str(py), "-c", code, *names], what=f"looking for {', '.join(names)}").split()
    if present:
        _say(progress, f"pip uninstall {' '.join(present)}")
        _run([str(py), "-m", "pip", "uninstall", "-y", "-q", *present], what=f"pip uninstall {' '.join(present)}")
    return present


def module_name(path: str) -> str | None:
    """site-packages-relative .py path -> module name (None for anything else)."""
    if not path.endswith(".py"):
        return None
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


IMPORT_CHECK = """
import importlib, importlib.abc, importlib.util, json, sys
# argv[1]: {module: file} to load from the pristine base tree instead of the venv (the unpatched
# module, for telling "the patch broke it" from "it does not import on this machine at all").
base = json.loads(sys.argv[1])

class _Base(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_file_location(name, base[name]) if name in base else None

sys.meta_path.insert(0, _Base())
res = {}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
        res[name] = "ok"
    except BaseException as e:  # SystemExit and friends too: the module does not import
        res[name] = (type(e).__name__ + ": " + str(e)).splitlines()[0][:300]
print("DSV4-IMPORTS " + json.dumps(res))
"""
UNPATCHED_TOO = "does not import here unpatched either: "


def _import_in(py: Path, mods: list[str], base: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([str(py), "-c", IMPORT_CHECK, json.dumps(base), *mods], capture_output=True, text=True,
                       env=env, cwd="/")
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("DSV4-IMPORTS ")), None)
    if line is None:
        tail = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return {m: f"the interpreter died: {tail}" for m in mods}
    return json.loads(line[len("DSV4-IMPORTS "):])


def check_imports(py: Path, paths: list[str], progress: Progress = None,
                  base_tree: Path | None = None) -> dict[str, str]:
    """Import every patched module in the built venv, in a fresh interpreter on CPU. A module that
    fails is imported again from the pristine base tree (one interpreter per module): failing there
    too, it is a module this machine cannot import at all (e.g. vllm.platforms.rocm without ROCm),
    reported as such, not a broken build."""
    by_mod = {m: p for p in paths for m in [module_name(p)] if m}
    mods = sorted(by_mod)
    if not mods:
        return {}
    _say(progress, f"importing {len(mods)} patched module(s) in {py}")
    res = _import_in(py, mods, {})
    for m, why in list(res.items()):
        orig = base_tree / by_mod[m] if base_tree is not None else None
        if why == "ok" or orig is None or not orig.is_file() or by_mod[m].endswith("__init__.py"):
            continue
        if _import_in(py, [m], {m: str(orig)}).get(m, "ok") != "ok":
            res[m] = UNPATCHED_TOO + why
    return res


# --- overlay -------------------------------------------------------------------------------------

def _replace_file(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".dsv4-tmp")
    shutil.copyfile(src, tmp)
    shutil.copymode(src, tmp)
    os.replace(tmp, dst)  # a new inode: hard-linked clones of the venv keep their copy


def _remove_file(dst: Path) -> None:
    try:
        dst.unlink()
    except FileNotFoundError:
        pass


def _sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _restore_previous(stamp: dict, base_tree: Path, site: Path, progress: Progress) -> None:
    # The originals come back from the base tree only if it is the tree the venv was overlaid
    # from: a tree of another release would silently mix two releases in one venv.
    for entry in stamp.get("files", []):
        want = entry.get("orig_sha256")
        if entry["status"] != "A" and want and _sha256(base_tree / entry["path"]) != want:
            raise BuildError(
                f"{entry['path']}: {base_tree} is not the base this venv was overlaid from "
                f"({stamp.get('package')} {stamp.get('version')})",
                hint="pass the matching base tree and version, or build into a fresh venv")
    for entry in stamp.get("files", []):
        status, path = entry["status"], entry["path"]
        dst = site / path
        if status == "A":
            _remove_file(dst)
        elif (base_tree / path).is_file():
            _replace_file(base_tree / path, dst)
    _say(progress, f"restored {len(stamp.get('files', []))} file(s) of the previous overlay")


def _plan(changes, base_tree: Path, site: Path, dist_files: set[str], package: str, version: str):
    """Split changes into (apply list, skipped) and check the originals against the wheel."""
    top_dirs = {f.split("/", 1)[0] for f in dist_files if "/" in f and not f.split("/", 1)[0].endswith(
        (".dist-info", ".data"))}
    plan, skipped = [], []
    for status, path in changes:
        in_wheel = path in dist_files
        in_pkg = path.split("/", 1)[0] in top_dirs and "/" in path
        if not (in_wheel or (status == "A" and in_pkg)):
            skipped.append(path)
            continue
        if status in ("M", "D"):
            orig = base_tree / path
            inst = site / path
            if not orig.is_file() or not inst.is_file() or orig.read_bytes() != inst.read_bytes():
                raise BuildError(
                    f"{path}: the installed {package} {version} differs from the pinned base tree; "
                    "refusing to overlay (reinstall the release or use --from-source)")
        plan.append((status, path))
    return plan, skipped


def venv_lock(venv: Path):
    """One writer per venv: venvs in a shared cache (~/.cache/dsv4-patch/venvs) are built by every
    checkout of the same pin, and a second process must wait, not rewrite files under the first."""
    venv = Path(venv)
    return file_lock(venv.parent / f".{venv.name}.lock")


def build_overlay(base_tree: Path, patched_tree: Path, venv: Path, *, package: str, version: str,
                  python: str | None = None, from_source: bool = False, cache_dir: Path | None = None,
                  deepgemm_src: Path | None = None, progress: Progress = None,
                  prune_names: tuple[str, ...] | None = None, verify_imports: bool = True) -> BuildResult:
    """See the module docstring. Holds the venv's lock throughout; afterwards every patched module
    is imported in the venv (`imports`; a build whose modules do not import is reported by the
    caller as failed). `prune_names` default: PRUNE[package], removed after a fresh install."""
    venv = Path(venv).absolute()
    t0 = time.monotonic()
    with venv_lock(venv):
        res = _build_overlay(base_tree, patched_tree, venv, package=package, version=version, python=python,
                             from_source=from_source, cache_dir=cache_dir, deepgemm_src=deepgemm_src,
                             progress=progress,
                             prune_names=PRUNE.get(package, ()) if prune_names is None else prune_names)
        if verify_imports and res.mode == "overlay":
            stamp = _read_stamp(venv) or {}
            if res.cached and stamp.get("imports") is not None and (
                    BuildResult(**{**res.__dict__, "imports": stamp["imports"]}).imports_ok):
                res.imports = stamp["imports"]
            else:
                res.imports = check_imports(res.python, res.overlaid + res.added, progress, base_tree=Path(base_tree))
                stamp["imports"] = res.imports
                _write_stamp(venv, stamp)
        res.pruned = res.pruned or (_read_stamp(venv) or {}).get("pruned", [])
    res.seconds = time.monotonic() - t0  # the import check included: it is part of the build
    return res


def _build_overlay(base_tree: Path, patched_tree: Path, venv: Path, *, package: str, version: str,
                   python: str | None, from_source: bool, cache_dir: Path | None,
                   deepgemm_src: Path | None, progress: Progress, prune_names: tuple[str, ...]) -> BuildResult:
    t0 = time.monotonic()
    base_tree, patched_tree, venv = Path(base_tree), Path(patched_tree), Path(venv).absolute()
    for t, what in ((base_tree, "base"), (patched_tree, "patched")):
        if not t.is_dir():
            raise BuildError(f"{t}: {what} tree not found", hint="run `dsv4-patch apply` first")
    changes = changed_files(base_tree, patched_tree)
    compiled = [p for _, p in changes if is_compiled_source(p)]
    if compiled and not from_source:
        raise BuildError(
            f"the stack changes compiled sources ({compiled[0]}"
            + (f" and {len(compiled) - 1} more" if len(compiled) > 1 else "")
            + "); an overlay of Python files cannot carry them",
            hint="build with --from-source")
    key = overlay_key(package, version, patched_tree, changes)
    mode = "source" if from_source else "overlay"

    py = ensure_venv(venv, python, progress)
    stamp = _read_stamp(venv)
    installed, site, dist_files = _installed(py, package)
    # a venv made before pruning (or by hand) still has them: the import would fail there too
    early_pruned = prune(py, prune_names, progress) if installed == version and not from_source else []
    if (stamp and stamp.get("key") == key and stamp.get("mode") == mode
            and installed == (stamp.get("installed_version") or version)):
        _say(progress, f"{venv}: up to date ({package} {version}, overlay {key[:12]})")
        return BuildResult(venv=venv, python=py, package=package, version=version, mode=mode, key=key,
                           cached=True, overlaid=stamp.get("overlaid", []), added=stamp.get("added", []),
                           removed=stamp.get("removed", []), skipped=stamp.get("skipped", []),
                           site_packages=site, seconds=time.monotonic() - t0, pruned=early_pruned)

    if from_source:
        env = dict(os.environ)
        if deepgemm_src is not None:
            env["DEEPGEMM_SRC_DIR"] = str(Path(deepgemm_src).absolute())
        argv = [str(py), "-m", "pip", "install", "--disable-pip-version-check"]
        if cache_dir is not None:
            argv += ["--cache-dir", str(cache_dir)]
        _say(progress, f"pip install {patched_tree} (from source)")
        _run(argv + [str(patched_tree)], what=f"pip install {patched_tree}", env=env)
        installed, site, _ = _installed(py, package)
        _write_stamp(venv, {"key": key, "mode": mode, "package": package, "version": version,
                            "installed_version": installed, "files": []})
        return BuildResult(venv=venv, python=py, package=package, version=version, mode=mode, key=key,
                           cached=False, site_packages=site, seconds=time.monotonic() - t0)

    if installed != version:
        if installed is not None:
            _say(progress, f"{package} {installed} installed; replacing with {version}")
        install_release(py, package, version, cache_dir=cache_dir, progress=progress)
        pruned = prune(py, prune_names, progress)
        installed, site, dist_files = _installed(py, package)
        if installed != version:
            raise BuildError(f"{venv}: pip installed {package} {installed}, not {version}")
        stamp = None  # a fresh install carries no overlay
    else:
        pruned = early_pruned
        if stamp and stamp.get("files"):
            _restore_previous(stamp, base_tree, site, progress)
    pruned = pruned or list((stamp or {}).get("pruned", []))
    plan, skipped = _plan(changes, base_tree, site, dist_files, package, version)
    overlaid, added, removed = [], [], []
    for status, path in plan:
        dst = site / path
        if status == "D":
            _remove_file(dst)
            removed.append(path)
        else:
            _replace_file(patched_tree / path, dst)
            (added if status == "A" else overlaid).append(path)
        for pyc in (dst.parent / "__pycache__").glob(dst.stem + ".*.pyc"):
            _remove_file(pyc)
    _say(progress, f"overlaid {len(overlaid)} modified, {len(added)} added, {len(removed)} removed file(s)")
    _write_stamp(venv, {"key": key, "mode": mode, "package": package, "version": version,
                        "installed_version": installed,
                        "files": [{"status": s, "path": p, "orig_sha256": _sha256(base_tree / p)} for s, p in plan],
                        "overlaid": overlaid, "added": added, "removed": removed, "skipped": skipped,
                        "pruned": pruned})
    return BuildResult(venv=venv, python=py, package=package, version=version, mode=mode, key=key,
                       cached=False, overlaid=overlaid, added=added, removed=removed, skipped=skipped,
                       site_packages=site, seconds=time.monotonic() - t0, pruned=pruned)
