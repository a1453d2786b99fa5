"""torch for the GPU-marked test files, imported only where a GPU can be there.

Those files are collected by every pytest that `regress`, `bump` and `status --check` start for the
vLLM stack (their ids are bound to patches), and on a machine without a GPU they only skip. Importing
torch to learn that costs 2-4 s a run. A machine with no GPU device node (NVIDIA's /dev/nvidiactl or
/proc/driver/nvidia, WSL's /dev/dxg, ROCm's /dev/kfd) and no NVIDIA or AMD device on its PCI bus
(a driver that loads on first use) has no device torch could use, so there the skip is decided
without torch. Everywhere else torch is imported and asked, as before."""

from __future__ import annotations

import glob
import importlib.util
import os

NEEDS_TORCH = "needs torch (pip install torch==2.13.0 -e '.[kernels]')"
NEEDS_GPU = "needs a CUDA GPU (the lent H200)"
DEVICE_NODES = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg", "/dev/kfd")
GPU_VENDORS = ("0x10de", "0x1002")  # NVIDIA, AMD (PCI vendor ids)


def _maybe_a_gpu() -> bool:
    if any(os.path.exists(p) for p in DEVICE_NODES):
        return True
    for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"):
        try:
            with open(vendor) as f:
                if f.read().strip() in GPU_VENDORS:
                    return True
        except OSError:
            continue
    return False


def cuda_torch():
    """(torch, None) where torch sees a GPU, else (None, why the GPU tests skip). Without a GPU
    the reason is the GPU: installing torch would not make these tests run."""
    if not _maybe_a_gpu():
        return None, NEEDS_GPU
    if importlib.util.find_spec("torch") is None:
        return None, NEEDS_TORCH
    try:
        import torch
    except ImportError:  # installed but broken: as if absent
        return None, NEEDS_TORCH
    return (torch, None) if torch.cuda.is_available() else (None, NEEDS_GPU)
