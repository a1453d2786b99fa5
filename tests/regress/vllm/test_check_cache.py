"""The check-result cache (tests/_check_cache.py; the vLLM checks' key in _vllm_venvs.py; tests/conftest.py
picks its folder):
a stored result is read back only for the very same computation. Every input the key claims to
cover is changed here one at a time and must give another key; inputs it must not see (an unrelated
variable, another tree for a check that reads none) must not."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import _check_cache as C
import _vllm_venvs as V

ROOT = Path(__file__).resolve().parents[3]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=cwd,
                   check=True, capture_output=True)


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A repo root with a check folder, a stamped venv with one distribution, and a clean git tree."""
    checks = tmp_path / "repo" / "checks"
    checks.mkdir(parents=True)
    (checks / "c.py").write_text("import _helper\nimport os\nSEED = os.environ['DSV4_SEED']\n"
                                 "TREE = os.environ['DSV4_TREE_VLLM']\n")
    (checks / "_helper.py").write_text("X = 1\n")
    (checks / "plain.py").write_text("print('reads no tree')\n")
    monkeypatch.setattr(V, "ROOT", tmp_path / "repo")
    monkeypatch.setattr(V, "_SOURCES", (checks,))
    monkeypatch.setattr(C, "_sources", {})
    monkeypatch.setattr(C, "_dists", {})
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "torch-2.13.0.dist-info").mkdir(parents=True)
    (site / "torch-2.13.0.dist-info" / "RECORD").write_text("torch/__init__.py,sha256=AAAA,10\n")
    (venv / "pyvenv.cfg").write_text("home = /x\nversion = 3.11.7\n")
    (venv / V.STAMP).write_text(json.dumps({"key": "overlay-1", "mode": "overlay", "package": "vllm",
                                            "version": "0.27.1", "installed_version": "0.27.1", "pruned": []}))
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f.py").write_text("a = 1\n")
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "one")
    patched_venv = tmp_path / "patched-venv"
    shutil.copytree(venv, patched_venv)
    stamp = patched_venv / V.STAMP
    stamp.write_text(stamp.read_text().replace("overlay-1", "overlay-patched"))
    env = {"DSV4_SEED": "7", "HOME": "/home/x", "UNRELATED": "1", "DSV4_TREE_VLLM": str(tree),
           "PYTEST_XDIST_WORKER": "gw0", "PYTEST_CURRENT_TEST": "t.py::x (call)"}

    def key(script: str = "c.py", env_over: dict | None = None, in_venv: Path = venv) -> str | None:
        C._sources.clear()  # a new run: the sources are hashed again
        named = V._named_variables(checks / script, [checks])
        return V._memo_key(in_venv, patched_venv, tree, checks / script, named, {**env, **(env_over or {})})

    return SimpleNamespace(checks=checks, venv=venv, patched_venv=patched_venv, site=site, tree=tree, key=key)


def _changes(world, change, *, script: str = "c.py", env_over: dict | None = None) -> bool:
    before = world.key(script)
    assert before is not None
    change()
    C._dists.clear()  # as a later run sees it
    after = world.key(script, env_over)
    return after != before


