"""fp8_tutorial.formats, and the FP8 cast the kernels rely on (compiled on a GPU, interpreted on a CPU)."""

import pytest
import torch

from fp8_tutorial import formats
from fp8_tutorial._interpreter import to_fp8_satfinite

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def test_describe_e4m3fn():
    info = formats.describe(E4M3)
    assert (info.exponent_bits, info.mantissa_bits, info.bias) == (4, 3, 7)
    assert info.max == 448 and info.min_normal == 2**-6 and info.min_subnormal == 2**-9
    assert info.eps == 0.125 and info.nan_codes == 2 and not info.inf
    assert info.finite_values == 253  # 256 codes - 2 NaNs - one duplicate zero


def test_describe_e5m2():
    info = formats.describe(E5M2)
    assert (info.exponent_bits, info.mantissa_bits, info.bias) == (5, 2, 15)
    assert info.max == 57344 and info.min_normal == 2**-14 and info.min_subnormal == 2**-16
    assert info.eps == 0.25 and info.nan_codes == 6 and info.inf
    assert info.finite_values == 256 - 6 - 2 - 1


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_triton_cast_is_round_to_nearest_even_with_saturation(dtype, gen, device):
    """The GPU's cvt.rn.satfinite semantics (and the interpreter, once fp8_tutorial fixed it):
    in range, exactly torch's round-to-nearest-even; beyond the largest value, saturated; NaN kept."""
    fmax = torch.finfo(dtype).max
    x = torch.cat([
        (torch.rand(20000, generator=gen) * 2 - 1) * fmax,              # the whole range
        torch.randn(20000, generator=gen) * 2.0 ** -8,                    # subnormals
        formats.all_values(dtype).nan_to_num(0) * (1 + 2.0 ** -5),        # near each value
        (formats.all_values(dtype)[:127].nan_to_num(0)                    # exact midpoints: ties to even
         + formats.all_values(dtype)[1:128].nan_to_num(0)) / 2,
        torch.tensor([fmax * 1.5, -fmax * 3, 1e30, float("inf"), -float("inf"), float("nan")]),
    ])
    y = formats.triton_cast(x.to(device), dtype).cpu()
    expected = to_fp8_satfinite(x, dtype)
    assert torch.equal(y.view(torch.uint8), expected.view(torch.uint8))
    assert y[-6:-1].float().abs().eq(fmax).all() and y[-1].float().isnan()


@pytest.mark.parametrize("src", [torch.bfloat16, torch.float16])
def test_triton_cast_from_16_bit(src, gen, device):
    x = (torch.randn(5000, generator=gen) * 50).to(src)
    y = formats.triton_cast(x.to(device), E4M3).cpu()
    assert torch.equal(y.view(torch.uint8), to_fp8_satfinite(x, E4M3).view(torch.uint8))


def test_relative_spacing_bounds():
    v, gap = formats.relative_spacing(E4M3)
    normal = v >= 2**-6
    assert gap[normal].max() == 0.125 and gap[normal].min() == pytest.approx(1 / 15)
    assert formats.dynamic_range_binades(E4M3) == pytest.approx(17.807, abs=1e-3)


def test_triton_cast_bad_input():
    with pytest.raises(TypeError, match="dtype"):
        formats.triton_cast(torch.ones(3), torch.float16)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        formats.triton_cast(torch.ones(3, dtype=torch.float64), E4M3)
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        formats.triton_cast([1.0], E4M3)
    with pytest.raises(TypeError, match="dtype"):
        formats.describe(torch.float16)


@pytest.mark.parametrize("dtype,pairs", [
    (E4M3, [(124.2, 128), (1000, 448), (464, 448), (480, 448), (-1000, -448), (1.0625, 1.0), (1.1875, 1.25),
            (2.0**-10, 0.0), (3 * 2.0**-10, 2.0**-8), (float("inf"), 448)]),
    (E5M2, [(61440, 57344), (1e9, 57344), (1.125, 1.0), (1.375, 1.5), (-float("inf"), -57344)]),
])
def test_triton_cast_known_values(dtype, pairs, device):
    """Fixed expectations (not computed by the code under test): rounding to nearest even,
    ties to even, saturation, underflow to zero."""
    x = torch.tensor([p[0] for p in pairs], dtype=torch.float32)
    y = formats.triton_cast(x.to(device), dtype).float().cpu()
    assert y.tolist() == [p[1] for p in pairs]

