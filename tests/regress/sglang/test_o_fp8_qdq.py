"""Regression tests of patches/sglang/add-opt-in-o-fp8-qdq-before-wo-a.patch.

What runs (integration level, CPU): the real `MQALayer.forward` (deepseek_v4.py) and
`DSparkAttention.forward` (deepseek_v4_dspark.py) of the patched tree, with the tree's environ.py
reading the switches at import, and the patch's new o_fp8_qdq.py. Each forward runs unbound on a
stand-in `self` (small shapes: T=5 tokens, 8 heads x 128, 2 groups of D=512, RoPE dim 64) with a
stand-in attention backend that returns a fixed o, and wo_a = identity per group, so what reaches
wo_b is exactly the o that reached wo_a. Real on the path: the forward bodies, the real
`_kernel_num_heads` / `_local_attn_sink`, `_apply_wo_a_bf16_matmul` (its CPU einsum), DSpark's torch
inverse RoPE, the custom op the layers call and the QDQ module's check of the block. Stood in:
attention backend, q/kv projections, wo_b, pool, MQALayer's CUDA-only fused_rope_inplace (the same
inverse RoPE in torch), and the op's CPU kernel (the QDQ module runs on NVIDIA GPUs only: the in-tree
reference, as in the patch's wiring test). Details: _o_fp8_qdq_probe.py. The expected values come from the float64 oracle (kernels/o_fp8_qdq/naive.py),
never from the code under test.

Each check is also run against the pinned, unpatched tree, where it must fail (the switch has no
effect there): that is what makes these regression tests.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from kernels.o_fp8_qdq.naive import bf16_bits_to_f64, o_fp8_qdq_oracle
from kernels.o_fp8_qdq.sglang_o_fp8_qdq_cpu import o_fp8_qdq_ as o_fp8_qdq_cpu_

ROOT = Path(__file__).resolve().parents[3]
NEW_FILE = "python/sglang/kernels/ops/quantization/o_fp8_qdq.py"
IN_TREE_TEST = "test/registered/kernels/ops/quantization/test_o_fp8_qdq.py"  # added by the patch
IN_TREE_WIRING_TEST = "test/registered/unit/models/test_deepseek_v4_o_fp8_qdq_wiring.py"  # ditto
# the one reference both in-tree tests import (added by the patch, where SGLang keeps test oracles)
REFERENCE_MODULE = "sglang.test.kernels.deepseek_v4.o_fp8_qdq_reference"
REFERENCE_FILE = "python/sglang/test/kernels/deepseek_v4/o_fp8_qdq_reference.py"
SWITCH = "SGLANG_DSV4_O_FP8_QDQ_BLOCK"
G = 2  # groups in the probe


def _groups(o_bits: np.ndarray) -> np.ndarray:
    """[T, H, hd] bits -> [T, G, H*hd/G] float64, the layout wo_a sees."""
    T = o_bits.shape[0]
    return bf16_bits_to_f64(o_bits).reshape(T, G, -1)


def _expected(res: dict) -> np.ndarray:
    T = res["o_roped"].shape[0]
    return bf16_bits_to_f64(o_fp8_qdq_oracle(res["o_roped"].reshape(T, G, -1), 32))


def _assert_equal_values(got_bits: np.ndarray, want: np.ndarray, what: str) -> None:
    # Compared as values: the identity einsum turns -0 into +0 (x*1 + 0*y); signed zero is checked
    # at the kernel level (tests/kernels/test_o_fp8_qdq_kernel.py).
    got = bf16_bits_to_f64(got_bits).reshape(want.shape)
    bad = got != want
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} values differ from the oracle; "
                           f"first at {tuple(np.argwhere(bad)[0])}: got {got[bad][0]!r}, want {want[bad][0]!r}")


def check_mqa(res: dict) -> None:
    """With the switch at 32: MQALayer hands wo_a the oracle's QDQ of the inverse-RoPE'd o, also
    when the fused RoPE+wo_a kernel is eligible (it must be skipped then)."""
    want = _expected(res)
    assert not np.array_equal(want, _groups(res["o_roped"])), "test input: QDQ must change o"
    _assert_equal_values(res["mqa"], want, "MQALayer.forward, wo_a input")
    assert int(res["mqa_fused_fused_calls"]) == 0, "fused RoPE+wo_a ran although the QDQ is on"
    _assert_equal_values(res["mqa_fused"], want, "MQALayer.forward (fused path eligible), wo_a input")


def check_dspark(res: dict) -> None:
    """With the switch at 32: DSparkAttention hands wo_a the oracle's QDQ of the inverse-RoPE'd o."""
    _assert_equal_values(res["dspark"], _expected(res), "DSparkAttention.forward, wo_a input")


# ------------------------------------------------------------------------------------ patched


def test_mqa_layer_rounds_o_before_wo_a(sglang_probe):
    check_mqa(sglang_probe(True, 32))


def test_dspark_attention_rounds_o_before_wo_a(sglang_probe):
    check_dspark(sglang_probe(True, 32))


def test_switch_off_leaves_o_untouched(sglang_probe):
    """Default (0 = off): wo_a gets the unrounded o and the fused RoPE+wo_a path stays in use. A guard
    (it passes on the pin too), so no Regression-Test of the patch (docs/patch-format.md)."""
    res = sglang_probe(True, 0)
    roped = _groups(res["o_roped"])
    _assert_equal_values(res["mqa"], roped, "MQALayer.forward with the switch off")
    _assert_equal_values(res["dspark"], roped, "DSparkAttention.forward with the switch off")
    assert int(res["mqa_fused_fused_calls"]) == 1
    _assert_equal_values(res["mqa_fused"], roped, "MQALayer.forward fused path, switch off")


def _load_new_file(tree: Path, rel: str = NEW_FILE):
    path = tree / rel
    if not path.is_file():
        raise AssertionError(f"{rel} is not in {tree}")
    spec = importlib.util.spec_from_file_location(f"_o_fp8_qdq_from_{tree.name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_new_file(tree: Path) -> None:
    mod = _load_new_file(tree)
    reference = _load_new_file(tree, REFERENCE_FILE).o_fp8_qdq_reference  # the in-tree tests' oracle
    assert (tree / NEW_FILE).read_bytes() == (ROOT / "kernels/o_fp8_qdq/sglang_o_fp8_qdq.py").read_bytes()
    cpu = torch.ones(1, 8, 4096, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="not on cpu"):  # NVIDIA CUDA GPUs only
        mod.o_fp8_qdq_(cpu, 32)
    gen = torch.Generator().manual_seed(1017)
    for T in (1, 3, 37):
        o = torch.randn(T, 8, 4096, generator=gen)
        o = o * torch.exp2(torch.randint(-30, 31, (T, 8, 128, 1), generator=gen).float()).repeat_interleave(
            32, -1).reshape(T, 8, 4096)
        o[0, 0, :32] = 0
        o[0, 1, :32] *= 1e-9
        o[0, 2, 7] = 448 * 2.0**9
        o = o.to(torch.bfloat16)
        want = o_fp8_qdq_oracle(o.view(torch.int16).numpy().view(np.uint16), 32)
        for emulate in (False, True):  # the tree's argument checks, the harness's eager path
            x = o.clone()
            o_fp8_qdq_cpu_(x, 32, emulate=emulate, op=mod)
            got = x.view(torch.int16).numpy().view(np.uint16)
            assert np.array_equal(got, want), f"T={T} emulate={emulate}: {int((got != want).sum())} differ"
        ref = reference(o).view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(ref, want), f"T={T} in-tree reference: {int((ref != want).sum())} differ"


def test_patched_module_matches_oracle(dsv4_tree):
    """The patched tree's new o_fp8_qdq.py is byte-equal to kernels/o_fp8_qdq/sglang_o_fp8_qdq.py (whose
    Triton kernel tests/kernels/test_o_fp8_qdq_kernel.py checks under Triton's interpreter, and on the
    H200) and refuses CPU tensors; its argument checks, with the project's eager CPU path around them
    (kernels/o_fp8_qdq/sglang_o_fp8_qdq_cpu.py), give the oracle's bits at T = 1, 3, 37 (Flash shape,
    8 x 4096); so does the reference the patch's in-tree tests import (sglang.test.kernels.deepseek_v4)."""
    check_new_file(dsv4_tree("sglang"))


