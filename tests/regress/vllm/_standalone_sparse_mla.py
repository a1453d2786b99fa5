"""Import the patched tree's vllm/v1/attention/ops/rocm_aiter_mla_sparse.py (and the common.py it
imports) on a machine without a vLLM install, e.g. the lent H200: the two files are the tree's own,
the vLLM infrastructure they import at module level is replaced by minimal stand-ins. The kernels and
the reference decode run as written; only what they do not use at decode time is stubbed.

The stand-in vllm.envs reads the two sparse-MLA switches from os.environ at each access, as vLLM's
does; the stand-in platform is not ROCm (so _ON_GFX942/_ON_GFX950 and use_manual_e4m3() start
False: callers set the module's names to pick a path)."""

from __future__ import annotations

import enum
import importlib.util
import os
import sys
import types
from pathlib import Path

_MODULE = "vllm/v1/attention/ops/rocm_aiter_mla_sparse.py"
_COMMON = "vllm/v1/attention/ops/common.py"


class _Envs(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("VLLM_ROCM_SPARSE_MLA_"):
            return os.getenv(name, "0").lower() in ("1", "true")
        raise AttributeError(name)


class _Platform:
    def is_rocm(self):
        return False

    def is_fp8_fnuz(self):
        return False


class _CGSupport(enum.Enum):  # vllm.v1.attention.backend.AttentionCGSupport's members
    ALWAYS = 3
    UNIFORM_BATCH = 2
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    NEVER = 0


def _stubs() -> dict[str, types.ModuleType]:
    import triton
    import triton.language as tl

    def mod(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        m.__path__ = []  # a package, so submodules resolve
        return m

    return {
        "vllm": mod("vllm"),
        "vllm.envs": _Envs("vllm.envs"),
        "vllm.compilation": mod("vllm.compilation"),
        "vllm.compilation.breakable_cudagraph": mod("vllm.compilation.breakable_cudagraph",
                                                    eager_break_during_capture=lambda fn: fn),
        "vllm.forward_context": mod("vllm.forward_context", get_forward_context=lambda: None),
        "vllm.platforms": mod("vllm.platforms", current_platform=_Platform()),
        "vllm.triton_utils": mod("vllm.triton_utils", tl=tl, triton=triton),
        "vllm.utils": mod("vllm.utils"),
        "vllm.utils.torch_utils": mod("vllm.utils.torch_utils", LayerNameType=str),
        "vllm.distributed": mod("vllm.distributed"),
        "vllm.distributed.parallel_state": mod("vllm.distributed.parallel_state", GroupCoordinator=object),
        "vllm.v1": mod("vllm.v1"),
        "vllm.v1.attention": mod("vllm.v1.attention"),
        "vllm.v1.attention.backend": mod("vllm.v1.attention.backend", AttentionCGSupport=_CGSupport),
        "vllm.v1.attention.backends": mod("vllm.v1.attention.backends"),
        "vllm.v1.attention.backends.mla": mod("vllm.v1.attention.backends.mla"),
        "vllm.v1.attention.backends.mla.indexer": mod("vllm.v1.attention.backends.mla.indexer",
                                                      DeepseekV32IndexerMetadata=object),
        "vllm.v1.attention.ops": mod("vllm.v1.attention.ops"),
        "vllm.v1.worker": mod("vllm.v1.worker"),
        "vllm.v1.worker.workspace": mod("vllm.v1.worker.workspace", current_workspace_manager=None),
    }


def _load_file(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def install_decode(tree: Path) -> types.ModuleType:
    """Put the tree's DSV4 cache writers (_standalone_dsv4_writers) and, on top of them, its
    rocm_aiter_mla_sparse module into sys.modules, with these stand-ins filling in only what the
    writers' do not provide. Works for every carried release (v0.33.0+ import more at module level)."""
    import logging

    import _standalone_dsv4_writers

    _standalone_dsv4_writers.install(tree)
    for name, stub in _stubs().items():
        have = sys.modules.get(name)
        if have is None:
            sys.modules[name] = stub
        else:  # keep the writers' module (platform, envs, common.py); add the names the decode needs
            for k, v in vars(stub).items():
                if not k.startswith("__") and not hasattr(have, k):
                    setattr(have, k, v)
    # v0.33.0's module also imports these at module level (used only inside the full decode path).
    for name, attrs in {
        "vllm.config": {"CUDAGraphMode": types.SimpleNamespace(FULL=object(), NONE=object()),
                        "get_current_vllm_config": lambda: None},
        "vllm.logger": {"init_logger": logging.getLogger},
    }.items():
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)
        for k, v in attrs.items():
            if not hasattr(sys.modules[name], k):
                setattr(sys.modules[name], k, v)
    return _load_file("vllm.v1.attention.ops.rocm_aiter_mla_sparse", tree / _MODULE)


def load(tree: Path) -> types.ModuleType:
    """The tree's rocm_aiter_mla_sparse module, loaded as install_decode does. The stand-ins stay in
    sys.modules: the module imports some of them lazily, at call time (ops/common.py's
    use_manual_e4m3 reads vllm.platforms), so this is for a process that has no vLLM of its own."""
    return install_decode(tree)
