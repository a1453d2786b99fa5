"""The patched vLLM DeepSeek V4 cache writers with the integer e4m3 encode (the gfx936 path) against
the same writers with the hardware float32 -> e4m3 conversion, in one run on one GPU.

Both variants run the tree's own launchers (imported through
tests/regress/vllm/_standalone_dsv4_writers.py), differing only in what the module's
use_manual_e4m3() answers: quantize_and_insert_k_cache (the K cache writer, N tokens of 512) and
fused_indexer_q_rope_quant (the indexer query, N tokens x 64 heads x 128). Prints a table with the
ratio manual / hardware and whether the bytes are equal; writes it as JSON with --json. On a GPU
that has the conversion this measures the cost of the integer ops, not gfx936's speed.

    python benchmarks/bench_vllm_e4m3_encode.py --tree build/vllm [--json out.json]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "regress" / "vllm")]

import _standalone_dsv4_writers  # noqa: E402
from _cuda_timing import bench, gpu_bench_args, print_rows, write_rows  # noqa: E402

SIZES = (4_096, 16_384, 65_536)


def k_cache_writer(mods, n: int, gen: torch.Generator):
    cu = mods["cache_utils"]
    block_size = 64
    num_blocks = n // block_size + 1
    k = (torch.randn(n, 512, generator=gen) * 4).bfloat16().cuda()
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:n].cuda()
    cache = torch.zeros(num_blocks, block_size * 584 + 128, dtype=torch.uint8, device="cuda")
    view = cache.as_strided((num_blocks, block_size, 584), (cache.stride(0), 584, 1))

    def run():
        cu.quantize_and_insert_k_cache(k, view, slots, block_size=block_size)
        return cache

    return cu, run


def indexer_q(mods, n: int, gen: torch.Generator):
    fq = mods["fused_indexer_q"]
    q = torch.randn(n, 64, 128, generator=gen).bfloat16().cuda()
    pos = torch.randint(0, 4096, (n,), generator=gen).cuda()
    cs = torch.randn(4096, 64, generator=gen).cuda()
    w = torch.randn(n, 64, generator=gen).bfloat16().cuda()
    out = torch.empty(n, 64, 128, dtype=torch.float8_e4m3fn, device="cuda")
    wout = torch.empty(n, 64, device="cuda")

    import inspect

    if "output_buffers" in inspect.signature(fq.fused_indexer_q_rope_quant).parameters:
        def run():
            fq.fused_indexer_q_rope_quant(pos, q, cs, w, 128**-0.5, 64**-0.5, output_buffers=(out, wout))
            return out.view(torch.uint8)
    else:  # v0.33.0: the function allocates its output
        def run():
            return fq.fused_indexer_q_rope_quant(pos, q, cs, w, 128**-0.5, 64**-0.5)[0].view(torch.uint8)

    return fq, run


def case(mods, writer: str, make, n: int, reps: int, gen: torch.Generator) -> dict:
    module, run = make(mods, n, gen)
    saved = module.use_manual_e4m3

    def variant(manual: bool):
        module.use_manual_e4m3 = lambda: manual
        return run().clone()

    try:
        same = torch.equal(variant(True), variant(False))
        manual, hardware = [], []
        for _ in range(7):  # interleaved, so clock and thermal drift hit both alike
            module.use_manual_e4m3 = lambda: True
            manual.append(bench(run, reps))
            module.use_manual_e4m3 = lambda: False
            hardware.append(bench(run, reps))
    finally:
        module.use_manual_e4m3 = saved
    m, h = statistics.median(manual), statistics.median(hardware)
    return {"writer": writer, "N": n, "manual_us": round(m, 2), "hardware_us": round(h, 2),
            "ratio": round(m / h, 4), "bit_equal": same}


def main() -> int:
    args = gpu_bench_args(__doc__)
    mods = _standalone_dsv4_writers.install(args.tree)
    gen = torch.Generator().manual_seed(0)
    rows = [case(mods, name, make, n, args.reps, gen)
            for name, make in (("quantize_and_insert_k_cache", k_cache_writer),
                               ("fused_indexer_q_rope_quant", indexer_q))
            for n in SIZES]
    print_rows(rows, (("writer", "<28"), ("N", ">6")))
    if args.json:
        write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
