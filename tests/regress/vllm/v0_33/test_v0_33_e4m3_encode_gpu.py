"""Aliases: the v0.33.0-series `Regression-Test:` trailers name these node ids. The tests are
../test_e4m3_encode_gpu.py's, the same for every release (../conftest.py gives them the release under test); this
module only collects them under the ids those trailers name, and goes once the trailers name
../test_e4m3_encode_gpu.py directly."""

from test_e4m3_encode_gpu import (  # noqa: F401
    pytestmark,
    test_encode_all_float32_patterns_match_hw_cast,
    test_in_tree_encode_tests_pass_on_gpu,
    writers,
)
