"""The overlay venvs and check runner shared by the vLLM regression tests of every release.

A release's venvs live in DSV4_VENV_CACHE (default ~/.cache/dsv4-patch/venvs), in a folder named by
the release and the CPU recipe (release_root):

    vllm-<version>-cpu-<hash>/base             the release as the CPU recipe below installs it
    vllm-<version>-cpu-<hash>/patched-<key>    a hard-link clone of base, one patched tree's files overlaid

The patched clone is named by the overlay's key (dsv4_patch.build.overlay_key: the changed paths and
their bytes), not just `patched`: the cache is shared by every checkout and by the child pytest runs
of `bump`/`pin` (whose intent tests overlay a pristine or rebased tree), and one venv rewritten under
another run's check scripts made those fail at random. A clone costs ~2 s and only directory
entries. Every write (install, prune, clone) holds the venv's lock (dsv4_patch.build.venv_lock), so
parallel workers (pytest-xdist) and parallel checkouts wait for each other instead of racing.

How the base venv gets the release is chosen by what the release's tree holds, never by its version
(base_recipe): the torch it builds against (tree_torch_pin: pyproject's build requirements, else
requirements/cuda.txt). A release that pins the CPU torch installable here gets the CPU recipe below;
one that pins another torch (vLLM 0.33.0 and later pin 2.14.0, whose CPU build is not on this machine
and whose CUDA build is a multi-GB download) gets the "substitute torch" recipe: a hard-link clone of
the base venv of a donor release that pins the CPU torch (the stack's primary release), the release's
wheel installed over it without dependencies, and the pure-Python packages it imports at module level
but declares GPU-only (SUBSTITUTE_EXTRAS, at the versions it declares). Its modules then run on the
donor's dependencies and CPU torch; its compiled ops (vllm._C) do not load, which these CPU checks
do not need. The rest is here too: the clone, the overlay, and one check script per venv per run.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import site
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Callable

import _check_cache as check_cache
import pytest

from dsv4_patch.build import (DEFAULT_TORCH, STAMP, build_overlay, changed_files, ensure_venv, overlay_key,
                              venv_lock, venv_python)
from dsv4_patch.errors import Dsv4Error
from dsv4_patch.regress import RUN_DIR_ENV, venv_cache_root

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = "vllm"
# CUDA builds from PyPI that cannot load beside the CPU torch and are not needed on CPU.
PRUNE = ("torchvision", "torchaudio", "torchcodec")


def venv_cache() -> Path:
    env = os.environ.get("DSV4_VENV_CACHE")
    return Path(env) if env else venv_cache_root()  # under DSV4_PATCH_CACHE / XDG_CACHE_HOME when set


def release_version(tree: Path) -> str | None:
    """The release a tree holds, from the `__version__` setuptools-scm wrote into the sdist."""
    f = tree / "vllm" / "_version.py"
    m = re.search(r"^__version__\s*=\s*(?:\w+\s*=\s*)*['\"]([^'\"]+)['\"]", f.read_text(), re.M) if f.exists() else None
    return m.group(1) if m else None


def prune(py: Path) -> None:
    code = "import importlib.util as u, sys; print(' '.join(n for n in sys.argv[1:] if u.find_spec(n)))"
    present = subprocess.run([str(py), "-c", code, *PRUNE], capture_output=True, text=True).stdout.split()
    if present:
        subprocess.run([str(py), "-m", "pip", "uninstall", "-y", "-q", *present], check=True, capture_output=True)


def hardlink_clone(src: Path, dst: Path, prepare: Callable[[Path], None] | None = None) -> None:
    """dst as a hard-link copy of venv src (no second install, no second 3.6 GB); build_overlay and
    pip write new inodes, so src never sees what is done to dst. Built aside, moved in whole, under
    the locks of src (nobody writes it meanwhile) and dst (one cloner; the others then find it)."""
    if venv_python(dst).exists():
        return
    with venv_lock(src), venv_lock(dst):
        if venv_python(dst).exists():  # made while this process waited for the lock
            return
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-al", str(src), str(tmp)], check=True)
        if prepare:
            prepare(tmp)
        os.replace(tmp, dst)


def patched_venv_path(root: Path, base_tree: Path, patched_tree: Path, version: str) -> Path:
    """root/patched-<key>: the clone that holds exactly this patched tree's overlay."""
    key = overlay_key(PACKAGE, version, patched_tree, changed_files(base_tree, patched_tree))
    return root / f"patched-{key[:16]}"