def test_upstream_unit_test_passes(dsv4_tree, run_sglang_unit_test):
    """The kernel test the patch adds inside SGLang's test tree (next to SGLang's other quantization
    kernel tests) passes on the patched tree: its CPU class runs (argument checks, devices refused,
    the registry entry), its CUDA class skips here (it runs on the GPU: test_o_fp8_qdq_gpu.py)."""
    tree = dsv4_tree("sglang")
    assert (tree / IN_TREE_TEST).is_file(), f"{IN_TREE_TEST} is not in {tree}"  # the pin has none
    p = run_sglang_unit_test(tree / IN_TREE_TEST, tree)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Ran 6 tests" in p.stderr and "OK (skipped=3)" in p.stderr, p.stderr[-2000:]


def test_in_tree_wiring_test_passes(dsv4_tree, run_sglang_unit_test):
    """The patch's wiring test inside SGLang's tree passes on the patched tree: the real
    MQALayer.forward and DSparkAttention.forward on stand-in layers (o rounded before wo_a at 32, also
    where the fused RoPE+wo_a kernel was eligible; untouched at 0, the registered default) and the
    layer-init check (bad values, non-CUDA platforms refused, one warning per bypassing path), and
    the custom op the layers call (its schema writes o; torch.compile(fullgraph=True), eager and
    aot_eager backends, keeps it as one node with the reference's values, on CPU)."""
    tree = dsv4_tree("sglang")
    assert (tree / IN_TREE_WIRING_TEST).is_file(), f"{IN_TREE_WIRING_TEST} is not in {tree}"  # the pin has none
    p = run_sglang_unit_test(tree / IN_TREE_WIRING_TEST, tree)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Ran 12 tests" in p.stderr and "OK" in p.stderr, p.stderr[-2000:]


