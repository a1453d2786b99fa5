"""vllm 2 on v0.33.0 on a CUDA GPU (level `gpu`): ../test_e4m3_decode_gpu.py unchanged, against the
v0.33.0 tree (whose prefill gather is a JIT-warmup kernel object, loaded from the tree).

Run: dsv4-patch regress vllm -r v0.33.0 -m gpu --record gpu --hardware H200"""

# The same test as ../test_e4m3_decode_gpu.py, collected here so that regress binds it to the
# v0.33.0 patch.
from test_e4m3_decode_gpu import (  # noqa: E402,F401
    pytestmark,
    test_in_tree_decode_tests_pass_on_gpu,
)
