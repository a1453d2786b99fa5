"""pytest plugin (-p _dsv4_writers_plugin): before collection, load the patched tree's DSV4 cache
writers under their vLLM names (_standalone_dsv4_writers), so the tree's own test file
tests/kernels/attention/test_dsv4_e4m3_manual_encode.py runs without a vLLM install. The tree is
DSV4_WRITERS_TREE."""

import os
from pathlib import Path

import _standalone_dsv4_writers

_standalone_dsv4_writers.install(Path(os.environ["DSV4_WRITERS_TREE"]))
