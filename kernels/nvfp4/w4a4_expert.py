"""One routed expert of DeepGEMM's `fp4_fp4_mega_moe` (native NVFP4 MegaMoE, W4A4), emulated in torch, and
the float64 oracle of the same recipe beside it.

The recipe, as the vendored kernel (`impls/sm100_fp4_fp4_mega_moe.cuh`) and vLLM's input staging for it
(`prepare_megamoe_nvfp4`, Muse Spark) define it:

1. activations quantized per token: E2M1 with one E4M3 scale per 16 values, `sf = e4m3(max(amax / 6,
   2^-9))` (unit global scale; the floor keeps an all-zero block off a zero scale), values rounded to
   nearest even on the E2M1 grid (saturating at 6);
2. L1 block-scaled GEMM (`kind::mxf4nvf4`, block 16): FP32 accumulation of e2m1 * sf products (exact);
3. L1 epilogue: `gate = bf16(acc_gate * alpha_gate)`, `up = bf16(acc_up * alpha_up)` (separate FP32
   alphas, the w1/w3 `weight_scale_2`), clamp `gate <= limit`, `-limit <= up <= limit` (DeepSeek V4:
   limit 10), `act = gate * sigmoid(gate) * up` in FP32 (unweighted: the top-k weight comes after L2);
4. in-kernel requantization of `act` to NVFP4 normalized by the down-projection input scale a2:
   `sf = e4m3(max(amax / 6 / a2, 2^-9))`, `q = e2m1(act / a2 / sf)`;
5. L2 block-scaled GEMM, FP32 accumulation; `y = bf16(acc * (alpha_down * a2))`.

The emulation (`expert_torch`) does this in torch FP32/BF16 on CPU or GPU; the oracle (`expert_oracle`)
does the same recipe in float64 numpy with the codecs of `kernels/codecs.py` and no BF16 rounding;
`expert_ideal` is the expert the checkpoint means, with unquantized activations. Experts stay NVFP4: no
UE8M0, no 16 -> 32 merge; the global scales are FP32 epilogue multiplies, never folded.

`recipe="nvfp4"` is the other kernel, `nvfp4_mega_moe` (`impls/sm100_nvfp4_mega_moe.cuh`, staged by vLLM's
`prepare_megamoe_nvfp4_inputs`): the one vLLM's `MEGA_MOE_NVFP4` runs, and so the one the DeepSeek V4 patch
wires. It differs in two places:
1'. activations quantized per token *relative to a token scale* `xs = max(amax_row, 1e-12) / 2688`
   (6 x 448): `sf = e4m3(clamp(amax_block(x / xs) / 6, 2^-9, 448))`, `q = e2m1((x / xs) / sf)`;
3'. one L1 alpha for gate and up (the w1 `weight_scale_2`; the loader refuses an expert whose w3 one
   differs), joined with the token scale before the BF16 rounding: `gate = bf16(acc_gate * (xs * alpha))`;
4'. (same recipe as 4, with a2 the launch's `l2_activation_scale`: the max w2 `input_scale` over experts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..codecs import e2m1_decode, e2m1_encode, ue4m3_decode, ue4m3_encode
from . import naive

MIN_SF = 2.0 ** -9  # the smallest E4M3 subnormal
NVFP4_MAX = 6.0 * 448.0  # E2M1 max x E4M3 max: nvfp4_mega_moe's token scale is amax / 2688
RECIPES = ("fp4_fp4", "nvfp4")
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


@dataclass
class Expert:
    """One expert's ModelOpt NVFP4 tensors (uint8 codes; FP32 global scales as Python floats)."""

    w1: np.ndarray  # [I, H/2] gate
    w1_sf: np.ndarray  # [I, H/16]
    g1: float
    w3: np.ndarray  # [I, H/2] up
    w3_sf: np.ndarray
    g3: float
    w2: np.ndarray  # [H, I/2] down
    w2_sf: np.ndarray  # [H, I/16]
    g2: float
    a2: float  # down-projection input scale


# ---------------------------------------------------------------- torch emulation
def _e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    grid = torch.tensor(E2M1_GRID, dtype=torch.float32, device=codes.device)
    mag = grid[(codes & 7).long()]
    return torch.where((codes & 8) != 0, -mag, mag)


def _unpack(packed: torch.Tensor) -> torch.Tensor:
    p = packed.to(torch.uint8)
    return torch.stack([p & 0xF, p >> 4], dim=-1).reshape(*p.shape[:-1], p.shape[-1] * 2)


def weight_values_fp32(w: np.ndarray, sf: np.ndarray, device="cpu") -> torch.Tensor:
    """e2m1 * UE4M3 block scale in FP32 (exact: 2 x 4 significant bits), global scale NOT applied."""
    vals = _e2m1_values(_unpack(torch.from_numpy(np.ascontiguousarray(w)).to(device)))
    scales = torch.from_numpy(np.ascontiguousarray(sf)).to(device).view(torch.float8_e4m3fn).float()
    return vals * scales.repeat_interleave(16, dim=-1)