def check_init(res: dict) -> None:
    """What building a layer does with the switch (see _o_fp8_qdq_init_probe.py for the cases)."""
    def result(case):
        return res[case]["result"]

    for case in ("cuda_bf16", "off_on_rocm"):
        assert result(case) == "ok" and res[case]["warnings"] == [], (case, res[case])
    for case, what in (("negative", "=-32 is not a power of two"), ("not_power_of_two", "=48 is not"),
                       ("does_not_divide_d", "=8192 does not divide the group row width D=4096")):
        assert result(case).startswith("ValueError: " + SWITCH + what), (case, result(case))
    for case, where in (("rocm_bf16", "ROCm"), ("npu_bf16", "NPU"), ("xpu_bf16", "XPU"),
                        ("cpu_bf16", "this platform (no CUDA)")):
        r = result(case)
        assert r.startswith("NotImplementedError: " + SWITCH) and f"not on {where}" in r, (case, r)
    # what each path does with o instead, as the tree's code does it (the warning must say so)
    for case, path, does in (
            ("mega", "mega-attention", "o as FP8 with per-32 scales"),
            ("fp8_wo_a", "FP8 wo_a GEMM", "quantizes o to FP8 with its own scales per 128 values"),
            ("rocm_mxscale", "ROCm mxscale wo_a", "e8m0 scales per 128 values"),
            ("npu_mxfp8", "NPU MXFP8 wo_a", "MXFP8 (e8m0 scales per 32 values)"),
            ("gguf", "GGUF wo_a", "rounds o to int8 (q8_1, per 32 values) for quantized")):
        assert result(case) == "ok", (case, result(case))  # ignored, not refused
        warned = res[case]["warnings"]
        assert len(warned) == 1 and warned[0].startswith(f"{SWITCH}=32 is ignored") \
            and f"on the {path} path" in warned[0] and does in warned[0], (case, warned)
        assert "not rounded" not in warned[0], (case, warned)  # the old, wrong, text
    assert res["mega_again"]["warnings"] == [], "the same warning must be logged once"


def test_layer_init_checks_the_switch(sglang_init_probe):
    """A bad SGLANG_DSV4_O_FP8_QDQ_BLOCK (negative, not a power of two, not dividing D = 4096) is a
    ValueError naming the switch when a layer is built; every platform without CUDA (ROCm, NPU, XPU,
    CPU) with the bf16 wo_a is refused there too (NotImplementedError); the import itself does not
    fail on a bad value."""
    res = sglang_init_probe(True)
    assert res["import_value"] == -32
    check_init(res)


