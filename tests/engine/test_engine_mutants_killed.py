"""Engine decisions that survived the engine mutation run (benchmarks/mutate_engine.py, seed 29;
docs/engine-mutation-report.md): each test states what a user sees, and fails when the rule behind
it is dropped or bent.

- the compile check blames a new `.py` file that does not compile even when a later patch of the
  series touches it again (the file did not exist upstream: nothing there excuses it)."""

from __future__ import annotations

import pytest

from dsv4_patch.api import compile_problems
from dsv4_patch.errors import Dsv4Error

META = "Why.\n\nUpstream-Status: Pending\nRegression-Test: tests/test_demo.py::test_ok\nSigned-off-by: Pat Cher <pat@example.com>\n"


def test_a_new_python_file_that_does_not_compile_is_blamed_when_a_later_patch_touches_it(env):
    env.author({"pkg/new.py": "def f(:\n    pass\n\nX = 1\n"}, "[DSV4] Add new.py", body=META)
    env.author({"pkg/new.py": "def f(:\n    pass\n\nX = 2\n"}, "[DSV4] Tune new.py", body=META)
    with pytest.raises(Dsv4Error) as e:
        compile_problems(env.stack, env.rebuild())
    assert "pkg/new.py:1: SyntaxError" in str(e.value), str(e.value)
