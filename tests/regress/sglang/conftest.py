"""Fixtures for the SGLang regression tests (integration level).

SGLang 0.5.23 cannot be pip-installed with its dependencies on a CPU machine (it pins torch 2.14.1
CUDA builds, flashinfer, sgl-kernel, flash-attn-4, tilelang, ...). The tests therefore import the
real modules straight from the tree (`dsv4_tree("sglang")`: the pinned wheel's files, which include
its compiled rust extensions, plus the stack's patches; `patched=False`: the pin), with:
- the pure-Python / CPU-wheel dependencies that the deepseek_v4 import chain needs, installed once
  with `pip install --no-deps --target` from requirements-cpu.txt into a cache outside the repo
  (DSV4_VENV_CACHE, default ~/.cache/dsv4-patch/venvs; or an existing dir in DSV4_SGLANG_CPU_DEPS);
- torch, numpy and triton from the test venv;
- `flash_attn` and `torchvision` stubbed (see _o_fp8_qdq_probe.py).

Each probe runs in its own interpreter (the switches are read when deepseek_v4 is imported), with
the tree's python/ first on PYTHONPATH and byte-code kept out of the tree (PYTHONPYCACHEPREFIX):
a child of a fork server that has imported torch, transformers and sympy once (sglang_interpreter,
tests/_forkserver.py), or a fresh interpreter with DSV4_SGLANG_FORKSERVER=0.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _check_cache as check_cache
import numpy as np
import pytest

from dsv4_patch.regress import venv_cache_root

HERE = Path(__file__).resolve().parent
REQS = HERE / "requirements-cpu.txt"
PROBE = HERE / "_o_fp8_qdq_probe.py"
INIT_PROBE = HERE / "_o_fp8_qdq_init_probe.py"
RUN_IN_TREE_TEST = HERE / "_in_tree_runner.py"


def _cache_root() -> Path:
    env = os.environ.get("DSV4_VENV_CACHE")
    return Path(env) if env else venv_cache_root()  # under DSV4_PATCH_CACHE / XDG_CACHE_HOME when set


@pytest.fixture(scope="session")
def sglang_cpu_deps() -> Path:
    env = os.environ.get("DSV4_SGLANG_CPU_DEPS")
    if env:
        return Path(env)
    key = hashlib.sha256(REQS.read_bytes()).hexdigest()[:12]
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    target = _cache_root() / f"sglang-0.5.23-cpu-deps-{tag}-{key}"
    stamp = target / ".complete"
    if stamp.exists():
        return target
    _cache_root().mkdir(parents=True, exist_ok=True)
    # one installer at a time (pytest-xdist workers, other checkouts): the others wait, then reuse it
    with open(_cache_root() / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=_cache_root()))
        # --no-compile: the probes write their byte code under PYTHONPYCACHEPREFIX anyway
        p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "--no-compile", "--no-deps", "--target", str(tmp), "-r", str(REQS)],
                           capture_output=True, text=True, timeout=1200)
        if p.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.skip(f"could not install SGLang's CPU import dependencies ({REQS.name}): "
                        f"{(p.stderr.strip().splitlines() or ['pip failed'])[-1]}")
        (tmp / ".complete").write_text("ok\n")
        os.replace(tmp, target)
    return target


def probe_env(tree: Path | None, deps: Path, switches: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in check_cache.child_env(os.environ).items()
           if not k.startswith(("SGLANG_", "TRITON_")) and k != "PYTHONPATH"}
    env.update({
        "PYTHONPATH": os.pathsep.join([*([str(tree / "python")] if tree else []), str(deps)]),
        "PYTHONPYCACHEPREFIX": str(_cache_root() / "pycache"),
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONWARNINGS": "ignore",
    })
    env.update(switches)
    return env


ROOT = HERE.parents[2]


def result_key(kind: str, trees: list[Path], deps: Path, env: dict[str, str], *files: Path) -> str | None:
    """The check-result cache key (tests/_check_cache.py) of one probe or in-tree test run: the trees it
    imports or reads (HEAD tree ids: None, never stored, for one with local changes), the files it
    runs (bytes), this folder's scripts, the CPU import dependencies and the test interpreter's
    distributions, and the environment it reads (check_cache.KEYED_ENV)."""
    ids = [check_cache.tree_identity(t) for t in trees]
    if not all(ids):
        return None
    return check_cache.key_of(kind, ids, [hashlib.sha256(f.read_bytes()).hexdigest() for f in files],
                              check_cache.sources_digest(ROOT, (HERE,)), check_cache.dists_identity([deps]),
                              check_cache.interpreter_identity(), check_cache.keyed_env(env))


# Imported once by the fork server: about half of each probe's interpreter start, and none of them
# reads an SGLANG_ switch, the probe seed or the tree (they come from the test venv and the deps).
PRELOAD = ("torch", "torch._dynamo", "torch.distributed.tensor", "numpy", "sympy", "triton",
           "transformers", "transformers.activations")
FORKSERVER_ENV = "DSV4_SGLANG_FORKSERVER"  # 0: a plain interpreter for every probe
_interpreters: list = []


class _Interpreter:
    """spawn/wait/run for the probes: a child of the fork server (tests/_forkserver.py, started on
    first use and again after close()), or a fresh interpreter where the server cannot start, a
    run's start-up variables differ from its, or DSV4_SGLANG_FORKSERVER=0."""

    def __init__(self, server_env: dict[str, str]):
        self._server_env, self._server, self._failed = server_env, None, False

    def _forking(self, env: dict[str, str]):
        if self._failed or os.environ.get(FORKSERVER_ENV, "1") == "0":
            return None
        if self._server is None:
            from _forkserver import ForkServer

            self._server = ForkServer(sys.executable, self._server_env, PRELOAD)
            if not self._server.ok:
                self._server, self._failed = None, True
                return None
        return self._server if self._server.forkable(env) else None

    def spawn(self, argv, env, cwd, stdout, stderr):
        server = self._forking(env)
        if server is not None:
            return server, server.spawn(argv, env, cwd, stdout, stderr)
        out = open(stdout, "w")
        err = subprocess.STDOUT if stderr == stdout else open(stderr, "w")
        proc = subprocess.Popen([sys.executable, *map(str, argv)], env=env, cwd=cwd, stdout=out, stderr=err)
        out.close()
        if err is not subprocess.STDOUT:
            err.close()
        return None, proc

    @staticmethod
    def wait(handle, timeout=None) -> int:
        server, proc = handle
        if server is not None:
            return server.wait(proc, timeout)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise

    def run(self, argv, env, cwd, log_dir, timeout=None) -> subprocess.CompletedProcess:
        server = self._forking(env)
        if server is not None:
            return server.run(argv, env, cwd, log_dir, timeout)
        return subprocess.run([sys.executable, *map(str, argv)], env=env, cwd=cwd, capture_output=True,
                              text=True, timeout=timeout)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()  # kills and collects what nobody waited for; their wait() gives -9
            self._server = None