def test_switch_ignored_paths_warn_once(sglang_init_probe):
    """Mega attention, ROCm mxscale, FP8 and NPU MXFP8 wo_a GEMMs and GGUF wo_a bypass the bf16 einsum:
    with the switch set, building such a layer logs one warning naming the path and what it does
    with o instead (not an error, not silence), once per message."""
    res = sglang_init_probe(True)
    for case in ("mega", "fp8_wo_a", "rocm_mxscale", "npu_mxfp8", "gguf"):
        assert len(res[case]["warnings"]) == 1, (case, res[case])
    assert res["mega_again"]["warnings"] == []


def test_negative_switch_is_not_silently_ignored(sglang_init_probe):
    """The forward hook and the fused-path choice use one predicate: a negative value reaching
    forward raises (it used to turn the fused path off and then round nothing)."""
    r = sglang_init_probe(True)["forward_negative"]
    assert r.startswith("ValueError: " + SWITCH + "=-32"), r


# ---------------------------------------------------------------------- unpatched companions


def test_unpatched_tree_fails(dsv4_tree, sglang_probe, run_sglang_unit_test):
    """The same checks against the pinned tree must fail: there the switch is unknown, o reaches
    wo_a unrounded, the QDQ module does not exist, and the patch's own unit test fails."""
    if os.environ.get("DSV4_INTENT"):  # the base IS the tree under test there (docs/patch-format.md)
        pytest.skip("about the unpatched tree: not an intent test")
    res = sglang_probe(False, 32)
    assert not bool(res["has_switch"])
    with pytest.raises(AssertionError):
        check_mqa(res)
    with pytest.raises(AssertionError):
        check_dspark(res)
    roped = _groups(res["o_roped"])
    _assert_equal_values(res["mqa"], roped, "unpatched MQALayer")  # untouched, not rounded
    _assert_equal_values(res["dspark"], roped, "unpatched DSparkAttention")
    with pytest.raises(AssertionError):
        check_new_file(dsv4_tree("sglang", patched=False))
    base = dsv4_tree("sglang", patched=False)
    assert not (base / IN_TREE_TEST).exists()
    p = run_sglang_unit_test(dsv4_tree("sglang") / IN_TREE_TEST, base)
    assert p.returncode != 0 and "o_fp8_qdq" in p.stderr, "the patch's unit test must fail on the pin"


def test_unpatched_tree_fails_the_wiring_and_init_checks(dsv4_tree, run_sglang_unit_test,
                                                           sglang_init_probe):
    """On the pin the wiring test fails on behaviour (o reaches wo_a unrounded in MQALayer and in
    DSparkAttention; the fused kernel runs), not on an import; its init tests fail because the
    layer-init check does not exist; so does the forward hook. The pin has no o FP8 QDQ reference
    (the patch adds it under sglang.test.kernels, where both in-tree tests import it from): the
    patched tree's file is loaded as that module for this run, so only the code under test is the
    pin's."""
    if os.environ.get("DSV4_INTENT"):  # the base IS the tree under test there (docs/patch-format.md)
        pytest.skip("about the unpatched tree: not an intent test")
    base = dsv4_tree("sglang", patched=False)
    assert not (base / REFERENCE_FILE).exists()
    reference = dsv4_tree("sglang") / REFERENCE_FILE
    p = run_sglang_unit_test(dsv4_tree("sglang") / IN_TREE_WIRING_TEST, base, {REFERENCE_MODULE: reference})
    assert p.returncode != 0
    assert "values differ" in p.stderr and "ImportError" not in p.stderr, p.stderr[-3000:]
    dspark = p.stderr.split("test_o_is_rounded_before_wo_a (__main__.TestDSparkOFp8QdqWiring")
    assert len(dspark) > 2 and "values differ" in dspark[-1].split("=" * 70)[0], p.stderr[-3000:]
    for name in ("test_bad_values_raise", "test_non_cuda_platforms_are_refused",
                 "test_paths_without_the_bf16_einsum_warn_once"):
        assert f"{name} (__main__.TestDeepSeekV4OFp8QdqInit" in p.stderr, name  # listed as failing
    for name in ("test_the_op_mutates_o", "test_torch_compile_keeps_the_op_opaque"):  # no custom op
        assert f"{name} (__main__.TestOFp8QdqCustomOp" in p.stderr, name
    assert "has no attribute '_init_o_fp8_qdq'" in p.stderr, p.stderr[-3000:]
    res = sglang_init_probe(False)
    with pytest.raises((AssertionError, KeyError)):
        check_init(res)
    assert res["forward_negative"] == "missing"
