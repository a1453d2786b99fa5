"""Triton E4M3 decode helpers and the gather-and-dequantize kernel against the references.

CPU: the Triton interpreter (TRITON_INTERPRET=1) must be set before triton is first imported, and
other test modules may import triton earlier in the same process, so the interpreter work runs in a
subprocess (this file run as a script) and the assertions stay here.
GPU: marked `gpu`; skipped with the reason when CUDA is not available.
Deterministic: every random byte comes from a fixed seed; the edges (all 256 codes, NaN codes,
scale bytes 0, 1, 127, 254, 255 and a NaN scale, the first and last slot of a block and of the
cache, a partial last program) are planted explicitly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from kernels.e4m3_decode.naive import e4m3_to_f32_reference  # noqa: E402
from kernels.fp8_ds_mla import layout as L  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ALL_CODES = np.arange(256, dtype=np.uint8)
NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


def same_f32_bits(a, b) -> bool:
    """Equal float32 bit patterns, except that NaN positions only need to match."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(nan_a, nan_b)
                and np.array_equal(a[~nan_a].view(np.uint32), b[~nan_b].view(np.uint32)))


def random_cache(num_blocks: int, block_size: int, pad: int, seed: int):
    """Random bytes in a padded-stride cache: every code, every scale byte (0xFF too) appears."""
    stride = L.block_bytes(block_size) + pad
    g = torch.Generator().manual_seed(seed)
    flat = torch.randint(0, 256, (num_blocks * stride,), dtype=torch.uint8, generator=g)
    view = flat.as_strided((num_blocks, block_size, L.TOKEN_BYTES), (stride, L.TOKEN_BYTES, 1))
    return flat, view


def _interpreter_worker(case_dir: str) -> None:
    """Runs in a fresh process with TRITON_INTERPRET=1; writes the kernels' outputs."""
    from kernels.e4m3_decode import triton_decode as td
    from kernels.fp8_ds_mla import naive

    case = np.load(Path(case_dir) / "case.npz")
    codes = torch.from_numpy(case["codes"])
    manual = td.decode_bytes(codes, manual_decode=True).numpy()
    results = {"manual_codes": manual}
    # more than one program, the last one partial, into a view of a poisoned buffer
    many = torch.from_numpy(np.tile(case["codes"], 6)[:2 * 1024 + 777].copy())
    big = torch.full((many.numel() + 64,), -3.0)
    td.decode_bytes(many, manual_decode=True, out=big[:many.numel()])
    results["many_codes"], results["many_out"] = many.numpy(), big.numpy()
    # one slot, one token a program, a caller's out, a single block with an odd (unused) stride,
    # and block_size 1
    flat = torch.from_numpy(case["flat_64"])
    view = flat.as_strided((3, 64, L.TOKEN_BYTES), (L.block_bytes(64), L.TOKEN_BYTES, 1))
    results["one_slot"] = td.gather_dequantize(view, torch.tensor([0]), 64).numpy()
    results["one_slot_ref"] = naive.dequantize(view, torch.tensor([0]), 64).numpy()
    slots = torch.tensor([5, 0, 130, 64])
    out = torch.empty(4, 512)
    td.gather_dequantize(view, slots, 64, tokens_per_program=1, out=out)
    results["tpp1"], results["tpp1_ref"] = out.numpy(), naive.dequantize(view, slots, 64).numpy()
    single = flat[:L.block_bytes(64)].as_strided((1, 64, L.TOKEN_BYTES), (12345, L.TOKEN_BYTES, 1))
    results["single_block"] = td.gather_dequantize(single, torch.tensor([63, 0]), 64).numpy()
    results["single_block_ref"] = naive.dequantize(single, torch.tensor([63, 0]), 64).numpy()
    bs1 = flat[:3 * 586].view(3, 586)  # 584 bytes a block, stride 586 (even)
    results["bs1"] = td.gather_dequantize(bs1, torch.tensor([2, 0, 1]), 1).numpy()
    results["bs1_ref"] = naive.dequantize(bs1, torch.tensor([2, 0, 1]), 1).numpy()
    for block_size, pad in [(16, 48), (64, 0)]:
        flat = torch.from_numpy(case[f"flat_{block_size}"])
        stride = L.block_bytes(block_size) + pad
        nb = flat.numel() // stride
        view = flat.as_strided((nb, block_size, L.TOKEN_BYTES), (stride, L.TOKEN_BYTES, 1))
        slots = torch.from_numpy(case[f"slots_{block_size}"])
        out = td.gather_dequantize(view, slots, block_size, manual_decode=True,
                                   tokens_per_program=4)
        results[f"gather_{block_size}"] = out.numpy()
        results[f"small_{block_size}"] = td.gather_dequantize(
            view, slots, block_size, manual_decode=True, tokens_per_program=2).numpy()
        results[f"naive_{block_size}"] = naive.dequantize(view, slots, block_size).numpy()
    np.savez(Path(case_dir) / "out.npz", **results)


