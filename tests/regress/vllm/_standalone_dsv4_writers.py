"""Import the patched tree's DeepSeek V4 Triton cache writers on a machine without a vLLM install,
e.g. the lent H200: vllm/v1/attention/ops/common.py and, under vllm/models/deepseek_v4/common/ops/,
cache_utils.py, fused_indexer_q.py, fused_inv_rope_fp8_quant.py and fused_compress_quant_cache.py
are the tree's own files, loaded as the modules of those names (and, where the tree has DeepSeek
V4.1, its writers under vllm/models/deepseek_v41/common/ops/: cache_utils.py,
fused_compress_quant_cache.py and indexer_k_store.py); the vLLM infrastructure they import
at module level is replaced by stand-ins (platform: CUDA, OCP e4m3, no PDL; no CuTe DSL). The JIT
warmup machinery (from v0.33.0 several writers launch through it) is the tree's own
vllm/model_executor/warmup/jit_warmup*.py, loaded the same way; an inert class stands for it only in
a tree that has no such files.

`install(tree)` puts the modules into sys.modules (for mock.patch by dotted name and for the
in-tree test file, which imports them by those names); `uninstall()` takes everything out again."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

OPS = "vllm.models.deepseek_v4.common.ops"
OPS41 = "vllm.models.deepseek_v41.common.ops"
_WARMUP = {  # loaded from the tree where its writers launch through them (v0.33.0)
    "vllm.model_executor.warmup.jit_warmup": "vllm/model_executor/warmup/jit_warmup.py",
    "vllm.model_executor.warmup.jit_warmup_triton_helper": "vllm/model_executor/warmup/jit_warmup_triton_helper.py",
}
_FILES = {  # module -> file in the tree, in import order
    "vllm.v1.attention.ops.common": "vllm/v1/attention/ops/common.py",
    f"{OPS}.fused_indexer_q": "vllm/models/deepseek_v4/common/ops/fused_indexer_q.py",
    f"{OPS}.cache_utils": "vllm/models/deepseek_v4/common/ops/cache_utils.py",
    f"{OPS}.fused_inv_rope_fp8_quant": "vllm/models/deepseek_v4/common/ops/fused_inv_rope_fp8_quant.py",
    f"{OPS}.fused_compress_quant_cache": "vllm/models/deepseek_v4/common/ops/fused_compress_quant_cache.py",
}
_FILES41 = {  # DeepSeek V4.1's writers (from v0.33.0), loaded where the tree has them
    f"{OPS41}.cache_utils": "vllm/models/deepseek_v41/common/ops/cache_utils.py",
    f"{OPS41}.fused_compress_quant_cache": "vllm/models/deepseek_v41/common/ops/fused_compress_quant_cache.py",
    f"{OPS41}.indexer_k_store": "vllm/models/deepseek_v41/common/ops/indexer_k_store.py",
}
_installed: list[str] = []


class _Inert:
    """Stands for classes and helpers the writers import but do not call (JIT warmup)."""

    def __init__(self, *a, **kw):
        pass

    def __class_getitem__(cls, item):
        return cls

    def __call__(self, *a, **kw):
        return self

    @classmethod
    def from_alignment(cls, *a, **kw):
        return cls()


class _Envs(types.ModuleType):
    VLLM_TRITON_JIT_WARMUP_NUM_THREADS = 1

    def __getattr__(self, name):
        if name.startswith("VLLM_ROCM_SPARSE_MLA_"):  # read at each access, as vLLM's envs does
            return os.getenv(name, "0").lower() in ("1", "true")
        return False  # any other switch: off


class _Platform:
    device_type = "cuda"

    def is_cpu(self):
        return False

    def is_rocm(self):
        return False

    def is_cuda(self):
        return True

    def is_cuda_alike(self):
        return True

    def is_xpu(self):
        return False

    def is_fp8_fnuz(self):
        return False

    def fp8_dtype(self):
        import torch

        return torch.float8_e4m3fn

    def is_arch_support_pdl(self):
        return False

    def has_device_capability(self, capability):  # vLLM's: (major, minor) or major * 10 + minor
        import torch

        major, minor = torch.cuda.get_device_capability()
        want = capability if isinstance(capability, int) else capability[0] * 10 + capability[1]
        return major * 10 + minor >= want


def _register_custom_op(op_name, op_func, mutates_args=None, fake_impl=None, **kw):
    import torch

    setattr(torch.ops.vllm, op_name, op_func)  # called as torch.ops.vllm.<op_name>(...)


def _tma_aligned_size(x: int, element_size: int) -> int:
    align = 16 // element_size
    return (x + align - 1) // align * align


def _stubs(tree: Path) -> dict[str, types.ModuleType]:
    import torch
    import triton
    import triton.language as tl

    def mod(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        m.__path__ = []  # a package, so submodules resolve
        return m

    names = ["vllm", "vllm.model_executor", "vllm.model_executor.layers",
             "vllm.model_executor.layers.quantization", "vllm.model_executor.layers.quantization.utils",
             "vllm.model_executor.warmup", "vllm.utils", "vllm.v1", "vllm.v1.attention",
             "vllm.v1.attention.ops", "vllm.models", "vllm.models.deepseek_v4",
             "vllm.models.deepseek_v4.common", OPS, "vllm.distributed",
             "vllm.models.deepseek_v41", "vllm.models.deepseek_v41.common", OPS41]
    stubs = {n: mod(n) for n in names}
    stubs.update({
        "vllm.platforms": mod("vllm.platforms", current_platform=_Platform()),
        "vllm.envs": _Envs("vllm.envs"),
        "vllm.triton_utils": mod("vllm.triton_utils", tl=tl, triton=triton, HAS_TRITON=True),
        "vllm.transformers_utils.deepseek_v4_utils": mod(
            "vllm.transformers_utils.deepseek_v4_utils", get_compress_ratios=lambda *a, **kw: []),
        "vllm.distributed.parallel_state": mod("vllm.distributed.parallel_state", GroupCoordinator=object),
        "vllm.utils.import_utils": mod("vllm.utils.import_utils", has_cutedsl=lambda: False),
        "vllm.utils.math_utils": mod("vllm.utils.math_utils", next_power_of_2=triton.next_power_of_2,
                                     round_up=lambda x, y: (x + y - 1) // y * y,
                                     cdiv=lambda x, y: -(-x // y)),
        "vllm.utils.torch_utils": mod("vllm.utils.torch_utils", direct_register_custom_op=_register_custom_op),
        "vllm.utils.deep_gemm": mod("vllm.utils.deep_gemm", get_tma_aligned_size=_tma_aligned_size,
                                    mqa_logits_use_mx_scales=lambda: False),
        "vllm.model_executor.layers.quantization.utils.quant_utils": mod(
            "vllm.model_executor.layers.quantization.utils.quant_utils",
            get_fp8_min_max=lambda: (-448.0, 448.0)),
        "vllm.model_executor.warmup.jit_warmup": mod(
            "vllm.model_executor.warmup.jit_warmup", VllmJitKernel=_Inert, zip_inputs=_Inert()),
        "vllm.model_executor.warmup.jit_warmup_triton_helper": mod(
            "vllm.model_executor.warmup.jit_warmup_triton_helper",
            TritonPointerInputVariant=_Inert, TritonWarmupTensor=_Inert),
    })
    stubs["vllm.transformers_utils"] = mod("vllm.transformers_utils")
    if (tree / _WARMUP["vllm.model_executor.warmup.jit_warmup_triton_helper"]).exists():
        for name in _WARMUP:
            del stubs[name]
    del torch
    return stubs


def install(tree: Path) -> dict[str, types.ModuleType]:
    """Load the tree's writer modules under their vLLM names; returns them by short name."""
    uninstall()
    stubs = _stubs(tree)
    sys.modules.update(stubs)
    _installed.extend(stubs)
    loaded = {}
    files = {n: r for n, r in _WARMUP.items() if n not in stubs} | _FILES
    for name, rel in files.items():
        spec = importlib.util.spec_from_file_location(name, tree / rel)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        _installed.append(name)
        spec.loader.exec_module(module)
        parent, _, short = name.rpartition(".")
        setattr(sys.modules[parent], short, module)
        loaded[short] = module
    ops = sys.modules[OPS]  # what `from vllm.models.deepseek_v4.common.ops import ...` finds
    ops.quantize_and_insert_k_cache = loaded["cache_utils"].quantize_and_insert_k_cache
    ops.fused_indexer_q_rope_quant = loaded["fused_indexer_q"].fused_indexer_q_rope_quant
    ops.fused_inv_rope_fp8_quant = loaded["fused_inv_rope_fp8_quant"].fused_inv_rope_fp8_quant
    ops41 = sys.modules[OPS41]  # the names V4.1's package takes from V4 (its __init__ re-exports)
    for name in ("MXFP4_BLOCK_SIZE", "_fp32x2_to_fp4x2", "fused_indexer_q_rope_quant"):
        setattr(ops41, name, getattr(loaded["fused_indexer_q"], name))
    ops41.fused_inv_rope_fp8_quant = ops.fused_inv_rope_fp8_quant
    for name, rel in _FILES41.items():
        if not (tree / rel).exists():  # no DeepSeek V4.1 in this tree (v0.27.1)
            continue
        spec = importlib.util.spec_from_file_location(name, tree / rel)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        _installed.append(name)
        spec.loader.exec_module(module)
        setattr(ops41, name.rpartition(".")[2], module)
        loaded["v41_" + name.rpartition(".")[2]] = module
    if "v41_cache_utils" in loaded:
        ops41.quantize_and_insert_k_cache = loaded["v41_cache_utils"].quantize_and_insert_k_cache
    return loaded


def uninstall() -> None:
    while _installed:
        sys.modules.pop(_installed.pop(), None)
