"""Aliases: the v0.33.0-series `Regression-Test:` trailers name these node ids. The tests are
../test_e4m3_manual_decode.py's, the same for every release (../conftest.py gives them the release under test); this
module only collects them under the ids those trailers name, and goes once the trailers name
../test_e4m3_manual_decode.py directly."""

from test_e4m3_manual_decode import (  # noqa: F401
    test_fallback_applies_inverse_rope,
)
