"""The patched vLLM sparse MLA decode kernel (the ragged kernel gfx936 runs) with the integer e4m3
decode against the same kernel with the hardware e4m3 conversion, in one run on one GPU.

Both variants run the tree's own _rocm_sparse_attn_decode_ragged_triton (imported through
tests/regress/vllm/_standalone_sparse_mla.py), differing only in the MANUAL_E4M3 constexpr; N is
the number of (query, key) pairs attended in one decode call (queries x 2048 keys, 64 heads), on a
cache with a padded block stride. Prints a table and the ratio manual / hardware (target: <= 1.03
at N >= 65,536) and writes it as JSON with --json.

    python benchmarks/bench_vllm_sparse_mla_e4m3.py --tree build/vllm [--json out.json]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "regress" / "vllm")]

from _standalone_sparse_mla import load  # noqa: E402
from _cuda_timing import bench, gpu_bench_args, print_rows, write_rows  # noqa: E402

KEYS_PER_QUERY = 2048
HEADS = 64
SIZES = (16_384, 65_536, 131_072, 262_144)


def case(mla, n: int, reps: int, gen: torch.Generator) -> dict:
    queries = n // KEYS_PER_QUERY
    block_size, pad = 64, 1664
    num_blocks = max(1, n // block_size)
    stride = block_size * 584 + pad
    store = torch.randint(0, 256, (num_blocks * stride,), dtype=torch.uint8, generator=gen).cuda()
    raw = store.view(num_blocks, stride)
    raw[:, block_size * 576: block_size * 584] = 120  # finite scales (2^-7)
    cache = store.as_strided((num_blocks, block_size, 584), (stride, 584, 1))
    rows = num_blocks * block_size
    indices = torch.randint(0, rows, (queries * KEYS_PER_QUERY,), generator=gen, dtype=torch.int32).cuda()
    indptr = (torch.arange(queries + 1, dtype=torch.int32) * KEYS_PER_QUERY).cuda()
    q = (torch.randn(queries, HEADS, 512, generator=gen) * 0.1).bfloat16().cuda()
    sink = torch.zeros(HEADS).cuda()

    gate = mla.use_manual_e4m3  # the launcher asks this (cached) gate which decode to compile

    def run(manual: bool):
        mla.use_manual_e4m3 = lambda: manual
        return mla._rocm_sparse_attn_decode_ragged_triton(
            q=q, main_cache=cache, main_indices=indices, main_indptr=indptr, scale=0.05, attn_sink=sink,
            nope_head_dim=448, rope_head_dim=64)

    same = torch.equal(torch.nan_to_num(run(True)), torch.nan_to_num(run(False)))
    # interleave the variants so clock and thermal drift hit both alike
    manual, hardware = [], []
    for _ in range(7):
        manual.append(bench(lambda: run(True), reps))
        hardware.append(bench(lambda: run(False), reps))
    mla.use_manual_e4m3 = gate
    m, h = statistics.median(manual), statistics.median(hardware)
    return {"N": n, "queries": queries, "heads": HEADS, "manual_us": round(m, 2), "hardware_us": round(h, 2),
            "ratio": round(m / h, 4), "bit_equal": same}


def main() -> int:
    args = gpu_bench_args(__doc__)
    mla = load(args.tree)
    gen = torch.Generator().manual_seed(0)
    rows = [case(mla, n, args.reps, gen) for n in SIZES]
    print_rows(rows, (("N", ">8"), ("queries", ">7")))
    if args.json:
        write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
