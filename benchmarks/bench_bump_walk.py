#!/usr/bin/env python3
"""Benchmark `dsv4-patch bump vllm --walk v0.27.1..v0.33.0` with the archives already cached.

Target: <= 60 s for the 7 releases on 2 cores. The first run imports any missing release (network,
~15 s each); the timed runs after it use the cached imports (~/.cache/dsv4-patch/imports) and
only read the index page once per run.

    python benchmarks/bench_bump_walk.py [--runs 3] [--span v0.27.1..v0.33.0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsv4_patch.bump import walk  # noqa: E402
from dsv4_patch.config import load_project  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--span", default="v0.27.1..v0.33.0")
    a = ap.parse_args()
    project = load_project(Path(__file__).resolve().parents[1])
    walk(project, "vllm", a.span)  # warm-up: fills the cache if needed
    times = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        rep = walk(project, "vllm", a.span)
        times.append(time.perf_counter() - t0)
    print(f"walk vllm {a.span}: {len(rep.steps)} releases x {len(rep.patches)} patches, "
          f"cores={os.cpu_count()}, runs={a.runs}: median {statistics.median(times):.2f} s, "
          f"min {min(times):.2f} s, max {max(times):.2f} s (target <= 60 s)")
    return 0 if statistics.median(times) <= 60 else 1


if __name__ == "__main__":
    sys.exit(main())
