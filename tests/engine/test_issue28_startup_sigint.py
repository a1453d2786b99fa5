"""Issue 28: Ctrl-C in the first second of start-up (while Python imports typer, rich and the
engine, before main() installs its handler) printed a KeyboardInterrupt traceback (21 of 50
SIGINTs under load). From the moment the tool's own code runs (tools/__init__.py), a SIGINT is one
line and exit 130; one that lands after the command finished is exit 0 and silent.

Deterministic: the child runs with `-X importtime`, which writes a line as each import ends; the
signal is sent a seeded delay after the line saying the `tools` package was imported (the first
code of the tool's own). Re-run one case: DSV4_TEST_SEED=<seed> pytest this file."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("DSV4_TEST_SEED", "28"))

# what pip's console script `dsv4-patch` does (argv[0] names the tool), without needing the install
CONSOLE = ("import sys; sys.argv[0] = 'dsv4-patch'; sys.path.insert(0, %r); "
           "from tools.applypatch import main; sys.exit(main())" % str(ROOT))


def _spawn(how: str, project: Path, cache: Path) -> subprocess.Popen:
    head = ["-c", CONSOLE] if how == "console" else [str(ROOT / "tools/applypatch.py")]
    return subprocess.Popen([sys.executable, "-X", "importtime", *head, "status", "--project", str(project)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(project),
                            env={**os.environ, "DSV4_PATCH_CACHE": str(cache), "COLUMNS": "100"})


def _wait_for_tools_import(proc: subprocess.Popen) -> list[str]:
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("import time:") and line.rstrip().split("|")[-1].strip() == "tools":
            return seen
    return seen  # the child ended first: the assertions below say why


@pytest.mark.parametrize("how", ["console", "script"])
def test_ctrl_c_during_start_up_is_one_line_and_130(env, how):
    rng = random.Random(f"{SEED}:{how}")
    # half of the delays inside the imports (~0.2 s unloaded), the rest anywhere up to the end
    inside = 3 if how == "console" else 1
    delays = [0.0] + sorted(rng.uniform(0, 0.25) for _ in range(inside)) + [rng.uniform(0.25, 0.6)]
    outcomes = []
    for delay in delays:
        proc = _spawn(how, env.root, env.cache.root)
        before = _wait_for_tools_import(proc)
        time.sleep(delay)
        try:
            proc.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass
        out, rest = proc.communicate(timeout=60)
        err = "".join(before) + rest
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("import time:")]
        where = f"seed {SEED} ({how}), SIGINT {delay:.3f}s after `tools` was imported: rc {proc.returncode}\n{err[-1500:]}"
        assert "Traceback" not in err and "Exception ignored" not in err, where
        assert proc.returncode in (0, 130), where
        if proc.returncode == 130:
            assert len(lines) == 1 and "interrupted" in lines[0], where
        outcomes.append(proc.returncode)
    # At least one must land during start-up, or the test shows nothing. On a loaded machine this
    # reader can be scheduled so late that even the 0.0 s signal finds the command done: try the
    # earliest signal again a bounded number of times before calling the machine too slow.
    tries = 0
    while 130 not in outcomes and tries < 12:
        tries += 1
        proc = _spawn(how, env.root, env.cache.root)
        _wait_for_tools_import(proc)
        try:
            proc.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass
        _, rest = proc.communicate(timeout=60)
        assert "Traceback" not in rest and proc.returncode in (0, 130), (tries, proc.returncode, rest[-1500:])
        outcomes.append(proc.returncode)
    if 130 not in outcomes:
        pytest.skip(f"no SIGINT landed during start-up in {len(outcomes)} tries (machine too loaded to aim one)")
