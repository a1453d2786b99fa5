"""Eager launch cost of the SGLang patch's o FP8 QDQ (python/sglang/kernels/ops/quantization/o_fp8_qdq.py)
next to a raw launch of the same Triton kernel, in one run on one CUDA GPU.

At T = 1 and 64 tokens (o = [T, G=8, D=4096] bf16, blocks of 32: DeepSeek-V4 Flash's 64 heads x 512
in 8 o-groups, as in tests/kernels/test_o_fp8_qdq_kernel.py) it measures:
  (a) raw:      `_o_fp8_qdq_kernel[grid](...)` with the grid and constants computed beforehand;
  (b) wrapper:  `o_fp8_qdq_(o, 32)`, the function the model's custom op runs (SGLang's
                register_custom_op calls it directly in eager inference, no_grad, plain CUDA tensors);
  (c) graph:    the wrapper captured 200 times in one CUDA graph, device time per launch on replay;
  (d) dispatch: the wrapper registered as a custom op mutating o (torch.library, CUDA key, as SGLang's
                direct_register_custom_op does) and called through torch.ops: the path the model's op
                takes under torch.compile, with grad enabled or under the profiler.
(a), (b), (d): host time per call of back-to-back calls (`--calls` calls between two synchronizations;
at these sizes the host, not the GPU, is the bottleneck), median of `--reps` samples after a warm-up,
the variants interleaved within each sample. Prints each figure in µs and wrapper/raw (target <= 1.2).

The kernel file is loaded by path: the project's byte-equal copy kernels/o_fp8_qdq/sglang_o_fp8_qdq.py
(torch and triton only: runs on a bare GPU box), or the patched tree's with --tree build/sglang.
Without a CUDA GPU it prints one line saying so and exits 0.

    python benchmarks/bench_o_fp8_qdq_launch.py [--tree build/sglang] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
COPY = ROOT / "kernels" / "o_fp8_qdq" / "sglang_o_fp8_qdq.py"
IN_TREE = Path("python/sglang/kernels/ops/quantization/o_fp8_qdq.py")
G, D, BLOCK = 8, 4096, 32
TOKENS = (1, 64)
GRAPH_LAUNCHES = 200


def load_kernel(tree: Path | None):
    path = tree / IN_TREE if tree else COPY
    spec = importlib.util.spec_from_file_location("_o_fp8_qdq_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, path


def register_dispatch_op(K):
    """o_fp8_qdq_ as a custom op that mutates o, reached through the dispatcher (torch.ops)."""
    lib = torch.library.Library("dsv4_bench", "FRAGMENT")

    def o_fp8_qdq_op(o: torch.Tensor, block: int) -> None:
        K.o_fp8_qdq_(o, block)

    lib.define("o_fp8_qdq_" + torch.library.infer_schema(o_fp8_qdq_op, mutates_args=["o"]))
    lib.impl("o_fp8_qdq_", o_fp8_qdq_op, "CUDA")
    return lib, torch.ops.dsv4_bench.o_fp8_qdq_


def host_us_per_call(fn, calls: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def graph_us_per_launch(fn) -> float:
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_LAUNCHES):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3 / GRAPH_LAUNCHES)
    return statistics.median(times)


def measure(K, op, T: int, calls: int, reps: int) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(1017 + T)
    o = (torch.randn(T, G, D, device="cuda", generator=gen) * 3).to(torch.bfloat16)
    chunk = K._pick_chunk(T * G, D, BLOCK)
    grid = (T * G, -(-D // chunk))
    hw = K._hw_fp8_supported(o.get_device())
    kernel, s_t, s_g = K._o_fp8_qdq_kernel, o.stride(0), o.stride(1)

    def raw():
        kernel[grid](o, G, D, s_t, s_g, BLOCK=BLOCK, CHUNK=chunk, HW_FP8=hw, num_warps=4)

    variants = {"raw": raw, "wrapper": lambda: K.o_fp8_qdq_(o, BLOCK), "dispatch": lambda: op(o, BLOCK)}
    for fn in variants.values():  # compile, fill the caches, settle clocks
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    samples = {k: [] for k in variants}
    names = list(variants)
    for r in range(reps):
        for k in names[r % 3:] + names[:r % 3]:  # rotate the order between samples
            samples[k].append(host_us_per_call(variants[k], calls))
    row = {"T": T, "hw_fp8": hw, "chunk": chunk, "grid": list(grid)}
    for k, v in samples.items():
        row[k + "_us"] = statistics.median(v)
    row["graph_us"] = graph_us_per_launch(variants["wrapper"])
    row["wrapper_over_raw"] = row["wrapper_us"] / row["raw_us"]
    row["dispatch_over_raw"] = row["dispatch_us"] / row["raw_us"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, help="load the kernel from this patched SGLang tree (build/sglang)")
    ap.add_argument("--calls", type=int, default=1000, help="back-to-back calls a sample (default 1000)")
    ap.add_argument("--reps", type=int, default=30, help="samples a variant (default 30)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available() or torch.version.hip is not None:
        print("bench_o_fp8_qdq_launch: needs an NVIDIA CUDA GPU (none here); nothing measured")
        return 0
    import triton

    K, path = load_kernel(args.tree)
    _lib, op = register_dispatch_op(K)
    with torch.no_grad():
        rows = [measure(K, op, T, args.calls, args.reps) for T in TOKENS]
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; triton {triton.__version__}; "
          f"kernel {path}")
    print(f"o [T, {G}, {D}] bf16, block {BLOCK}; host µs a call: median of {args.reps} samples of "
          f"{args.calls} back-to-back calls; graph: device µs a launch, {GRAPH_LAUNCHES} launches a replay")
    print(f"{'T':>3} {'(a) raw':>9} {'(b) wrapper':>12} {'(c) graph':>10} {'(d) dispatch':>13} "
          f"{'wrapper/raw':>12} {'dispatch/raw':>13}")
    for r in rows:
        print(f"{r['T']:>3} {r['raw_us']:>9.2f} {r['wrapper_us']:>12.2f} {r['graph_us']:>10.2f} "
              f"{r['dispatch_us']:>13.2f} {r['wrapper_over_raw']:>12.3f} {r['dispatch_over_raw']:>13.3f}")
    ok = all(r["wrapper_over_raw"] <= 1.2 for r in rows)
    print(f"wrapper within 1.2x of the raw launch at T={', '.join(str(t) for t in TOKENS)}: {ok}")
    if args.json:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                         "triton": triton.__version__, "kernel": str(path),
                                         "calls": args.calls, "reps": args.reps, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