# --- the CPU recipe of a release's base venv --------------------------------------------------------
# The checks run vLLM's Python modules on the CPU. The wheel also declares GPU-only dependencies: CUDA
# kernel packages and CUDA builds that the CPU checks do not need, 1.9 GB of the 5.5 GB that `pip
# install vllm==0.27.1` puts on disk. So a base venv gets CPU torch, the release with --no-deps, and
# then every dependency the release declares except these, at the versions pip resolves from the
# release's own specifiers (a release whose modules import one of them at module level installs it
# itself: SUBSTITUTE_EXTRAS). The recipe is part of the venvs' folder name
# (release_root), so checkouts with another recipe -- or the full install older checkouts made in
# vllm-<version>/ -- share the cache without touching each other's venvs.
GPU_ONLY = ("flashinfer-python", "nvidia-cutlass-dsl", "nvidia-cudnn-frontend", "tilelang", "tokenspeed-mla",
            "quack-kernels", "pynvvideocodec", "humming-kernels", "fastsafetensors", "nvtx",
            *PRUNE)
RECIPE_FILE = ".dsv4-cpu-recipe"  # written last: a base venv without it is an install that did not finish
BYTECODE_FILE = ".dsv4-bytecode"  # written once every module of the venv has its byte code beside it
# The release's declared dependencies (its installed metadata) but the named ones, markers evaluated
# for this interpreter, extras kept: argv[1] the dist, argv[2] the JSON list of normalized names.
DECLARED = r"""
import json, re, sys
from importlib.metadata import distribution
from pip._vendor.packaging.requirements import Requirement
drop = set(json.loads(sys.argv[2]))
keep = []
for text in distribution(sys.argv[1]).requires or []:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # an extra's, or another platform's
    if re.sub(r"[-_.]+", "-", req.name).lower() not in drop:
        req.marker = None
        keep.append(str(req))
print(json.dumps(keep))
"""


def _torch_pin() -> str:
    return os.environ.get("DSV4_BUILD_TORCH", DEFAULT_TORCH)  # "" = take the release's (as build.py)


def _recipe(substitute: dict | None = None) -> str:
    """The recipe's identity (part of the venvs' folder name). `substitute`: the substitute-torch
    recipe's own part (the donor release, the extras); None for the CPU recipe, whose text is
    unchanged since before releases pinned other torches (its venvs stay where they are)."""
    r = {"gpu_only": sorted(GPU_ONLY), "torch": _torch_pin()}
    return json.dumps(r if substitute is None else {**r, "substitute": substitute}, sort_keys=True)


def release_root(version: str, substitute: dict | None = None) -> Path:
    """The folder of `version`'s venvs made by this recipe: vllm-<version>-cpu-<recipe hash>."""
    return venv_cache() / f"{PACKAGE}-{version}-cpu-{hashlib.sha256(_recipe(substitute).encode()).hexdigest()[:8]}"


# --- which recipe a release gets: read from its tree ------------------------------------------------
# GPU-only packages (GPU_ONLY) that a release may import at module level, pure Python and installable
# without their dependencies: the substitute-torch recipe installs each its release declares, at the
# version declared (vLLM 0.33.0 and 0.34.0 reach humming's modules from quantization/utils at import).
SUBSTITUTE_EXTRAS = ("humming-kernels",)
_PIN_RE = r"^\s*{name}(?:\[[^\]]*\])?\s*==\s*([A-Za-z0-9_.+!-]+)\s*(?:;.*)?(?:#.*)?$"


