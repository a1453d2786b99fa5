#!/usr/bin/env python3
"""Benchmark the import of a release archive (default: the pinned vLLM 0.27.1 sdist), three ways in
the same run, interleaved, median of N rounds:

  stream : today's import (members streamed into one `git fast-import`, nothing extracted)
  old    : the import before streaming (checked extraction to disk, `git add -A`, commit, repack),
           loaded from this repository's history at commit OLD_RECIPE, so it is measured as it was
  floor  : `tar -xzf` + `git add -A` + write-tree + commit-tree, no checks (what a shell script does)

and prints stream/old and stream/floor. Target (issue 14): stream <= 5 s after download, and below
both baselines. Each import goes into a private cache under /tmp (the shared cache is not touched);
the archive comes from the shared cache, or is downloaded once before timing (reported apart).

    python benchmarks/bench_import.py [--runs 3] [--version 0.27.1]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsv4_patch.config import load_project  # noqa: E402
from dsv4_patch.gitcmd import Git, clean_env  # noqa: E402
from dsv4_patch.sources import Cache, archive  # noqa: E402

OLD_RECIPE = "6c9ad79"  # the last commit whose archive.py extracted to disk and ran `git add`


def old_archive_module():
    """dsv4_patch/sources/archive.py as it was at OLD_RECIPE, importable beside today's modules."""
    src = Git(ROOT).raw("show", f"{OLD_RECIPE}:dsv4_patch/sources/archive.py").decode()
    name = "dsv4_patch.sources._archive_before_streaming"
    spec = importlib.util.spec_from_loader(name, loader=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "dsv4_patch.sources"
    sys.modules[name] = mod
    exec(compile(src, f"{OLD_RECIPE}:archive.py", "exec"), mod.__dict__)
    return mod


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its children)."""
    c0, k0, t0 = time.process_time(), children_cpu(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0 + children_cpu() - k0


def floor(tarball: Path, top: str, tmp: Path) -> str:
    out, repo = tmp / "floor", tmp / "floor.git"
    for d in (out, repo):
        shutil.rmtree(d, ignore_errors=True)
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(tarball), "--no-same-owner", "-C", str(out)], check=True)
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True, env=clean_env())
    env = clean_env({"GIT_DIR": str(repo), "GIT_WORK_TREE": str(out / top), "GIT_AUTHOR_NAME": "floor",
                     "GIT_AUTHOR_EMAIL": "floor@example.invalid"})
    subprocess.run(["git", "add", "-A", "--force", "."], cwd=out / top, check=True, env=env)
    tree = subprocess.run(["git", "write-tree"], cwd=out / top, check=True, env=env, capture_output=True, text=True).stdout.strip()
    return subprocess.run(["git", "commit-tree", tree, "-m", "floor"], cwd=out / top, check=True, env=env,
                          capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--version", default="0.27.1")
    a = ap.parse_args()
    cfg = load_project(ROOT).stack("vllm")
    spec = next(s for s in cfg.sources if s.kind == "sdist")
    filename = archive.archive_filename(spec, a.version)
    old = old_archive_module()
    with tempfile.TemporaryDirectory(prefix="dsv4-bench-import-") as td:
        tmp = Path(td)
        t0 = time.perf_counter()
        real, note = archive.download("vllm", filename, spec.get("sha256") if a.version == spec.get("version") else None,
                                      Cache.default())
        print(f"archive {filename}: {note} ({time.perf_counter() - t0:.1f} s, not counted below)")
        cache = Cache(tmp / "cache")
        (cache.dir("archives") / filename).symlink_to(real)

        def fresh():
            shutil.rmtree(cache.root / "imports", ignore_errors=True)

        def run_stream():
            fresh()
            return archive.materialize(cfg, spec, cache, version=a.version, expect_commit="").commit

        def run_old():
            fresh()
            return old.materialize(cfg, spec, cache, version=a.version, expect_commit="").commit

        ways = {"stream": run_stream, "old": run_old, "floor": lambda: floor(real, filename[: -len(".tar.gz")], tmp)}
        wall: dict[str, list[float]] = {k: [] for k in ways}
        cpu: dict[str, list[float]] = {k: [] for k in ways}
        commits = {}
        for i in range(a.runs):
            for k in (list(ways) if i % 2 == 0 else list(reversed(ways))):  # interleaved, order alternating
                out = {}
                w, c = timed(lambda: out.setdefault("sha", ways[k]()))
                wall[k].append(w)
                cpu[k].append(c)
                commits[k] = out["sha"]
        if commits["stream"] != commits["old"]:
            print(f"MISMATCH: stream imported {commits['stream']}, the old recipe {commits['old']}")
            return 1
        med = {k: statistics.median(v) for k, v in wall.items()}
        print(f"import {filename}, cores={os.cpu_count()}, load={os.getloadavg()[0]:.1f}, runs={a.runs} (median wall, "
              f"median CPU incl. git):")
        for k in ways:
            print(f"  {k:6} {med[k]:6.2f} s   cpu {statistics.median(cpu[k]):6.2f} s")
        print(f"  stream/old   = {med['stream'] / med['old']:.2f}x")
        print(f"  stream/floor = {med['stream'] / med['floor']:.2f}x   (same commit as the old recipe: {commits['stream'][:12]})")
        ok = med["stream"] <= 5 and med["stream"] < med["floor"]
        print(f"  target: stream <= 5 s and below the floor: {'met' if ok else 'NOT met'}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
