"""Benchmark: a newcomer's first run (empty caches) against the same steps again (warm), in one run.

The README's realistic session is a test (tests/newcomer/test_newcomer_session.py): a fresh clone of
HEAD, the README's first command, then every `$` line of the session. This runs that test twice with
DSV4_SESSION_UNSEEDED=1 (nothing prepared for it: `regress` builds its venvs, `build --venv`
installs vLLM), first on new empty caches, then again on the caches the first run left, and prints
each command's wall time cold against warm with the ratio. With `--suite` it then does the same for
the README's test command in fresh clones (its own empty caches: it must not find the session's).

"Empty caches" means every cache the tool and pip read, pointed at new folders: DSV4_PATCH_CACHE,
DSV4_VENV_CACHE, XDG_CACHE_HOME, PIP_CACHE_DIR. Packages still come from whatever index pip is
configured with (a local index makes downloads near-instant: the figures then show the tool's own
cost). The 1-minute load average at the start of each run is printed beside it: on a shared machine
the figures mean little without it.

    .venv/bin/python benchmarks/bench_first_run.py [--suite | --suite-only] [--transcript FILE] [--keep DIR]

--transcript writes the cold session as it printed, paths shown as a newcomer's (/home/you/...):
the README's session is pasted from it. Exit 1 when a run fails (its log is kept and named).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SESSION_TEST = "tests/newcomer/test_newcomer_session.py"
# The commands whose cost the README quotes (a prefix of the session's command line each).
HEADLINE = {
    "python3 -m venv .venv": "the README's first command (venv, install, apply)",
    "dsv4-patch check && dsv4-patch regress vllm": "check + regress vllm (every carried release)",
    "dsv4-patch build vllm --venv .venv-vllm": "build vllm --venv",
}


def _caches(base: Path) -> dict[str, str]:
    if base.exists():
        shutil.rmtree(base)  # "empty caches" means empty, also in a reused --keep folder
    dirs = {"DSV4_PATCH_CACHE": base / "dsv4-patch", "DSV4_VENV_CACHE": base / "dsv4-patch" / "venvs",
            "XDG_CACHE_HOME": base / "xdg", "PIP_CACHE_DIR": base / "pip"}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in dirs.items()}


def _env(caches: dict[str, str], **extra: str) -> dict[str, str]:
    drop = ("VIRTUAL_ENV", "DSV4_SEED", "DSV4_CHECK_MEMO", "DSV4_TEST_RUN_DIR", "PYTHONPYCACHEPREFIX")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}  # nothing warm from the caller
    env.update(caches, DSV4_TEST_WORKERS="0", **extra)
    return env


def _load() -> float:
    return os.getloadavg()[0]


def run_session(label: str, work: Path, caches: dict[str, str]) -> dict:
    times, transcript, log = work / f"{label}-times.json", work / f"{label}-session.txt", work / f"{label}.log"
    basetemp = work / f"{label}-tmp"
    for stale in (times, transcript):  # never read an earlier run's figures as this one's
        stale.unlink(missing_ok=True)
    env = _env(caches, DSV4_SESSION_UNSEEDED="1", DSV4_SESSION_TIMES=str(times),
               DSV4_SESSION_TRANSCRIPT=str(transcript))
    load, t0 = _load(), time.monotonic()
    print(f"· session, {label}: running {SESSION_TEST} (1-minute load {load:.2f}; log {log})", flush=True)
    with log.open("w") as fh:
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                            f"--basetemp={basetemp}", SESSION_TEST], cwd=ROOT, env=env, stdout=fh,
                           stderr=subprocess.STDOUT)
    wall = time.monotonic() - t0
    run = {"label": label, "rc": p.returncode, "wall": wall, "load": load, "log": str(log),
           "transcript": transcript, "basetemp": basetemp, "caches": caches}
    # each run's clone has its own path (the pip install the session is told to run names it): the
    # commands are compared as a newcomer would type them
    steps = json.loads(times.read_text()) if times.is_file() else []
    run["steps"] = [{**s, "command": newcomer_paths(s["command"], run)} for s in steps]
    if run["rc"] == 0 and not steps:  # the session test skipped (no upstream reachable): no figures
        run["rc"] = 5
    shutil.rmtree(basetemp, ignore_errors=True)  # the clone and its 5 GB .venv-vllm: the disk is not endless
    return run


def run_suite(label: str, work: Path, caches: dict[str, str]) -> dict:
    """The README's test command, exactly as written there, in a fresh clone of HEAD."""
    readme = (ROOT / "README.md").read_text()
    command = next(b.strip() for b in re.findall(r"```sh\n(.*?)```", readme, re.S) if "pytest" in b)
    clone, log = work / f"suite-{label}" / "dsv4-patch", work / f"suite-{label}.log"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = _env(caches)
    env.pop("DSV4_TEST_WORKERS")  # the suite spreads over the cores as it does in CI
    load, t0 = _load(), time.monotonic()
    print(f"· test command, {label}: {command} (1-minute load {load:.2f}; log {log})", flush=True)
    with log.open("w") as fh:
        p = subprocess.run(["bash", "-c", command], cwd=clone, env=env, stdout=fh, stderr=subprocess.STDOUT)
    wall = time.monotonic() - t0
    tail = log.read_text().strip().splitlines()[-1:] or [""]
    shutil.rmtree(clone.parent, ignore_errors=True)
    return {"label": label, "rc": p.returncode, "wall": wall, "load": load, "summary": tail[0], "log": str(log)}