def _requirement_pin(tree: Path, name: str) -> str | None:
    """`name`'s exact pin in the tree's requirements/cuda.txt, then common.txt (the wheel's own
    dependencies are generated from these), or None."""
    for f in ("requirements/cuda.txt", "requirements/common.txt"):
        path = tree / f
        m = re.search(_PIN_RE.format(name=re.escape(name)), path.read_text(), re.M) if path.is_file() else None
        if m:
            return m.group(1)
    return None


def tree_torch_pin(tree: Path) -> str | None:
    """The torch a release builds against: pyproject.toml's [build-system] requires (`torch == 2.13.0`),
    else requirements/cuda.txt's `torch==...`; None when the tree says neither."""
    try:
        data = tomllib.loads((tree / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        data = {}
    for req in data.get("build-system", {}).get("requires", []):
        m = re.fullmatch(r"\s*torch\s*==\s*([A-Za-z0-9_.+]+)\s*", req)
        if m:
            return m.group(1)
    return _requirement_pin(tree, "torch")


def needs_substitute_torch(tree: Path) -> bool:
    """The tree's torch is not the CPU torch this recipe installs (DSV4_BUILD_TORCH="" installs the
    release's own: never a substitute)."""
    cpu = _torch_pin()
    return bool(cpu) and tree_torch_pin(tree) not in (cpu, f"{cpu}+cpu")


def substitute_extras(tree: Path) -> list[str]:
    """`name==version` of the SUBSTITUTE_EXTRAS the tree declares."""
    return [f"{n}=={v}" for n in SUBSTITUTE_EXTRAS if (v := _requirement_pin(tree, n))]


def declared_dependencies(py: str, dist: str, drop: tuple[str, ...]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = subprocess.run([py, "-c", DECLARED, dist, json.dumps(list(drop))], check=True, capture_output=True,
                         text=True, env=env).stdout
    return json.loads(out)


def install_cpu_release(venv: Path, version: str) -> None:
    """The release and its CPU dependencies into `venv` (see GPU_ONLY), unless a finished install is
    there; an unfinished one is removed first, and so is the venv of an install that fails. The
    caller holds the venv's lock."""
    if (venv / RECIPE_FILE).is_file():
        return
    shutil.rmtree(venv, ignore_errors=True)
    try:
        py = str(ensure_venv(venv, None))
        pip = [py, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-compile"]  # ensure_bytecode
        torch = [f"torch=={_torch_pin()}"] if _torch_pin() else []
        if torch:
            subprocess.run([*pip, *torch], check=True, capture_output=True, text=True)
        subprocess.run([*pip, "--no-deps", f"{PACKAGE}=={version}"], check=True, capture_output=True, text=True)
        reqs = declared_dependencies(py, PACKAGE, GPU_ONLY + (("torch",) if torch else ()))
        subprocess.run([*pip, *torch, *reqs], check=True, capture_output=True, text=True)
        (venv / RECIPE_FILE).write_text(_recipe())
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise


def ensure_bytecode(venv: Path) -> None:
    """Byte code for every module of `venv`, beside its source, compiled once (under the venv's lock).

    The checks import vLLM (and torch) in venvs that have none otherwise: pip compiles into
    PYTHONPYCACHEPREFIX when it is set (the test run's own folder, gone after the run) and writes
    nothing under PYTHONDONTWRITEBYTECODE, and the checks run with PYTHONDONTWRITEBYTECODE (nothing
    written into the trees they read). An import of vLLM then compiles ~2,000 modules in memory,
    9 s of every check's 15. Read-only byte code costs ~25 s once per venv and is read by every
    later check, by the clones (hard links) and by the newcomer's seeded venvs. An overlaid file's
    byte code is removed by build_overlay, and Python checks each file's against its source anyway."""
    if (venv / BYTECODE_FILE).is_file():
        return
    with venv_lock(venv):
        if (venv / BYTECODE_FILE).is_file():
            return
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PYTHONHOME")}
        site_dirs = [str(d) for d in sorted(venv.glob("lib/python*/site-packages"))]
        # exit 1 is normal: a few packages ship files that are not Python 3.11 (templates, py2 vendored code)
        r = subprocess.run([str(venv_python(venv)), "-m", "compileall", "-q", "-j", "0", *site_dirs],
                           capture_output=True, env=env, check=False)
        if r.returncode in (0, 1):  # killed or crashed: no marker, the next run compiles again
            (venv / BYTECODE_FILE).write_text("")


def _fail(what: str, e: Exception):
    msg = e.one_line() if isinstance(e, Dsv4Error) else f"{e.cmd}: {(e.stderr or '')[-2000:]}"
    pytest.fail(f"{what} failed: {msg}")


def release_base(base_tree: Path, version: str, make_base: Callable[[Path], None] | None = None,
                 root: Path | None = None) -> Path:
    """The base venv of `version` (in `root`, default release_root(version)), built if missing:
    make_base(venv) installs the release into it, None the CPU recipe (the release's wheel with its
    CPU dependencies, see GPU_ONLY). base_venvs picks the recipe from the tree."""
    base_venv = (root or release_root(version)) / "base"
    try:
        if make_base is not None:
            make_base(base_venv)
        else:
            with venv_lock(base_venv):
                install_cpu_release(base_venv, version)
        # no import check (verify_imports): that is `dsv4-patch build`'s promise to a user; here the
        # checks import what they test, and importing every patched vLLM module costs 20-30 s a venv
        build_overlay(base_tree, base_tree, base_venv, package=PACKAGE, version=version, verify_imports=False)
        with venv_lock(base_venv):
            prune(venv_python(base_venv))
        ensure_bytecode(base_venv)
    except (Dsv4Error, subprocess.CalledProcessError) as e:
        _fail(f"vLLM {version} base venv build", e)
    return base_venv


def _install_over(venv: Path, version: str, extras: list[str]) -> None:
    """In a clone of the donor's base venv: the release's wheel without dependencies (the tool's
    archive cache may hold it already, sha256-checked by the DeepGEMM targets: that file rather than
    a second download), then `extras` without theirs."""
    (venv / ".dsv4-build.json").unlink(missing_ok=True)  # the donor's stamp (a hard link: unlink, never rewrite)
    (venv / BYTECODE_FILE).unlink(missing_ok=True)  # the release's modules get theirs in release_base
    (venv / RECIPE_FILE).unlink(missing_ok=True)
    from dsv4_patch.sources.base import Cache

    cached = sorted((Cache.default().root / "archives").glob(f"{PACKAGE}-{version}-*.whl"))
    subprocess.run([str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                    "--no-compile", "--no-deps", str(cached[0]) if cached else f"{PACKAGE}=={version}", *extras],
                   check=True, capture_output=True, text=True)


def base_venv_for(base_tree: Path, donor_tree: Callable[[], Path]) -> Path:
    """The base venv of the release `base_tree` holds, by the recipe its content asks for (see the
    module's docstring). donor_tree() gives the pristine tree of the donor release (built only when
    the substitute recipe needs a donor venv that is not there yet)."""
    version = release_version(base_tree)
    if not version:
        pytest.fail(f"{base_tree}: vllm/_version.py records no __version__ (not a vLLM sdist tree?)")
    if not needs_substitute_torch(base_tree):
        return release_base(base_tree, version)
    extras = substitute_extras(base_tree)
    donor = donor_tree()
    donor_version = release_version(donor)
    if needs_substitute_torch(donor):
        pytest.skip(f"vLLM {version} pins torch {tree_torch_pin(base_tree)} and the donor release "
                    f"{donor_version} pins torch {tree_torch_pin(donor)}: neither is the CPU torch "
                    f"{_torch_pin()} installable here (set DSV4_BUILD_TORCH, or make a release that pins it primary)")
    root = release_root(version, {"donor": donor_version, "extras": extras})

    def make(venv: Path) -> None:
        if not venv_python(venv).exists():  # hardlink_clone asks again under the locks
            hardlink_clone(release_base(donor, donor_version), venv, prepare=lambda t: _install_over(t, version, extras))

    return release_base(base_tree, version, make, root=root)


def overlay_pair(base_tree: Path, patched_tree: Path, version: str,
                 make_base: Callable[[Path], None] | None = None, base_venv: Path | None = None) -> dict[bool, Path]:
    """{False: pristine venv, True: patched venv} for `version`; make_base as for release_base, or
    the base venv already made (base_venv_for)."""
    base_venv = base_venv or release_base(base_tree, version, make_base)
    try:
        patched_venv = patched_venv_path(base_venv.parent, base_tree, patched_tree, version)
        hardlink_clone(base_venv, patched_venv)
        build_overlay(base_tree, patched_tree, patched_venv, package=PACKAGE, version=version,
                      verify_imports=False)  # as in release_base
        ensure_bytecode(patched_venv)  # a clone of a base that had none yet (made by an older checkout)
    except (Dsv4Error, subprocess.CalledProcessError) as e:
        _fail(f"vLLM {version} overlay build", e)
    return {False: base_venv, True: patched_venv}


SEED_ENV = "DSV4_SEED"  # the run's seed (tests/conftest.py), read by the randomized checks
PYTEST_ONLY = ("_pytest", "pluggy", "iniconfig", "py", "pytest")  # what a tree's test files need of pytest


def pytest_only_path() -> Path:
    """A folder holding only this interpreter's pytest and what it imports (links), for check scripts
    that run a tree's own test file inside a venv that has no pytest. Put last on sys.path there.
    One folder per interpreter (the links point into its site-packages), links that point elsewhere
    (a deleted venv's) replaced; in the run's folder, which goes when the run ends (the system's
    temporary folder outside a run)."""
    import importlib.util

    key = hashlib.sha256(os.path.realpath(sys.prefix).encode()).hexdigest()[:12]
    run_dir = os.environ.get(RUN_DIR_ENV)
    dst = Path(run_dir) / f"pytest-only-{key}" if run_dir else Path(tempfile.gettempdir()) / f"dsv4-pytest-only-{os.getuid()}-{key}"
    dst.mkdir(exist_ok=True)
    # "pytest" last: its presence is what says the folder is complete
    for name in PYTEST_ONLY:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        src = Path(spec.origin)
        src = src.parent if src.name == "__init__.py" else src
        link = dst / src.name
        if link.is_symlink() and os.readlink(link) == str(src):
            continue
        tmp = dst / f".{src.name}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(src)
        os.replace(tmp, link)  # atomic: another worker sees the old link or this one
    return dst


def check_env(extra_env: dict[str, str] | None, pythonpath: list[Path]) -> dict[str, str]:
    """The environment a check script runs with."""
    env = {k: v for k, v in check_cache.child_env(os.environ).items() if not k.startswith(("VLLM_", "TRITON_"))}
    env.update(extra_env or {})
    env["DSV4_PYTEST_PATH"] = str(pytest_only_path())
    env["DSV4_CHECK_ROOT"] = str(ROOT)  # _harness.report names the repo files the check imported
    env.update({
        # Not the repository: its kernels/ would shadow PyPI's `kernels`, which transformers >= 5.25
        # requires (checks/_harness.py loads the oracles as `dsv4_kernels` from DSV4_CHECK_ROOT).
        "PYTHONPATH": os.pathsep.join(str(p) for p in pythonpath),
        "CUDA_VISIBLE_DEVICES": "",        # CPU; keeps vLLM's Triton import enabled for the interpreter
        "VLLM_LOGGING_LEVEL": "WARNING",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    return env


def run_in_venv(venv: Path, script: Path, *, pythonpath: list[Path], timeout: int = 900,
                extra_env: dict[str, str] | None = None, env: dict[str, str] | None = None):
    env = env if env is not None else check_env(extra_env, pythonpath)
    return subprocess.run([str(venv_python(venv)), str(script)], capture_output=True, text=True,
                          env=env, cwd=str(ROOT), timeout=timeout)


# --- each computation once ------------------------------------------------------------------------
# A check's result is a function of what it runs: its script and the files it imports from the repo,
# the release, overlay and installed distributions of the venv it runs in, its Python, the patched
# tree it reads in-tree tests from, the test interpreter's pytest (which runs those), and the
# environment variables it or its libraries read. `_memo_key` hashes all of that, and the result is
# kept in the check-result cache (tests/_check_cache.py) under that key.
_SOURCES = (ROOT / "kernels", Path(__file__).resolve().parent)  # kernels/ oracles, checks/, harness


def _overlay_paths(*venvs: Path) -> list[str]:
    """The site-packages paths the venvs' stamps say were overlaid (modified, added or removed)."""
    paths: set[str] = set()
    for venv in venvs:
        try:
            files = json.loads((venv / STAMP).read_text()).get("files") or []
        except (OSError, ValueError, AttributeError):
            continue
        paths.update(e["path"] for e in files if isinstance(e, dict) and isinstance(e.get("path"), str))
    return sorted(paths)


def installed_files(venv: Path, paths: list[str]) -> dict[str, str | None]:
    """{path: sha256 of the file as the venv's site-packages holds it now, None when absent} for
    each of `paths` that is not as pip installed it (its RECORD's bytes; absent where a RECORD lists
    it): what the checks import, read at key time. The stamp says what the overlay asked for and
    RECORD what pip installed; neither sees an overlay lost afterwards (a file back at its pristine
    bytes, a build that stamped without copying), which a key made of them served from an earlier
    pass. Files as installed are left out, so the key says what the venv holds whichever paths were
    asked about: a pristine venv is the same install whether it is paired with a patched one (the
    unpatched runs) or with itself (bump's and status's intent runs on the pristine tree), and one
    computation serves both."""
    sites = sorted(venv.glob("lib/python*/site-packages"))
    recorded = {sp: check_cache.recorded_hashes(sp) for sp in sites} if paths else {}
    out: dict[str, str | None] = {}
    for path in paths:
        site_dir = next((sp for sp in sites if (sp / path).is_file()), None)
        if site_dir is None:
            if any(path in hashes for hashes in recorded.values()):
                out[path] = None  # installed, then removed
            continue
        now = hashlib.sha256((site_dir / path).read_bytes()).hexdigest()
        if recorded[site_dir].get(path) != now:
            out[path] = now  # overlaid, or added
    return out


def _venv_identity(venv: Path, paths: list[str] = ()) -> str:
    """The release and prune state build_overlay stamped into the venv, its Python, its installed
    distributions (check_cache.dists_identity) and the bytes it holds where they are not as installed
    at `paths` (the overlaid files of both venvs of the pair: installed_files); "" for an unstamped
    venv: never memoized. What it holds, not which overlay was asked for (the stamp's key): two
    venvs with the same bytes compute the same thing."""
    try:
        stamp = json.loads((venv / STAMP).read_text())
        cfg = (venv / "pyvenv.cfg").read_text()
    except (OSError, ValueError):
        return ""
    python = re.findall(r"^(?:version|version_info)\s*=\s*(\S+)", cfg, re.M)
    dists = check_cache.dists_identity(sorted(venv.glob("lib/python*/site-packages")))
    return json.dumps({**{k: stamp.get(k) for k in ("mode", "package", "version", "installed_version", "pruned")},
                       "python": python, "dists": dists, "installed": installed_files(venv, list(paths))},
                      sort_keys=True)


_IMPORT_RE = re.compile(r"^\s*(?:from\s+([A-Za-z_]\w*)|import\s+([A-Za-z_]\w*))", re.M)
_ENV_NAME_RE = re.compile(r"\bDSV4_[A-Z0-9_]+")
# Read by the libraries a check runs (vLLM, Triton, torch, the BLAS) rather than by the check itself.
_PATH_ENV = ("DSV4_TREE_", "DSV4_BASE_", "DSV4_PYTEST_PATH", "DSV4_CHECK_ROOT")  # paths: what they hold is keyed otherwise
_TREE_ENV_RE = re.compile(r"^DSV4_(?:TREE|BASE)_")


def _check_files(script: Path, check_dirs: list[Path]) -> list[Path]:
    """The script and the check-folder modules it imports, transitively (what its text can reach)."""
    seen: list[Path] = []
    todo = [script]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.append(f)
        for a, b in _IMPORT_RE.findall(f.read_text()):
            for d in check_dirs:
                if (d / f"{a or b}.py").is_file():
                    todo.append(d / f"{a or b}.py")
                    break
    return seen


def _memo_key(venv: Path, patched_venv: Path, patched_tree: Path, script: Path, named: set[str],
              env: dict[str, str]) -> str | None:
    """None: not memoized. `env`: the environment the check runs with. A tree enters the key only for
    a check whose files name its variable (DSV4_TREE_VLLM, DSV4_BASE_...: the HEAD tree id of what it
    points at, when clean; the patched tree also with its venv's overlay); a check that reads no tree
    computes the same thing in a pristine venv whichever patched tree the run has (regress's
    unpatched runs, bump's intent runs on the pristine tree). `named`: _named_variables(script)."""
    if not any(script.is_relative_to(top) for top in _SOURCES):
        return None  # a script the digest does not cover: always run
    paths = _overlay_paths(venv, patched_venv)
    here = _venv_identity(venv, paths)
    trees = {}
    for name in _tree_variables(named, env):
        head = check_cache.tree_identity(Path(env[name]))
        if head and Path(env[name]) == patched_tree:  # with the overlay made of it
            overlay = here if patched_venv == venv else _venv_identity(patched_venv, paths)
            head = overlay and f"{head} {overlay}"
        trees[name] = head
    if not here or not all(trees.values()):
        return None  # an unstamped venv, or a tree with local changes: always run
    keyed = {k: v for k, v in check_cache.keyed_env(env, named).items() if not k.startswith(_PATH_ENV)}
    return check_cache.key_of(here, trees, script.relative_to(ROOT).as_posix(),
                              check_cache.sources_digest(ROOT, _SOURCES), keyed, sys.platform, platform.machine(),
                              check_cache.interpreter_identity(only=_RUNNER_PYTEST))


def _named_variables(script: Path, check_dirs: list[Path]) -> set[str]:
    """The DSV4_ variables the script and the check-folder modules it imports name."""
    return set(_ENV_NAME_RE.findall("".join(f.read_text() for f in _check_files(script, check_dirs))))


def _tree_variables(named: set[str], env: dict[str, str]) -> list[str]:
    """The named variables that point the check at a tree (keyed by the tree's content)."""
    return sorted(n for n in named if _TREE_ENV_RE.match(n) and n in env)


def _runner_pytest_file(f: Path) -> bool:
    """A file of the test interpreter's pytest (pytest_only_path links them; keyed by _RUNNER_PYTEST),
    which lies under the repo when the test venv does (.venv)."""
    for sp in site.getsitepackages():
        sp = Path(sp).resolve()
        if f.is_relative_to(sp):
            return f.relative_to(sp).parts[0].removesuffix(".py") in PYTEST_ONLY
    return False


# The test interpreter's pytest and what it imports (their dist-info names): checks that run a tree's
# own test files run them with these (pytest_only_path).
_RUNNER_PYTEST = tuple(f"{name}-" for name in PYTEST_ONLY if not name.startswith("_"))


def storable(result: dict, run_lines: list[str], trees: tuple[Path, ...] = ()):
    """`result`, or check_cache.Uncached(result) when the key does not cover the run: the machine failed
    a sub-check (out of memory, interrupted), or the check imported repo files outside _SOURCES (or
    one of its test modules, which no key covers) and the keyed `trees` (a tree under build/ is in
    the repo too)."""
    if not run_lines:
        return check_cache.Uncached(result, "the check did not say what it imported")
    run = json.loads(run_lines[-1][len("DSV4-CHECK-RUN "):])
    if run["machine_failures"]:
        return check_cache.Uncached(result, f"the machine failed {', '.join(run['machine_failures'])}")
    sources, keyed_trees = [t.resolve() for t in _SOURCES], [t.resolve() for t in trees]
    outside = [f for f in run["repo_files"]
               if not (any(Path(f).is_relative_to(t) for t in sources) and not check_cache.is_test_module(Path(f)))
               and not any(Path(f).is_relative_to(t) for t in keyed_trees) and not _runner_pytest_file(Path(f))]
    if outside:
        return check_cache.Uncached(result, f"it imported {outside[0]}, which its key does not cover")
    return result


def check_runner(venvs: dict[bool, Path], check_dirs: list[Path], patched_tree: Path):
    """`get(name, patched=True)`: run checks/<name>.py (first found in check_dirs) in one venv,
    once per session (and once per set of inputs: tests/_check_cache.py), and return its JSON
    {sub-check: {"ok": bool, "error": str}}.

    Checks that run the tree's own test files read them from DSV4_TREE_VLLM, the patched tree, in
    both venvs (the unpatched modules must fail the patch's tests), under `dsv4-patch regress` and
    plain pytest alike."""
    cache: dict[tuple[str, bool], dict] = {}

    def script(name: str) -> Path:
        return next(d / f"{name}.py" for d in check_dirs if (d / f"{name}.py").is_file())

    def run(name: str, patched: bool, env: dict[str, str], trees: tuple[Path, ...]):
        r = run_in_venv(venvs[patched], script(name), pythonpath=check_dirs, env=env)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("DSV4-CHECK ")]
        if not lines:
            pytest.fail(f"check {name} ({'patched' if patched else 'unpatched'}) printed no result "
                        f"(rc {r.returncode}):\n{r.stderr[-4000:]}")
        result = json.loads(lines[-1][len("DSV4-CHECK "):])
        failed = sorted(k for k, v in result.items() if not v.get("ok"))
        kept = storable(result, [ln for ln in r.stdout.splitlines() if ln.startswith("DSV4-CHECK-RUN ")], trees)
        if failed and not isinstance(kept, check_cache.Uncached):
            # a transient failure stored would replay; a pristine venv's "expected" one would turn green:
            # kept for this run only (the same inputs asked for again in it), never across runs
            return check_cache.Uncached(result, f"{failed[0]} failed: failures are never stored", run=True)
        return kept  # a pass, or what the key cannot cover (the machine failed, an unhashed import)

    def get(name: str, patched: bool = True) -> dict:
        key = (name, patched)
        if key not in cache:
            env = check_env({"DSV4_TREE_VLLM": str(patched_tree)}, check_dirs)
            named = _named_variables(script(name), check_dirs)
            trees = tuple(Path(env[n]) for n in _tree_variables(named, env))  # what the key covers
            memo_key = _memo_key(venvs[patched], venvs[True], patched_tree, script(name), named, env)
            what = f"{name} {'patched' if patched else 'pristine'} in {venvs[patched].parent.name}"
            seed = env.get(SEED_ENV) if SEED_ENV in named else None  # a randomized check: keyed (named)
            if seed:
                what += f" (seed {seed})"
            result = check_cache.memoized(memo_key, what, lambda: run(name, patched, env, trees),
                                          meta={"seed": seed} if seed else None)
            cache[key] = result if not seed else {  # a failure says how to draw the same inputs again
                k: v if v.get("ok") else {**v, "error": f"[{SEED_ENV}={seed} re-runs it] {v.get('error', '')}"}
                for k, v in result.items()}
        return cache[key]

    return get
