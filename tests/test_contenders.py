"""fp8_tutorial.measure.contenders: problems laid out as torch._scaled_mm wants them, and the registry."""

import pytest
import torch

import fp8_tutorial as fp8
from fp8_tutorial.measure import contenders as C


@pytest.mark.parametrize("recipe,scale_shapes", [
    ("tensor", ((), ())), ("row", ((96, 1), (1, 384))), ("block", ((96, 2), (2, 3))), ("bf16", (None, None)),
])
def test_problem_layout(recipe, scale_shapes):
    p = C.make_problem(96, 256, 384, recipe, device="cpu")
    assert p.a.shape == (96, 256) and p.a.is_contiguous()
    assert p.b.shape == (256, 384) and p.b.stride() == (1, 256)  # column-major, as cuBLAS wants
    if recipe == "bf16":
        assert p.a.dtype == torch.bfloat16 and p.scale_a is None
    else:
        assert p.a.dtype == p.b.dtype == torch.float8_e4m3fn
        assert tuple(p.scale_a.shape) == scale_shapes[0] and tuple(p.scale_b.shape) == scale_shapes[1]
    assert p.reference.dtype == torch.float64 and p.reference.shape == (96, 384)
    assert p.flops == 2 * 96 * 256 * 384 and p.shape == "96x256x384"


def test_problem_reference_is_the_dequantized_product():
    p = C.make_problem(128, 256, 128, "block", device="cpu", seed=3)
    a = fp8.dequantize(p.a, p.scale_a, torch.float64)
    b = fp8.dequantize(p.b.t().contiguous(), p.scale_b.t().contiguous(), torch.float64).t()
    assert torch.allclose(p.reference, a @ b, rtol=1e-12, atol=1e-12)


def test_problems_are_fresh_unless_seeded():
    p1, p2 = (C.make_problem(16, 32, 16, "row", device="cpu") for _ in range(2))
    assert not torch.equal(p1.reference, p2.reference)
    s1, s2 = (C.make_problem(16, 32, 16, "row", device="cpu", seed=7) for _ in range(2))
    assert torch.equal(s1.reference, s2.reference)


def test_problem_bad_input():
    with pytest.raises(ValueError, match="unknown recipe"):
        C.make_problem(16, 32, 16, "mxfp8", device="cpu")
    with pytest.raises(ValueError, match="divisible by 128"):
        C.make_problem(16, 100, 128, "block", device="cpu")


def test_registry_has_every_cublas_baseline():
    keys = set(C.REGISTRY)
    assert "cublas/bf16/fp32" in keys
    for recipe in ("tensor", "row", "block"):
        for acc in C.ACCUMULATIONS:
            assert f"cublas/{recipe}/{acc}" in keys


def test_select_always_brings_the_baseline():
    @C.register("dummy-test-kernel", ["row"], ["fast"], description="test only")
    def _dummy(p, precise):
        return lambda: None

    try:
        chosen = [c.key for c in C.select(["dummy-test-kernel"])]
        assert chosen == ["cublas/row/fast", "dummy-test-kernel/row/fast"]
        assert {c.key for c in C.select(["cublas"], ["tensor"], ["precise"])} == {"cublas/tensor/precise"}
        with pytest.raises(ValueError, match="unknown contender"):
            C.select(["nope"])
        with pytest.raises(ValueError, match="unknown accumulation"):
            C.select(accumulations=["sloppy"])
    finally:
        del C.REGISTRY["dummy-test-kernel/row/fast"]


def test_seed_shapes():
    assert len(C.SEED_SHAPES) == 8 and (4608, 12288, 3072) in C.SEED_SHAPES and (512, 3072, 12288) in C.SEED_SHAPES