def test_key_follows_every_input(world):
    w = world
    assert w.key() == w.key()  # deterministic
    edits = {
        "a RECORD byte (another build of the same version)":
            lambda: (w.site / "torch-2.13.0.dist-info" / "RECORD").write_text("torch/__init__.py,sha256=AAAB,10\n"),
        "another distribution version":
            lambda: os.rename(w.site / "torch-2.13.0.dist-info", w.site / "torch-2.13.1.dist-info"),
        "another Python": lambda: (w.venv / "pyvenv.cfg").write_text("home = /x\nversion = 3.11.8\n"),
        "another prune state": lambda: (w.venv / V.STAMP).write_text(
            (w.venv / V.STAMP).read_text().replace('"pruned": []', '"pruned": ["torchvision"]')),
        "the script": lambda: (w.checks / "c.py").write_text((w.checks / "c.py").read_text() + "# more\n"),
        "a module it imports": lambda: (w.checks / "_helper.py").write_text("X = 2\n"),
        "the tree it reads": lambda: ((w.tree / "f.py").write_text("a = 2\n"), _git(w.tree, "commit", "-qam", "two")),
    }
    for what, change in edits.items():
        assert _changes(w, change), f"{what} did not change the key"
    (w.checks / "test_c.py").write_text("def test_c():\n    pass\n")
    assert not _changes(w, lambda: (w.checks / "test_c.py").write_text("def test_c():\n    assert 1\n")), \
        "a test module: it only asks for results and judges them"
    assert _changes(w, lambda: (w.checks / "conftest.py").write_text("X = 1\n")), "a conftest (it builds the runners)"
    assert _changes(w, lambda: None, env_over={"DSV4_SEED": "8"}), "a DSV4_ variable the script reads"
    assert _changes(w, lambda: None, env_over={"VLLM_USE_V2": "1"}), "a variable vLLM reads"
    assert _changes(w, lambda: None, env_over={"OMP_NUM_THREADS": "1"}), "a BLAS thread variable"
    assert not _changes(w, lambda: None, env_over={"UNRELATED": "2"}), "a variable nothing reads"
    assert _changes(w, lambda: None, env_over={"PYTEST_ADDOPTS": "-x"}), "a variable pytest reads (in-tree tests)"
    assert not _changes(w, lambda: None, env_over={"PYTEST_XDIST_WORKER": "gw1", "PYTEST_CURRENT_TEST": "y"}), \
        "per-worker variables: workers share results"
    (w.checks / "_helper.py").write_text("import os\nR = os.environ['DSV4_CHECK_ROOT'], os.environ['DSV4_PYTEST_PATH']\n")
    assert not _changes(w, lambda: None, env_over={"DSV4_CHECK_ROOT": "/other/clone", "DSV4_PYTEST_PATH": "/tmp/x"}), \
        "paths named by the harness (keyed by what they hold): clones at other paths share results"
    assert not _changes(w, lambda: (w.venv / V.STAMP).write_text(
        (w.venv / V.STAMP).read_text().replace("overlay-1", "overlay-2"))), \
        "the overlay's name alone (what the venv holds is keyed: test_a_lost_overlay_is_another_key)"
    _overlaid(w, "PATCHED = True\n")
    assert w.key(in_venv=w.patched_venv) != w.key(), "the patched and the pristine venv"
    (record,) = w.site.glob("torch-*.dist-info/RECORD")  # renamed above
    record.write_text(record.read_text() + "../../../bin/torchrun,sha256=SHEBANG1,99\n")
    assert not _changes(w, lambda: record.write_text(record.read_text().replace("SHEBANG1", "SHEBANG2"))), \
        "a console script (its shebang names the venv's path: the same wheels elsewhere are the same)"
    assert not _changes(w, lambda: record.write_text(record.read_text() + "torch/__pycache__/__init__.cpython-311.pyc,,\n")), \
        "byte code pip compiled (or did not, with --no-compile)"


def test_key_follows_the_base_tree_a_helper_names_and_the_cache_code(world, tmp_path, monkeypatch):
    w = world
    (w.checks / "_helper.py").write_text("import os\nBASE = os.environ['DSV4_BASE_VLLM']\nN = os.environ['DSV4_N']\n")
    base = tmp_path / "base"
    shutil.copytree(w.tree, base)
    over = {"DSV4_BASE_VLLM": str(base), "DSV4_N": "1"}
    k0 = w.key(env_over=over)
    assert w.key(env_over={**over, "DSV4_N": "2"}) != k0, "a DSV4_ variable only an imported helper names"
    (base / "f.py").write_text("a = base 2\n")
    _git(base, "commit", "-qam", "base two")
    assert w.key(env_over=over) != k0, "the base tree the helper reads"
    (base / "new.py").write_text("x = 1\n")
    assert w.key(env_over=over) is None, "an untracked file is a local change (importable)"
    (base / "new.py").unlink()
    own = tmp_path / "own.py"
    own.write_text("v = 1\n")
    monkeypatch.setattr(C, "_OWN", (own,))
    monkeypatch.setattr(C, "_HERE", tmp_path / "x")
    k1 = w.key(env_over=over)
    own.write_text("v = 2\n")
    assert w.key(env_over=over) != k1, "the cache's own code"


