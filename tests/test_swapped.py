"""fp8_tutorial.kernels.swapped: the small-M kernel (C^T = W @ A^T, K cut into pieces) against
float64 at odd shapes, every recipe, split and unsplit, outputs poisoned; its configurations, its
refusals, and the plan that launches it directly on a GPU."""

import dataclasses

import pytest
import torch

import fp8_tutorial as fp8
from fp8_tutorial import checks, gemm
from fp8_tutorial.kernels import host
from fp8_tutorial.kernels import swapped as S
from fp8_tutorial.kernels.compat import DIRECT_LAUNCH

E5M2 = torch.float8_e5m2
RECIPES = [("tensor", "tensor"), ("row", "row"), ("tensor", "row"), ("row", "tensor")]
# Odd M up to the kernel's limit, K and N that no tile divides; the GPU adds projection-sized ones.
SHAPES = [(1, 13, 5), (7, 100, 65), (33, 257, 131), (64, 300, 70)]
BLOCK_SHAPES = [(1, 256, 256), (5, 384, 256), (33, 256, 384), (64, 512, 128)]
if fp8.ON_GPU:
    SHAPES += [(3, 1000, 1000), (64, 7168, 4096)]
    BLOCK_SHAPES += [(16, 7168, 4096), (61, 1536, 3072)]


