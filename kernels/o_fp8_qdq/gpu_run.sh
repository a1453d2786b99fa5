#!/bin/bash
# One device call: GPU tests of the o FP8 QDQ + the benchmark; logs under $OUT.
set -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/o_fp8_qdq_out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest -q -m gpu tests/kernels/test_o_fp8_qdq_kernel.py -p no:cacheprovider --durations=5 2>&1 | tee "$OUT/gpu_tests.log"
python3 -m kernels.o_fp8_qdq.bench --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
