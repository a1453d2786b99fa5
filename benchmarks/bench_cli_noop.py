"""The CLI no-op: `dsv4-patch apply STACK` when nothing changed, beside floors measured in the
same run.

    python benchmarks/bench_cli_noop.py                 # vllm (both of its releases), 15 rounds
    python benchmarks/bench_cli_noop.py --stack sglang --runs 25
    python benchmarks/bench_cli_noop.py --bytecode      # let Python write .pyc for the children
    git archive main | tar -x -C /tmp/dsv4-main         # an older checkout, to time beside this one:
    python benchmarks/bench_cli_noop.py --baseline /tmp/dsv4-main

Each round runs, in this order, one process of each (interleaved, so a burst of load on the
shared machine hits all of them alike):
- `python -c pass`: the interpreter's start;
- `python -c "import typer, rich.console"`: what any Typer+rich CLI pays before its own code;
- `git status --porcelain=v2 --branch` in each tree the no-op checks;
- the CLI no-op itself (the installed `dsv4-patch` script beside this Python, else
  tools/applypatch.py), checked to say "unchanged";
- with --baseline DIR: DIR/tools/applypatch.py (another checkout's CLI, its own dsv4_patch) on
  the same project and trees, also checked to say "unchanged".
Wall time (perf_counter around the process) and CPU time (the child's user+system from wait4).
Printed: the median of each, the floor (`python -c pass` + the git status calls of the same
round) and the ratios CLI / floor, CLI / typer floor. Then one `python -X importtime` run of the
CLI: the groups of modules it imports, largest first, and whether any heavy module (pydantic,
dsv4_patch.e2e, dsv4_patch.bump) was imported.

The trees are the ones the CLI uses (OUT of the project, default build/); the first run builds
them if they are missing, and must then be a no-op. Nothing else is written, except .pyc files
with --bytecode (by default the children run with the environment as it is, so a shell with
PYTHONDONTWRITEBYTECODE=1 compiles this project's modules on every run: the figure says so).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("pydantic", "dsv4_patch.e2e", "dsv4_patch.bump", "dsv4_patch.config_schema")


def run(argv: list[str], *, cwd: Path, env: dict) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the child, exit code, stdout+stderr)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, p.returncode, out.decode("utf-8", "replace")


def cli_argv() -> list[str]:
    script = Path(sys.executable).with_name("dsv4-patch")
    return [str(script)] if script.exists() else [sys.executable, str(ROOT / "tools" / "applypatch.py")]


def trees_of(out_text: str) -> list[Path]:
    return [Path(m) for m in re.findall(r": (?:unchanged|built) (\S+) \(", out_text)]


def importtime(argv: list[str], env: dict, cwd: Path) -> tuple[list[tuple[str, float]], float, list[str]]:
    """Groups of imported modules (dsv4_patch.<module> / tools.<module> one by one, the rest by
    top-level package) with their own import time in ms, the total, and the heavy ones present."""
    rest = argv[1:] if argv[0] == sys.executable else argv  # the console script is a Python file too
    p = subprocess.run([sys.executable, "-X", "importtime", *rest], cwd=cwd, env=env, capture_output=True, text=True)
    groups: dict[str, float] = defaultdict(float)
    names = []
    for line in p.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s+)(\S+)", line)
        if not m:
            continue
        name = m.group(4)
        names.append(name)
        parts = name.split(".")
        key = ".".join(parts[:2]) if parts[0] in ("dsv4_patch", "tools") else parts[0]
        groups[key] += int(m.group(1)) / 1000
    heavy = sorted({h for h in HEAVY for n in names if n == h or n.startswith(h + ".")})
    return sorted(groups.items(), key=lambda kv: -kv[1]), sum(groups.values()), heavy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stack", default="vllm", help="stack (or STACK@TAG) to re-apply [default: vllm]")
    ap.add_argument("--runs", type=int, default=15, help="interleaved rounds [default: 15]")
    ap.add_argument("--project", type=Path, default=ROOT, help="checkout holding patches/stacks.toml")
    ap.add_argument("--baseline", type=Path, help="another checkout whose CLI to time beside this one")
    ap.add_argument("--bytecode", action="store_true", help="let the children write and use .pyc files "
                    "(unset PYTHONDONTWRITEBYTECODE), as an installed tool does")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    cli = cli_argv() + ["apply", args.stack]
    cwd = args.project.resolve()

    wall, cpu, rc, text = run(cli, cwd=cwd, env=env)  # builds what is missing; writes .pyc with --bytecode
    if rc != 0:
        print(text)
        return rc
    wall, cpu, rc, text = run(cli, cwd=cwd, env=env)
    trees = trees_of(text)
    if rc != 0 or "built" in text or not trees:
        print("the second run is not a no-op:\n" + text)
        return 1

    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import typer, rich.console'": [sys.executable, "-c", "import typer, rich.console"],
        **{f"git status ({t.name})": ["git", "-C", str(t), "status", "--porcelain=v2", "--branch"] for t in trees},
        "dsv4-patch apply (no-op)": cli,
    }
    if args.baseline:
        cases["baseline checkout's CLI (no-op)"] = [sys.executable, str(args.baseline.resolve() / "tools" / "applypatch.py"),
                                                    "apply", args.stack]
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
    floor: list[tuple[float, float]] = []
    for _ in range(args.runs):
        for name, argv in cases.items():
            w, c, rc, text = run(argv, cwd=cwd, env=env)
            if rc != 0 or ("no-op" in name and "unchanged" not in text):
                print(f"{name}: exit {rc}\n{text}")
                return 1
            samples[name].append((w, c))
        git = [samples[n][-1] for n in cases if n.startswith("git status")]
        base = samples["python -c pass"][-1]
        floor.append((base[0] + sum(g[0] for g in git), base[1] + sum(g[1] for g in git)))

    def med(xs: list[tuple[float, float]]) -> tuple[float, float]:
        return statistics.median(x[0] for x in xs), statistics.median(x[1] for x in xs)

    load = os.getloadavg()[0]
    print(f"CLI no-op of `apply {args.stack}` ({len(trees)} trees), {args.runs} interleaved rounds, "
          f"load {load:.1f} on {os.cpu_count()} cores; bytecode: "
          + ("written and used (--bytecode)" if args.bytecode else
             "as the environment says (PYTHONDONTWRITEBYTECODE=" + env.get("PYTHONDONTWRITEBYTECODE", "") + ")"))
    print(f"{'':44} {'wall s':>8} {'CPU s':>8}")
    for name in cases:
        w, c = med(samples[name])
        print(f"{name:44} {w:8.3f} {c:8.3f}")
    fw, fc = med(floor)
    print(f"{'floor: python -c pass + the git status calls':44} {fw:8.3f} {fc:8.3f}")
    cw, cc = med(samples["dsv4-patch apply (no-op)"])
    tw, tc = med(samples["python -c 'import typer, rich.console'"])
    pw, pc = med(samples["python -c pass"])
    uw, uc = tw + fw - pw, tc + fc - pc  # typer+rich instead of a bare interpreter, plus the same git calls
    print(f"{'floor + typer/rich imports':44} {uw:8.3f} {uc:8.3f}")
    print(f"ratio CLI / floor: wall {cw / fw:.2f}x, CPU {cc / fc:.2f}x;  "
          f"CLI / (floor + typer/rich): wall {cw / uw:.2f}x, CPU {cc / uc:.2f}x")
    if args.baseline:
        bw, bc = med(samples["baseline checkout's CLI (no-op)"])
        print(f"ratio CLI / baseline CLI: wall {cw / bw:.2f}x, CPU {cc / bc:.2f}x")
    print(f"target: no-op <= 0.300 s wall: {'met' if cw <= 0.3 else 'NOT met'} (median {cw:.3f} s)")

    groups, total, heavy = importtime(cli, env, cwd)
    print(f"\nimports of one no-op run (python -X importtime, own time per group): {total:.0f} ms")
    for name, ms in groups[:18]:
        print(f"  {name:36} {ms:7.1f} ms")
    rest = sum(ms for _, ms in groups[18:])
    print(f"  {'(the other ' + str(max(0, len(groups) - 18)) + ' groups)':36} {rest:7.1f} ms")
    print("heavy modules imported: " + (", ".join(heavy) if heavy else "none (pydantic, e2e, bump, config_schema)"))
    print(json.dumps({"stack": args.stack, "runs": args.runs, "load": round(load, 2), "trees": len(trees),
                      "cli": {"wall": round(cw, 4), "cpu": round(cc, 4)},
                      "floor": {"wall": round(fw, 4), "cpu": round(fc, 4)},
                      "floor_typer_rich": {"wall": round(uw, 4), "cpu": round(uc, 4)},
                      **({"baseline": {"wall": round(bw, 4), "cpu": round(bc, 4)}} if args.baseline else {}),
                      "ratio_wall": round(cw / fw, 3), "ratio_cpu": round(cc / fc, 3),
                      "import_ms": round(total, 1), "heavy": heavy}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
