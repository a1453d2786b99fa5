#!/bin/bash
# One GPU call for the SGLang o FP8 QDQ patch (run from the repository root; logs under $OUT):
#   1. dsv4-patch regress sglang -m gpu --record gpu --hardware H200: builds the patched tree and runs
#      the gpu-marked bound tests (the tree's kernel on CUDA vs the oracle; its in-tree kernel test);
#   2. the in-tree kernel test again, for its log;
#   3. tests/kernels' o QDQ GPU tests;
#   4. the benchmark (BENCH_ARGS=--variants adds CHUNK / num_warps variants).
# Where nothing can be downloaded, put the pinned sglang wheel under $DSV4_PATCH_CACHE/archives/ and
# have pydantic and msgspec importable (e.g. wheels installed with pip --target, on PYTHONPATH).
set -o pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/o_fp8_qdq_out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -m tools.applypatch regress sglang -m gpu --record gpu --hardware H200 2>&1 | tee "$OUT/regress-gpu.log"
cp patches/sglang/results/*-gpu-*.json "$OUT/" 2>/dev/null
python3 tests/regress/sglang/_in_tree_gpu_runner.py build/sglang \
  build/sglang/test/registered/kernels/ops/quantization/test_o_fp8_qdq.py -v 2>&1 | tee "$OUT/in-tree-gpu.log"
python3 -m pytest -q -m gpu tests/kernels/test_o_fp8_qdq_kernel.py -p no:cacheprovider --durations=5 2>&1 | tee "$OUT/kernels-gpu.log"
python3 -m kernels.o_fp8_qdq.bench --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
