"""Timing and result files shared by the GPU benchmarks (CUDA events; median after a warm-up)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch


def bench(fn, reps: int) -> float:
    """Median of `reps` timings (µs) of fn, CUDA events, after a warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def write_rows(path: Path, rows: list[dict]) -> None:
    """The rows with the device and the torch/triton versions they were measured with."""
    import triton

    path.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                "triton": triton.__version__, "rows": rows}, indent=1))


def gpu_bench_args(doc: str) -> argparse.Namespace:
    """--tree/--reps/--json, the options every GPU benchmark of a patched tree takes; exits 2 (with
    the reason) where there is no CUDA GPU."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, required=True, help="the patched vLLM tree (dsv4-patch apply vllm)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        sys.exit(2)
    return args


def print_rows(rows: list[dict], lead: tuple[tuple[str, str], ...]) -> None:
    """The device, then one line per row: the `lead` columns ((key, format spec) each), then the
    manual/hardware timings, their ratio and whether the outputs were bit-equal."""
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(" ".join(f"{k:{spec}}" for k, spec in lead)
          + f" {'manual µs':>10} {'hardware µs':>12} {'manual/hw':>9} {'bit-equal':>9}")
    for r in rows:
        print(" ".join(f"{r[k]:{spec}}" for k, spec in lead)
              + f" {r['manual_us']:>10.1f} {r['hardware_us']:>12.1f} {r['ratio']:>9.3f} {str(r['bit_equal']):>9}")
