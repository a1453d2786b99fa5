#!/usr/bin/env python3
"""Benchmark a cold `dsv4-patch bump vllm --walk v0.27.1..v0.33.0`: every release imported from its
archive (nothing in the import cache), then the stack classified at each release.

All imports go into a private DSV4_PATCH_CACHE under /tmp (the shared cache is never written). The
archives are linked from the shared cache, or downloaded into the private one first: downloads are
timed apart and not counted. Printed, median of N runs:
  cold   : the walk with an empty import cache (the figure issue 14 targets: <= 90 s for 7 releases)
  warm   : the same walk again, every import cached
  old    : (once, unless --no-old) the cold walk with the import recipe before streaming
           (extraction + `git add`, see bench_import.py), the baseline of the ratio cold/old

    python benchmarks/bench_bump_walk.py [--runs 3] [--span v0.27.1..v0.33.0] [--no-old]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_import import old_archive_module  # noqa: E402

from dsv4_patch import sources  # noqa: E402
from dsv4_patch.bump import targets, walk  # noqa: E402
from dsv4_patch.config import load_project  # noqa: E402
from dsv4_patch.sources import Cache, archive  # noqa: E402
from dsv4_patch.bump.targets import VERSION_RE, version_key  # noqa: E402


def cpu() -> float:
    """CPU seconds of this process and its finished children (git): what the load does not inflate."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + r.ru_utime + r.ru_stime


def seed_archives(cfg, span: str, cache: Cache) -> tuple[int, float]:
    """Link every archive of the span from the shared cache, or download it; (downloads, seconds)."""
    spec = next(s for s in cfg.sources if s.kind == "sdist")
    a, b = (version_key(VERSION_RE.match(x).group(1)) for x in span.split(".."))
    shared = Cache.default().root / "archives"
    n, t0 = 0, time.perf_counter()
    for version, sha in targets.releases(spec, cache):
        if not a <= version_key(version) <= b:
            continue
        name = archive.archive_filename(spec, version)
        if (shared / name).exists():
            (cache.dir("archives") / name).symlink_to(shared / name)
        else:
            archive.download(str(spec.get("package")), name, sha, cache)
            n += 1
    return n, time.perf_counter() - t0


@contextmanager
def old_recipe():
    """Archive imports through the recipe before streaming (everywhere the engine looks it up)."""
    old = old_archive_module().materialize
    saved = archive.materialize, sources._KINDS["sdist"]
    archive.materialize = sources._KINDS["sdist"] = old
    try:
        yield
    finally:
        archive.materialize, sources._KINDS["sdist"] = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--span", default="v0.27.1..v0.33.0")
    ap.add_argument("--no-old", action="store_true", help="skip the (slow) baseline with the old import recipe")
    a = ap.parse_args()
    project = load_project(ROOT)
    with tempfile.TemporaryDirectory(prefix="dsv4-bench-walk-") as td:
        cache = Cache(Path(td) / "cache")
        downloads, dl_s = seed_archives(project.stack("vllm"), a.span, cache)
        print(f"archives: {downloads} downloaded in {dl_s:.1f} s (not counted), the rest linked from the shared cache")

        def cold():
            for sub in ("imports", "tmp", "git"):
                shutil.rmtree(cache.root / sub, ignore_errors=True)
            return walk(project, "vllm", a.span, cache=cache)

        def timed(fn):
            t0, c0 = time.perf_counter(), cpu()
            rep = fn()
            cpus.append(cpu() - c0)
            return time.perf_counter() - t0, rep

        cpus: list[float] = []

        colds, warms, cold_cpu = [], [], []
        for _ in range(a.runs):
            t, rep = timed(cold)
            colds.append(t)
            cold_cpu.append(cpus[-1])
            warms.append(timed(lambda: walk(project, "vllm", a.span, cache=cache))[0])
        old = None
        if not a.no_old:
            with old_recipe():
                old = timed(cold)[0]
        c, w = statistics.median(colds), statistics.median(warms)
        print(f"walk vllm {a.span}: {len(rep.steps)} releases x {len(rep.patches)} patches, cores={os.cpu_count()}, "
              f"load={os.getloadavg()[0]:.1f}, runs={a.runs}")
        print(f"  cold (streaming import) median {c:6.1f} s  (min {min(colds):.1f}, max {max(colds):.1f}; "
              f"CPU incl. git {statistics.median(cold_cpu):.1f} s); target <= 90 s")
        print(f"  warm (imports cached)   median {w:6.1f} s")
        if old is not None:
            print(f"  cold with the old extract+add import {old:6.1f} s (one run)   cold/old = {c / old:.2f}x")
        return 0 if c <= 90 else 1


if __name__ == "__main__":
    sys.exit(main())
