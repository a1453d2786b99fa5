"""Aliases: the v0.33.0-series `Regression-Test:` trailers name these node ids. The tests are
../test_e4m3_manual_encode.py's, the same for every release (../conftest.py gives them the release under test); this
module only collects them under the ids those trailers name, and goes once the trailers name
../test_e4m3_manual_encode.py directly."""

from test_e4m3_manual_encode import (  # noqa: F401
    test_manual_encode_matches_torch,
    test_manual_encode_edge_codes,
    test_k_cache_writer_without_fp8_matches_oracle,
    test_every_writer_without_fp8_matches_torch_cast,
    test_manual_encode_only_on_gfx936,
    test_every_writer_gate_only_on_gfx936,
    test_v32_indexer_q_launcher_never_runs_on_rocm,
    test_unpatched_writer_fails,
)
