"""Aliases: the v0.33.0-series `Regression-Test:` trailers name these node ids. The tests are
../test_sparse_mla_reader.py's, the same for every release (../conftest.py gives them the release under test); this
module only collects them under the ids those trailers name, and goes once the trailers name
../test_sparse_mla_reader.py directly."""

from test_sparse_mla_reader import (  # noqa: F401
    test_reader_matches_oracle,
    test_decode_matches_reference_attention,
    test_validate_raises_on_nan,
    test_validate_checks_triton_output,
    test_validate_off_costs_nothing,
    test_host_sync_decode_disables_cudagraphs,
    test_unpatched_tree_fails,
)
