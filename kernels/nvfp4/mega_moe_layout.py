"""The weight and scale transform a vLLM wiring does for DeepGEMM's `fp4_fp4_mega_moe` (native layout),
from a ModelOpt NVFP4 checkpoint's per-expert tensors, and a naive reference beside it.

What the kernel takes (read from the Python API of the DeepGEMM vLLM vendors, `deep_gemm/mega/__init__.py`
`fp4_fp4_mega_moe` and `transform_weights_for_mega_moe`, and from vLLM 0.34.0's callers; no DeepGEMM code
is imported or copied here):

- `l1_weights = (w13, sf13)`: packed E2M1 `int8 [E, 2I, H/2]` (two values a byte, low nibble first) with
  gate and up rows interleaved in groups of 8 (`[gate 0..7, up 0..7, gate 8..15, up 8..15, ...]`), and the
  UE4M3 block-16 scales packed four per `int32` along K (byte i of word w scales block 4w+i),
  `int32 [E, 2I, H/64]`, interleaved like the weights, then transposed for UTCCP within each 128-row
  group (row 128b + 32j + i -> 128b + 4i + j), MN-major (stride 1 along the rows);
- `l2_weights = (w2, sf2)`: `int8 [E, H, I/2]` as in the checkpoint; scales `int32 [E, H, I/64]`,
  UTCCP-transposed, MN-major;
- `l1_alphas`: FP32 `[E, 2]`, the gate and up global scales (ModelOpt `weight_scale_2` of w1 and w3, kept
  separate: never folded into the block scales);
- `l2_alphas`: FP32 `[E]`, w2's `weight_scale_2`; `a2_scales`: FP32 `[E]`, w2's `input_scale` (the kernel
  normalizes its in-kernel L2 requantization by 1/a2 and folds a2 back into the L2 alpha).

The ModelOpt checkpoint: `value = e2m1 * weight_scale (UE4M3, one per 16 along K) * weight_scale_2`.
Nothing here converts a UE4M3 scale to UE8M0 or merges 16-blocks (the field's hard rule).

`transform` is the vectorized form (the reshapes DeepGEMM's helpers do); `reference_transform` computes
every destination row from the closed form vLLM's loader documents (`64b + 16j + 8q + m -> 128b + 64q +
32*half + 4m + j` for L1 scales); `decode_l1` / `decode_l2` read the kernel layout back to float64
values through the oracle (`kernels/nvfp4/naive.py`) and the same closed form.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import naive

GRAN = 8  # gate/up interleave granularity (rows)
UTCCP_ROWS = 128  # rows of one UTCCP 4x32dp128bit copy


@dataclass
class ExpertsCheckpoint:
    """One MoE layer's experts as a ModelOpt NVFP4 checkpoint stores them, stacked over E experts."""

    w1: torch.Tensor  # uint8 [E, I, H/2] gate_proj, packed E2M1
    w1_sf: torch.Tensor  # uint8 [E, I, H/16] UE4M3 codes (or float8_e4m3fn)
    w1_gs: torch.Tensor  # float32 [E] weight_scale_2
    w3: torch.Tensor  # up_proj, as w1
    w3_sf: torch.Tensor
    w3_gs: torch.Tensor
    w2: torch.Tensor  # uint8 [E, H, I/2] down_proj
    w2_sf: torch.Tensor  # uint8 [E, H, I/16]
    w2_gs: torch.Tensor  # float32 [E]
    w2_input_scale: torch.Tensor  # float32 [E]


@dataclass
class KernelWeights:
    l1_weights: tuple[torch.Tensor, torch.Tensor]
    l2_weights: tuple[torch.Tensor, torch.Tensor]
    l1_alphas: torch.Tensor
    l2_alphas: torch.Tensor
    a2_scales: torch.Tensor


