"""pytest plugin (-p _dsv4_decode_plugin): before collection, load the patched tree's DSV4 cache
writers (_standalone_dsv4_writers) and, on top of them, its sparse MLA module
vllm/v1/attention/ops/rocm_aiter_mla_sparse.py (_standalone_sparse_mla's stand-ins fill in only
what the writers' do not provide), so the tree's own test file
tests/kernels/attention/test_dsv4_e4m3_manual_decode.py runs without a vLLM install. The tree is
DSV4_WRITERS_TREE."""

import logging
import os
import sys
import types
from pathlib import Path

import _standalone_dsv4_writers
import _standalone_sparse_mla

_tree = Path(os.environ["DSV4_WRITERS_TREE"])
_standalone_dsv4_writers.install(_tree)
for _name, _stub in _standalone_sparse_mla._stubs().items():
    _have = sys.modules.get(_name)
    if _have is None:
        sys.modules[_name] = _stub
    else:  # keep the writers' module (platform, envs, common.py); add the names the decode needs
        for _k, _v in vars(_stub).items():
            if not _k.startswith("__") and not hasattr(_have, _k):
                setattr(_have, _k, _v)
# v0.33.0's module also imports these at module level (used only inside the full decode path).
for _name, _attrs in {
    "vllm.config": {"CUDAGraphMode": types.SimpleNamespace(FULL=object(), NONE=object()),
                    "get_current_vllm_config": lambda: None},
    "vllm.logger": {"init_logger": logging.getLogger},
}.items():
    if _name not in sys.modules:
        sys.modules[_name] = types.ModuleType(_name)
    for _k, _v in _attrs.items():
        if not hasattr(sys.modules[_name], _k):
            setattr(sys.modules[_name], _k, _v)
_standalone_sparse_mla._load_file("vllm.v1.attention.ops.rocm_aiter_mla_sparse",
                                  _tree / _standalone_sparse_mla._MODULE)