@pytest.fixture(scope="session")
def sglang_interpreter(sglang_cpu_deps):
    """What runs the probes and SGLang's unit tests (see _Interpreter). Its server is closed after
    the last test of this folder (pytest_runtest_teardown: ~0.5 GB resident, not kept while the
    worker runs other folders' tests) and started again if another test here needs it."""
    it = _Interpreter(probe_env(None, sglang_cpu_deps, {}))
    _interpreters.append(it)
    yield it
    it.close()
    _interpreters.remove(it)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if nextitem is None or HERE not in Path(nextitem.path).parents:
        for it in _interpreters:
            it.close()


@pytest.fixture(scope="session")
def sglang_probe(dsv4_tree, sglang_interpreter, sglang_cpu_deps, tmp_path_factory):
    """probe(patched, block) -> dict of arrays from _o_fp8_qdq_probe.py. The first call
    starts every configuration the tests use at once (they are CPU-bound imports; two at a time)."""
    configs = [(True, 32), (True, 0), (False, 32)]
    out_dir = tmp_path_factory.mktemp("sglang_probe")
    results: dict[tuple, dict] = {}
    started: dict[tuple, tuple] = {}

    def start(cfg):
        patched, block = cfg
        tree = dsv4_tree("sglang", patched=patched)
        out = out_dir / f"{'patched' if patched else 'base'}-{block}.npz"
        switches = {"SGLANG_DSV4_O_FP8_QDQ_BLOCK": str(block),
                    "PROBE_SEED": "1017"}  # fixed: every run checks the same o
        env = probe_env(tree, sglang_cpu_deps, switches)
        key, what = result_key("probe", [tree], sglang_cpu_deps, env, PROBE), f"sglang probe {out.stem}"
        stored = check_cache.lookup(key, what)
        if stored is not None and isinstance(stored.get("npz"), str):  # the same probe of the same tree:
            # its arrays, as that run wrote them (an entry without them is computed again)
            results[cfg] = dict(np.load(io.BytesIO(base64.b64decode(stored["npz"]))))
            return
        log = out.with_suffix(".log")
        proc = sglang_interpreter.spawn([PROBE, out], env, os.getcwd(), log, log)
        started[cfg] = (proc, out, key, what, time.monotonic())

    def finish(cfg):
        proc, out, key, what, t0 = started.pop(cfg)
        rc = sglang_interpreter.wait(proc, timeout=900)
        if rc != 0:
            text = out.with_suffix(".log").read_text()[-4000:]
            pytest.fail(f"probe {cfg} failed (rc {rc}):\n{text}")
        data = out.read_bytes()
        results[cfg] = dict(np.load(io.BytesIO(data)))
        check_cache.store(key, what, {"npz": base64.b64encode(data).decode()}, took=time.monotonic() - t0)

    def top_up():
        for c in configs:
            if len(started) >= 2:
                break
            if c not in results and c not in started:
                start(c)  # read back from the cache, or started

    def get(patched: bool, block: int = 32) -> dict:
        cfg = (patched, block)
        if cfg not in results and cfg not in started:
            start(cfg)
        top_up()
        while cfg not in results:
            finish(next(iter(started)))  # oldest first
            top_up()
        return results[cfg]

    yield get
    for proc, *_ in started.values():  # started ahead for a test that did not run: stop it
        try:
            sglang_interpreter.wait(proc, timeout=0.1)
        except subprocess.TimeoutExpired:
            pass  # killed by wait


