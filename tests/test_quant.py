"""fp8_tutorial.quant: the Triton kernels against the torch reference, bit for bit, and the
reference against the definition of FP8 quantization."""


import pytest
import torch

import fp8_tutorial as fp8
from fp8_tutorial.quant import AMAX_FLOOR, FP8_MAX, _group_shape, _quantize_torch
from fp8_tutorial.kernels import compat

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
# (mantissa bits, smallest subnormal exponent) of each format
FORMAT_BITS = {E4M3: (3, -9), E5M2: (2, -16)}

# Shapes each granularity accepts, odd ones included (the interpreter keeps them small).
SHAPES = {
    "tensor": [(1, 1), (7, 300), (131, 129), (64, 1000)],
    "row": [(1, 1), (5, 3), (33, 257), (3, 9000)],  # 9000 > 8192: the two-pass path
    "1x128": [(1, 128), (13, 384), (130, 256)],
    "128x128": [(128, 128), (256, 384)],
}
CASES = [(g, s) for g, shapes in SHAPES.items() for s in shapes]


def random_input(shape, dtype, gen, device):
    """Values over many binades, rows and columns of very different sizes, a few outliers."""
    M, K = shape
    x = torch.randn(shape, generator=gen) * torch.exp2(torch.randint(-6, 5, (M, 1), generator=gen))
    x = x * torch.exp2(torch.randint(-3, 4, (1, K), generator=gen))
    outliers = torch.rand(shape, generator=gen) < 0.002
    x = torch.where(outliers, x * 30, x)  # still finite in float16
    return x.to(dtype).to(device)


def same_bits(a, b):
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize("granularity,shape", CASES)
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fp8_dtype", [E4M3, E5M2])
def test_triton_matches_reference(granularity, shape, x_dtype, fp8_dtype, gen, device):
    x = random_input(shape, x_dtype, gen, device)
    q, scale = fp8.quantize(x, granularity, fp8_dtype, impl="triton")
    q_ref, scale_ref = _quantize_torch(x.cpu(), granularity, fp8_dtype)
    assert q.dtype == fp8_dtype and q.shape == x.shape and q.device == x.device
    assert scale.dtype == torch.float32 and scale.shape == scale_ref.shape
    assert torch.equal(scale.cpu(), scale_ref)
    assert same_bits(q.cpu(), q_ref)


@pytest.mark.parametrize("granularity,shape", CASES)
def test_strided_input(granularity, shape, gen, device):
    """A transposed (column-major) input quantizes as its contiguous copy does."""
    x = random_input(shape[::-1], torch.float32, gen, device).t()
    q, scale = fp8.quantize(x, granularity, impl="triton")
    q_ref, scale_ref = fp8.quantize(x.contiguous(), granularity, impl="triton")
    assert torch.equal(scale, scale_ref) and same_bits(q, q_ref)


