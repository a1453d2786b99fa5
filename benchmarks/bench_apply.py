"""Benchmark: `dsv4-patch apply` against the raw git floor, measured in the same run.

Builds a synthetic upstream of ~8,500 files and a 10-patch stack, then times (median of N runs):
  floor  : git clone --local --no-checkout + git checkout of the pin + one `git am` of the 10 patches
  apply  : dsv4_patch build_tree into an empty output folder (the full tool path)
  noop   : apply again with nothing changed
and prints the ratios. Targets (issue 2): apply <= 1.25 x floor; no-op <= 0.5 s.

    python benchmarks/bench_apply.py [--files 8500] [--runs 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "engine")]

from synth import Upstream, author_commit, make_project  # noqa: E402

from dsv4_patch.config import load_project  # noqa: E402
from dsv4_patch.exporter import export_stack  # noqa: E402
from dsv4_patch.gitcmd import clean_env  # noqa: E402
from dsv4_patch.sources import Cache  # noqa: E402
from dsv4_patch.tree import build_tree  # noqa: E402


def make_upstream(tmp: Path, n_files: int) -> Upstream:
    up = Upstream(tmp / "upstream")
    for i in range(n_files):
        d = f"pkg/mod{i % 97}/sub{i % 13}"
        up.write(f"{d}/file_{i}.py", "".join(f"value_{i}_{j} = {j}\n" for j in range(40)))
    up.commit("synthetic upstream")
    return up


def time_it(fn, runs: int) -> float:
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=8500)
    ap.add_argument("--patches", type=int, default=10)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dsv4-bench-") as td:
        tmp = Path(td)
        t0 = time.perf_counter()
        up = make_upstream(tmp, args.files)
        base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=up.path, capture_output=True, text=True).stdout.strip()
        root = make_project(tmp / "proj", up.path, base)
        cache = Cache(tmp / "cache")
        stack = load_project(root).stack("demo")
        tree = build_tree(stack, tmp / "author", cache=cache).tree
        for k in range(args.patches):
            rel = f"pkg/mod{k}/sub{k % 13}/file_{k}.py"
            text = (tree / rel).read_text().replace(f"value_{k}_7 = 7\n", f"value_{k}_7 = 700  # patched\n")
            author_commit(tree, {rel: text, f"dsv4/new_{k}.py": f"NEW = {k}\n"}, f"[DSV4] Patch {k}",
                          "Bench.\n\nUpstream-Status: Pending\n")
        export_stack(stack, tree)
        print(f"setup: {args.files} files, {args.patches} patches in {time.perf_counter() - t0:.1f} s")
        patches = [str(stack.patch_dir / e) for e in (stack.series_path.read_text().split()) if e.endswith(".patch")]
        env = clean_env()

        def floor():
            d = tmp / "floor"
            shutil.rmtree(d, ignore_errors=True)
            # gc.auto=0 as the tool sets it: otherwise `git am` may start an auto-gc of the loose objects
            g = ["git", "-c", "gc.auto=0"]
            subprocess.run([*g, "clone", "-q", "--no-checkout", "--local", str(up.path), str(d)], check=True, env=env)
            subprocess.run([*g, "checkout", "-q", base], cwd=d, check=True, env=env)
            subprocess.run([*g, "am", "-q", "--3way", "--keep-cr", "-k", *patches], cwd=d, check=True, env=env)

        def apply():
            shutil.rmtree(tmp / "out", ignore_errors=True)
            build_tree(stack, tmp / "out", cache=cache)

        def noop():
            r = build_tree(stack, tmp / "out", cache=cache)
            assert r.status == "noop"

        # interleave floor and apply so load from other processes hits both alike
        fl, ap_ = [], []
        for _ in range(args.runs):
            fl.append(time_it(floor, 1))
            ap_.append(time_it(apply, 1))
        t_floor, t_apply = statistics.median(fl), statistics.median(ap_)
        t_floor2, t_apply_min = min(fl), min(ap_)
        t_noop = time_it(noop, args.runs)
    floor_med = t_floor
    print(f"{'what':<34}{'median s':>10}")
    print(f"{'git floor (clone+checkout+am)':<34}{t_floor:>10.3f}")
    print(f"{'git floor, fastest run':<34}{t_floor2:>10.3f}")
    print(f"{'dsv4-patch apply (fresh)':<34}{t_apply:>10.3f}")
    print(f"{'dsv4-patch apply, fastest run':<34}{t_apply_min:>10.3f}")
    print(f"{'dsv4-patch apply (no-op)':<34}{t_noop:>10.3f}")
    ratio = t_apply / floor_med
    print(f"apply / floor = {ratio:.2f}x by medians, {t_apply_min / t_floor2:.2f}x by fastest runs "
          f"(target <= 1.25x); no-op = {t_noop:.3f} s (target <= 0.5 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
