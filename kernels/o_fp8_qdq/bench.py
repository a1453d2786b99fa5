"""Benchmark of the o FP8 QDQ on a CUDA GPU (the T=4096 x 32768 bf16 anchor of docs/background.md).

    python -m kernels.o_fp8_qdq.bench [--json OUT.json] [--tokens 1,64,4096,16384] [--variants]

For each T (o = [T, 8 groups, 4096] bf16, DeepSeek-V4 Flash), in one run:
- copy:     dst.copy_(src) of the same bytes (the bandwidth ceiling: bytes read + written);
- eager:    kernels/o_fp8_qdq/torch_qdq.py (hardware e4m3 cast), out of place;
- compile:  torch.compile of the same function;
- triton:   the patch's kernel, in place (hardware e4m3), and its emulated rounding.
Times are device-event medians from triton.testing.do_bench (warm-up first; it flushes L2 before
each call). For T = 1 and 64 the Triton kernel is also timed as 200 launches captured in one CUDA
graph (per launch), which shows it is one launch with no host sync (capture would fail otherwise).
`--variants` also times CHUNK / num_warps variants of the Triton kernel at the large sizes.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import triton
from triton.testing import do_bench

from kernels.o_fp8_qdq import sglang_o_fp8_qdq as K
from kernels.o_fp8_qdq.torch_qdq import o_fp8_qdq_torch

G, D, BLOCK = 8, 4096, 32


def med(fn, warmup=25, rep=200) -> float:
    """Median in microseconds (NaN, with the error printed, if the function fails)."""
    try:
        return do_bench(fn, warmup=warmup, rep=rep, return_mode="median") * 1e3
    except Exception as e:  # keep the other measurements of the run
        print(f"measurement failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        return float("nan")


def graph_per_launch(fn, n=200) -> float:
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3 / n)
    times.sort()
    return times[len(times) // 2]


def single_launch(fn, n=50) -> float:
    """Median of n single calls, each bracketed by events right after a device sync (so the time
    includes the host's launch latency)."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    times.sort()
    return times[len(times) // 2]


def launch_variant(o, chunk, warps, hw=True):
    T = o.shape[0]
    grid = (T * G, triton.cdiv(D, chunk))
    K._o_fp8_qdq_kernel[grid](o, G, D, o.stride(0), o.stride(1), BLOCK=BLOCK, CHUNK=chunk, HW_FP8=hw,
                              num_warps=warps)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,64,4096,16384")
    ap.add_argument("--json", default=None)
    ap.add_argument("--variants", action="store_true")
    args = ap.parse_args(argv)
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    dev = torch.cuda.get_device_name()
    torch.manual_seed(0)
    compiled = torch.compile(o_fp8_qdq_torch, dynamic=False)
    rows, variants = [], []
    for T in [int(t) for t in args.tokens.split(",")]:
        o = (torch.randn(T, G, D, device="cuda") * 3).to(torch.bfloat16)
        dst = torch.empty_like(o)
        nbytes = 2 * o.numel() * o.element_size()  # read + write
        r = {"T": T, "bytes_rw": nbytes}
        r["copy_us"] = med(lambda: dst.copy_(o))
        r["eager_us"] = med(lambda: o_fp8_qdq_torch(o, BLOCK, False), warmup=5, rep=50)
        r["compile_us"] = med(lambda: compiled(o, BLOCK, False))
        work = o.clone()
        r["triton_us"] = med(lambda: K.o_fp8_qdq_(work, BLOCK))
        r["triton_emulated_us"] = med(lambda: K.o_fp8_qdq_(work, BLOCK, emulate=True))
        if T <= 64:
            try:
                r["triton_graph_us"] = graph_per_launch(lambda: K.o_fp8_qdq_(work, BLOCK))
                r["copy_graph_us"] = graph_per_launch(lambda: dst.copy_(o))
            except Exception as e:
                print(f"graph timing failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        for k in ("copy", "eager", "compile", "triton", "triton_emulated"):
            r[k + "_GBps"] = nbytes / r[k + "_us"] / 1e3
        r["triton_pct_of_copy"] = 100.0 * r["copy_us"] / r["triton_us"]
        rows.append(r)
        if T <= 64:
            # Small T: the same kernel timed several ways (order swapped, wrapper bypassed, one
            # launch bracketed by events after a sync, i.e. including the host launch latency).
            r["small"] = {
                "emulated_first_us": med(lambda: K.o_fp8_qdq_(work, BLOCK, emulate=True)),
                "hw_again_us": med(lambda: K.o_fp8_qdq_(work, BLOCK)),
                "hw_direct_launch_us": med(lambda: launch_variant(work, K._pick_chunk(T * G, D, BLOCK), 4)),
                "emulated_graph_us": graph_per_launch(lambda: K.o_fp8_qdq_(work, BLOCK, emulate=True)),
                "hw_single_launch_after_sync_us": single_launch(lambda: K.o_fp8_qdq_(work, BLOCK)),
                "copy_single_launch_after_sync_us": single_launch(lambda: dst.copy_(o)),
            }
        if args.variants and T >= 4096:
            for chunk, warps in ((1024, 4), (2048, 4), (4096, 4), (4096, 8)):
                t = med(lambda: launch_variant(work, chunk, warps))
                variants.append({"T": T, "chunk": chunk, "warps": warps, "us": t,
                                 "pct_of_copy": 100.0 * r["copy_us"] / t})
        del o, dst, work
        torch.cuda.empty_cache()

    print(f"device: {dev}; torch {torch.__version__}; triton {triton.__version__}")
    hdr = ("| T | copy µs (GB/s) | eager µs | compile µs | Triton hw µs (GB/s, % of copy) | "
           "Triton emulated µs | Triton hw per launch in a CUDA graph µs |")
    print(hdr)
    print("|" + "---|" * 7)
    for r in rows:
        print(f"| {r['T']} | {r['copy_us']:.1f} ({r['copy_GBps']:.0f}) | {r['eager_us']:.1f} | "
              f"{r['compile_us']:.1f} | {r['triton_us']:.1f} ({r['triton_GBps']:.0f}, "
              f"{r['triton_pct_of_copy']:.1f} %) | {r['triton_emulated_us']:.1f} | "
              f"{r.get('triton_graph_us', float('nan')):.2f} |")
    for r in rows:
        if "small" in r:
            print(f"T={r['T']} small-T timings (µs): " + ", ".join(f"{k}={v:.2f}" for k, v in r["small"].items()))
    if variants:
        print("\nvariants (Triton hw):")
        for v in variants:
            print(f"  T={v['T']} CHUNK={v['chunk']} warps={v['warps']}: {v['us']:.1f} µs "
                  f"({v['pct_of_copy']:.1f} % of copy)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev, "torch": torch.__version__, "triton": triton.__version__,
                       "rows": rows, "variants": variants}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
