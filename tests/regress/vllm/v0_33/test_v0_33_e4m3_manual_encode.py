"""vllm 5 (integer e4m3 encode in the DSV4 Triton cache writers) on v0.33.0: ../checks/e4m3_manual_encode.py
runs unchanged against v0.33.0's writers, whose indexer query quantizer, inverse-RoPE quantizer and
indexer compressor are JIT-warmup kernel objects there (the check records their launches either way)."""

# The same tests as ../test_e4m3_manual_encode.py, collected here so that they request this folder's
# fixtures (the v0.33.0 venvs); the check script runs unchanged.
from test_e4m3_manual_encode import (  # noqa: E402,F401
    test_manual_encode_matches_torch,
    test_manual_encode_edge_codes,
    test_k_cache_writer_without_fp8_matches_oracle,
    test_every_writer_without_fp8_matches_torch_cast,
    test_manual_encode_only_on_gfx936,
    test_every_writer_gate_only_on_gfx936,
    test_v32_indexer_q_launcher_never_runs_on_rocm,
    test_unpatched_writer_fails,
)
