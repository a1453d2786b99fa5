"""Benchmark: apply at Electron's scale (10 and 200 patches over the real vLLM 0.27.1 tree),
full and incremental, beside the `git am` floor measured in the same run.

The tree comes through the tool (the vllm stack's sources: the PyPI sdist, imported into the
cache once); where it cannot be had, a synthetic 8,500-file upstream stands in and the output
says so. The patch stack is generated (seeded) and never written into the repository: patch i
edits 1-3 files chosen over the whole tree (some files by several patches), every 7th adds a file.

Per stack size, interleaved runs, medians (the fastest runs are printed too):
  floor        git clone --local --no-checkout + git checkout of the pin + one `git am` of the series
  full         apply into an empty --out: build_tree() in-process (as bench_apply.py) and the CLI
  incremental  patch k (k = 190 of 200, 9 of 10) rewritten, then `dsv4-patch apply` (CLI wall)
  no-op        `dsv4-patch apply` again with nothing changed (CLI wall)
  ..in-process the same two through build_tree() in this process: the apply core without the
               CLI's start-up (Python, Typer, Rich, GitPython imports)
Each figure is shown as wall time and as CPU time (the machine may be shared: CPU says what the
command costs, and its ratio to the floor's CPU is the steadier one).
Targets (issue 14): full <= 1.0x floor; incremental at 200 <= 1 s; no-op <= 0.3 s.

    python benchmarks/bench_apply_scale.py [--patches 10,200] [--runs 5] [--synthetic]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "engine")]

from synth import Upstream, make_project  # noqa: E402

from dsv4_patch.config import load_project  # noqa: E402
from dsv4_patch.errors import Dsv4Error  # noqa: E402
from dsv4_patch.exporter import export_stack  # noqa: E402
from dsv4_patch.gitcmd import clean_env  # noqa: E402
from dsv4_patch.sources import Cache, materialize  # noqa: E402
from dsv4_patch.tree import build_tree  # noqa: E402

CLI = [sys.executable, str(ROOT / "tools" / "applypatch.py")]
AUTHOR = {"GIT_AUTHOR_NAME": "Pat Cher", "GIT_AUTHOR_EMAIL": "pat@example.com",
          "GIT_AUTHOR_DATE": "2026-02-01T00:00:00+0000"}


def git(cwd: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(["git", "-c", "gc.auto=0", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=clean_env(env)).stdout


def base_tree(tmp: Path, synthetic: bool) -> tuple[Path, str, str]:
    """(git dir, commit, what it is) of the upstream the patches go on."""
    if not synthetic:
        try:
            b = materialize(load_project(ROOT).stack("vllm"), Cache.default())
            return b.git_dir, b.commit, f"real vLLM tree ({b.source})"
        except Dsv4Error as e:
            print(f"real vLLM tree not available ({e.one_line()}): using a synthetic upstream")
    up = Upstream(tmp / "upstream")
    for i in range(8500):
        up.write(f"pkg/mod{i % 97}/sub{i % 13}/file_{i}.py", "".join(f"value_{i}_{j} = {j}\n" for j in range(40)))
    return up.path / ".git", up.commit("synthetic upstream"), "synthetic 8,500-file upstream"


def edit_file(text: str, rng: random.Random, tag: str) -> str:
    lines = text.split("\n")
    at = rng.randrange(0, max(1, len(lines) - 1))
    lines.insert(at, f"# dsv4 {tag}")
    return "\n".join(lines)


def commit_patch(tree: Path, files: list[str], rng: random.Random, i: int, tag: str) -> None:
    for rel in files:
        p = tree / rel
        p.write_text(edit_file(p.read_text(errors="surrogateescape"), rng, f"patch {i}{tag}"),
                     errors="surrogateescape")
    if i % 7 == 0:
        new = tree / f"dsv4_bench/new_{i}.py"
        new.parent.mkdir(exist_ok=True)
        new.write_text(f"N = {i}  # {tag}\n")
        files = [*files, str(new.relative_to(tree))]
    git(tree, "add", "--", *files)
    git(tree, "commit", "-q", "-m", f"[DSV4] Bench patch {i:03d}{tag}",
        "-m", f"Why patch {i} is needed.\n\nUpstream-Status: Pending", env=AUTHOR)


def make_stack(tmp: Path, git_dir: Path, commit: str, n: int, k: int) -> tuple[Path, Path, Path]:
    """A project with an n-patch series; returns (project, series A files, series B files), where
    B differs from A from patch k on (patch k's diff and message changed, the rest rebased)."""
    proj = make_project(tmp / f"proj{n}", git_dir, commit, stack="bench")
    stack = load_project(proj).stack("bench")
    tree = build_tree(stack, tmp / f"author{n}", cache=Cache(tmp / "cache"), upto=0).tree
    py = sorted(p for p in git(tree, "ls-files", "*.py").split("\n") if p)
    rng = random.Random(14)
    picks = [[py[rng.randrange(len(py))] for _ in range(rng.randint(1, 3))] for _ in range(n)]
    for i in range(n):
        picks[i] = sorted(set(picks[i] + ([picks[i - 3][0]] if i >= 3 and i % 5 == 0 else [])))
    seeds = [rng.randrange(1 << 30) for _ in range(n)]
    for i in range(n):
        commit_patch(tree, picks[i], random.Random(seeds[i]), i, "")
    export_stack(stack, tree)
    a = tmp / f"series{n}-A"
    shutil.copytree(stack.patch_dir, a)
    git(tree, "reset", "-q", "--hard", f"HEAD~{n - k}")
    commit_patch(tree, picks[k], random.Random(seeds[k] + 1), k, " (edited)")
    for i in range(k + 1, n):
        commit_patch(tree, picks[i], random.Random(seeds[i]), i, "")
    export_stack(stack, tree)
    b = tmp / f"series{n}-B"
    shutil.copytree(stack.patch_dir, b)
    return proj, a, b


def use_series(proj: Path, series: Path) -> None:
    d = proj / "patches" / "bench"
    shutil.rmtree(d)
    shutil.copytree(series, d)


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child processes): on a shared machine the CPU time says
    what the command costs, the wall time what a user waits."""
    def cpu() -> float:
        return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_CHILDREN),
                                                       resource.getrusage(resource.RUSAGE_SELF)))
    c0 = cpu()
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    return wall, cpu() - c0


def cli_apply(proj: Path, out: Path, expect: str) -> None:
    r = subprocess.run([*CLI, "apply", "bench", "--out", str(out), "--json"], cwd=proj, capture_output=True, text=True)
    if r.returncode != 0 or expect not in r.stdout:
        raise SystemExit(f"apply failed or did not say {expect!r}:\n{r.stdout}\n{r.stderr}")


def bench(tmp: Path, git_dir: Path, commit: str, n: int, runs: int) -> dict:
    k = min(190, n - 1) if n >= 200 else max(0, n - 1)
    t0 = time.perf_counter()
    proj, a, b = make_stack(tmp, git_dir, commit, n, k)
    print(f"  setup of {n} patches: {time.perf_counter() - t0:.1f} s (edited patch: {k})")
    series = [a, b]
    env = clean_env()

    def floor():
        d = tmp / "floor"
        shutil.rmtree(d, ignore_errors=True)
        g = ["git", "-c", "gc.auto=0"]
        # (the cached import holds objects and no refs: git warns "cloned an empty repository")
        subprocess.run([*g, "clone", "-q", "--no-checkout", "--local", str(git_dir), str(d)], check=True, env=env,
                       stderr=subprocess.DEVNULL)
        subprocess.run([*g, "checkout", "-q", commit], cwd=d, check=True, env=env)
        pd = proj / "patches" / "bench"
        patches = [str(pd / e) for e in (pd / "series").read_text().split() if e.endswith(".patch")]
        subprocess.run([*g, "am", "-q", "--3way", "--keep-cr", "-k", *patches], cwd=d, check=True, env=env)

    out = tmp / f"out{n}"
    stack = load_project(proj).stack("bench")
    cache = Cache(tmp / "cache")

    def in_process(expect: str) -> None:
        r = build_tree(stack, out, cache=cache)
        assert r.status == expect and (expect != "applied" or r.note.startswith("incremental: kept")), r.note

    def fresh_in_process() -> None:
        shutil.rmtree(out, ignore_errors=True)
        build_tree(stack, out, cache=cache)

    def fresh_cli() -> None:
        shutil.rmtree(tmp / "out-cli", ignore_errors=True)
        cli_apply(proj, tmp / "out-cli", '"applied"')

    res: dict[str, list] = {k: [] for k, _ in ROWS}
    for r in range(runs):  # interleaved: load from other processes hits every figure alike
        use_series(proj, series[r % 2])
        res["floor"].append(timed(floor))
        res["full_lib"].append(timed(fresh_in_process))
        res["full"].append(timed(fresh_cli))
        use_series(proj, series[(r + 1) % 2])
        res["incremental"].append(timed(lambda: cli_apply(proj, out, "incremental: kept")))
        res["noop"].append(timed(lambda: cli_apply(proj, out, '"noop"')))
        use_series(proj, series[r % 2])
        res["incremental_lib"].append(timed(lambda: in_process("applied")))
        res["noop_lib"].append(timed(lambda: in_process("noop")))
    shutil.rmtree(tmp / "floor", ignore_errors=True)
    return res


ROWS = [("floor", "git floor (clone+checkout+am)"), ("full_lib", "apply, fresh (in-process)"),
        ("full", "apply, fresh (CLI)"), ("incremental", "apply, one late patch edited"),
        ("incremental_lib", "  the same, in-process"), ("noop", "apply, no-op (CLI)"),
        ("noop_lib", "  no-op, in-process")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patches", default="10,200")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--synthetic", action="store_true", help="use the synthetic upstream even if vLLM is at hand")
    args = ap.parse_args()
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    with tempfile.TemporaryDirectory(prefix="dsv4-bench-scale-") as td:
        tmp = Path(td)
        git_dir, commit, what = base_tree(tmp, args.synthetic)
        print(f"upstream: {what}, {commit[:12]}")
        rows = []
        for n in (int(x) for x in args.patches.split(",")):
            r = bench(tmp, git_dir, commit, n, args.runs)
            med = {k: statistics.median(w for w, _ in v) for k, v in r.items()}
            fast = {k: min(w for w, _ in v) for k, v in r.items()}
            cpu = {k: statistics.median(c for _, c in v) for k, v in r.items()}
            rows.append((n, med, fast, cpu))
    print(f"\n{'patches':>7} {'what':<30}{'wall med':>9}{'fastest':>9}{'/ floor':>9}{'CPU med':>9}{'/ floor':>9}")
    for n, med, fast, cpu in rows:
        for key, label in ROWS:
            print(f"{n:>7} {label:<30}{med[key]:>9.3f}{fast[key]:>9.3f}{med[key] / med['floor']:>8.2f}x"
                  f"{cpu[key]:>9.3f}{cpu[key] / cpu['floor']:>8.2f}x")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for n, med, fast, cpu in rows:
        print(f"{n} patches: full / floor = {med['full_lib'] / med['floor']:.2f}x in-process "
              f"({med['full'] / med['floor']:.2f}x through the CLI) by wall medians, "
              f"{cpu['full_lib'] / cpu['floor']:.2f}x ({cpu['full'] / cpu['floor']:.2f}x) by CPU (target <= 1.0x); "
              f"incremental = {med['incremental']:.3f} s wall, {cpu['incremental']:.3f} s CPU "
              f"(target <= 1 s at 200); no-op = {med['noop']:.3f} s wall, {cpu['noop']:.3f} s CPU (target <= 0.3 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