def _u8(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype != torch.uint8 else t


def check_shapes(ck: ExpertsCheckpoint) -> tuple[int, int, int]:
    """(E, H, I), or ValueError naming the tensor that does not fit the kernel's constraints."""
    e, i, h2 = ck.w1.shape
    h = h2 * 2
    want = {"w1": (e, i, h // 2), "w3": (e, i, h // 2), "w1_sf": (e, i, h // 16), "w3_sf": (e, i, h // 16),
            "w2": (e, h, i // 2), "w2_sf": (e, h, i // 16)}
    for name, shape in want.items():
        if tuple(getattr(ck, name).shape) != shape:
            raise ValueError(f"{name}: shape {tuple(getattr(ck, name).shape)}, expected {shape}")
    for name in ("w1_gs", "w3_gs", "w2_gs", "w2_input_scale"):
        if tuple(getattr(ck, name).shape) != (e,):
            raise ValueError(f"{name}: one FP32 scale per expert expected, got shape {tuple(getattr(ck, name).shape)}")
    if (2 * i) % UTCCP_ROWS or h % UTCCP_ROWS or i % 64 or h % 64:
        raise ValueError(f"hidden {h} and intermediate {i}: 2*I and H must be multiples of 128, H and I of 64")
    return e, h, i


def _pack_sf(sf: torch.Tensor) -> torch.Tensor:
    """uint8 [..., K/16] UE4M3 codes -> int32 [..., K/64] (little-endian: byte i of word w is block 4w+i)."""
    return _u8(sf).contiguous().view(torch.int32)


def _mn_major(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def _interleave(t: torch.Tensor, gran: int = GRAN) -> torch.Tensor:
    """[E, 2N, ...] = [gate | up] -> rows [gate 0..gran-1, up 0..gran-1, gate gran.., ...]."""
    e, n, *rest = t.shape
    half = n // 2
    gate = t[:, :half].reshape(e, half // gran, gran, *rest)
    up = t[:, half:].reshape(e, half // gran, gran, *rest)
    return torch.empty_like(t).copy_(torch.stack([gate, up], dim=2).reshape(e, n, *rest))


def _utccp(sf: torch.Tensor) -> torch.Tensor:
    """Within each 128-row group: row 32j + i -> 4i + j."""
    e, mn, k = sf.shape
    return torch.empty_like(sf).copy_(sf.reshape(e, mn // UTCCP_ROWS, 4, 32, k).transpose(2, 3).reshape(e, mn, k))


def transform(ck: ExpertsCheckpoint) -> KernelWeights:
    check_shapes(ck)
    w13 = torch.cat([_u8(ck.w1), _u8(ck.w3)], dim=1).view(torch.int8)
    sf13 = _mn_major(torch.cat([_pack_sf(ck.w1_sf), _pack_sf(ck.w3_sf)], dim=1))
    l1 = (_interleave(w13), _utccp(_interleave(sf13)))
    l2 = (_u8(ck.w2).view(torch.int8).contiguous(), _utccp(_mn_major(_pack_sf(ck.w2_sf))))
    return KernelWeights(l1, l2,
                         torch.stack([ck.w1_gs, ck.w3_gs], dim=1).to(torch.float32).contiguous(),
                         ck.w2_gs.to(torch.float32).contiguous(), ck.w2_input_scale.to(torch.float32).contiguous())


# ---------------------------------------------------------------- the naive reference (closed forms)
def l1_weight_row(r: int, half: int) -> int:
    """Destination row of checkpoint row r of gate (half 0) or up (half 1) in the L1 weights."""
    return (r // GRAN) * 2 * GRAN + GRAN * half + r % GRAN


def l1_scale_row(r: int, half: int) -> int:
    """vLLM's loader: r = 64b + 16j + 8q + m -> 128b + 64q + 32*half + 4m + j."""
    b, rem = divmod(r, 64)
    j, rem = divmod(rem, 16)
    q, m = divmod(rem, 8)
    return 128 * b + 64 * q + 32 * half + 4 * m + j


def l2_scale_row(r: int) -> int:
    """UTCCP: row 128b + 32j + i -> 128b + 4i + j."""
    b, rem = divmod(r, 128)
    j, i = divmod(rem, 32)
    return 128 * b + 4 * i + j


def reference_transform(ck: ExpertsCheckpoint) -> KernelWeights:
    """Row by row, from the closed forms; scales packed with the oracle's `pack_sf_int32`."""
    e, h, i = check_shapes(ck)
    w13 = np.zeros((e, 2 * i, h // 2), dtype=np.uint8)
    sf13 = np.zeros((e, 2 * i, h // 64), dtype=np.int32)
    w2 = _u8(ck.w2).numpy().copy()
    sf2 = np.zeros((e, h, i // 64), dtype=np.int32)
    for half, (w, sf) in enumerate(((ck.w1, ck.w1_sf), (ck.w3, ck.w3_sf))):
        w, sf = _u8(w).numpy(), _u8(sf).numpy()
        for r in range(i):
            w13[:, l1_weight_row(r, half)] = w[:, r]
            sf13[:, l1_scale_row(r, half)] = naive.pack_sf_int32(sf[:, r])
    s2 = _u8(ck.w2_sf).numpy()
    for r in range(h):
        sf2[:, l2_scale_row(r)] = naive.pack_sf_int32(s2[:, r])
    alphas = np.stack([ck.w1_gs.numpy(), ck.w3_gs.numpy()], axis=1).astype(np.float32)
    return KernelWeights((torch.from_numpy(w13).view(torch.int8), torch.from_numpy(sf13)),
                         (torch.from_numpy(w2).view(torch.int8), torch.from_numpy(sf2)),
                         torch.from_numpy(alphas), ck.w2_gs.to(torch.float32), ck.w2_input_scale.to(torch.float32))


# ---------------------------------------------------------------- reading the kernel layout back
def decode_l1(kw: KernelWeights, intermediate: int) -> tuple[np.ndarray, np.ndarray]:
    """(gate, up) float64 [E, I, H]: what the kernel's L1 GEMM multiplies with, alphas applied."""
    w, sf = kw.l1_weights
    w = w.contiguous().view(torch.uint8).numpy()
    sf = sf.contiguous().numpy()
    h = w.shape[-1] * 2
    out = []
    for half in (0, 1):
        wr = np.stack([w[:, l1_weight_row(r, half)] for r in range(intermediate)], axis=1)
        sr = np.stack([naive.unpack_sf_int32(sf[:, l1_scale_row(r, half)], h // 16) for r in range(intermediate)], axis=1)
        g = kw.l1_alphas[:, half].numpy()
        out.append(np.stack([naive.dequantize(wr[x], sr[x], float(g[x])) for x in range(w.shape[0])]))
    return out[0], out[1]


def decode_l2(kw: KernelWeights) -> np.ndarray:
    """down float64 [E, H, I], its L2 alpha applied (the a2 scale cancels: it only normalizes the requant)."""
    w, sf = kw.l2_weights
    w = w.contiguous().view(torch.uint8).numpy()
    sf = sf.contiguous().numpy()
    h, i = w.shape[1], w.shape[2] * 2
    sr = np.stack([naive.unpack_sf_int32(sf[:, l2_scale_row(r)], i // 16) for r in range(h)], axis=1)
    return np.stack([naive.dequantize(w[x], sr[x], float(kw.l2_alphas[x])) for x in range(w.shape[0])])


def checkpoint_values(ck: ExpertsCheckpoint) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(w1, w3, w2) float64 as the checkpoint means them (the oracle on the checkpoint's own tensors)."""
    def dq(w, sf, gs):
        return np.stack([naive.dequantize(_u8(w)[x].numpy(), _u8(sf)[x].numpy(), float(gs[x]))
                         for x in range(w.shape[0])])
    return dq(ck.w1, ck.w1_sf, ck.w1_gs), dq(ck.w3, ck.w3_sf, ck.w3_gs), dq(ck.w2, ck.w2_sf, ck.w2_gs)
