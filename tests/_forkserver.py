"""A fork server for test probes that each need a fresh interpreter but share heavy imports.

SGLang's probes each import SGLang anew (its switches are read when deepseek_v4 is imported): ~20 s
an interpreter, about half of it torch, transformers and sympy, which read none of those switches.
The server imports such modules once, then forks one child per run; the child takes the run's
environment, argv, working directory and sys.path as `python SCRIPT ARGS` would set them, and runs
the script as __main__ (runpy), its stdout and stderr going to files. For code that does not depend
on which third-party modules are already imported, that is the same run as a fresh interpreter;
the server refuses to start (and `run`/`spawn` fall back to a plain interpreter) when its imports
left a thread running, since a fork copies only the thread that calls it -- but for thread pools that
stop themselves before a fork (numpy's OpenBLAS: one trial fork, then the threads are counted).
A run is forked when its interpreter start-up variables (STARTUP_VARS) are the server's; the rest of
its environment is its own, which suits preloads checked not to read it (the SGLang probes').

Protocol (one JSON line each way): {"run": {...}} -> {"pid": N}; {"wait": N} -> {"rc": R} (R as
subprocess reports it: negative for a signal). The server answers one request at a time.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

_SERVER = r'''
import json, os, sys, threading
preload = json.loads(sys.argv[1])
answer = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # what the imports print goes to stderr, never into the answers


def tasks():  # native threads too (a BLAS or OpenMP pool): a fork copies only the calling thread
    try:
        return max(len(os.listdir("/proc/self/task")), threading.active_count())
    except OSError:
        return threading.active_count()


for name in preload:
    try:
        __import__(name)
    except Exception:  # noqa: BLE001 - the child imports it itself, as a fresh interpreter would
        pass
sys.stdout.flush()  # now, into stderr: never into a child's log
sys.stderr.flush()
base_path = [p for p in sys.path if p != ""]
base_pp = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
# numpy's OpenBLAS starts its thread pool when numpy is imported (torch imports numpy). The pool is
# fork-safe: a pthread_atfork handler joins it before every fork, and the next threaded BLAS call
# starts it again, in the parent or the child. So one trial fork stops such pools; a thread still
# running after it belongs to a library that does not prepare for forks, and the server refuses.
if tasks() > 1:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
threads = tasks()
print(json.dumps({"ready": threads}), file=answer, flush=True)
if threads != 1:
    sys.exit(0)
for line in sys.stdin:
    req = json.loads(line)
    if "wait" in req:
        _, status = os.waitpid(req["wait"], 0)
        rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        print(json.dumps({"rc": rc}), file=answer, flush=True)
        continue
    run = req["run"]
    pid = os.fork()
    if pid:
        print(json.dumps({"pid": pid}), file=answer, flush=True)
        continue
    # the child: become `python SCRIPT ARGS` with the run's environment
    answer.close()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, run["stdout"]), (2, run["stderr"])):
        if fd == 2 and path == run["stdout"]:  # one log for both, as stderr=subprocess.STDOUT
            os.dup2(1, 2)
            continue
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    os.chdir(run["cwd"])
    os.environ.clear()
    os.environ.update(run["env"])
    script = os.path.abspath(run["argv"][0])
    script_dir = os.path.dirname(os.path.realpath(script))  # as the interpreter sets sys.path[0]
    pp = [p for p in run["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [script_dir, *pp, *(p for p in base_path if p not in base_pp)]
    sys.argv = [script, *run["argv"][1:]]
    import runpy, traceback
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - what a fresh interpreter prints and exits 1 with
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)  # out of the loop: the interpreter shuts down as after a script
'''


# Read by the interpreter at start-up only: a run that sets them differently from the server cannot
# be forked from it (it gets a fresh interpreter instead).
STARTUP_VARS = ("PYTHONWARNINGS", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED",
                "PYTHONOPTIMIZE", "PYTHONSAFEPATH", "PYTHONUTF8", "PYTHONIOENCODING", "PYTHONNOUSERSITE",
                "PYTHONDEVMODE", "PYTHONFAULTHANDLER", "PYTHONTRACEMALLOC", "PYTHONHOME", "PYTHONSTARTUP",
                # read when a preloaded BLAS or OpenMP runtime loads (the thread count changes sums)
                "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class ForkServer:
    """`spawn(argv, env, cwd, stdout, stderr) -> pid`, `wait(pid, timeout) -> rc`, `run(...)`:
    subprocess.run's answer. `ok` is False when the server could not start (then `run` and `spawn`
    are not to be used: the caller runs a plain interpreter). `close()` kills and collects the runs
    nobody waited for; `wait` on one of those afterwards gives -9."""

    def __init__(self, python: str, env: dict[str, str], preload: tuple[str, ...]):
        self.env = dict(env)
        self._proc = subprocess.Popen([python, "-c", _SERVER, json.dumps(list(preload))], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ok, self._runs, self._pending, self._done = False, itertools.count(1), set(), {}
        try:
            reply = self._read(timeout=600)
        except RuntimeError:  # it exited at start (an import that killed it): a plain interpreter then
            reply = None
        self.ok = bool(reply) and reply.get("ready") == 1
        if not self.ok:
            self.close()

    def forkable(self, env: dict[str, str]) -> bool:
        """Whether a run with `env` is the run a fresh interpreter makes when forked from here."""
        return self.ok and all(env.get(k) == self.env.get(k) for k in STARTUP_VARS)

    def _read(self, timeout: float | None) -> dict | None:
        """The next answer; None when none came within `timeout`. RuntimeError when the server is gone."""
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the fork server exited")
        try:
            return json.loads(line)
        except ValueError as e:
            raise RuntimeError(f"the fork server answered {line!r}") from e

    def _ask(self, req: dict, timeout: float | None = 60) -> dict:
        if self._proc.poll() is not None or self._proc.stdin.closed:
            raise RuntimeError("the fork server is not running")
        self._proc.stdin.write(json.dumps(req) + "\n")
        self._proc.stdin.flush()
        reply = self._read(timeout)
        if reply is None:
            raise RuntimeError(f"fork server gave no answer to {req}")
        return reply

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path | str, stdout: Path, stderr: Path) -> int:
        pid = self._ask({"run": {"argv": [str(a) for a in argv], "env": env, "cwd": str(cwd),
                                 "stdout": str(stdout), "stderr": str(stderr)}})["pid"]
        self._pending.add(pid)
        return pid

    def wait(self, pid: int, timeout: float | None = None) -> int:
        if pid in self._done:
            return self._done[pid]
        if self._proc.poll() is not None or self._proc.stdin.closed:
            raise RuntimeError("the fork server is not running")
        self._proc.stdin.write(json.dumps({"wait": pid}) + "\n")
        self._proc.stdin.flush()
        reply = self._read(timeout)
        if reply is None:  # ran past its time: kill it, then collect it
            os.kill(pid, signal.SIGKILL)
            self._done[pid] = (self._read(60) or {}).get("rc", -9)
            self._pending.discard(pid)
            raise subprocess.TimeoutExpired(str(pid), timeout or 0)
        self._pending.discard(pid)
        self._done[pid] = reply["rc"]
        return reply["rc"]

    def run(self, argv: list[str], env: dict[str, str], cwd: Path | str, log_dir: Path,
            timeout: float | None = None) -> subprocess.CompletedProcess:
        n = next(self._runs)
        out, err = log_dir / f"run-{n}.out", log_dir / f"run-{n}.err"
        rc = self.wait(self.spawn(argv, env, cwd, out, err), timeout)
        return subprocess.CompletedProcess(argv, rc, out.read_text(errors="replace"), err.read_text(errors="replace"))

    def close(self) -> None:
        for pid in sorted(self._pending):
            try:
                os.kill(pid, signal.SIGKILL)
                self.wait(pid, timeout=60)
            except (OSError, RuntimeError, subprocess.TimeoutExpired):
                self._done[pid] = -9
        self._pending.clear()
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        elif not self._proc.stdin.closed:
            self._proc.stdin.close()