def _e2m1_rne(m: torch.Tensor, unit) -> torch.Tensor:
    """E2M1 code magnitudes of m / unit, round to nearest even (ties at 0.25, 0.75, ... go to the even
    code), saturating at 6; compared against scaled boundaries (exact products for an E4M3 unit)."""
    return ((m > 0.25 * unit).int() + (m >= 0.75 * unit).int() + (m > 1.25 * unit).int()
            + (m >= 1.75 * unit).int() + (m > 2.5 * unit).int() + (m >= 3.5 * unit).int() + (m > 5.0 * unit).int())


def quantize_fp32(x: torch.Tensor, inv_global: float | None = None) -> torch.Tensor:
    """x FP32 [T, K] -> the dequantized NVFP4 values e2m1 * sf (FP32, exact; sf normalized by inv_global).

    inv_global None: vLLM's input staging (unit global scale; values compared against the E4M3 scale times
    the grid boundaries, which is exact). A number: the kernel's L2 requantization, which multiplies by
    `inv_global * (1 / sf)` in FP32 and rounds the product (`cvt.rn.satfinite.e2m1x2.f32`)."""
    t, k = x.shape
    blocks = x.reshape(t, k // 16, 16)
    inv = 1.0 if inv_global is None else float(np.float32(inv_global))
    amax = blocks.abs().amax(-1)
    sf = (amax * np.float32(1.0 / 6.0) * np.float32(inv)).clamp(min=MIN_SF, max=448.0).to(torch.float8_e4m3fn).float()
    if inv_global is None:
        code = _e2m1_rne(blocks.abs(), sf.unsqueeze(-1))
    else:
        code = _e2m1_rne((blocks * (np.float32(inv) * (1.0 / sf)).unsqueeze(-1)).abs(), 1.0)
    grid = torch.tensor(E2M1_GRID, dtype=torch.float32, device=x.device)
    q = torch.where(blocks < 0, -grid[code], grid[code])
    return (q * sf.unsqueeze(-1)).reshape(t, k)


def quantize_token_scaled_fp32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x FP32 [T, K] -> (e2m1 * sf in FP32 [T, K], token scales xs FP32 [T], block scales sf FP32 [T, K/16]):
    `nvfp4_mega_moe`'s staging,
    operation for operation (`x / xs` and `/ sf` are IEEE FP32 divisions there too); xs is applied later,
    in the L1 epilogue."""
    t, k = x.shape
    xs = x.abs().amax(-1).clamp(min=1e-12) * np.float32(1.0 / NVFP4_MAX)
    blocks = (x / xs.unsqueeze(-1)).reshape(t, k // 16, 16)
    sf = (blocks.abs().amax(-1) * np.float32(1.0 / 6.0)).clamp(min=MIN_SF, max=448.0)
    sf = sf.to(torch.float8_e4m3fn).float()
    code = _e2m1_rne((blocks / sf.unsqueeze(-1)).abs(), 1.0)
    grid = torch.tensor(E2M1_GRID, dtype=torch.float32, device=x.device)
    q = torch.where(blocks < 0, -grid[code], grid[code])
    return (q * sf.unsqueeze(-1)).reshape(t, k), xs, sf


def _requantize_l2_nvfp4(act: torch.Tensor, l2s: float) -> torch.Tensor:
    """`nvfp4_mega_moe`'s in-kernel L2 requantization: sf = e4m3(clamp(min(amax, 448 d) / d, 2^-9, 448)) with
    d = 6 * l2s, then e2m1(act * (1 / (sf * l2s))) (the kernel's reciprocal, one FP32 rounding)."""
    t, k = act.shape
    blocks = act.reshape(t, k // 16, 16)
    d = np.float32(6.0) * np.float32(l2s)
    amax = blocks.abs().amax(-1).clamp(max=float(np.float32(448.0) * d))
    sf = (amax / float(d)).clamp(min=MIN_SF, max=448.0).to(torch.float8_e4m3fn).float()
    inv = 1.0 / (sf * np.float32(l2s))
    code = _e2m1_rne((blocks * inv.unsqueeze(-1)).abs(), 1.0)
    grid = torch.tensor(E2M1_GRID, dtype=torch.float32, device=act.device)
    q = torch.where(blocks < 0, -grid[code], grid[code])
    return (q * sf.unsqueeze(-1)).reshape(t, k)


def expert_torch(x: torch.Tensor, ex: Expert, limit: float | None = 10.0, *, recipe: str = "fp4_fp4",
                 swap_alphas: bool = False, fold_a2: bool = True, no_token_scale: bool = False) -> torch.Tensor:
    """x BF16 [T, H] -> y BF16 [T, H], the kernel's arithmetic for one expert (top-k weight not applied).
    `recipe` names the kernel (RECIPES). `swap_alphas` / `fold_a2=False` / `limit=None` / `no_token_scale`
    (nvfp4: the token scale left out of the L1 epilogue) are the wiring mistakes the tests must catch."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe {recipe!r}: expected one of {RECIPES}")
    dev = x.device
    w1 = weight_values_fp32(ex.w1, ex.w1_sf, dev)
    w3 = weight_values_fp32(ex.w3, ex.w3_sf, dev)
    w2 = weight_values_fp32(ex.w2, ex.w2_sf, dev)
    if recipe == "nvfp4":
        a, xs, _ = quantize_token_scaled_fp32(x.float())
        l1 = torch.ones_like(xs) if no_token_scale else xs
        l1 = (l1 * np.float32(ex.g1)).unsqueeze(-1)  # one alpha: the w1 weight_scale_2
        gate = (a @ w1.T * l1).to(torch.bfloat16)
        up = (a @ w3.T * l1).to(torch.bfloat16)
    else:
        a = quantize_fp32(x.float())
        ag, au = (ex.g3, ex.g1) if swap_alphas else (ex.g1, ex.g3)
        gate = (a @ w1.T * np.float32(ag)).to(torch.bfloat16)
        up = (a @ w3.T * np.float32(au)).to(torch.bfloat16)
    if limit is not None:
        gate = gate.clamp(max=limit)
        up = up.clamp(min=-limit, max=limit)
    g = gate.float()
    act = g / (1.0 + torch.exp(-g)) * up.float()
    if recipe == "nvfp4":
        h = _requantize_l2_nvfp4(act, ex.a2)
    else:
        h = quantize_fp32(act, float(np.float32(1.0) / np.float32(ex.a2)))
    acc = h @ w2.T
    l2_scale = np.float32(ex.g2) * np.float32(ex.a2) if fold_a2 else np.float32(ex.g2)
    return (acc * l2_scale).to(torch.bfloat16)


# ---------------------------------------------------------------- float64 oracle of the same recipe
def quantize_f64(x: np.ndarray, global_scale: float | np.ndarray = 1.0) -> np.ndarray:
    """float64 [T, K] -> dequantized NVFP4 values (e2m1 * sf * global), the recipe above in float64.
    global_scale: one number, or one per row [T] (nvfp4_mega_moe's token scales)."""
    t, k = x.shape
    blocks = x.reshape(t, k // 16, 16)
    g = np.asarray(global_scale, dtype=np.float64).reshape(-1, 1)  # [1 or T, 1]
    sf = ue4m3_decode(ue4m3_encode(np.clip(np.abs(blocks).max(-1) / 6.0 / g, MIN_SF, 448.0)))
    q = e2m1_decode(e2m1_encode(blocks / (sf * g)[..., None]))
    return (q * (sf * g)[..., None]).reshape(t, k)


def token_scales_f64(x: np.ndarray) -> np.ndarray:
    """nvfp4_mega_moe's per-token scale in float64: max(amax_row, 1e-12) / (6 * 448)."""
    return np.maximum(np.abs(x).max(-1), 1e-12) / NVFP4_MAX


def weights_f64(ex: Expert) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (naive.dequantize(ex.w1, ex.w1_sf, ex.g1), naive.dequantize(ex.w3, ex.w3_sf, ex.g3),
            naive.dequantize(ex.w2, ex.w2_sf, ex.g2))


def _swiglu_f64(gate: np.ndarray, up: np.ndarray, limit: float | None) -> np.ndarray:
    if limit is not None:
        gate = np.minimum(gate, limit)
        up = np.clip(up, -limit, limit)
    return gate / (1.0 + np.exp(-gate)) * up


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float64 -> the nearest BF16 (ties to even), through float32 as the kernel rounds an FP32 value."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def expert_oracle(x: np.ndarray, ex: Expert, limit: float | None = 10.0, recipe: str = "fp4_fp4") -> np.ndarray:
    """W4A4 in float64: activations and intermediate quantized as the recipe says, gate and up rounded to
    BF16 where the kernel rounds them (step 3), every product and sum exact in float64. Gate and up use
    the checkpoint's own global scales in both recipes (what the checkpoint means)."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe {recipe!r}: expected one of {RECIPES}")
    w1, w3, w2 = weights_f64(ex)
    x = np.asarray(x, dtype=np.float64)
    a = quantize_f64(x, token_scales_f64(x)) if recipe == "nvfp4" else quantize_f64(x)
    act = _swiglu_f64(bf16_round(a @ w1.T), bf16_round(a @ w3.T), limit)
    return quantize_f64(act, float(np.float32(ex.a2))) @ w2.T


def expert_ideal(x: np.ndarray, ex: Expert, limit: float | None = 10.0) -> np.ndarray:
    """The expert the checkpoint means (NVFP4 weights, unquantized activations), float64."""
    w1, w3, w2 = weights_f64(ex)
    x = np.asarray(x, dtype=np.float64)
    return _swiglu_f64(x @ w1.T, x @ w3.T, limit) @ w2.T


def rel_err(got, want) -> float:
    got = got.double().cpu().numpy() if isinstance(got, torch.Tensor) else np.asarray(got, dtype=np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))