def test_a_check_that_reads_no_tree_is_not_keyed_by_it(world):
    w = world
    assert not _changes(w, lambda: ((w.tree / "f.py").write_text("a = 3\n"), _git(w.tree, "commit", "-qam", "3")),
                        script="plain.py")


def test_a_pristine_venv_is_one_computation_whichever_venv_it_is_paired_with(world):
    """The unpatched run (pristine venv paired with a patched one) and an intent run on the pristine
    tree (a venv paired with itself) compute the same thing for a check that reads no tree: one key,
    so one run computes it once. A byte that differs from what pip installed still splits them."""
    w = world
    _overlaid(w, "PATCHED = True\n")
    (w.site / "vllm").mkdir()
    pristine = w.site / "vllm" / "layer.py"
    pristine.write_text("PATCHED = False\n")
    record = w.site / "torch-2.13.0.dist-info" / "RECORD"
    digest = base64.urlsafe_b64encode(hashlib.sha256(pristine.read_bytes()).digest()).rstrip(b"=").decode()
    record.write_text(record.read_text() + f"vllm/layer.py,sha256={digest},16\n")
    named = V._named_variables(w.checks / "plain.py", [w.checks])
    paired = V._memo_key(w.venv, w.patched_venv, w.tree, w.checks / "plain.py", named, {})
    alone = V._memo_key(w.venv, w.venv, w.tree, w.checks / "plain.py", named, {})
    assert paired == alone is not None
    pristine.write_text("PATCHED = True\n")  # the overlay leaked into the pristine venv
    assert V._memo_key(w.venv, w.patched_venv, w.tree, w.checks / "plain.py", named, {}) != paired


def test_every_check_that_runs_tree_tests_names_the_tree_it_reads():
    """A check is keyed by the trees its own files name (_harness names none, so that a check
    reading no tree is one computation for every tree): one that runs a tree's test files must name
    the variable, or its stored pass would outlive an edit of those files."""
    checks = Path(V.__file__).parent / "checks"
    readers = [f for f in sorted(checks.glob("*.py")) if "run_tree_tests(" in f.read_text() and f.name != "_harness.py"]
    assert readers, "no check runs a tree's tests: this test looks at the wrong folder"
    for f in readers:
        assert "DSV4_TREE_VLLM" in V._named_variables(f, [checks]), f.name
    assert "DSV4_TREE_VLLM" not in V._named_variables(checks / "sparse_mla_reader.py", [checks])


def test_what_cannot_be_named_is_never_stored(world):
    w = world
    (w.tree / "f.py").write_text("a = local edit\n")
    assert w.key() is None  # a tree with local changes
    _git(w.tree, "checkout", "-q", "f.py")
    (w.venv / V.STAMP).unlink()
    C._dists.clear()
    assert w.key() is None  # an unstamped venv
    outside = w.checks.parent / "elsewhere.py"
    outside.write_text("x = 1\n")
    assert V._memo_key(w.venv, w.venv, w.tree, outside, set(), {}) is None  # not in the hashed sources


def _counting():
    calls = []

    def compute():
        calls.append(1)
        return {"sub": {"ok": len(calls) == 1, "error": f"call {len(calls)}"}}

    return calls, compute


def test_a_result_is_read_back_by_a_later_run_and_a_torn_one_recomputed(tmp_path, monkeypatch):
    memo = tmp_path / "check-results"
    memo.mkdir()
    monkeypatch.setenv(C.MEMO_ENV, str(memo))
    calls, compute = _counting()
    first = C.memoized("k" * 64, "c patched", compute)
    again = C.memoized("k" * 64, "c patched", compute)
    assert calls == [1] and again == first == {"sub": {"ok": True, "error": "call 1"}}
    entry = json.loads((memo / f"{'k' * 64}.json").read_text())
    assert entry["what"] == "c patched" and entry["computed"]
    assert "hit " in (memo / "log").read_text()
    (memo / f"{'k' * 64}.json").write_text('{"format": 2, "result": ')  # torn (a killed writer)
    assert C.memoized("k" * 64, "c patched", compute) == {"sub": {"ok": False, "error": "call 2"}}
    assert json.loads((memo / f"{'k' * 64}.json").read_text())["result"]["sub"]["error"] == "call 2"
    other = C.memoized("j" * 64, "c pristine", compute)
    assert other["sub"]["error"] == "call 3"  # another key is another computation


