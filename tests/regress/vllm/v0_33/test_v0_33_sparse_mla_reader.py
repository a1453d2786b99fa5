"""vllm 1 (sparse MLA reader) on v0.33.0: ../checks/sparse_mla_reader.py unchanged, same sub-checks
and names as ../test_sparse_mla_reader.py."""

# The same tests as ../test_sparse_mla_reader.py, collected here so that they request this folder's
# fixtures (the v0.33.0 venvs); the check script runs unchanged.
from test_sparse_mla_reader import (  # noqa: E402,F401
    test_reader_matches_oracle,
    test_decode_matches_reference_attention,
    test_validate_raises_on_nan,
    test_validate_checks_triton_output,
    test_validate_off_costs_nothing,
    test_host_sync_decode_disables_cudagraphs,
    test_unpatched_tree_fails,
)