PLANTED_SCALES = (0, 1, 127, 254, 255, 118, 128)  # slot 0's seven UE8M0 bytes: zero and maximal


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    d = tmp_path_factory.mktemp("e4m3_interp")
    rng = np.random.default_rng(0xDEC0DE)
    case = {"codes": np.concatenate([ALL_CODES, rng.integers(0, 256, 256, dtype=np.uint8)])}
    for block_size, pad in [(16, 48), (64, 0)]:
        nb = 3
        flat, _ = random_cache(nb, block_size, pad, 1000 + block_size)
        flat = flat.numpy()
        # slot 0 (block 0, pos 0): NoPE bytes are all 256 codes (NaN codes 0x7F, 0xFF included) then
        # 0x38 (1.0); its seven scale bytes are the planted ones; slot 1 gets the same codes under
        # scale byte 0 everywhere (2^-127 times a subnormal code: float32 denormals)
        flat[:256] = ALL_CODES
        flat[256:448] = 0x38
        flat[576:576 + 256] = ALL_CODES
        sc = block_size * 576
        flat[sc:sc + 7] = PLANTED_SCALES
        flat[sc + 8:sc + 15] = 0
        case[f"flat_{block_size}"] = flat
        # block boundaries, the last slot, and an odd count so the last program is partial
        slots = np.concatenate([[0, 1, block_size - 1, block_size, nb * block_size - 1],
                                rng.permutation(np.arange(2, nb * block_size - 1))[:6]])
        case[f"slots_{block_size}"] = slots.astype(np.int64)
    np.savez(d / "case.npz", **case)
    if os.environ.get("TRITON_INTERPRET") == "1":  # this process already interprets (mutation runs)
        _interpreter_worker(str(d))
    else:
        env = dict(os.environ, TRITON_INTERPRET="1",
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        proc = subprocess.run([sys.executable, __file__, str(d)], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return case, dict(np.load(d / "out.npz"))


def test_manual_decode_all_256_codes_interpreter(interpreted):
    case, out = interpreted
    ref = e4m3_to_f32_reference(case["codes"])
    assert same_f32_bits(out["manual_codes"], ref)
    assert np.isnan(out["manual_codes"][[0x7F, 0xFF]]).all()
    assert np.signbit(out["manual_codes"][0x80]) and out["manual_codes"][0x80] == 0


def test_decode_many_programs_into_a_view_interpreter(interpreted):
    """2,825 codes: three programs, the last partial; every output written, nothing past it."""
    _, out = interpreted
    n = out["many_codes"].size
    assert same_f32_bits(out["many_out"][:n], e4m3_to_f32_reference(out["many_codes"]))
    assert (out["many_out"][n:] == -3.0).all()


@pytest.mark.parametrize("name", ["one_slot", "tpp1", "single_block", "bs1"])
def test_gather_edge_launches_interpreter(interpreted, name):
    """One slot; one token a program (into the caller's out); a single-block cache whose stride is
    odd but never used; a cache of one token a block."""
    _, out = interpreted
    assert same_f32_bits(out[name], out[name + "_ref"])


@pytest.mark.parametrize("block_size", [16, 64])
def test_gather_matches_reference_reader_interpreter(interpreted, block_size):
    _, out = interpreted
    got, ref = out[f"gather_{block_size}"], out[f"naive_{block_size}"]
    assert got.shape == (11, 512)
    # slot 0 is row 0: the planted NaN codes and NaN scale (tile 4) must come through, not be zeroed
    assert np.isnan(got[0, [0x7F, 0xFF]]).all() and np.isnan(got[0, 256:320]).all()
    assert got[0, 0x38] == 2.0**-127  # code 1.0 under scale byte 0: 2^-127, not 0
    assert got[0, 383] == 2.0**-9 and got[0, 447] == 2.0  # tiles 5 and 6: bytes 118 and 128
    assert same_f32_bits(got, ref)
    assert same_f32_bits(out[f"small_{block_size}"], ref)


def test_gather_reference_agrees_with_float64_oracle_on_planted_slots(interpreted):
    """Slots 0 and 1 (every code under every edge scale byte) against kernels.codecs directly."""
    case, out = interpreted
    from kernels import codecs
    flat = case["flat_64"]
    for row in (0, 1):
        base = row * 576
        sc = 64 * 576 + row * 8
        scale = np.repeat(codecs.ue8m0_decode(flat[sc:sc + 7]), 64)
        with np.errstate(over="ignore", invalid="ignore"):
            expect = (codecs.e4m3_decode(flat[base:base + 448]) * scale).astype(np.float32)
        assert same_f32_bits(out["naive_64"][row, :448], expect)
        assert same_f32_bits(out["gather_64"][row, :448], expect)


@pytest.mark.parametrize("kwargs,what", [
    (dict(tokens_per_program=3), "tokens_per_program"),
    (dict(tokens_per_program=0), "tokens_per_program"),
    (dict(tokens_per_program=6), "tokens_per_program"),
    (dict(num_warps=3), "num_warps"),
    (dict(block_size=0), "block_size"),
    (dict(out=torch.empty(2, 512, dtype=torch.float64)), "out must be"),
    (dict(out=torch.empty(3, 512)), "out must be"),
    (dict(out=torch.empty(512, 2).t()), "out must be"),
])
def test_gather_refuses_bad_arguments_before_triton(kwargs, what):
    """On CPU tensors without the interpreter Triton would fail too, with another error; the
    wrapper must name the argument first (ValueError) and write nothing."""
    from kernels.e4m3_decode import triton_decode as td
    flat, view = random_cache(2, 16, 0, 1)
    before = flat.clone()
    with pytest.raises(ValueError, match=what):
        td.gather_dequantize(view, torch.tensor([0, 5]), kwargs.pop("block_size", 16), **kwargs)
    assert torch.equal(flat, before)


@pytest.mark.parametrize("out", [torch.empty(6, dtype=torch.float64), torch.empty(5),
                                 torch.empty(12)[::2]])
def test_decode_refuses_an_out_it_cannot_fill(out):
    from kernels.e4m3_decode import triton_decode as td
    with pytest.raises(ValueError, match="out must be"):
        td.decode_bytes(torch.zeros(6, dtype=torch.uint8), out=out)


def test_gather_refuses_caches_it_cannot_read_as_bf16():
    """RoPE is read as bf16: an odd block stride (with more than one block) or an odd base address
    would misalign it. Refused before launch."""
    from kernels.e4m3_decode import triton_decode as td
    flat = torch.zeros(3 * (16 * 584 + 1) + 1, dtype=torch.uint8)
    odd = flat.as_strided((3, 16, 584), (16 * 584 + 1, 584, 1))
    with pytest.raises(ValueError, match="block stride must be even"):
        td.gather_dequantize(odd, torch.tensor([0]), 16)
    two = flat.as_strided((2, 16, 584), (16 * 584 + 1, 584, 1))
    with pytest.raises(ValueError, match="block stride must be even"):
        td.gather_dequantize(two, torch.tensor([0]), 16)
    shifted = flat[1:1 + 2 * 16 * 584].view(2, 16, 584)
    with pytest.raises(ValueError, match="2-byte aligned"):
        td.gather_dequantize(shifted, torch.tensor([0]), 16)


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
@NEEDS_CUDA
@pytest.mark.parametrize("manual", [True, False])
def test_decode_all_256_codes_gpu(manual):
    from kernels.e4m3_decode import triton_decode as td
    codes = torch.from_numpy(np.tile(ALL_CODES, 9)).cuda()
    got = td.decode_bytes(codes, manual_decode=manual).cpu().numpy()
    assert same_f32_bits(got, e4m3_to_f32_reference(codes.cpu().numpy()))


@pytest.mark.gpu
@NEEDS_CUDA
@pytest.mark.parametrize("manual", [True, False])
@pytest.mark.parametrize("block_size,pad,n,tokens,warps", [
    (64, 0, 1, 4, 4), (64, 512, 1000, 8, 4), (16, 40, 333, 4, 2), (16, 0, 77, 2, 4),
    (64, 64, 4099, 32, 8), (64, 64, 4099, 16, 8)])
def test_gather_matches_reference_reader_gpu(manual, block_size, pad, n, tokens, warps):
    from kernels.e4m3_decode import triton_decode as td
    from kernels.fp8_ds_mla import naive
    nb = n // block_size + 2
    flat, view = random_cache(nb, block_size, pad, 7 * n + tokens)
    flat[:256] = torch.arange(256, dtype=torch.uint8)  # slot 0: every code under the edge scale bytes
    flat[block_size * 576:block_size * 576 + 7] = torch.tensor(PLANTED_SCALES, dtype=torch.uint8)
    flat = flat.cuda()
    stride = L.block_bytes(block_size) + pad
    view = flat.as_strided((nb, block_size, L.TOKEN_BYTES), (stride, L.TOKEN_BYTES, 1))
    slots = torch.randperm(nb * block_size, generator=torch.Generator().manual_seed(n))[:n].cuda()
    slots[0] = nb * block_size - 1
    slots[-1] = 0 if n > 1 else slots[-1]
    if n > 1:
        slots[1:-1][slots[1:-1] == 0] = nb * block_size - 2  # keep the slots distinct
    out = torch.full((n, 512), float("nan"), device="cuda").view(torch.int32).fill_(0x7FBADBAD)
    out = out.view(torch.float32)
    td.gather_dequantize(view, slots, block_size, manual_decode=manual, out=out,
                         tokens_per_program=tokens, num_warps=warps)
    torch.cuda.synchronize()
    assert not (out.view(torch.int32) == 0x7FBADBAD).any(), "an output element was not written"
    ref = naive.dequantize(view, slots, block_size)
    assert same_f32_bits(out.cpu().numpy(), ref.cpu().numpy())


@pytest.mark.gpu
@NEEDS_CUDA
@pytest.mark.parametrize("manual", [True, False])
def test_gather_from_a_cache_over_2_gib_gpu(manual):
    """A cache over 2 GiB (64-token blocks of 37,376 bytes, 2^31 / 37,376 + 2,000 blocks), so the byte
    offset of the last blocks (block * block_stride) passes 2^31, where a 32-bit block index or
    offset wraps. Slots in the
    first and last blocks, random bytes there (the rest of the cache zero). Not run in the session
    that wrote it (no GPU time left): run with -m gpu on the H200."""
    from kernels.e4m3_decode import triton_decode as td
    from kernels.fp8_ds_mla import naive
    block_size = 64
    stride = L.block_bytes(block_size)
    nb = 2**31 // stride + 2_000
    assert (nb - 1) * stride >= 2**31
    flat = torch.zeros(nb * stride, dtype=torch.uint8, device="cuda")
    g = torch.Generator().manual_seed(2031)
    for b in (0, 1, nb - 2, nb - 1):
        flat[b * stride:(b + 1) * stride] = torch.randint(0, 256, (stride,), dtype=torch.uint8,
                                                          generator=g).cuda()
    view = flat.as_strided((nb, block_size, L.TOKEN_BYTES), (stride, L.TOKEN_BYTES, 1))
    slots = torch.cat([torch.arange(0, 2 * block_size), torch.arange((nb - 2) * block_size, nb * block_size)])
    slots = slots[torch.randperm(slots.numel(), generator=g)].cuda()
    out = td.gather_dequantize(view, slots, block_size, manual_decode=manual)
    torch.cuda.synchronize()
    ref = naive.dequantize(view, slots, block_size)
    assert same_f32_bits(out.cpu().numpy(), ref.cpu().numpy()), "seed 2031"


if __name__ == "__main__":
    _interpreter_worker(sys.argv[1])
