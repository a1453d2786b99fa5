"""The v0.33.0 fix of the fallback sparse MLA decode's inverse RoPE (its own patch in the v0.33.0
series). The sub-check lives in v0_33/checks/e4m3_manual_decode_v0_33.py, next to the launcher
rebuilt for the interpreter that it shares with the e4m3 checks."""

from _vllm_regress import assert_fails, assert_ok

CHECK = "e4m3_manual_decode_v0_33"


def test_fallback_applies_inverse_rope(vllm_check):
    """The non-gfx942/gfx950 launcher branch hands back inverse-RoPE'd rows when given positions
    (rocm_sparse_attn_decode reports them rotated), matching an independent inverse GPT-J RoPE;
    on the unpatched tree the rows come back unrotated."""
    assert_ok(vllm_check(CHECK), "fallback_applies_inverse_rope")
    assert_fails(vllm_check(CHECK, patched=False), "fallback_applies_inverse_rope", "not rotated")
