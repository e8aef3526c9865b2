"""fp8_tutorial.checks: the error measure and the float64 reference product."""

import math

import pytest
import torch

import fp8_tutorial as fp8


def test_rel_error():
    ref = torch.tensor([3.0, 4.0])
    assert fp8.rel_error(ref, ref) == 0
    assert fp8.rel_error(torch.tensor([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert fp8.rel_error(torch.zeros(2), torch.zeros(2)) == 0
    with pytest.raises(ValueError, match="shapes differ"):
        fp8.rel_error(torch.zeros(3), ref)
    with pytest.raises(ValueError, match="reference holds NaN"):
        fp8.rel_error(ref, torch.tensor([1.0, float("nan")]))
    big = torch.tensor([3e200, 4e200], dtype=torch.float64)
    assert fp8.rel_error(big * 1.1, big) == pytest.approx(0.1)
    tiny = torch.tensor([3e-170, 4e-170], dtype=torch.float64)
    assert fp8.rel_error(tiny * 1.5, tiny) == pytest.approx(0.5)
    assert fp8.rel_error(torch.zeros(2, dtype=torch.float64), tiny) == pytest.approx(1.0)


def test_poisoned_output_never_passes():
    out = fp8.poison(torch.empty(4, 4))
    assert torch.isnan(out).all()
    assert fp8.rel_error(out, torch.ones(4, 4)) == math.inf
    out[:, :3] = 1  # one column never written
    assert fp8.rel_error(out, torch.ones(4, 4)) == math.inf
    assert fp8.poison(torch.empty(2, dtype=torch.int32)).eq(2**31 - 1).all()


@pytest.mark.parametrize("ga,gb", [("tensor", "tensor"), ("row", "row"), ("1x128", "128x128")])
def test_reference_mm_dequantizes_with_the_right_layout(ga, gb, gen):
    """reference_mm(a, b, scale_a, scale_b) == dequantize(a) @ dequantize(b) in float64, with b
    (K, N) column-major and its scale laid out as torch._scaled_mm wants: (1, N) for rows and
    (K/128, N/128) for blocks."""
    M, K, N = 128, 256, 384
    x = torch.randn(M, K, generator=gen)
    w = torch.randn(N, K, generator=gen) * torch.rand(N, 1, generator=gen)
    a, sa = fp8.quantize(x, ga)
    wq, sw = fp8.quantize(w, gb)
    b, sb = wq.t(), sw.t()  # (K, N) column-major, scale (1, N) or (K/128, N/128)
    out = fp8.reference_mm(a, b, sa, sb)
    expected = fp8.dequantize(a, sa, torch.float64) @ fp8.dequantize(wq, sw, torch.float64).t()
    assert out.dtype == torch.float64 and torch.allclose(out, expected, rtol=1e-12, atol=1e-12)
    assert fp8.rel_error(out, x.double() @ w.double().t()) < 0.06