def newcomer_paths(text: str, run: dict) -> str:
    """The transcript with this run's private folders shown where a newcomer's would be."""
    text = re.sub(re.escape(str(run["basetemp"])) + r"/[^/\s]+/dsv4-patch", "/home/you/dsv4-patch", text)
    home = {"DSV4_VENV_CACHE": "/home/you/.cache/dsv4-patch/venvs", "DSV4_PATCH_CACHE": "/home/you/.cache/dsv4-patch",
            "PIP_CACHE_DIR": "/home/you/.cache/pip", "XDG_CACHE_HOME": "/home/you/.cache"}
    for key, shown in home.items():  # the venv cache sits inside the tool cache: replaced first
        text = text.replace(run["caches"][key], shown)
    return text


def _mmss(s: float) -> str:
    s = round(s, 1)  # 119.97 s is 2:00.0, not 1:60.0
    return f"{int(s // 60)}:{s % 60:04.1f}" if s >= 60 else f"{s:.1f} s"


def report(cold: dict, warm: dict) -> list[dict]:
    rows = []
    if len(cold["steps"]) != len(warm["steps"]):
        raise SystemExit(f"error: the two runs ran different commands ({len(cold['steps'])} vs {len(warm['steps'])})")
    for c, w in zip(cold["steps"], warm["steps"]):
        if c["command"] != w["command"]:
            raise SystemExit(f"error: the two runs ran different commands ({c['command']!r} vs {w['command']!r})")
        rows.append({"command": c["command"], "cold_s": c["seconds"], "warm_s": w["seconds"],
                     "ratio": round(c["seconds"] / max(w["seconds"], 0.01), 1)})
    width = 60
    print(f"\n{'command':<{width}} {'empty caches':>12} {'warm':>9} {'cold/warm':>9}")
    for r in rows:
        cmd = r["command"] if len(r["command"]) <= width else r["command"][:width - 1] + "…"
        print(f"{cmd:<{width}} {_mmss(r['cold_s']):>12} {_mmss(r['warm_s']):>9} {r['ratio']:>8.1f}x")
    print(f"{'whole session (pytest wall)':<{width}} {_mmss(cold['wall']):>12} {_mmss(warm['wall']):>9} "
          f"{cold['wall'] / max(warm['wall'], 0.01):>8.1f}x")
    print(f"1-minute load at start: empty caches {cold['load']:.2f}, warm {warm['load']:.2f}")
    print("\nthe steps the README quotes:")
    for prefix, name in HEADLINE.items():
        hit = [r for r in rows if r["command"].startswith(prefix)]
        if hit:
            r = hit[0]
            print(f"  {name}: {_mmss(r['cold_s'])} with empty caches, {_mmss(r['warm_s'])} warm ({r['ratio']:.1f}x)")
    return rows


def session_figures(args, work: Path) -> dict | None:
    """The README's session cold then warm, compared; None when a run failed (its log is named)."""
    caches = _caches(work / "session-caches")
    cold = run_session("cold", work, caches)
    if cold["rc"] != 0:
        print(f"error: the session failed with empty caches (exit {cold['rc']}); log: {cold['log']}")
        args.keep = args.keep or work
        return None
    if args.transcript:
        args.transcript.write_text(newcomer_paths(cold["transcript"].read_text(), cold))
        print(f"· wrote the cold session to {args.transcript}")
    warm = run_session("warm", work, caches)
    if warm["rc"] != 0:
        print(f"error: the session failed warm (exit {warm['rc']}); log: {warm['log']}")
        args.keep = args.keep or work
        return None
    return {"session": report(cold, warm), "session_wall": [cold["wall"], warm["wall"]],
            "session_load": [cold["load"], warm["load"]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", action="store_true", help="also time the README's test command, cold then warm")
    ap.add_argument("--suite-only", action="store_true",
                    help="time only the README's test command, cold then warm (the suite runs the session too)")
    ap.add_argument("--transcript", type=Path, help="write the cold session here, with newcomer paths")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary folder, removed)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="dsv4-first-run-"))
    work.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    try:
        figures = {} if args.suite_only else session_figures(args, work)
        if figures is None:
            return 1
        if args.suite or args.suite_only:
            shutil.rmtree(work / "session-caches", ignore_errors=True)  # 6 GB; the suite gets its own
            suite_caches = _caches(work / "suite-caches")
            runs = [run_suite("cold", work, suite_caches), run_suite("warm", work, suite_caches)]
            print(f"\n{'the README test command':<40} {'wall':>9} {'load':>5}  result")
            for r in runs:
                print(f"{r['label']:<40} {_mmss(r['wall']):>9} {r['load']:>5.2f}  {r['summary']}")
                if r["rc"]:
                    failed.append(f"test command {r['label']}: exit {r['rc']} ({r['log']})")
            print(f"cold/warm: {runs[0]['wall'] / max(runs[1]['wall'], 0.01):.1f}x")
            figures["suite"] = [{k: v for k, v in r.items()} for r in runs]
        if args.json:
            args.json.write_text(json.dumps(figures, indent=1, default=str))
        for f in failed:
            print(f"error: {f}")
        if failed:
            args.keep = args.keep or work
        return 1 if failed else 0
    except BaseException:
        args.keep = args.keep or work  # the logs an error names stay
        raise
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"· kept {work}")


if __name__ == "__main__":
    sys.exit(main())
