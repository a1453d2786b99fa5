"""swiglu_torch against the float64 oracle, and the oracle against the formula's landmarks."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernels.swiglu.naive import split_gate_up, swiglu_ref, swiglu_torch  # noqa: E402

INF, NAN = float("inf"), float("nan")


def close_or_both_nan(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> bool:
    nan_o, nan_r = np.isnan(out), np.isnan(ref)
    if not np.array_equal(nan_o, nan_r):
        return False
    o, r = out[~nan_o], ref[~nan_r]
    inf = np.isinf(r)
    if not np.array_equal(o[inf], r[inf]):
        return False
    return bool(np.all(np.abs(o[~inf] - r[~inf]) <= rtol * np.abs(r[~inf]) + atol))


def test_oracle_landmarks():
    assert swiglu_ref(0.0, 5.0) == 0.0
    assert swiglu_ref(1.0, 1.0) == pytest.approx(1 / (1 + math.exp(-1)))
    # gate above the limit is clamped to it; up is clamped both ways
    assert swiglu_ref(50.0, -50.0, alpha=1.0, limit=10.0) == pytest.approx(
        -10.0 * 10.0 / (1 + math.exp(-10.0)))
    # the clamp is on gate before alpha, and alpha sits inside the sigmoid only:
    # min(20, 10) * sigmoid(0.5 * 10) * 1 (silu(alpha * gate) would give 5 * sigmoid(5))
    assert swiglu_ref(20.0, 1.0, alpha=0.5, limit=10.0) == pytest.approx(10 / (1 + math.exp(-5)))
    # beta shifts up after its clamp: 2 * sigmoid(1.702 * 2) * (min(9, 7) + 1)
    assert swiglu_ref(2.0, 9.0, alpha=1.702, limit=7.0, beta=1.0) == pytest.approx(
        2 * 8 / (1 + math.exp(-3.404)))
    # a limit <= 0 means no clamp (not "clamp everything to 0")
    for off in (0.0, -1.0, None):
        assert swiglu_ref(20.0, 30.0, limit=off) == pytest.approx(20 * 30 / (1 + math.exp(-20)))
    # a very negative gate is not clamped from below
    assert abs(swiglu_ref(-50.0, 1.0, limit=10.0)) < 1e-15
    assert np.isnan(swiglu_ref(-INF, 1.0, limit=10.0))  # IEEE: -inf * sigmoid(-inf) = -inf * 0


@pytest.mark.parametrize("alpha,limit,beta", [(None, None, None), (1.0, 10.0, None), (1.702, 7.0, 1.0),
                                              (0.5, None, None), (1.702, 0.0, 1.0)])
@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 2e-5), (torch.bfloat16, 2.0**-8)])
def test_torch_matches_oracle_random(alpha, limit, beta, dtype, rtol):
    rng = np.random.default_rng(20261201)
    t, i = 37, 96
    x = torch.from_numpy(rng.standard_normal((t, 2 * i)) * 8).to(dtype)
    out = swiglu_torch(x, alpha, limit, beta=beta)
    assert out.shape == (t, i) and out.dtype == dtype
    xd = x.double().numpy()
    ref = swiglu_ref(xd[:, :i], xd[:, i:], alpha, limit, beta)
    # bf16: one output rounding; float32: exp error grows with |gate * alpha| (up to ~50 here)
    assert close_or_both_nan(out.double().numpy(), ref, rtol, 1e-30)


def test_torch_edges_match_oracle():
    gate = np.array([0.0, -0.0, 9.99, 10.0, 10.01, 1e4, -1e4, -100.0, INF, -INF, NAN, 3.0, 3.0, 3.0, 0.0])
    up = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 11.0, 1.0, 1.0, 2.0, 1.0, 1.0, INF, -INF, NAN, INF])
    x = torch.from_numpy(np.concatenate([gate, up])[None, :]).float()
    for alpha, limit in [(1.0, 10.0), (None, None)]:
        out = swiglu_torch(x, alpha, limit).double().numpy()[0]
        ref = swiglu_ref(gate, up, alpha, limit)
        assert close_or_both_nan(out, ref, 2e-6, 1e-30), (alpha, limit, out, ref)
    limited = swiglu_torch(x, 1.0, 10.0).double().numpy()[0]
    assert limited[5] == pytest.approx(10.0 * 10.0 / (1 + math.exp(-10.0)), rel=1e-6)
    assert limited[11] == pytest.approx(10.0 * 3.0 / (1 + math.exp(-3.0)), rel=1e-6)  # up=inf->10
    assert np.isnan(limited[10]) and np.isnan(limited[13])  # NaN is not clamped away
    assert np.isnan(swiglu_torch(x, None, None).double().numpy()[0][14])  # silu(0) * inf


def test_alpha_inside_the_sigmoid_is_not_silu_of_scaled_gate():
    # the convention the gfx936 fallback used, silu(alpha * gate) * up, is off by the factor alpha
    rng = np.random.default_rng(7)
    x = torch.from_numpy(rng.standard_normal((64, 256)) * 4).float()
    gate, up = split_gate_up(x)
    ours = swiglu_torch(x, 1.702, None).double()
    seed_convention = (torch.nn.functional.silu(1.702 * gate) * up).double()
    assert torch.allclose(ours * 1.702, seed_convention, rtol=1e-5, atol=1e-5)
    assert (ours - seed_convention).abs().max() > 1.0


def test_dsv4_defaults_are_alpha_1_limit_10():
    x = torch.tensor([[20.0, 20.0]])
    assert swiglu_torch(x).item() == pytest.approx(10 * 10 / (1 + math.exp(-10)), rel=1e-6)


def test_layouts():
    x = torch.arange(8.0).reshape(1, 8)
    g, u = split_gate_up(x)
    assert g.tolist() == [[0, 1, 2, 3]] and u.tolist() == [[4, 5, 6, 7]]
    g, u = split_gate_up(x, "interleaved")
    assert g.tolist() == [[0, 2, 4, 6]] and u.tolist() == [[1, 3, 5, 7]]
    ref = swiglu_ref(x[0, 0::2].double().numpy(), x[0, 1::2].double().numpy(), 1.0, 10.0)
    assert np.allclose(swiglu_torch(x, layout="interleaved")[0].numpy(), ref, rtol=1e-6)
    with pytest.raises(ValueError):
        split_gate_up(torch.zeros(1, 3))
    with pytest.raises(ValueError):
        split_gate_up(x, "columns")
