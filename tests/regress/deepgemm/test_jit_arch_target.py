"""Why the stack carries no per-kernel JIT arch target: the pin's JIT already targets sm_100a whenever the
compiler has no arch families, i.e. exactly when the NVFP4 MMA falls back to the `scale_vec::4X` spelling.

Arch families (`sm_100f`) and the `.block16` spelling both arrive with CUDA 12.9 (test_nvfp4_mma_compile.py:
`.block16` assembles on sm_100f with the same SASS), so the family target is never asked to assemble
`scale_vec::4X`. A patch that picks `sm_100a` per kernel (this stack carried one until the rule was
measured) has nothing left to do. Reads the pristine pin (dsv4_tree, skips when unreachable)."""

from __future__ import annotations

import re


def test_pin_targets_sm100a_exactly_when_families_are_missing(dsv4_tree):
    src = (dsv4_tree("deepgemm", patched=False) / "csrc/jit/device_runtime.hpp").read_text()
    assert 'return support_arch_family ? "100f" : "100a";' in src
    # and `support_arch_family` means CUDA >= 12.9 for both NVCC and NVRTC, the version `.block16` needs
    compiler = (dsv4_tree("deepgemm", patched=False) / "csrc/jit/compiler.hpp").read_text()
    checks = re.findall(r"get_arch\(false, (\w+) > 12 or (\w+) >= 9\)", compiler)
    assert len(checks) == 2, checks  # the NVCC and the NVRTC path
