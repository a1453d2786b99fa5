"""o FP8 QDQ before wo_a (DeepSeek-V4.1-Flash-1017): float64 oracle, eager torch, Triton kernel.

sglang_o_fp8_qdq.py is byte-for-byte the file the SGLang patch adds
(python/sglang/kernels/ops/quantization/o_fp8_qdq.py); `dsv4-patch check` compares them. That operator
runs on NVIDIA CUDA GPUs only; sglang_o_fp8_qdq_cpu.py is this project's CPU harness around it (its
Triton kernel under TRITON_INTERPRET=1, an eager path in its arithmetic), for the tests; not in the patch.
"""
