"""A stand-in `amdsmi` that reports a chosen GCN arch, so vllm.platforms.rocm can be imported (and
reloaded per arch) on a machine without an AMD GPU. install() puts it in sys.modules: vLLM's platform
detection then sees ROCm, so a check that wants the CPU platform must resolve
vllm.platforms.current_platform (e.g. import the module under test) before calling it."""

from __future__ import annotations

import importlib
import sys
import types

ARCH = {"name": "gfx942"}
fake = types.ModuleType("amdsmi")
fake.AmdSmiException = type("AmdSmiException", (Exception,), {})
fake.AmdSmiMemoryType = types.SimpleNamespace(VRAM=0)
fake.amdsmi_init = lambda *a, **k: None
fake.amdsmi_shut_down = lambda *a, **k: None
fake.amdsmi_get_processor_handles = lambda: [object()]
fake.amdsmi_get_gpu_asic_info = lambda h: {"target_graphics_version": ARCH["name"]}
for _n in ("amdsmi_get_gpu_device_uuid", "amdsmi_get_gpu_memory_total", "amdsmi_topo_get_link_type",
           "amdsmi_topo_get_numa_node_number"):
    setattr(fake, _n, lambda *a, **k: None)


def install() -> None:
    sys.modules["amdsmi"] = fake


def set_arch(arch: str):
    """Reload vllm.platforms.rocm as if running on `arch`; returns the module."""
    install()
    import vllm.platforms.rocm as rocm

    ARCH["name"] = arch
    rocm = importlib.reload(rocm)
    clear_gate()
    return rocm


def clear_gate() -> None:
    """The patched trees cache the integer-e4m3 gate (functools.cache, one platform per process):
    forget it, so the next launch asks again for the simulated arch and platform."""
    gate = getattr(sys.modules.get("vllm.v1.attention.ops.common"), "use_manual_e4m3", None)
    getattr(gate, "cache_clear", lambda: None)()
