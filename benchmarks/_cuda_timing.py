"""Timing and result files shared by the GPU benchmarks (CUDA events; median after a warm-up)."""

from __future__ import annotations

import json
import statistics
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