@pytest.mark.parametrize("granularity,shape", CASES)
@pytest.mark.parametrize("fp8_dtype", [E4M3, E5M2])
def test_reference_is_fp8_quantization(granularity, shape, fp8_dtype, gen):
    """Every group's scale is amax / FP8_MAX, its largest element lands on FP8_MAX, and every
    element is the nearest FP8 value to x / scale (error at most half a step)."""
    x = random_input(shape, torch.float32, gen, "cpu")
    q, scale = fp8.quantize(x, granularity, fp8_dtype, impl="torch")
    fmax = FP8_MAX[fp8_dtype]
    M, K = shape
    gm, gk = _group_shape(granularity, M, K)
    groups = x.reshape(M // gm, gm, K // gk, gk).abs().amax(dim=(1, 3))
    assert torch.allclose(scale.reshape(groups.shape), groups / fmax, rtol=1e-6, atol=0)
    qg = q.float().reshape(M // gm, gm, K // gk, gk).abs().amax(dim=(1, 3))
    assert torch.all(qg == fmax)

    mantissa, min_exp = FORMAT_BITS[fp8_dtype]
    s = fp8.dequantize(torch.ones_like(q), scale)  # each element's scale
    y = x / s  # what was rounded
    step = torch.exp2(torch.clamp(torch.floor(torch.log2(y.abs().clamp_min(1e-30))), min=min_exp + mantissa) - mantissa)
    # half a step, plus a few float32 ulps: y = x / scale is itself rounded, while the kernels
    # round x * (FP8_MAX / amax), which can differ from it in the last bit
    assert torch.all((q.float() - y).abs() <= step / 2 + 4 * torch.finfo(torch.float32).eps * y.abs())


@pytest.mark.parametrize("granularity", list(SHAPES))
@pytest.mark.parametrize("impl", ["triton", "torch"])
def test_zero_groups_give_zeros(granularity, impl, gen, device):
    M, K = (256, 256)
    x = random_input((M, K), torch.float32, gen, device)
    x[:128, :128] = 0  # a zero 128x128 block, zero rows, zero 1x128 groups
    if granularity == "tensor":
        x.zero_()
    q, scale = fp8.quantize(x, granularity, impl=impl)
    assert torch.isfinite(scale).all()
    assert torch.all(q.float()[:128, :128] == 0)
    assert torch.all(fp8.dequantize(q, scale)[:128, :128] == 0)
    assert scale.min() >= AMAX_FLOOR / 448 * (1 - 1e-6)


@pytest.mark.parametrize("granularity", list(SHAPES))
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("impl", ["triton", "torch"])
def test_non_finite_input_poisons_its_group_only(granularity, bad, impl, gen, device):
    M, K = (256, 384)
    x = random_input((M, K), torch.float32, gen, device)
    clean_q, clean_scale = fp8.quantize(x, granularity, impl=impl)
    x[5, 200] = bad
    q, scale = fp8.quantize(x, granularity, impl=impl)
    dq = fp8.dequantize(q, scale)
    gm, gk = _group_shape(granularity, M, K)
    group = torch.zeros(M, K, dtype=torch.bool, device=device)
    r0, c0 = (5 // gm) * gm, (200 // gk) * gk
    group[r0:r0 + gm, c0:c0 + gk] = True
    assert torch.isnan(dq[group]).all()
    assert torch.isnan(scale).sum() == 1
    assert torch.equal(dq[~group], fp8.dequantize(clean_q, clean_scale)[~group])
    # the group's FP8 values are all the canonical NaN code, the same bits from kernel and reference
    assert torch.all(q.view(torch.uint8)[group] == 0x7F)
    q_ref, scale_ref = _quantize_torch(x.cpu(), granularity, E4M3)
    assert same_bits(q.cpu(), q_ref) and torch.equal(scale.cpu().isnan(), scale_ref.isnan())


@pytest.mark.parametrize("K", [9000, 16385])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_in_a_long_row(K, bad, device):
    """Rows longer than one tile are swept in chunks; a NaN in any chunk must reach the scale
    (on the GPU a plain tl.maximum drops NaN: the interpreter is made to do the same)."""
    x = torch.randn(3, K, device=device)
    x[0, 7] = bad
    x[2, K - 1] = bad
    q, scale = fp8.quantize(x, "row", impl="triton")
    assert scale[:, 0].isnan().tolist() == [True, False, True]
    assert torch.all(q.view(torch.uint8)[0] == 0x7F)


def test_bfloat16_subnormals(device):
    """bfloat16 keeps float32's exponent range, subnormals included: they must be read exactly."""
    x = torch.tensor([[1e-38, 5e-39, 1e-39, 9.2e-41]]).to(torch.bfloat16).to(device)
    for fp8_dtype in (E4M3, E5M2):
        q, scale = fp8.quantize(x, "row", fp8_dtype, impl="triton")
        q_ref, scale_ref = _quantize_torch(x.cpu(), "row", fp8_dtype)
        assert torch.equal(scale.cpu(), scale_ref) and same_bits(q.cpu(), q_ref)


def test_negated_view_is_read_as_its_values(gen, device):
    z = torch.complex(torch.randn(8, 256, generator=gen), torch.randn(8, 256, generator=gen)).to(device)
    x = z.conj().imag  # a lazily negated view: its memory holds the opposite signs
    assert x.is_neg()
    for impl in ("triton", "torch"):
        q, scale = fp8.quantize(x, "1x128", impl=impl)
        assert fp8.rel_error(fp8.dequantize(q, scale), x) < 0.04


def test_results_are_not_part_of_autograd(device):
    x = torch.randn(4, 128, device=device, requires_grad=True)
    for impl in ("triton", "torch"):
        q, scale = fp8.quantize(x, "row", impl=impl)
        assert not q.requires_grad and not scale.requires_grad


def test_amax_floor_keeps_tiny_groups_finite(device):
    x = torch.full((4, 128), 1e-38, device=device)  # below the floor, above float32's smallest normal
    x[1] = 0
    for impl in ("triton", "torch"):
        q, scale = fp8.quantize(x, "row", impl=impl)
        assert torch.isfinite(scale).all() and torch.isfinite(q.float()).all()
        assert torch.all(scale == AMAX_FLOOR / 448)


@pytest.mark.parametrize("M", [1, 13, 64, 130])
def test_1x128_scales_are_m_major(M, gen, device):
    """"1x128" scales come M-major, as cuBLAS takes them: the torch reference's with strides
    (1, M), the Triton kernel's with each K block's column padded to a multiple of 4 rows (16
    bytes, for TMA), which its fake (torch.compile's) declares too; the values are the same."""
    x = random_input((M, 384), torch.float32, gen, device)
    _, s_ref = fp8.quantize(x, "1x128", impl="torch")
    assert s_ref.shape == (M, 3) and s_ref.stride() == (1, M)
    _, s = fp8.quantize(x, "1x128", impl="triton")
    assert s.stride() == (1, -(-M // 4) * 4) and torch.equal(s.cpu(), s_ref.cpu())
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
        for impl, want in (("torch", s_ref), ("triton", s)):
            assert torch.ops.fp8_tutorial.quantize(fake, "1x128", E4M3, impl)[1].stride() == want.stride(), impl


def test_auto_uses_kernels_on_gpu_and_reference_on_cpu(gen):
    x = random_input((64, 256), torch.float32, gen, "cpu")
    q, s = fp8.quantize(x, "1x128")
    q_ref, s_ref = _quantize_torch(x, "1x128", E4M3)
    assert same_bits(q, q_ref) and torch.equal(s, s_ref)


@pytest.mark.parametrize("granularity", list(SHAPES))
def test_roundtrip_error_is_small(granularity, gen, device):
    """Sanity bound from the format: e4m3 keeps 3 mantissa bits, so the relative error of a
    round trip is at most 2^-4 per element and, on Gaussian data, about 2.5% in norm."""
    x = torch.randn(256, 512, generator=gen).to(device)
    q, scale = fp8.quantize(x, granularity)
    err = fp8.rel_error(fp8.dequantize(q, scale), x)
    assert 0.005 < err < 0.04


# ---- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("x,granularity,kwargs,exc,match", [
    (torch.ones(4, 4, dtype=torch.int32), "tensor", {}, TypeError, "floating-point"),
    (torch.ones(4, 4).to(E4M3), "tensor", {}, TypeError, "floating-point"),
    (torch.ones(4, 4, dtype=torch.float64), "tensor", {}, TypeError, "float32, bfloat16 or float16"),
    (torch.ones(4, 4).to(torch.float8_e4m3fnuz), "tensor", {}, TypeError, "floating-point"),
    (torch.ones(4, 4).to(torch.float8_e5m2fnuz), "row", {}, TypeError, "floating-point"),
    (torch.ones(4, 4, dtype=torch.complex64), "row", {}, TypeError, "floating-point"),
    (torch.eye(4).to_sparse(), "row", {}, TypeError, "dense"),
    ([[1.0, 2.0]], "tensor", {}, TypeError, "torch.Tensor"),
    (torch.ones(4), "tensor", {}, ValueError, "2-D"),
    (torch.ones(2, 4, 4), "row", {}, ValueError, "2-D"),
    (torch.ones(0, 4), "row", {}, ValueError, "non-empty"),
    (torch.ones(4, 100), "1x128", {}, ValueError, "divisible by 128"),
    (torch.ones(128, 100), "128x128", {}, ValueError, "divisible by 128"),
    (torch.ones(100, 128), "128x128", {}, ValueError, "rows divisible by 128"),
    (torch.ones(4, 4), "column", {}, ValueError, "unknown granularity"),
    (torch.ones(4, 4), "tensor", {"dtype": torch.float16}, TypeError, "float8"),
    (torch.ones(4, 4), "tensor", {"impl": "cuda"}, ValueError, "impl"),
])
def test_bad_input(x, granularity, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fp8.quantize(x, granularity, **kwargs)


def test_dequantize_bad_input():
    q = torch.ones(4, 8).to(E4M3)
    with pytest.raises(TypeError, match="FP8"):
        fp8.dequantize(torch.ones(4, 8), torch.ones(()))
    with pytest.raises(TypeError, match="float32"):
        fp8.dequantize(q, torch.ones((), dtype=torch.float64))
    with pytest.raises(ValueError, match="does not tile"):
        fp8.dequantize(q, torch.ones(3, 1))
    for empty in (torch.ones(0, 1), torch.ones(1, 0)):
        with pytest.raises(ValueError, match="non-empty"):
            fp8.dequantize(q, empty)
    with pytest.raises(TypeError, match="float32 or torch.float64"):
        fp8.dequantize(q, torch.ones(()), torch.float16)


@pytest.mark.skipif(not fp8.ON_GPU, reason="direct launches are for CUDA tensors")
def test_direct_launches_give_the_references_bits():
    """A problem's first call compiles and keeps a direct launch (``quant._DIRECT``); the calls
    after it take that launch and give the torch reference's bits on fresh values, for every
    granularity of the group kernel, odd shapes, an input off 16-byte alignment and a strided one."""
    from fp8_tutorial import quant
    quant._DIRECT.clear()
    for granularity, (M, K) in [("row", (1, 7168)), ("row", (77, 1000)), ("1x128", (1, 128)),
                                ("1x128", (300, 7168)), ("128x128", (256, 384))]:
        for layout in ("contiguous", "offset", "strided"):
            big = torch.empty(M, 2 * K + 1, device="cuda", dtype=torch.bfloat16)
            x = {"contiguous": big[:, :K], "offset": big[:, 1:K + 1], "strided": big[:, ::2][:, :K]}[layout]
            for call in range(3):
                big.normal_()
                big[:, :7] *= 100  # outliers in a few groups
                q, s = fp8.quantize(x, granularity)
                rq, rs = fp8.quantize(x, granularity, impl="torch")
                what = (granularity, M, K, layout, call)
                assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(s, rs), what
    direct = len(quant._DIRECT)
    assert direct == 15 or not compat.DIRECT_LAUNCH, direct  # one per problem, each then launched directly


@pytest.mark.skipif(fp8.ON_GPU, reason="what happens without a GPU")
def test_no_direct_launch_in_the_interpreter():
    from fp8_tutorial import quant
    quant._DIRECT.clear()
    x = torch.randn(4, 256)
    q, s = fp8.quantize(x, "1x128", impl="triton")
    assert not quant._DIRECT and torch.equal(s, fp8.quantize(x, "1x128", impl="torch")[1])