@pytest.fixture(scope="session")
def run_sglang_unit_test(sglang_cpu_deps, sglang_interpreter, tmp_path_factory):
    """run(test_file, tree) -> CompletedProcess: SGLang's way of running one registered unit test,
    `python3 <file>` (unittest), with `tree`'s python/ and the CPU import dependencies on the path
    and no GPU visible. The file may come from another tree (to run the patch's test on the pin);
    `preload` maps a module name to a file loaded as that module first (_in_tree_runner.py)."""

    def run(test_file: Path, tree: Path, preload: dict[str, Path] | None = None) -> subprocess.CompletedProcess:
        env = probe_env(tree, sglang_cpu_deps, {})
        # sglang.test.test_utils reads CUDA_VISIBLE_DEVICES[0] at import: an empty value breaks it
        # (this machine has no GPU anyway)
        env.pop("CUDA_VISIBLE_DEVICES")
        pre = [a for name, path in (preload or {}).items() for a in ("--preload", f"{name}={path}")]
        argv = [RUN_IN_TREE_TEST, *pre, test_file, "-v"]
        owner = next((t for t in test_file.parents if (t / ".git").exists()), None)  # the file's tree
        key = result_key(f"unit test {test_file.name}", [tree, owner], sglang_cpu_deps, env, RUN_IN_TREE_TEST,
                         test_file, *(preload or {}).values()) if owner else None

        def compute():
            p = sglang_interpreter.run(argv, env, tree, tmp_path_factory.mktemp("sglang_unit_test"), timeout=900)
            out = {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
            # a pass or failure that ran out of memory somewhere is the machine's (torch raises RuntimeError for it)
            oom = any(t in (p.stdout + p.stderr).lower() for t in ("memoryerror", "can't allocate memory", "out of memory"))
            if p.returncode != 0:  # failures are never stored (tests/_check_cache.py), only kept for this run
                return check_cache.Uncached(out, f"exit {p.returncode}: failures are never stored",
                                            run=p.returncode > 0 and not oom)
            if oom:
                return check_cache.Uncached(out, "out of memory")
            return out

        return check_cache.completed(check_cache.memoized(key, f"sglang unit test {test_file.name}", compute), argv)

    return run


@pytest.fixture(scope="session")
def sglang_init_probe(dsv4_tree, sglang_cpu_deps, sglang_interpreter, tmp_path_factory):
    """probe(patched) -> dict from _o_fp8_qdq_init_probe.py (the layer-init checks of the switch),
    the tree imported with SGLANG_DSV4_O_FP8_QDQ_BLOCK=-32 (a bad value must not fail the import)."""
    import json

    cache: dict[bool, dict] = {}

    def get(patched: bool) -> dict:
        if patched not in cache:
            tree = dsv4_tree("sglang", patched=patched)
            env = probe_env(tree, sglang_cpu_deps, {"SGLANG_DSV4_O_FP8_QDQ_BLOCK": "-32"})

            def compute() -> dict:
                out = tmp_path_factory.mktemp("sglang_init_probe") / "init.json"
                p = sglang_interpreter.run([INIT_PROBE, out], env, os.getcwd(), out.parent, timeout=900)
                if p.returncode != 0:
                    pytest.fail(f"init probe (patched={patched}) failed (rc {p.returncode}):\n"
                                f"{(p.stdout + p.stderr)[-4000:]}")
                return json.loads(out.read_text())

            cache[patched] = check_cache.memoized(result_key("init probe", [tree], sglang_cpu_deps, env, INIT_PROBE),
                                                  f"sglang init probe {'patched' if patched else 'pristine'}", compute)
        return cache[patched]

    return get
