"""vllm 2 on a CUDA GPU (level `gpu`; run on the lent H200): the patch's in-tree test file
tests/kernels/attention/test_dsv4_e4m3_manual_decode.py run as written, with the patched tree's
rocm_aiter_mla_sparse.py, ops/common.py and DSV4 writer modules loaded through _dsv4_decode_plugin
(no vLLM install needed): the integer decode on all 256 codes against torch on the CPU, the ragged
decode kernel with the integer decode against the PyTorch reference decode on the CPU, and the
ragged kernel and the prefill gather with the integer decode against the same kernels with the FP8
conversion, bit for bit. None of it may be skipped.

vllm 6 (v0.33.0+) the same way: its in-tree test
tests/kernels/attention/test_dsv4_sparse_decode_fallback_rope.py calls rocm_sparse_attn_decode on the
fallback kernel and checks that the rows it reports rotated come back inverse-RoPE'd.

Run: dsv4-patch regress vllm -m gpu --record gpu --hardware H200"""

from __future__ import annotations

from test_e4m3_encode_gpu import pytestmark, run_in_tree  # noqa: F401

IN_TREE = ("tests/kernels/attention/test_dsv4_e4m3_manual_decode.py",)


def test_in_tree_decode_tests_pass_on_gpu(vllm_trees, tmp_path):
    run_in_tree(vllm_trees[0], IN_TREE, "_dsv4_decode_plugin", tmp_path)


def test_in_tree_inverse_rope_tests_pass_on_gpu(vllm_trees, tmp_path):
    run_in_tree(vllm_trees[0], ("tests/kernels/attention/test_dsv4_sparse_decode_fallback_rope.py",),
                "_dsv4_decode_plugin", tmp_path)
