"""vllm 3 (SwiGLU alpha/limit, applies with offsets) on v0.33.0: ../checks/emulation_swiglu.py
unchanged, same sub-checks and names as ../test_emulation_swiglu.py."""

# The same tests as ../test_emulation_swiglu.py, collected here so that they request this folder's
# fixtures (the v0.33.0 venvs); the check script runs unchanged.
from test_emulation_swiglu import (  # noqa: E402,F401
    test_dsv4_config_matches_oracle,
    test_alpha_and_limit_match_oracle,
    test_no_alpha_no_limit_unchanged,
    test_unpatched_tree_fails,
)