def test_off_and_no_key_always_compute(tmp_path, monkeypatch):
    calls, compute = _counting()
    monkeypatch.setenv(C.MEMO_ENV, "0")
    C.memoized("k" * 64, "c", compute)
    C.memoized("k" * 64, "c", compute)
    monkeypatch.setenv(C.MEMO_ENV, str(tmp_path))
    C.memoized(None, "c", compute)
    C.memoized(None, "c", compute)
    assert len(calls) == 4 and not list(tmp_path.glob("*.json"))


def _conftest():
    spec = importlib.util.spec_from_file_location("dsv4_root_conftest", ROOT / "tests" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("setting", ["", "run", "0", "custom"])
def test_the_run_picks_the_cache_folder(tmp_path, monkeypatch, setting):
    mod = _conftest()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(mod.RUN_DIR_ENV, str(run_dir))
    value = str(tmp_path / "mine") if setting == "custom" else setting
    monkeypatch.setenv(C.MEMO_ENV, value)
    config = SimpleNamespace()
    mod.pytest_configure(config)
    want = {"": tmp_path / "cache" / "check-results", "run": run_dir / "checks", "0": None,
            "custom": tmp_path / "mine"}[setting]
    got = os.environ.get(C.MEMO_ENV)
    if want is None:
        assert got == "0"
    else:
        assert Path(got) == want and want.is_dir()
    mod.pytest_unconfigure(config)
    if setting == "":
        assert C.MEMO_ENV not in os.environ  # the default is the run's, not left to what runs after


def test_results_unused_for_a_month_are_pruned_and_a_read_one_is_kept(tmp_path, monkeypatch):
    mod = _conftest()
    memo = tmp_path / "cache" / "check-results"
    memo.mkdir(parents=True)
    month = time.time() - 31 * 86400
    old, new, read, tmp = (memo / f"{c * 64}.json" for c in "abcd")
    tmp = memo / f".{'d' * 64}.json.123.tmp"
    for f in (old, new, read, tmp):
        f.write_text(json.dumps({"format": C.MEMO_FORMAT, "what": "x", "computed": "then", "result": {}}))
    for f in (old, read, tmp):
        os.utime(f, (month, month))
    theirs = memo / "notes.json"  # DSV4_CHECK_MEMO may name a folder that holds other files
    theirs.write_text("{}")
    os.utime(theirs, (month, month))
    lock = memo / "locks" / ".aa.lock"
    lock.parent.mkdir()
    lock.write_text("")
    os.utime(lock, (month, month))
    (memo / "log").write_text("x" * 10 + "\n" + "line\n" * (C.LOG_LIMIT // 5 + 10))
    monkeypatch.setenv(C.MEMO_ENV, str(memo))
    assert C.lookup("c" * 64, "read yesterday") == {}  # a hit counts as a use
    monkeypatch.setenv("DSV4_PATCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(C.MEMO_ENV, raising=False)
    monkeypatch.setenv(mod.RUN_DIR_ENV, str(tmp_path))
    config = SimpleNamespace()
    mod.pytest_configure(config)
    mod.pytest_unconfigure(config)
    assert not old.exists() and not tmp.exists() and new.exists() and read.exists()
    assert lock.exists()  # never removed: a holder could be using it
    assert theirs.exists()  # not a name this cache writes
    log = (memo / "log").read_text()
    assert len(log) <= C.LOG_LIMIT // 2 and log.startswith("line\n") and "hit " in log


def test_what_is_not_a_result_of_the_code_is_returned_but_never_stored(tmp_path, monkeypatch):
    monkeypatch.setenv(C.MEMO_ENV, str(tmp_path))
    res = {"sub": {"ok": False, "error": "MemoryError: "}}
    assert C.memoized("e" * 64, "c", lambda: C.Uncached(res, "the machine failed sub")) == res
    assert not (tmp_path / f"{'e' * 64}.json").exists()
    assert "not stored eeeeeeeeeeee c: the machine failed sub" in (tmp_path / "log").read_text()
    (tmp_path / f"{'f' * 64}.json").write_text(json.dumps({"format": 1, "what": "c", "computed": "then",
                                                          "result": {"stale": True}}))
    assert C.memoized("f" * 64, "c", lambda: {"fresh": True}) == {"fresh": True}  # another format: not read


def test_a_check_run_is_stored_only_when_its_key_covers_it():
    ok = {"sub": {"ok": True, "error": ""}}
    inside = str(V._SOURCES[0].resolve() / "codecs.py")
    line = lambda **run: "DSV4-CHECK-RUN " + json.dumps({"machine_failures": [], "repo_files": [inside], **run})
    assert V.storable(ok, [line()]) is ok
    assert isinstance(V.storable(ok, []), C.Uncached)  # it did not say what it imported
    assert "the machine failed sub" in V.storable(ok, [line(machine_failures=["sub"])]).why
    elsewhere = str(ROOT / "dsv4_patch" / "build.py")
    assert elsewhere in V.storable(ok, [line(repo_files=[inside, elsewhere])]).why
    a_test = str(V._SOURCES[1].resolve() / "test_sparse_mla_reader.py")  # in the sources, but keyed by no key
    assert a_test in V.storable(ok, [line(repo_files=[inside, a_test])]).why
    import site

    runner_pytest = str(Path(site.getsitepackages()[0]).resolve() / "_pytest" / "main.py")
    assert V.storable(ok, [line(repo_files=[runner_pytest])]) is ok  # the test venv's pytest (keyed) under .venv
    in_tree = str(ROOT / "build" / "vllm" / "tests" / "test_x.py")  # the keyed tree's own tests
    assert V.storable(ok, [line(repo_files=[in_tree])], (ROOT / "build" / "vllm",)) is ok
    assert isinstance(V.storable(ok, [line(repo_files=[in_tree])]), C.Uncached)  # no tree keyed


def test_the_machine_running_out_is_told_from_a_failure_of_the_code():
    spec = importlib.util.spec_from_file_location("dsv4_check_harness", Path(__file__).parent / "checks" / "_harness.py")
    h = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(h)
    import errno as E

    machine = [MemoryError(), KeyboardInterrupt(), OSError(E.ENOSPC, "No space left on device"),
               RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes. Error code 12"),
               RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")]
    code = [AssertionError("rows came back not rotated"), RuntimeError("shape mismatch"),
            OSError(E.ENOENT, "No such file"), ImportError("cannot import name 'x'")]
    assert [h._by_the_machine(e) for e in machine] == [True] * len(machine)
    assert [h._by_the_machine(e) for e in code] == [False] * len(code)


def _overlaid(world, text: str) -> Path:
    """The patched venv holds an overlaid module (its stamp names it, as build_overlay writes it)."""
    w = world
    psite = w.patched_venv / "lib" / "python3.11" / "site-packages"
    f = psite / "vllm" / "layer.py"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    stamp = json.loads((w.patched_venv / V.STAMP).read_text())
    stamp["files"] = [{"status": "M", "path": "vllm/layer.py", "orig_sha256": "0" * 64}]
    (w.patched_venv / V.STAMP).write_text(json.dumps(stamp))
    return f


def test_a_lost_overlay_is_another_key(world):
    """Planted defect: the patched venv's stamp was written, then its overlaid file went back to the
    pristine bytes (a build that stamped without copying, a hand edit, a half-restored clone). The
    key must see what site-packages holds, not what the stamp asked for."""
    w = world
    f = _overlaid(w, "PATCHED = True\n")
    k_good = w.key(in_venv=w.patched_venv)
    f.write_text("PATCHED = False\n")  # the pristine bytes, the stamp untouched
    assert w.key(in_venv=w.patched_venv) != k_good, "a lost overlay served the patched venv's stored results"
    assert w.key() != w.key(in_venv=w.patched_venv)
    pristine_before = w.key()
    (w.site / "vllm").mkdir()
    (w.site / "vllm" / "layer.py").write_text("PATCHED = True\n")  # the overlay leaked into the pristine venv
    assert w.key() != pristine_before, "the pristine venv is keyed by the same paths"
    f.unlink()
    assert w.key(in_venv=w.patched_venv) not in (k_good, None), "an overlaid file removed"


@pytest.fixture
def ran(world, tmp_path, monkeypatch):
    """check_runner over the world's venvs, whose python is this interpreter: a check script that
    imports the overlaid module from the venv's site-packages and fails unless it is patched."""
    import sys

    w = world
    memo = tmp_path / "check-results"
    memo.mkdir()
    monkeypatch.setenv(C.MEMO_ENV, str(memo))
    (tmp_path / "run-1").mkdir()  # this test's own run folder, not the suite's
    monkeypatch.setenv(C.RUN_DIR_ENV, str(tmp_path / "run-1"))
    f = _overlaid(w, "PATCHED = True\n")
    for venv in (w.venv, w.patched_venv):
        (venv / "bin").mkdir(exist_ok=True)
        py = venv / "bin" / "python"
        py.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
        py.chmod(0o755)
    shutil.copy(Path(__file__).parent / "checks" / "_harness.py", w.checks / "_harness.py")
    (w.checks / "layer_check.py").write_text(
        "import os\n"
        "from _harness import check, report, seed\n"
        "SEED = seed(os.environ.get('DSV4_SEED'))\n"
        "@check\n"
        "def patched():\n"
        "    assert 'PATCHED = True' in open(os.environ['LAYER']).read(), 'not patched'\n"
        "report()\n")
    monkeypatch.setenv("DSV4_SEED", "11")
    calls = []
    real = V.run_in_venv

    def run_in_venv(venv, script, **kw):
        calls.append(venv)
        layer = venv / "lib" / "python3.11" / "site-packages" / "vllm" / "layer.py"  # what the venv holds
        env = {**kw.pop("env"), "LAYER": str(layer) if layer.exists() else os.devnull}
        return real(venv, script, env=env, **kw)

    monkeypatch.setattr(V, "run_in_venv", run_in_venv)

    def get(patched: bool = True) -> dict:  # a new session each time (one run's own cache is per session)
        C._dists.clear()
        C._sources.clear()
        return V.check_runner({False: w.venv, True: w.patched_venv}, [w.checks], w.tree)("layer_check", patched)

    return SimpleNamespace(get=get, calls=calls, layer=f, memo=memo)


def test_a_venv_whose_overlay_was_lost_goes_red_not_a_stored_pass(ran):
    assert ran.get()["patched"]["ok"], ran.get()
    assert ran.get()["patched"]["ok"] and len(ran.calls) == 1, "a pass is read back by a later run"
    ran.layer.write_text("PATCHED = False\n")  # the overlay lost after the stamp was written
    got = ran.get()["patched"]
    assert len(ran.calls) == 2 and not got["ok"], "the lost overlay served the stored pass"
    assert "DSV4_SEED=11" in got["error"], "a randomized check's failure names its seed"


def test_failures_are_never_stored(ran, tmp_path, monkeypatch):
    ran.layer.write_text("PATCHED = False\n")
    assert not ran.get(patched=False)["patched"]["ok"]
    assert not ran.get(patched=False)["patched"]["ok"]
    # the run that computed it asks again (another test, regress's child pytest): one computation
    assert len(ran.calls) == 1, "the same inputs were computed twice in one run"
    assert not list(ran.memo.glob("*.json")), "a failure was stored across runs"
    assert "failures are never stored" in (ran.memo / "log").read_text()
    (tmp_path / "run-2").mkdir()
    monkeypatch.setenv(C.RUN_DIR_ENV, str(tmp_path / "run-2"))  # the next run
    assert not ran.get(patched=False)["patched"]["ok"]
    assert len(ran.calls) == 2, "a failure of an earlier run was replayed"
    ran.layer.write_text("PATCHED = True\n")  # the overlay mended within the run: another key, computed
    assert ran.get()["patched"]["ok"] and len(ran.calls) == 3


def test_what_the_machine_did_is_not_kept_even_for_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv(C.MEMO_ENV, str(tmp_path / "memo"))
    (tmp_path / "memo").mkdir()
    (tmp_path / "run").mkdir()
    monkeypatch.setenv(C.RUN_DIR_ENV, str(tmp_path / "run"))
    calls = []

    def compute(run: bool):
        calls.append(run)
        return C.Uncached({"sub": {"ok": False, "error": "x"}}, "why", run=run)

    C.memoized("m" * 64, "c", lambda: compute(False))
    C.memoized("m" * 64, "c", lambda: compute(False))
    assert calls == [False, False], "a failure the machine caused was replayed"
    C.memoized("n" * 64, "c", lambda: compute(True))
    C.memoized("n" * 64, "c", lambda: compute(True))
    assert calls == [False, False, True]
    monkeypatch.setenv(C.MEMO_ENV, "0")  # the cache off: every check every time, failures too
    C.memoized("n" * 64, "c", lambda: compute(True))
    assert calls == [False, False, True, True]


def test_the_seed_is_in_the_key_and_stored_with_the_result(ran, monkeypatch):
    ran.get()
    entry = json.loads(next(ran.memo.glob("*.json")).read_text())
    assert entry["seed"] == "11" and "seed 11" in entry["what"], "the seed is stored with the result"
    monkeypatch.setenv("DSV4_SEED", "12")
    ran.get()
    assert len(ran.calls) == 2, "another seed read back the result of the first"


def test_the_run_draws_a_seed_unless_given_one(tmp_path, monkeypatch):
    """CI draws a fresh seed every run (printed in the header and the summary); DSV4_SEED=N re-runs."""
    mod = _conftest()
    monkeypatch.setenv(mod.RUN_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(C.MEMO_ENV, "0")
    seeds = set()
    for _ in range(3):
        monkeypatch.delenv("DSV4_SEED", raising=False)
        config = SimpleNamespace()
        mod.pytest_configure(config)
        seeds.add(os.environ["DSV4_SEED"])
        assert os.environ["DSV4_SEED"] in mod.pytest_report_header(config)
        mod.pytest_unconfigure(config)
        assert "DSV4_SEED" not in os.environ  # a drawn seed goes with its run
    assert len(seeds) > 1 and all(s.isdigit() for s in seeds)
    monkeypatch.setenv("DSV4_SEED", "42")
    config = SimpleNamespace()
    mod.pytest_configure(config)
    mod.pytest_unconfigure(config)
    assert os.environ["DSV4_SEED"] == "42"  # given: kept, used, and left as it was
    monkeypatch.setenv("DSV4_SEED", "forty-two")
    with pytest.raises(pytest.UsageError, match="DSV4_SEED"):
        mod.pytest_configure(SimpleNamespace())


def test_every_randomized_check_takes_the_run_seed():
    """A check that draws its own seed (os.urandom) is keyed without it: one draw per key, forever,
    never reproducible. A randomized check takes the run's seed, which names it in its key; the
    others seed with a constant in their code (the same inputs every run)."""
    checks = Path(__file__).parent / "checks"
    seeded = []
    for f in sorted(checks.glob("*.py")):
        text = f.read_text()
        if f.name == "_harness.py":
            assert "DSV4_SEED" not in text, "_harness names the seed variable: every check would be keyed by it"
            continue
        assert "urandom" not in text, f"{f.name} draws its own seed"
        if "seed(" in text and "from _harness import" in text and ", seed" in text:
            assert 'seed(os.environ.get("DSV4_SEED"))' in text, f"{f.name}: seeded, but not by the run's seed"
            assert "DSV4_SEED" in V._named_variables(f, [checks])
            seeded.append(f.stem)
    assert {"e4m3_manual_decode", "emulation_swiglu", "sparse_mla_reader"} <= set(seeded)


def test_what_torch_wrote_into_this_process_is_not_another_computation(monkeypatch):
    """torch's inductor (a torch.compile anywhere in the worker) sets TORCHINDUCTOR_CACHE_DIR in
    os.environ to its default; the xdist workers and regress's pytest runs then keyed one check
    differently and each computed it. A check started with torch's default holds the same as one
    started without the variable; another folder is another environment."""
    cache_dir_utils = pytest.importorskip("torch._inductor.runtime.cache_dir_utils")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/placeholder")  # recorded: restored after the test
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    unset = V.check_env(None, [])
    cache_dir_utils.cache_dir()  # what torch.compile does first: writes its default into os.environ
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == os.path.abspath(cache_dir_utils.default_cache_dir())
    assert V.check_env(None, []) == unset
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/elsewhere/inductor")
    assert V.check_env(None, [])["TORCHINDUCTOR_CACHE_DIR"] == "/elsewhere/inductor"
    assert C.keyed_env(V.check_env(None, [])) != C.keyed_env(unset)