def configs(M, N, K, block):
    """Unsplit and split: the interpreter's tile, once whole and once cut in three; on a GPU, the
    first candidate and the one with the most pieces."""
    if not fp8.ON_GPU:
        base = S.interpreter_config(M, N, K, block)
        k_blocks = -(-K // base.BLOCK_K)
        return [dataclasses.replace(base, SPLIT=1), dataclasses.replace(base, SPLIT=min(3, k_blocks))]
    cands = S.candidates(M, N, K, host.sm_count(torch.device("cuda")), block)
    return [cands[0], max(cands, key=lambda c: c.SPLIT)]


def run(ops, precise, cfg, M, N, out_dtype=torch.bfloat16):
    out = fp8.poison(torch.empty(M, N, dtype=out_dtype, device=ops.a.device))
    S.launch_swapped(ops, out, precise, config=cfg)
    return out


@pytest.mark.parametrize("M,K,N", SHAPES)
@pytest.mark.parametrize("recipes", RECIPES)
def test_swapped_matches_float64(M, K, N, recipes, gen, device):
    a, b, sa, sb = checks.random_operands(M, K, N, *recipes, gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    for precise in (False, True):
        for cfg in configs(M, N, K, False):
            err = fp8.rel_error(run(ops, precise, cfg, M, N), ref)
            assert err < checks.tolerance(torch.bfloat16, precise), (precise, cfg, err)


@pytest.mark.parametrize("M,K,N", BLOCK_SHAPES)
def test_swapped_block_wise_matches_float64(M, K, N, gen, device):
    """Every 1 x 128 group and 128 x 128 block with its own scale (one of each all zeros)."""
    a, b, sa, sb = checks.block_operands(M, K, N, gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    for cfg in configs(M, N, K, True):
        out = run(ops, False, cfg, M, N)  # block-wise scales promote every block, precise or not
        assert fp8.rel_error(out, ref) < checks.tolerance(torch.bfloat16, True), cfg
        assert fp8.rel_error(out, -ref) > 1  # the check can fail


def test_swapped_takes_scales_through_their_strides(gen, device):
    """Block-wise scale_a M-major (``quantize``'s layout, as cuBLAS wants it) or row-major: the
    same result."""
    M, K, N = 9, 384, 256
    a, b, sa, sb = checks.block_operands(M, K, N, gen, device)
    row_major = sa.contiguous()
    assert sa.stride(0) == 1 and row_major.stride() == (3, 1)
    outs = []
    for scale_a in (sa, row_major):
        ops = gemm.check_operands(a, b, scale_a, sb)
        outs.append(run(ops, True, configs(M, N, K, True)[1], M, N))
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("layout", ["b row-major", "out column-major", "out strided"])
def test_swapped_takes_other_layouts(layout, gen, device):
    """b read along N (row-major (K, N)), and outputs written through their strides."""
    M, K, N = 13, 320, 96
    a, b, sa, sb = checks.random_operands(M, K, N, "row", "row", gen, device)
    if layout == "b row-major":
        b = b.contiguous()
        assert b.stride() == (N, 1)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    for cfg in configs(M, N, K, False):
        if layout == "out column-major":
            out = torch.empty(N, M, dtype=torch.bfloat16, device=device).t()
        elif layout == "out strided":
            out = torch.empty(M, 3 * N, dtype=torch.bfloat16, device=device)[:, ::3]
        else:
            out = torch.empty(M, N, dtype=torch.bfloat16, device=device)
        fp8.poison(out)
        S.launch_swapped(ops, out, True, config=cfg)
        assert fp8.rel_error(out, ref) < checks.tolerance(torch.bfloat16, True), (layout, cfg)


def test_swapped_refuses_offsets_past_32_bits():
    """Strides whose steps times the length could pass 2^31 are refused (auto takes a kernel that
    copies them, host.pointer_safe), not run into an overflowed address. Meta tensors: no memory."""
    M, K, N = 2, 512, 4096
    wide = 2**31 // (N + 256) + 1
    meta = dict(device="meta", dtype=torch.float8_e4m3fn)
    a, b = torch.empty(M, K, **meta), torch.empty(N, K, **meta).t()
    s1 = torch.empty(1, device="meta")
    ops = host.Operands(a, b, s1, s1, "tensor", "tensor")
    narrow = torch.empty(M, N, device="meta", dtype=torch.bfloat16)
    assert S.swapped_takes(ops, narrow) is None
    out = torch.empty_strided((M, N), (1, wide), device="meta", dtype=torch.bfloat16)
    assert "out is strided too widely" in S.swapped_takes(ops, out)
    a_wide = torch.empty_strided((M, K), (1, 2**31 // (K + 256) + 1), **meta)
    why = S.swapped_takes(host.Operands(a_wide, b, s1, s1, "tensor", "tensor"), out)
    assert "a, out are strided too widely" in why


@pytest.mark.skipif(not fp8.ON_GPU, reason="the output takes 4.3 GB of a GPU")
def test_auto_runs_an_output_with_wide_strides_right(gen, device):
    """An output whose last column starts past 2^31 elements ((N - 1) times its column step): auto
    passes the swapped kernel by, and the kernel it takes writes every element (the output
    poisoned first)."""
    if host.capability(device) < (8, 9):
        pytest.skip("the swapped kernel needs FP8 tensor cores (compute capability 8.9)")
    M, K, N = 2, 512, 4096
    wide = 2**31 // (N - 1) + 1
    assert (N - 1) * wide > 2**31 - 1
    a, b, sa, sb = checks.random_operands(M, K, N, "row", "row", gen, device)
    out = torch.empty(N, wide, dtype=torch.bfloat16, device=device)[:, :M].t()
    fp8.poison(out)
    name, refused = gemm.choose(a, b, sa, sb, out=out)
    assert name != "swapped" and "strided too widely" in refused["swapped"]
    fp8.scaled_mm(a, b, sa, sb, out=out)
    assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < checks.tolerance(torch.bfloat16, False)
    del out
    torch.cuda.empty_cache()


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
def test_swapped_other_outputs_and_e5m2(out_dtype, gen, device):
    M, K, N = 6, 200, 72
    a, b, sa, sb = checks.random_operands(M, K, N, "row", "row", gen, device, fp8_dtype=E5M2)
    ops = gemm.check_operands(a, b, sa, sb)
    out = run(ops, False, configs(M, N, K, False)[1], M, N, out_dtype)
    assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < checks.tolerance(out_dtype, False)


def test_split_leaves_the_counts_at_zero_and_is_repeatable(gen, device):
    """The last piece of each tile resets its count: the workspace serves the next launch as it is,
    and the same inputs give the same bits whoever arrives last."""
    M, K, N = 20, 512, 96
    a, b, sa, sb = checks.random_operands(M, K, N, "row", "row", gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    cfg = configs(M, N, K, False)[1]
    assert cfg.SPLIT > 1
    first = run(ops, True, cfg, M, N)
    for _ in range(2):
        assert torch.equal(run(ops, True, cfg, M, N), first)
    tiles = -(-N // cfg.BLOCK_N) * -(-M // cfg.BLOCK_T)
    _, arrivals = host.workspace(first.device, 0, tiles)
    assert not arrivals[:tiles].any()


def test_auto_runs_it_up_to_its_largest_m(gen, device):
    """``scaled_mm(kernel="auto")`` takes the swapped kernel up to MAX_M and says why not above."""
    for M in (1, S.MAX_M):
        a, b, sa, sb = checks.random_operands(M, 256, 64, "row", "row", gen, device)
        assert gemm.choose(a, b, sa, sb)[0] == "swapped"
    a, b, sa, sb = checks.random_operands(S.MAX_M + 1, 256, 64, "row", "row", gen, device)
    name, refused = gemm.choose(a, b, sa, sb)
    assert name != "swapped" and f"M up to {S.MAX_M}" in refused["swapped"]
    a, b, sa, sb = checks.block_operands(S.MAX_M + 1, 256, 128, gen, device)
    with pytest.raises(ValueError, match=f"M up to {S.MAX_M}"):
        fp8.scaled_mm(a, b, sa, sb, kernel="swapped")


@pytest.mark.parametrize("bad,match", [
    (dict(BLOCK_N=48), "BLOCK_N must be a power of two"),
    (dict(BLOCK_T=8), "BLOCK_T must be a power of two of at least 16"),
    (dict(BLOCK_T=256), "BLOCK_T must be at most"),
    (dict(SPLIT=0), "SPLIT must be an int from 1"),
    (dict(SPLIT=True), "SPLIT must be an int"),
    (dict(STAGES=9), "STAGES must be an int from 1 to 8"),
    (dict(num_warps=2), "num_warps must be 4 or 8"),
    (dict(BLOCK_K=64), "BLOCK_K = 128"),
    (dict(BLOCK_K=16), "BLOCK_K must be a power of two of at least 32"),
    (dict(BLOCK_N=256), "BLOCK_N divides 128"),
])
def test_bad_configurations_are_refused(bad, match, gen, device):
    a, b, sa, sb = checks.block_operands(4, 256, 256, gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    cfg = dataclasses.replace(S.SwappedConfig(64, 16), **bad)
    with pytest.raises(ValueError, match=match):
        S.launch_swapped(ops, torch.empty(4, 256, dtype=torch.bfloat16, device=device), True, config=cfg)
    with pytest.raises(TypeError, match="SwappedConfig"):
        S.launch_swapped(ops, torch.empty(4, 256, dtype=torch.bfloat16, device=device), True, config={"BLOCK_N": 64})


@pytest.mark.parametrize("M,N,K", [(1, 4096, 7168), (16, 24576, 1536), (64, 7168, 16384), (40, 128, 128)])
def test_candidates_are_valid_and_cover_unsplit_and_split(M, N, K):
    cands = S.candidates(M, N, K, 132, True)
    assert cands and len(set(cands)) == len(cands)
    for c in cands:
        S.check_swapped_config(c, True)
        assert c.BLOCK_T == S.token_block(M) >= M and 1 <= c.SPLIT <= min(K // 128, S.MAX_SPLIT)
    tiles = -(-N // 128)
    if tiles >= 132:  # enough tiles to fill the SMs: one of the candidates does not split
        assert min(c.SPLIT for c in cands) == 1
    if tiles * 4 < 132 and K // 128 >= 4:  # too few: some candidate does
        assert max(c.SPLIT for c in cands) > 1


def test_token_block_and_splits():
    assert [S.token_block(m) for m in (1, 16, 17, 33, 64)] == [16, 16, 32, 64, 64]
    assert S.splits(384, 12, 132) == [1]
    assert S.splits(32, 56, 132) == [4, 8, 16]
    assert S.splits(1, 2, 132) == [2]  # at most one K block a piece


@pytest.mark.skipif(not fp8.ON_GPU, reason="the plan's direct launch needs a GPU")
@pytest.mark.parametrize("recipes,M,K,N", [(("row", "row"), 16, 7168, 4096), (("tensor", "row"), 64, 1536, 24576),
                                          (("block", "block"), 1, 7168, 4096), (("block", "block"), 33, 2048, 7168)])
def test_plans_launch_the_swapped_kernel_directly(recipes, M, K, N, gen, device):
    """Every candidate forced as the problem's choice, then three calls of scaled_mm with fresh inputs
    into poisoned outputs, each right, through the plan's direct launch of the swapped kernel."""
    block = recipes[0] == "block"

    def fresh():
        return (checks.block_operands(M, K, N, gen, device) if block
                else checks.random_operands(M, K, N, *recipes, gen, device))
    a, b, sa, sb = fresh()
    ops = gemm.check_operands(a, b, sa, sb)
    out = torch.empty(M, N, dtype=torch.bfloat16, device=device)
    for precise in (False, True):
        key = S.choice_key(ops, out, precise)
        for cfg in S.candidates(M, N, K, host.sm_count(device), block):
            S.CHOICES[key] = cfg
            gemm.PLANS.clear()
            for _ in range(3):
                a, b, sa, sb = fresh()
                out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
                fp8.scaled_mm(a, b, sa, sb, precise=precise, out=out)
                err = fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb))
                assert err < checks.tolerance(torch.bfloat16, precise or block), (cfg, err)
            plan = gemm.plan_of(a, b, sa, sb, precise=precise, out=out)
            assert plan.kernel == "swapped" and plan.config is cfg
            assert len(gemm.PLANS) == 1  # the three calls shared one plan
            if DIRECT_LAUNCH:  # which launched the compiled kernel itself, not through Triton's dispatch
                assert "launch_again" in plan.launch.__qualname__
        del S.CHOICES[key]
