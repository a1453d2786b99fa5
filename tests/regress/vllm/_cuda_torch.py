"""torch for the GPU-marked test files, imported only where a CUDA GPU can be there.

Those files are collected by every pytest that `regress`, `bump` and `status --check` start for the
vLLM stack (their ids are bound to patches), and on a machine without a GPU they only skip. Importing
torch to learn that costs 2-4 s a run; a machine with no NVIDIA driver loaded (no /dev/nvidiactl, no
/proc/driver/nvidia) has no CUDA device either, so there the skip is decided without torch. Elsewhere
torch is imported and asked, as before."""

from __future__ import annotations

import importlib.util
import os

NEEDS_TORCH = "needs torch (pip install torch==2.13.0 -e '.[kernels]')"
NEEDS_GPU = "needs a CUDA GPU (the lent H200)"


def cuda_torch():
    """(torch, None) where a CUDA GPU is usable, else (None, why the GPU tests skip)."""
    if importlib.util.find_spec("torch") is None:
        return None, NEEDS_TORCH
    if not (os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia")):
        return None, NEEDS_GPU
    try:
        import torch
    except ImportError:  # installed but broken: as if absent
        return None, NEEDS_TORCH
    return (torch, None) if torch.cuda.is_available() else (None, NEEDS_GPU)
