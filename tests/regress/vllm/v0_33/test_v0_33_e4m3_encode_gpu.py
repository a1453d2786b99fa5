"""vllm 5 on v0.33.0 on a CUDA GPU (level `gpu`): ../test_e4m3_encode_gpu.py unchanged, against the
v0.33.0 tree's writers (whose JIT-warmup launchers _standalone_dsv4_writers loads from the tree).

Run: dsv4-patch regress vllm -r v0.33.0 -m gpu --record gpu --hardware H200"""

# The same tests as ../test_e4m3_encode_gpu.py, collected here so that regress binds them to the
# v0.33.0 patch; the fixture comes along.
from test_e4m3_encode_gpu import (  # noqa: E402,F401
    pytestmark,
    test_encode_all_float32_patterns_match_hw_cast,
    test_in_tree_encode_tests_pass_on_gpu,
    writers,
)
