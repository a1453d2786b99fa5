"""tests/_forkserver.py: a run through the fork server is the run a fresh interpreter makes (the
oracle here is `python SCRIPT ARGS` itself), exit codes and signals come back as subprocess reports
them, and a server whose imports left a thread running refuses to start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _forkserver import ForkServer

SCRIPT = textwrap.dedent('''
    import json, os, sys
    import shadowed
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path": sys.path, "name": __name__,
                      "file": __file__, "env": {k: v for k, v in os.environ.items() if k.startswith("FS_")},
                      "shadowed": shadowed.WHERE, "flag": os.environ.get("FS_GONE")}))
    print("to stderr", file=sys.stderr)
    sys.exit(int(os.environ.get("FS_EXIT", "0")))
''')


@pytest.fixture
def layout(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "a" / "shadowed.py").write_text("WHERE = 'a'\n")
    (tmp_path / "b" / "shadowed.py").write_text("WHERE = 'b'\n")
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    return tmp_path, script


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FS_", "PYTHON"))}
    env.update(extra)
    return env


@pytest.fixture
def server(layout):
    root, _ = layout
    s = ForkServer(sys.executable, _env(PYTHONPATH=str(root / "b"), FS_GONE="server's"), ("json", "textwrap"))
    assert s.ok
    yield s
    s.close()


@pytest.mark.parametrize("code", [0, 3])
def test_a_run_is_what_a_fresh_interpreter_does(layout, server, code):
    root, script = layout
    env = _env(PYTHONPATH=str(root / "a"), FS_ONE="1", FS_EXIT=str(code))  # FS_GONE: not the server's
    fresh = subprocess.run([sys.executable, str(script), "x", "--y"], env=env, cwd=root / "work",
                           capture_output=True, text=True)
    forked = server.run([script, "x", "--y"], env, root / "work", root)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    got = json.loads(forked.stdout)
    assert got["shadowed"] == "a" and got["flag"] is None and got["name"] == "__main__"
    assert got["env"] == {"FS_ONE": "1", "FS_EXIT": str(code)} and forked.returncode == code


def test_errors_and_signals_come_back_as_subprocess_reports_them(layout, server):
    root, _ = layout
    cases = {"raise ValueError('boom')": (1, "ValueError: boom"), "raise SystemExit('bye')": (1, "bye"),
             "import os, signal; os.kill(os.getpid(), signal.SIGTERM)": (-15, "")}
    for i, (code, (rc, err)) in enumerate(cases.items()):
        f = root / f"s{i}.py"
        f.write_text(code + "\n")
        fresh = subprocess.run([sys.executable, str(f)], env=_env(), cwd=root, capture_output=True, text=True)
        forked = server.run([f], _env(), root, root)
        assert forked.returncode == fresh.returncode == rc
        assert err in forked.stderr and err in fresh.stderr


def test_a_run_past_its_time_is_killed(layout, server):
    root, _ = layout
    f = root / "sleep.py"
    f.write_text("import time\ntime.sleep(60)\n")
    pid = server.spawn([f], _env(), root, root / "o", root / "e")
    with pytest.raises(subprocess.TimeoutExpired):
        server.wait(pid, timeout=0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone, and collected by the server (no zombie left)
    assert server.run([root / "probe.py"], _env(PYTHONPATH=str(root / "a")), root, root).returncode == 0


def test_stdout_and_stderr_can_share_one_log(layout, server):
    root, script = layout
    log = root / "both.log"
    assert server.wait(server.spawn([script], _env(PYTHONPATH=str(root / "a")), root, log, log)) == 0
    text = log.read_text()
    assert '"name": "__main__"' in text and "to stderr" in text


def test_a_server_whose_imports_started_a_thread_refuses(tmp_path):
    (tmp_path / "threads_at_import.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n")
    s = ForkServer(sys.executable, _env(PYTHONPATH=str(tmp_path)), ("threads_at_import",))
    assert not s.ok
    s.close()


BLAS_SCRIPT = textwrap.dedent('''
    import hashlib, os, sys
    import numpy as np
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((700, 900)), rng.standard_normal((900, 500))
    c = a @ b  # large enough for OpenBLAS to use its thread pool
    print(hashlib.sha256(c.tobytes()).hexdigest(), len(os.listdir("/proc/self/task")))
''')


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through /proc (Linux)")
def test_numpys_blas_pool_does_not_stop_the_server_and_works_in_the_child(tmp_path):
    """numpy's OpenBLAS starts threads when imported: the server still starts, and a child's
    threaded matrix product is the fresh interpreter's bit for bit, with the pool running again."""
    pytest.importorskip("numpy")
    script = tmp_path / "blas.py"
    script.write_text(BLAS_SCRIPT)
    env = _env(OPENBLAS_NUM_THREADS="2")  # a pool even on a 1-core machine
    s = ForkServer(sys.executable, env, ("numpy",))
    try:
        assert s.ok, "a server that preloads numpy refused to start"
        forked = s.run([str(script)], env, tmp_path, tmp_path, timeout=120)
    finally:
        s.close()
    fresh = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert forked.returncode == fresh.returncode == 0, forked.stderr + fresh.stderr
    (digest, threads), (fresh_digest, _) = forked.stdout.split(), fresh.stdout.split()
    assert digest == fresh_digest
    assert int(threads) >= 2, "the child's product ran without the BLAS pool"


def test_a_run_with_other_blas_threads_is_not_forked(server):
    assert not server.forkable({**server.env, "OPENBLAS_NUM_THREADS": "7"})  # read when numpy loaded


def test_close_kills_and_collects_the_runs_nobody_waited_for(layout, server):
    root, _ = layout
    f = root / "sleep.py"
    f.write_text("import time\ntime.sleep(60)\n")
    pid = server.spawn([f], _env(), root, root / "o", root / "e")
    server.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed, and not left a zombie
    assert server.wait(pid) == -9
    with pytest.raises(RuntimeError):
        server.spawn([f], _env(), root, root / "o", root / "e")


def test_a_run_with_other_start_up_variables_is_not_forked(layout, server):
    root, _ = layout
    assert server.forkable(_env(PYTHONPATH=str(root / "a"), FS_ANY="x"))  # PYTHONPATH is per run
    assert not server.forkable(_env(PYTHONWARNINGS="error"))  # read once, at the server's start
    assert not server.forkable(_env(PYTHONHASHSEED="7"))


def test_what_the_imports_print_does_not_break_the_answers(tmp_path):
    (tmp_path / "noisy.py").write_text("print('hello from an import')\n")
    s = ForkServer(sys.executable, _env(PYTHONPATH=str(tmp_path)), ("noisy",))
    try:
        assert s.ok
        (tmp_path / "p.py").write_text("print('run')\n")
        assert s.run([tmp_path / "p.py"], _env(), tmp_path, tmp_path).stdout == "run\n"
    finally:
        s.close()

