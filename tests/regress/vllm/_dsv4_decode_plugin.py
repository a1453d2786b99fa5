"""pytest plugin (-p _dsv4_decode_plugin): before collection, load the patched tree's DSV4 cache
writers (_standalone_dsv4_writers) and, on top of them, its sparse MLA module
vllm/v1/attention/ops/rocm_aiter_mla_sparse.py (_standalone_sparse_mla's stand-ins fill in only
what the writers' do not provide), so the tree's own test file
tests/kernels/attention/test_dsv4_e4m3_manual_decode.py runs without a vLLM install. The tree is
DSV4_WRITERS_TREE."""

import os
from pathlib import Path

import _standalone_sparse_mla

_standalone_sparse_mla.install_decode(Path(os.environ["DSV4_WRITERS_TREE"]))
