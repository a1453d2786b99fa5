"""Run SGLang's in-tree o FP8 QDQ kernel test the way SGLang does (`python3 FILE`, unittest) on a GPU
machine that has torch, triton and msgspec but not SGLang's dependency set (the lent H200: Python
3.12, no network, while the pinned tree is a cp311 wheel). Everything the test imports comes from
the tree, except:
- `sglang`, `sglang.kernels` and `sglang.kernels.ops` are entered as bare packages of the tree's
  folders: their __init__ import the whole runtime (srt, lang) or every operator group, which the
  kernel and its registry entry (`sglang.kernels.ops.quantization`, imported for real) do not need;
- `sglang.test.test_utils` is a stand-in whose CustomTestCase is unittest.TestCase: the real module
  imports the server test harness, and its CustomTestCase only wraps setUpClass, which this test
  does not define.

    python _in_tree_gpu_runner.py TREE FILE [unittest args]
"""

import runpy
import sys
import types
import unittest
from pathlib import Path

tree = Path(sys.argv[1]).resolve()
pkg = tree / "python" / "sglang"
for name, folder in (("sglang", pkg), ("sglang.kernels", pkg / "kernels"),
                     ("sglang.kernels.ops", pkg / "kernels" / "ops")):
    mod = types.ModuleType(name)
    mod.__path__ = [str(folder)]
    sys.modules[name] = mod
test_utils = types.ModuleType("sglang.test.test_utils")
test_utils.CustomTestCase = unittest.TestCase
sys.modules["sglang.test.test_utils"] = test_utils
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
