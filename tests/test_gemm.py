"""fp8_tutorial.gemm: scaled_mm against float64 at many shapes, and its input checks."""

import re

import pytest
import torch

import fp8_tutorial as fp8
from fp8_tutorial import checks, gemm
from fp8_tutorial.kernels import host, persistent, swapped, tiled, tma, ws, ws_gluon
from fp8_tutorial.measure import contenders as C
from fp8_tutorial.measure import schedule
from fp8_tutorial.kernels.persistent import _streamk_first_program

import triton  # noqa: E402  (after fp8_tutorial, which sets the interpreter up on a CPU)
import triton.language as tl  # noqa: E402

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
# Odd shapes, primes and sizes under one tile; larger ones only where kernels are compiled.
SHAPES = [(1, 1, 1), (1, 16, 1), (7, 13, 5), (33, 100, 65), (64, 128, 64), (97, 257, 131), (130, 300, 70)]
if fp8.ON_GPU:
    SHAPES += [(512, 3072, 1536), (1000, 1000, 1000), (2304, 1536, 3072), (4097, 512, 257)]


operands = checks.random_operands
tolerance = checks.tolerance


def first(configs):
    """On a GPU, shape tests use one configuration per kernel (a compilation per flag
    set, not one per configuration too); test_every_configuration covers the others. The
    interpreter always runs its own small configuration."""
    return configs[0] if fp8.ON_GPU else None


def check_scaled_mm(kernel, a, b, sa, sb, ref, out_dtype, device):
    """The named kernel through scaled_mm writes a right result into the given, poisoned ``out``."""
    out = fp8.poison(torch.empty(a.shape[0], b.shape[1], dtype=out_dtype, device=device))
    assert fp8.scaled_mm(a, b, sa, sb, out_dtype=out_dtype, kernel=kernel, out=out) is out
    assert fp8.rel_error(out, ref) < tolerance(out_dtype, False)


@pytest.mark.parametrize("M,K,N", SHAPES)
@pytest.mark.parametrize("recipes", [("tensor", "tensor"), ("row", "row"), ("tensor", "row"), ("row", "tensor")])
def test_tiled_matches_float64(M, K, N, recipes, gen, device):
    a, b, sa, sb = operands(M, K, N, *recipes, gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    for precise in (False, True):
        out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
        tiled.launch_tiled(ops, out, precise, config=first(tiled.TILED_CONFIGS))
        err = fp8.rel_error(out, ref)
        assert err < tolerance(torch.bfloat16, precise), (precise, err)


@pytest.mark.parametrize("M,K,N", [(97, 257, 131)] + ([(2304, 1536, 3072), (4097, 512, 257)] if fp8.ON_GPU else []))
@pytest.mark.parametrize("recipes", [("tensor", "tensor"), ("row", "row")])
def test_scaled_mm_tiled_autotuned(M, K, N, recipes, gen, device):
    """Through scaled_mm and the autotuner, which times every configuration and keeps one."""
    a, b, sa, sb = operands(M, K, N, *recipes, gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    for precise in (False, True):
        out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
        assert fp8.scaled_mm(a, b, sa, sb, kernel="tiled", precise=precise, out=out) is out
        assert fp8.rel_error(out, ref) < tolerance(torch.bfloat16, precise)


@pytest.mark.parametrize("M,K,N", [(1, 5, 1), (33, 100, 65), (70, 300, 129)] + ([(512, 12288, 3072)] if fp8.ON_GPU else []))
@pytest.mark.parametrize("split_k", [2, 3])
def test_split_k_matches_float64(M, K, N, split_k, gen, device):
    """Each of split_k programs per tile adds its share of K; some shares are empty when K is short."""
    a, b, sa, sb = operands(M, K, N, "row", "row", gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    for precise in (False, True):
        out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
        tiled.launch_tiled(ops, out, precise, split_k=split_k)
        assert fp8.rel_error(out, ref) < tolerance(torch.bfloat16, precise)
    with pytest.raises(ValueError, match="split_k must be >= 1"):
        tiled.launch_tiled(ops, out, False, split_k=0)


@pytest.mark.parametrize("M,K,N", [(33, 100, 65), (130, 384, 257)])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_tiled_output_dtypes(M, K, N, out_dtype, gen, device):
    a, b, sa, sb = operands(M, K, N, "row", "tensor", gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    for precise in (False, True):
        out = fp8.poison(torch.empty(M, N, dtype=out_dtype, device=device))
        fp8.scaled_mm(a, b, sa, sb, out_dtype=out_dtype, kernel="tiled", precise=precise, out=out)
        assert fp8.rel_error(out, ref) < tolerance(out_dtype, precise)


@pytest.mark.parametrize("fp8_dtypes", [(E5M2, E5M2), (E4M3, E5M2)])
def test_e5m2_operands(fp8_dtypes, gen, device):
    a, _, sa, _ = operands(64, 256, 96, "row", "row", gen, device, fp8_dtypes[0])
    _, b, _, sb = operands(64, 256, 96, "row", "row", gen, device, fp8_dtypes[1])
    out = fp8.scaled_mm(a, b, sa, sb, out_dtype=torch.float32, kernel="tiled")
    assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.float32, False)


def test_row_major_b_is_handled(gen, device):
    a, b, sa, sb = operands(100, 384, 130, "row", "row", gen, device)
    b_rows = b.contiguous()  # the same values, row-major
    assert b_rows.stride() != b.stride()
    ref = fp8.reference_mm(a, b, sa, sb)
    out = fp8.scaled_mm(a, b_rows, sa, sb, out_dtype=torch.float32, kernel="tiled")
    assert fp8.rel_error(out, ref) < tolerance(torch.float32, False)


def test_auto_never_refuses_a_valid_input(gen, device):
    x, w = torch.randn(128, 256, generator=gen).to(device), torch.randn(128, 256, generator=gen).to(device)
    a, sa = fp8.quantize(x, "1x128")
    wq, sw = fp8.quantize(w, "128x128")
    out = fp8.scaled_mm(a, wq.t(), sa, sw.t())  # block-wise: the Gluon kernel on a Hopper GPU, else the reference
    assert fp8.rel_error(out, fp8.reference_mm(a, wq.t(), sa, sw.t())) < 5e-3
    with pytest.raises(ValueError, match="tiled.*per-tensor and per-row"):
        fp8.scaled_mm(a, wq.t(), sa, sw.t(), kernel="tiled")


def test_cpu_tensors_where_triton_compiles_go_to_the_reference(gen, monkeypatch):
    """Where Triton compiles for a GPU (a GPU machine, or FP8_TUTORIAL_MODE=compile), CPU tensors
    go to the reference kernel, each Triton kernel saying why; named, one refuses them with the
    reason rather than failing inside Triton's launcher."""
    monkeypatch.setattr(gemm, "MODE", "hopper")
    monkeypatch.setattr(gemm, "PLANS", {})
    a, b, sa, sb = checks.block_operands(13, 384, 256, gen, torch.device("cpu"))
    chosen, refused = gemm.choose(a, b, sa, sb)
    assert chosen == "reference" and set(refused) == set(gemm.KERNELS) - {"reference"}
    assert all("not on a CUDA GPU" in why for why in refused.values())
    out = fp8.scaled_mm(a, b, sa, sb)
    assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, True)
    with pytest.raises(ValueError, match="kernel 'swapped' cannot take.*not on a CUDA GPU"):
        fp8.scaled_mm(a, b, sa, sb, kernel="swapped")


@pytest.mark.parametrize("K,expected", [(32, "tma"), (13, "persistent")])
def test_auto_picks_the_first_kernel_that_takes_the_input(K, expected, gen, device, monkeypatch):
    """Above the swapped kernel's M (tests/test_swapped.py has its own): Gluon first on a Hopper
    GPU, else TMA; where the 16-byte rule fails (rows of 13 bytes), the persistent kernel."""
    calls = []
    for name, k in list(gemm.KERNELS.items()):
        monkeypatch.setitem(gemm.KERNELS, name, gemm.Kernel(
            name, lambda o, out, p, k=k: calls.append(k.name) or k.run(o, out, p), k.refuses, k.priority))
    M = swapped.MAX_M + 1
    a, b, sa, sb = operands(M, K, 16, "row", "row", gen, device)
    if ws_gluon.gluon_takes(gemm.check_operands(a, b, sa, sb), torch.empty(M, 16, dtype=torch.bfloat16, device=device)) is None:
        expected = "gluon"
    name, refused = gemm.choose(a, b, sa, sb)
    assert name == expected and all(gemm.KERNELS[k].priority > gemm.KERNELS[name].priority for k in refused)
    assert ("16-byte aligned rows" in refused.get("tma", "")) == (K == 13)
    out = fp8.scaled_mm(a, b, sa, sb)
    assert calls == [expected]
    assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)


def _ops(device):
    a = torch.ones(8, 32, device=device).to(E4M3)
    b = torch.ones(16, 32, device=device).to(E4M3).t()
    return a, b, torch.ones((), device=device), torch.ones((), device=device)


@pytest.mark.parametrize("change,exc,match", [
    (lambda a, b, sa, sb: (a.half(), b, sa, sb), TypeError, "float8_e4m3fn or torch.float8_e5m2"),
    (lambda a, b, sa, sb: ("a", b, sa, sb), TypeError, "torch.Tensor"),
    (lambda a, b, sa, sb: (a[None], b, sa, sb), ValueError, "2-D"),
    (lambda a, b, sa, sb: (a[:, :16], b, sa, sb), ValueError, "a's columns must equal b's rows"),
    (lambda a, b, sa, sb: (a, b, sa.double(), sb), TypeError, "float32"),
    (lambda a, b, sa, sb: (a, b, torch.ones(3, 1, device=sa.device), sb), ValueError, r"scale_a has shape \(3, 1\)"),
    (lambda a, b, sa, sb: (a, b, sa, torch.ones(16, 1, device=sa.device)), ValueError, r"scale_b has shape \(16, 1\)"),
    (lambda a, b, sa, sb: (a, b, 1.0, sb), TypeError, "scale_a must be a float32 torch.Tensor"),
    (lambda a, b, sa, sb: (a[:0], b, sa, sb), ValueError, "empty"),
])
def test_bad_input(change, exc, match, device):
    with pytest.raises(exc, match=match):
        fp8.scaled_mm(*change(*_ops(device)))


def test_bad_options(device):
    ops = _ops(device)
    with pytest.raises(ValueError, match="unknown kernel 'fast'"):
        fp8.scaled_mm(*ops, kernel="fast")
    with pytest.raises(TypeError, match="out_dtype"):
        fp8.scaled_mm(*ops, out_dtype=torch.int32)
    with pytest.raises(ValueError, match="out must be a"):
        fp8.scaled_mm(*ops, out=torch.empty(8, 15, dtype=torch.bfloat16, device=device))


@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (7, 13, 5), (97, 257, 131), (130, 300, 70)]
                         + ([(512, 12288, 3072), (1000, 1000, 1000), (4097, 512, 257)] if fp8.ON_GPU else []))
@pytest.mark.parametrize("recipes", [("row", "row"), ("tensor", "row")])
@pytest.mark.parametrize("num_sms", [None, 1, 3])
def test_persistent_matches_float64(M, K, N, recipes, num_sms, gen, device):
    """Whatever the grid, every tile is computed once: few programs walk many tiles, or one each."""
    a, b, sa, sb = operands(M, K, N, *recipes, gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    for precise in (False, True):
        out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
        persistent.launch_persistent(ops, out, precise, num_sms=num_sms, config=first(persistent.PERSISTENT_CONFIGS))
        assert fp8.rel_error(out, ref) < tolerance(torch.bfloat16, precise), (precise, num_sms)
    check_scaled_mm("persistent", a, b, sa, sb, ref, torch.float32, device)
    with pytest.raises(ValueError, match="num_sms must be >= 1"):
        persistent.launch_persistent(ops, out, False, num_sms=0)


@pytest.mark.parametrize("M,K,N", [(1, 16, 8), (7, 48, 24), (97, 256, 136), (130, 320, 72)]
                         + ([(512, 12288, 3072), (1000, 1024, 1000), (4097, 512, 264)] if fp8.ON_GPU else []))
@pytest.mark.parametrize("recipes", [("row", "row"), ("tensor", "row")])
def test_tma_matches_float64(M, K, N, recipes, gen, device):
    """TMA zero-fills loads past the edges and clips stores: any M, and K, N on the 16-byte rule."""
    a, b, sa, sb = operands(M, K, N, *recipes, gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    for precise, out_dtype in [(False, torch.bfloat16), (True, torch.bfloat16), (False, torch.float32)]:
        for num_sms in (None, 1, 3):
            out = fp8.poison(torch.empty(M, N, dtype=out_dtype, device=device))
            config = first(tma.TMA_CONFIGS) and tma.fit_tma_config(first(tma.TMA_CONFIGS), out.element_size())
            tma.launch_tma(ops, out, precise, num_sms=num_sms, config=config)
            assert fp8.rel_error(out, ref) < tolerance(out_dtype, precise), (precise, out_dtype, num_sms)
    check_scaled_mm("tma", a, b, sa, sb, ref, torch.bfloat16, device)


@pytest.mark.parametrize("M,K,N", [(1, 16, 8), (97, 256, 136)] + ([(4608, 3072, 12288), (1000, 1040, 1000)] if fp8.ON_GPU else []))
def test_warp_specialized_matches_float64(M, K, N, gen, device):
    """Each recipe on its own side: a scale applied to the wrong rows shows (on the H200 a variant of
    this loop got per-row scales of A wrong, per tensor right)."""
    for recipes in [("tensor", "tensor"), ("row", "tensor"), ("tensor", "row"), ("row", "row")]:
        a, b, sa, sb = operands(M, K, N, *recipes, gen, device)
        ref = fp8.reference_mm(a, b, sa, sb)
        ops = gemm.check_operands(a, b, sa, sb)
        for precise, out_dtype in [(False, torch.bfloat16), (True, torch.bfloat16), (False, torch.float32)]:
            out = fp8.poison(torch.empty(M, N, dtype=out_dtype, device=device))
            ws.launch_ws(ops, out, precise, config=first(ws.WS_CONFIGS))
            assert fp8.rel_error(out, ref) < tolerance(out_dtype, precise), (recipes, precise, out_dtype)


def test_launch_ws_refuses_forms_that_are_not_specialized_or_wrong(device):
    a, b, sa, sb = _ops(device)
    ops = gemm.check_operands(a, b, sa, sb)
    out = torch.empty(8, 16, dtype=torch.bfloat16, device=device)
    W = ws.ws_config
    cases = [(tma.TMA_INTERPRETER_CONFIG, "has the keys"),
             (triton.Config(dict(W(32, 32, 32, 1).kwargs), num_warps=8, num_stages=3), "needs num_warps=4"),
             (W(128, 128, 128, ws.WS_MAX_STAGES + 1), "more than 4 stages gave wrong results"),
             ("128x128", "must be a triton.Config")]
    for config, message in cases:
        with pytest.raises(ValueError, match=message):
            ws.launch_ws(ops, out, False, config=config)
    assert all(ws.ws_refuses(c) is None for c in ws.WS_CONFIGS + [ws.WS_INTERPRETER_CONFIG])


GLUON_SHAPES = [(1, 16, 8), (97, 256, 136), (1000, 1040, 1000), (300, 4096, 520), (4097, 512, 264)]


SCALED_KINDS = sorted(set(ws_gluon.GLUON_KERNELS) - {"blockwise"})  # per-tensor and per-row scales


@pytest.mark.skipif(not fp8.ON_GPU, reason="Gluon kernels run on a Hopper GPU only (test_gluon_needs_a_gpu)")
@pytest.mark.parametrize("kind", SCALED_KINDS)
def test_gluon_kernels_match_float64(kind, gen, device):
    """Each recipe on its own side, fast and precise, bf16 and float32 outputs, with one tile per
    program and with many (3 "SMs": the ping-pong groups take turns, the ring wraps around)."""
    configs = [c for c in ws_gluon.GLUON_CONFIGS + ws_gluon.GLUON_PRECISE_CONFIGS if c.kwargs["KIND"] == kind]
    assert configs, f"no configuration of the {kind} kernel is checked"
    for (M, K, N), recipes in zip(GLUON_SHAPES, [("tensor", "tensor"), ("row", "tensor"), ("tensor", "row"),
                                                 ("row", "row"), ("row", "row")]):
        a, b, sa, sb = operands(M, K, N, *recipes, gen, device)
        ref = fp8.reference_mm(a, b, sa, sb)
        ops = gemm.check_operands(a, b, sa, sb)
        for config in configs:
            for precise, out_dtype, num_sms in [(False, torch.bfloat16, None), (True, torch.bfloat16, 3),
                                                (False, torch.float32, 3), (True, torch.bfloat16, None)]:
                out = fp8.poison(torch.empty(M, N, dtype=out_dtype, device=device))
                fitted = ws_gluon.fit_gluon_config(config, out.element_size())
                ws_gluon.launch_gluon(ops, out, precise, config=fitted, num_sms=num_sms)
                err = fp8.rel_error(out, ref)
                assert err < tolerance(out_dtype, precise), (host.describe_config(fitted), recipes, precise, num_sms)


@pytest.mark.skipif(not fp8.ON_GPU, reason="Gluon kernels run on a Hopper GPU only (test_gluon_needs_a_gpu)")
@pytest.mark.parametrize("kind", SCALED_KINDS)
def test_gluon_split_tail_matches_float64(kind, gen, device):
    """Every plan's pieces add up to the tile: none whole, half the tiles whole, all but one whole,
    and as many pieces as K steps, with 3 "SMs" and the GPU's; tiles stored whole and in quarters
    (the pieces then go out through a quarter's buffer, in eighths of the tile); and the arrival
    counters are all zero again after each launch."""
    G = ws_gluon.make_gluon_config
    block_m = 64 * ws_gluon.GLUON_GROUPS[kind] if ws_gluon.GLUON_GROUPS[kind] > 1 else 128
    configs = [c for c in ws_gluon.GLUON_CONFIGS if c.kwargs["KIND"] == kind and c.kwargs["SPLIT"]] or \
        [G(kind, block_m, 128, 128, 4, split=True)]
    configs.append(G(kind, block_m, 128, 128, 4, store_n=32, split=True))
    for (M, K, N), recipes in zip(GLUON_SHAPES[1:], [("row", "tensor"), ("tensor", "row"), ("row", "row"),
                                                     ("row", "row")]):
        a, b, sa, sb = operands(M, K, N, *recipes, gen, device)
        ref = fp8.reference_mm(a, b, sa, sb)
        ops = gemm.check_operands(a, b, sa, sb)
        for config in configs:
            k = config.kwargs
            tiles = host.tile_count(M, N, k)
            k_blocks = triton.cdiv(K, k["BLOCK_K"])
            for plan, precise, out_dtype, num_sms in [((0, min(3, k_blocks)), False, torch.bfloat16, None),
                                                      ((tiles // 2, min(2, k_blocks)), True, torch.bfloat16, 3),
                                                      ((tiles - 1, k_blocks), False, torch.float32, 3)]:
                out = fp8.poison(torch.empty(M, N, dtype=out_dtype, device=device))
                ws_gluon.launch_gluon(ops, out, precise, config=ws_gluon.fit_gluon_config(config, out.element_size()),
                                  num_sms=num_sms, plan=plan)
                err = fp8.rel_error(out, ref)
                assert err < tolerance(out_dtype, precise), (host.describe_config(config), plan, recipes, precise)
                # the last piece of each tile set its counter back: the next launch starts from zeros
                assert not host.workspace(out.device, 0, 0)[1].any(), (host.describe_config(config), plan)


@pytest.mark.skipif(not fp8.ON_GPU, reason="the plans' split launches run on a GPU (Gluon's on a Hopper one)")
@pytest.mark.parametrize("kernel", ["auto", "gluon"])
@pytest.mark.parametrize("M", [1, 2, 17, 64])
def test_small_m_plans_match_float64(M, kernel, gen, device):
    """Decode-sized problems, whose plans split K (few tiles for many SMs), called as a model calls
    them: three calls with fresh inputs into poisoned outputs, each right; "auto" runs the swapped
    kernel at these M, "gluon" the Gluon kernels' split plan."""
    if kernel == "gluon" and host.capability(device) != (9, 0):
        pytest.skip("Gluon kernels run on a Hopper GPU only (test_gluon_needs_a_gpu)")
    if host.capability(device) < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9")
    K, N = 7168, 2112
    for _ in range(3):
        a, b, sa, sb = operands(M, K, N, "row", "row", gen, device)
        out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
        fp8.scaled_mm(a, b, sa, sb, out=out, kernel=kernel)
        assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)
    assert gemm.plan_of(a, b, sa, sb, out=out, kernel=kernel).kernel == ("swapped" if kernel == "auto" else "gluon")
    assert not host.workspace(out.device, 0, 0)[1].any()


@pytest.mark.skipif(not fp8.ON_GPU, reason="Gluon kernels run on a Hopper GPU only (test_gluon_needs_a_gpu)")
def test_gluon_refuses_plans_it_cannot_take(gen, device):
    a, b, sa, sb = operands(256, 512, 256, "tensor", "tensor", gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    out = torch.empty(256, 256, dtype=torch.bfloat16, device=device)
    split = ws_gluon.make_gluon_config("cooperative", 128, 128, 128, 4, split=True)
    for config, plan, message in [(None, (0, 2), "needs a configuration with SPLIT=True"),
                                  (ws_gluon.GLUON_CONFIGS[2], (0, 2), "needs a configuration with SPLIT=True"),
                                  (split, (4, 2), "whole tiles must be an int from 0 to 3"),
                                  (split, (0, 5), "pieces must be an int from 1 to 4"),
                                  (split, 3, "plan must be (whole tiles, pieces per other tile)")]:
        with pytest.raises((ValueError, TypeError), match=re.escape(message)):
            ws_gluon.launch_gluon(ops, out, False, config=config, plan=plan)


def test_ablation_variants_take_the_kernels_arguments():
    from fp8_tutorial.kernels import ablation
    assert set(ablation.without_odd_w) == set(ws_gluon.GLUON_KERNELS)
    for kind, kernel in ablation.without_odd_w.items():
        real = ws_gluon.GLUON_KERNELS[kind]
        assert kernel.arg_names == real.arg_names and kernel is not real
        assert [p.is_constexpr for p in kernel.params] == [p.is_constexpr for p in real.params]
        assert kernel.do_not_specialize == real.do_not_specialize


@pytest.mark.skipif(not fp8.ON_GPU, reason="Gluon kernels run on a Hopper GPU only (test_gluon_needs_a_gpu)")
def test_ablation_leaves_out_loads_and_only_those(gen, device):
    """Without W's odd K steps the product is wrong; with a single K step (step 0 is even) it is right."""
    from fp8_tutorial.kernels import ablation
    for K, wrong in [(1024, True), (128, False)]:
        a, b, sa, sb = operands(300, K, 520, "row", "tensor", gen, device)
        ref = fp8.reference_mm(a, b, sa, sb)
        ops = gemm.check_operands(a, b, sa, sb)
        for kind in sorted(ws_gluon.GLUON_KERNELS):
            config = [c for c in ws_gluon.GLUON_CONFIGS if c.kwargs["KIND"] == kind][0]
            out = fp8.poison(torch.empty(300, 520, dtype=torch.bfloat16, device=device))
            ws_gluon.launch_gluon(ops, out, False, config=config, kernels=ablation.without_odd_w)
            assert (not fp8.rel_error(out, ref) < 0.1) == wrong, (kind, K)  # garbage may hold NaNs
    with pytest.raises(ValueError, match="pass config= too"):
        ws_gluon.launch_gluon(ops, out, False, kernels=ablation.without_odd_w)


@pytest.mark.skipif(not fp8.ON_GPU, reason="timing needs a GPU")
def test_fastest_picks_the_fastest_candidate():
    x = torch.randn(4096, 4096, device="cuda")
    assert host.fastest([4096, 256, 2048], lambda n: x[:n] @ x[:n].t()) == 256


def test_fitting_leaves_out_what_the_gpu_cannot_hold():
    ran = []

    def run(n):  # as a launch whose configuration needs more shared memory than the GPU has
        ran.append(n)
        if n == 256:
            raise triton.runtime.errors.OutOfResources(233472, 232448, "shared memory")
    assert host.fitting([4096, 256, 2048], run) == [4096, 2048] and ran == [4096, 256, 2048]
    with pytest.raises(RuntimeError, match="none of the 1 configurations fits"):
        host.fitting([256], run)
    with pytest.raises(ValueError):  # any other error is the caller's to see
        host.fitting([1], lambda n: int("x"))


@pytest.mark.skipif(not fp8.ON_GPU, reason="the configurations are timed on a GPU")
def test_launch_gluon_keeps_the_fastest_configuration(gen, device, monkeypatch):
    """The first launch for a problem times every configuration and keeps the fastest; the next
    launches reuse it, timing nothing."""
    a, b, sa, sb = operands(1000, 1040, 1000, "row", "row", gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    timed = []

    def fastest(candidates, run):  # runs each; says the last is the fastest
        timed.append([run(c).config for c in candidates])
        return candidates[-1]
    monkeypatch.setattr(ws_gluon, "fastest", fastest)
    monkeypatch.setattr(ws_gluon, "CHOICES", {})
    for _ in range(2):
        out = fp8.poison(torch.empty(1000, 1000, dtype=torch.bfloat16, device=device))
        launch = ws_gluon.launch_gluon(ops, out, False)
        assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)
        # every configuration but the SPLIT ones whose plan cuts no tile of this problem (their plain twins)
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        expected = [c for c in ws_gluon.GLUON_CONFIGS if not c.kwargs["SPLIT"] or ws_gluon.gluon_plan(c, 1000, 1000, 1040, sms)[1] > 1]
        assert len(timed) == 1 and len(timed[0]) == len(expected) and launch.config is timed[0][-1]
    check_scaled_mm("gluon", a, b, sa, sb, fp8.reference_mm(a, b, sa, sb), torch.bfloat16, device)


@pytest.mark.skipif(fp8.ON_GPU, reason="what happens without a GPU")
def test_gluon_needs_a_gpu(device):
    """Triton's interpreter cannot run Gluon: a clear error, and "auto" says why it passed it over."""
    a, b, sa, sb = _ops(device)
    ops = gemm.check_operands(a, b, sa, sb)
    out = torch.empty(8, 16, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="interpreter cannot run Gluon"):
        ws_gluon.launch_gluon(ops, out, False)
    with pytest.raises(ValueError, match="interpreter cannot run Gluon"):
        fp8.scaled_mm(a, b, sa, sb, kernel="gluon")
    ranked = sorted(gemm.KERNELS.values(), key=lambda k: -k.priority)
    assert [k.name for k in ranked[:3]] == ["swapped", "gluon", "tma"]
    assert gemm.choose(a, b, sa, sb)[0] == "swapped"  # M = 8: the swapped kernel, ranked first
    tall = a.repeat(swapped.MAX_M // a.shape[0] + 1, 1)
    chosen, refused = gemm.choose(tall, b, sa, sb)  # past its M, gluon is passed over and "auto" says why
    assert chosen == "tma" and "interpreter cannot run Gluon" in refused["gluon"] and "M up to" in refused["swapped"]


def test_gluon_refuses_what_it_was_not_checked_on(device):
    """e5m2 operands and other output dtypes: a clear refusal, on any machine."""
    a, b, sa, sb = _ops(device)
    for a_, b_, out_dtype, message in [(a.to(E5M2), b, torch.bfloat16, "float8_e4m3fn operands"),
                                       (a, b.to(E5M2), torch.bfloat16, "float8_e4m3fn operands"),
                                       (a, b, torch.int32, "bfloat16, float16 or float32")]:
        ops = gemm.check_operands(a_, b_, sa, sb)
        assert message in ws_gluon.gluon_takes(ops, torch.empty(8, 16, dtype=out_dtype, device=device))


def test_gluon_config_names_one_configuration():
    ping = ws_gluon.gluon_config(KIND="pingpong", GROUP_M=16)
    assert ping in ws_gluon.GLUON_CONFIGS and ping.kwargs["KIND"] == "pingpong" and ping.kwargs["GROUP_M"] == 16
    assert ws_gluon.gluon_config(KIND="cooperative", BLOCK_N=256, num_stages=3).num_stages == 3
    for wanted, message in [(dict(KIND="pingpong"), "2 of GLUON_CONFIGS have"),
                            (dict(KIND="split"), "0 of GLUON_CONFIGS have"),
                            (dict(STAGES=3), "has no ['STAGES']")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            ws_gluon.gluon_config(**wanted)


def test_gluon_refuses_configurations_it_cannot_run():
    G = ws_gluon.make_gluon_config
    cases = [(ws.WS_CONFIGS[0], "has the keys"),
             (G("split", 128, 128, 128, 4), "KIND one of"),
             (G("pingpong", 128, 128, 128, 4, warps=8), "takes 4 consumer warps"),
             (G("cooperative", 128, 128, 128, 4, warps=2), "takes 4 or 8 consumer warps"),
             (G("cooperative", 64, 128, 128, 4, warps=8), "multiple of 16 x num_warps"),
             (G("cooperative", 128, 256, 128, 3), "256 registers per thread"),
             (G("cooperative", 128, 128, 128, 1), "at least 2 buffers"),
             (G("cooperative", 128, 256, 128, 4, warps=8), "more than the 227 KiB"),
             (G("cooperative", 128, 512, 128, 4, warps=8), "BLOCK_N at most 256"),
             (G("cooperative", 128, 128, 16, 4), "BLOCK_K at least 32"),
             (G("cooperative", 128, 256, 256, 2, warps=8), "smaller tiles"),
             (G("cooperative", 128, 100, 128, 4), "power of two"),
             (G("stacked", 128, 128, 128, 4), "BLOCK_M must be 3 times a power of two of at least 16, got 128"),
             (G("stacked", 144, 128, 128, 4), "BLOCK_M must be 3 times a power of two of at least 16, got 144"),
             (G("stacked", 192, 100, 128, 4), "BLOCK_N must be a power of two of at least 16, got 100"),
             (G("stacked", 96, 128, 128, 4), "each consumer group's rows (BLOCK_M / 3) a multiple of 16 x num_warps"),
             (G("stacked", 192, 128, 128, 4, warps=8), "takes 4 consumer warps in each of its 3 groups"),
             (G("stacked", 192, 256, 64, 4), "128 registers per thread (at most 88 of the 128"),
             (G("stacked", 192, 128, 128, 5), "more than the 227 KiB"),
             (G("pingpong", 128, 128, 128, 6, store_n=48), "a half or a quarter of it; got 48"),
             (G("pingpong", 128, 128, 128, 6, store_n=256), "a half or a quarter of it; got 256"),
             (G("pingpong", 128, 128, 128, 6, store_n=True), "a half or a quarter of it; got True"),
             (G("cooperative", 128, 16, 128, 4, store_n=4), "multiple of 16 bytes"),
             (G("pingpong", 128, 128, 128, 6), "more than the 227 KiB"),  # stored whole: no room for 6 stages
             ("128x128", "must be a triton.Config")]
    for config, message in cases:
        assert message in ws_gluon.gluon_refuses(config), config
    stacked = G("stacked", 192, 128, 128, 4)  # three blocks of 64 rows; 16 warps in warp groups
    assert ws_gluon.gluon_blocks(stacked) == ([64, 128], [128, 128], [64, 128]) and ws_gluon.gluon_maxnreg(stacked) == 128
    # stores of 32 columns: two buffers of 128 x 32 for each of ping-pong's groups, 32 KiB in all
    quarters = G("pingpong", 128, 128, 128, 6, store_n=32)
    assert ws_gluon.gluon_blocks(quarters)[2] == [128, 32]
    assert ws_gluon.gluon_shared_bytes(quarters, 2) == 6 * 32 * 1024 + 2 * 2 * 128 * 32 * 2 + 8 * 14
    assert ws_gluon.gluon_shared_bytes(G("stacked", 192, 128, 128, 4, store_n=64), 2) == 4 * 40 * 1024 + 2 * 192 * 64 * 2 + 8 * 10
    assert all(ws_gluon.gluon_refuses(c) is None for c in ws_gluon.GLUON_CONFIGS)
    fitted = [ws_gluon.fit_gluon_config(c, 4) for c in ws_gluon.GLUON_CONFIGS]  # float32 outputs: fewer stages
    assert all(ws_gluon.gluon_refuses(c, 4) is None for c in fitted)
    assert ws_gluon.gluon_refuses(ws_gluon.GLUON_CONFIGS[0], 4) is not None


def test_tma_epilogue_halves(gen, device):
    a, b, sa, sb = operands(100, 64, 200, "row", "row", gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    out = fp8.poison(torch.empty(100, 200, dtype=torch.bfloat16, device=device))
    config = tma.tma_config(32, 64, 32, 4, 1, 1, group_m=2, flatten=False, halves=True)
    tma.launch_tma(ops, out, False, config=config, num_sms=2)
    assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)


@pytest.mark.parametrize("M,K,N,out_dtype,match", [
    (16, 100, 32, torch.bfloat16, "a has rows 100 bytes apart"),
    (16, 64, 36, torch.bfloat16, "out has rows 72 bytes apart"),
    (16, 64, 36, torch.float32, None),                 # 144-byte rows: fine in float32
    (16, 64, 30, torch.float32, "out has rows 120 bytes apart"),
])
def test_tma_sixteen_byte_rule(M, K, N, out_dtype, match, gen, device):
    a, b, sa, sb = operands(M, K, N, "row", "row", gen, device)
    out = torch.empty(M, N, dtype=out_dtype, device=device)
    why = tma.tma_refuses(gemm.check_operands(a, b, sa, sb), out)
    if match is None:
        assert why is None
        return
    assert match in why
    with pytest.raises(ValueError, match="kernel 'tma' cannot take these operands: TMA needs 16-byte"):
        fp8.scaled_mm(a, b, sa, sb, out_dtype=out_dtype, kernel="tma")
    auto = fp8.scaled_mm(a, b, sa, sb, out_dtype=out_dtype)  # another kernel takes it
    assert fp8.rel_error(auto, fp8.reference_mm(a, b, sa, sb)) < tolerance(out_dtype, False)


def test_tma_refuses_row_major_b(gen, device):
    a, b, sa, sb = operands(16, 64, 32, "row", "row", gen, device)
    ops = gemm.check_operands(a, b.contiguous(), sa, sb)
    assert "must be K-major" in tma.tma_refuses(ops, torch.empty(16, 32, dtype=torch.bfloat16, device=device))
    big = torch.empty(16 * 65, dtype=torch.uint8, device=device).view(torch.float8_e4m3fn)
    a_off = big[1:1 + 16 * 64].view(16, 64)  # a view 1 byte past an aligned start
    a_off.copy_(a)
    ops = gemm.check_operands(a_off, b, sa, sb)
    assert "starts 1 bytes past" in tma.tma_refuses(ops, torch.empty(16, 32, dtype=torch.bfloat16, device=device))


@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (7, 13, 5), (32, 300, 32), (40, 300, 70), (97, 257, 131)]
                         + ([(512, 12288, 3072), (512, 3072, 12288), (1000, 1000, 1000)] if fp8.ON_GPU else []))
@pytest.mark.parametrize("num_sms", [None, 1, 3, 7])
def test_streamk_matches_float64(M, K, N, num_sms, gen, device):
    """Shares that start and end inside tiles, several programs per tile, more programs than tiles."""
    a, b, sa, sb = operands(M, K, N, "row", "row", gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    for precise in (False, True):
        for _ in range(2):  # the arrival counts reset themselves: a second run is right too
            out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
            persistent.launch_streamk(ops, out, precise, num_sms=num_sms, config=first(persistent.STREAMK_CONFIGS))
            assert fp8.rel_error(out, ref) < tolerance(torch.bfloat16, precise), (precise, num_sms)
    check_scaled_mm("streamk", a, b, sa, sb, ref, torch.float32, device)


@pytest.mark.parametrize("M,K,N", [(40, 304, 72), (97, 256, 136)]
                         + ([(512, 12288, 3072), (1152, 3072, 12288), (1000, 1040, 1000)] if fp8.ON_GPU else []))
@pytest.mark.parametrize("num_sms", [None, 1, 3])
@pytest.mark.parametrize("tma,data_parallel", [(True, False), (False, True), (True, True)])
def test_streamk_variants_match_float64(M, K, N, num_sms, tma, data_parallel, gen, device):
    """Stream-K with TMA loads, and with whole tiles handed out first (DATA_PARALLEL)."""
    a, b, sa, sb = operands(M, K, N, "row", "tensor", gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    base = persistent.STREAMK_CONFIGS[0] if fp8.ON_GPU else persistent.STREAMK_INTERPRETER_CONFIG
    config = persistent.streamk_config(*(base.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")), base.num_warps,
                            base.num_stages, group_m=base.kwargs["GROUP_M"], data_parallel=data_parallel, tma=tma)
    for precise in (False, True):
        out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
        persistent.launch_streamk(ops, out, precise, num_sms=num_sms, config=config)
        assert fp8.rel_error(out, ref) < tolerance(torch.bfloat16, precise), (precise, num_sms)


@pytest.mark.parametrize("M,K,N", [(7, 13, 5), (40, 304, 72), (97, 256, 136)]
                         + ([(512, 12288, 3072), (1152, 3072, 12288), (1000, 1040, 1000)] if fp8.ON_GPU else []))
@pytest.mark.parametrize("num_sms", [None, 3, 7, 12])
def test_streamk_lanes_match_float64(M, K, N, num_sms, gen, device):
    """Lanes of programs, one per row of tiles, each sharing out its own row's K iterations; too few
    programs for the rows is refused."""
    a, b, sa, sb = operands(M, K, N, "row", "row", gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    config = persistent.STREAMK_CONFIGS[1] if fp8.ON_GPU else persistent.STREAMK_INTERPRETER_CONFIG
    assert not config.kwargs["DATA_PARALLEL"]
    rows = -(-M // config.kwargs["BLOCK_M"])
    programs = host.programs(torch.empty(1, device=device), num_sms, config)
    if rows > programs:
        with pytest.raises(ValueError, match="a program per row of tiles"):
            persistent.launch_streamk(ops, torch.empty(M, N, dtype=torch.bfloat16, device=device), False,
                                num_sms=num_sms, config=config, lanes=True)
        return
    for precise in (False, True):
        for _ in range(2):  # the arrival counts reset themselves: a second run is right too
            out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
            persistent.launch_streamk(ops, out, precise, num_sms=num_sms, config=config, lanes=True)
            assert fp8.rel_error(out, ref) < tolerance(torch.bfloat16, precise), (precise, num_sms)


def test_streamk_lanes_need_a_configuration_without_data_parallel(gen, device):
    a, b, sa, sb = operands(40, 64, 40, "tensor", "tensor", gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    out = torch.empty(40, 40, dtype=torch.bfloat16, device=device)
    base = persistent.STREAMK_INTERPRETER_CONFIG
    parallel = persistent.streamk_config(32, 32, 32, base.num_warps, base.num_stages, group_m=4, data_parallel=True)
    for config in (None, parallel):
        with pytest.raises(ValueError, match="without DATA_PARALLEL"):
            persistent.launch_streamk(ops, out, False, config=config, lanes=True)


def test_streamk_takes_tma_only_where_it_can(gen, device):
    a, b, sa, sb = operands(16, 40, 24, "row", "row", gen, device)  # rows of 40 bytes: no TMA
    ops = gemm.check_operands(a, b, sa, sb)
    out = fp8.poison(torch.empty(16, 24, dtype=torch.bfloat16, device=device))
    with pytest.raises(ValueError, match="16-byte aligned rows"):
        persistent.launch_streamk(ops, out, False, tma=True)
    launch = persistent.launch_streamk(ops, out, False)  # falls back to pointers
    assert not launch.config.kwargs["TMA"]
    assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)
    a, b, sa, sb = operands(16, 48, 24, "row", "row", gen, device)
    assert persistent.launch_streamk(gemm.check_operands(a, b, sa, sb), out, False).config.kwargs["TMA"]


CONFIG_LISTS = {"tiled": tiled.TILED_CONFIGS, "persistent": persistent.PERSISTENT_CONFIGS, "tma": tma.TMA_CONFIGS,
                "streamk": persistent.STREAMK_CONFIGS, "streamk-tma": persistent.STREAMK_TMA_CONFIGS,
                "ws": ws.WS_CONFIGS, "gluon": ws_gluon.GLUON_CONFIGS}
LAUNCHERS = {"tiled": tiled.launch_tiled, "persistent": persistent.launch_persistent,
             "streamk": persistent.launch_streamk, "split": persistent.launch_split, "tma": tma.launch_tma,
             "ws": ws.launch_ws, "gluon": ws_gluon.launch_gluon}


@pytest.mark.skipif(not fp8.ON_GPU, reason="the interpreter runs one small configuration per kernel")
@pytest.mark.parametrize("kernel", list(CONFIG_LISTS))
def test_every_configuration(kernel, gen, device):
    """Every configuration the autotuner may pick computes the right thing, on a shape no tile fits."""
    M, K, N = 1000, 1040, 1000  # K and N on TMA's 16-byte rule; nothing a multiple of 128 but N/8
    a, b, sa, sb = operands(M, K, N, "row", "row", gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    launch = LAUNCHERS[kernel.split('-')[0]]
    for config in CONFIG_LISTS[kernel]:
        for on_host in (False, True) if kernel == "tma" else (False,):  # launch_tma may choose either route
            out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
            launch(ops, out, False, config=config, **({"host_descriptors": True} if on_host else {}))
            assert fp8.rel_error(out, ref) < tolerance(torch.bfloat16, False), \
                (host.describe_config(config), on_host)


@pytest.mark.skipif(not fp8.ON_GPU, reason="the routes are timed on a GPU")
def test_launch_tma_keeps_the_faster_route(gen, device):
    """Without a configuration, launch_tma times device-side descriptors (autotuned) against
    host-side ones (each configuration) once per problem, and says which it kept."""
    M, K, N = 1000, 1040, 1000
    for recipes, out_dtype in [(("row", "row"), torch.bfloat16), (("tensor", "row"), torch.float32)]:
        a, b, sa, sb = operands(M, K, N, *recipes, gen, device)
        ops = gemm.check_operands(a, b, sa, sb)
        for _ in range(2):  # the second launch takes the recorded route
            out = fp8.poison(torch.empty(M, N, dtype=out_dtype, device=device))
            launch = tma.launch_tma(ops, out, False)
            assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(out_dtype, False)
        chosen = [t for t in C.tuned_configs() if t["kernel"] == "tma" and (t["M"], t["N"], t["K"]) == (M, N, K)
                  and t["dtypes"][-1] == str(out_dtype) and "host_descriptors" in t]
        assert len(chosen) == 1 and chosen[0]["config"].kwargs == launch.config.kwargs
        assert tma.tma_shared_bytes(launch.config, out.element_size()) <= schedule.SMEM_PER_PROGRAM_MAX


@pytest.mark.parametrize("kernel", ["tiled", "persistent", "streamk", "tma", "ws", "auto"])
def test_strided_and_expanded_scales(kernel, gen, device):
    """Scales are read as packed arrays: strided or expanded views must be packed first."""
    a, b, sa, sb = operands(40, 64, 56, "row", "row", gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    strided_a = torch.cat([sa, sa], 1)[:, :1]                        # (M, 1), strides (2, 1)
    strided_b = torch.cat([sb, sb], 0).t().contiguous().t()[:1]      # (1, N), strides (1, 2)
    assert strided_a.stride() == (2, 1) and strided_b.stride() == (1, 2)
    out = fp8.scaled_mm(a, b, strided_a, strided_b, kernel=kernel, out_dtype=torch.float32)
    assert fp8.rel_error(out, ref) < tolerance(torch.float32, False)
    one = torch.tensor(0.01, device=device)
    expanded = fp8.scaled_mm(a, b, one.expand(40, 1), sb, kernel=kernel, out_dtype=torch.float32)
    assert fp8.rel_error(expanded, fp8.reference_mm(a, b, one, sb)) < tolerance(torch.float32, False)


@pytest.mark.parametrize("M,K,N", [(16, 128, 256), (128, 128, 384), (8, 128, 128)])
def test_block_wise_when_k_is_one_block(M, K, N, gen, device):
    """With K = 128, per-row and block-wise scale_a shapes coincide: (M, 1). The other scale decides."""
    x, w = torch.randn(M, K, generator=gen).to(device), torch.randn(N, K, generator=gen).to(device)
    a, sa = fp8.quantize(x, "1x128")
    wq, sw = fp8.quantize(w, "128x128")
    out = fp8.scaled_mm(a, wq.t(), sa, sw.t())
    assert fp8.rel_error(out, fp8.reference_mm(a, wq.t(), sa, sw.t())) < tolerance(torch.bfloat16, True)


def test_bad_outputs_and_names(device):
    a, b, sa, sb = _ops(device)
    with pytest.raises(ValueError, match="share memory"):
        fp8.scaled_mm(a, b, sa, sb, out_dtype=torch.float32, out=torch.zeros(1, 16, device=device).expand(8, 16))
    with pytest.raises(ValueError, match="requires grad"):
        fp8.scaled_mm(a, b, sa, sb, out_dtype=torch.float32, out=torch.zeros(8, 16, device=device, requires_grad=True))
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        fp8.scaled_mm(a, b, sa, sb, out=[1])
    with pytest.raises(TypeError, match="kernel must be a name"):
        fp8.scaled_mm(a, b, sa, sb, kernel=["tiled"])
    meta = [t.to("meta") for t in (a, b, sa, sb)]
    with pytest.raises(ValueError, match="meta tensors"):
        fp8.scaled_mm(*meta)
    transposed = torch.empty(16, 8, dtype=torch.bfloat16, device=device).t()  # no overlap: accepted
    assert fp8.scaled_mm(a, b, sa, sb, out=transposed) is transposed


def test_pointer_kernels_get_unit_steps_where_offsets_would_pass_2_31():
    """A column-major a of 2^26 rows: K steps of 2^26 bytes overflow 32-bit offsets within a tile."""
    a = torch.empty(2**26 * 40, dtype=torch.uint8, device="meta").view(E4M3).as_strided((2**26, 40), (1, 2**26))
    b = torch.empty(40 * 16, dtype=torch.uint8, device="meta").view(E4M3).as_strided((40, 16), (1, 40))
    ops = host.Operands(a, b, torch.ones((), device="meta"), torch.ones((), device="meta"), "tensor", "tensor")
    safe, c = host.pointer_safe(ops, torch.empty(2**26, 16, device="meta"))
    assert safe.a.stride() == (40, 1) and safe.b is b and c.shape == (2**26, 16)
    # a column-major output 32 x 2^27: steps of 32 elements along N, 2^27 of them, overflow too
    a2 = torch.empty(32, 40, dtype=E4M3, device="meta")
    b2 = torch.empty(2**27 * 40, dtype=torch.uint8, device="meta").view(E4M3).as_strided((40, 2**27), (1, 40))
    wide = torch.empty(2**27 * 32, dtype=torch.bfloat16, device="meta").as_strided((32, 2**27), (1, 32))
    ops2 = host.Operands(a2, b2, ops.scale_a, ops.scale_b, "tensor", "tensor")
    safe2, c = host.pointer_safe(ops2, wide)
    assert safe2 is ops2 and c is not wide and c.stride() == (2**27, 1)


@pytest.mark.parametrize("M,K,N", [(7, 48, 24), (97, 256, 136)] + ([(2304, 3072, 12288), (1000, 1024, 1000)] if fp8.ON_GPU else []))
@pytest.mark.parametrize("halves", [False, True])
def test_tma_host_descriptors(M, K, N, halves, gen, device):
    """Descriptors built on the host and passed in compute the same thing as device-side ones."""
    a, b, sa, sb = operands(M, K, N, "row", "row", gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    config = tma.TMA_CONFIGS[0] if fp8.ON_GPU else tma.TMA_INTERPRETER_CONFIG
    config = tma.tma_config(*(config.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")), config.num_warps,
                           config.num_stages, 1, halves=halves)
    config = tma.fit_tma_config(config, 2)  # one bf16 store needs more staging than halves: fewer stages
    host = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
    device_side = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
    tma.launch_tma(ops, host, False, config=config, host_descriptors=True)
    tma.launch_tma(ops, device_side, False, config=config)
    assert fp8.rel_error(host, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)
    assert torch.equal(host, device_side)


@pytest.mark.parametrize("kernel", ["persistent", "streamk", "split", "tma", "ws"])
def test_persistent_launches_check_their_grid(kernel, device):
    """An empty grid would leave out unwritten: every way to ask for one is refused."""
    a, b, sa, sb = _ops(device)
    ops = gemm.check_operands(a, b, sa, sb)
    out = torch.empty(8, 16, dtype=torch.bfloat16, device=device)
    launch = LAUNCHERS[kernel]
    for bad in (0, -1):
        with pytest.raises(ValueError, match="num_sms must be >= 1"):
            launch(ops, out, False, num_sms=bad)
    with pytest.raises(TypeError, match="num_sms must be an int"):
        launch(ops, out, False, num_sms=2.5)
    if kernel in ("persistent", "tma"):
        maker = persistent.persistent_config if kernel == "persistent" else tma.tma_config
        with pytest.raises(ValueError, match="PROGRAMS_PER_SM must be an int of at least 1"):
            launch(ops, out, False, config=maker(32, 32, 32, 4, 1, 0), num_sms=2)
    if kernel == "ws":
        with pytest.raises(ValueError, match="GROUP_M must be an int of at least 1"):
            launch(ops, out, False, config=ws.ws_config(32, 32, 32, 1, group_m=0), num_sms=2)


def test_tma_configurations_are_cut_to_fit_shared_memory():
    """The TMA store stages the tile in shared memory: a float32 output needs twice the room of
    bf16, and the autotuner drops stages until the program fits (Triton refuses a launch that
    asks for more than the SM has)."""
    limit = schedule.SMEM_PER_PROGRAM_MAX
    halves = tma.tma_config(128, 256, 128, 8, 4, 1, halves=True)
    assert tma.tma_shared_bytes(halves, 2) == (192 + 32 + 1) * 1024 <= limit  # as compiled on the H200
    assert tma.fit_tma_config(halves, 2) is halves
    fitted = tma.fit_tma_config(halves, 4)
    assert fitted.num_stages == 3 and tma.tma_shared_bytes(fitted, 4) <= limit
    assert fitted.kwargs == halves.kwargs and fitted.num_warps == halves.num_warps

    class Out:
        def __init__(self, size):
            self.size = size

        def element_size(self):
            return self.size

    for size in (2, 4):
        for M in (16, 4096):
            kept = tma.prune_tma(tma.TMA_CONFIGS + ws.WS_CONFIGS, dict(M=M, N=4096, c_ptr=Out(size)))
            assert kept and all(tma.tma_shared_bytes(c, size) <= limit for c in kept)
            if M == 16:  # no 128-row tile: the smallest one, not the last one listed
                assert len(kept) == 1 and kept[0].kwargs["BLOCK_N"] == 128


def test_attach_configs_names_what_each_autotuner_chose(monkeypatch):
    """Records get the configuration their kernel's autotuner chose for that problem; stream-K's
    records look under its TMA autotuner first."""
    class Tuner:
        keys = ["M", "N", "K", "ROW_A", "ROW_B", "PRECISE"]

        def __init__(self, cache):
            self.cache = cache

    tma_cfg = tma.tma_config(128, 256, 128, 8, 4, 1, halves=True)
    sk = persistent.streamk_config(128, 128, 128, 8, 6, tma=True)
    tuners = {name: None for name in C._tuners()}
    tuners["tma"] = Tuner({(512, 3072, 12288, True, True, False, "torch.float8_e4m3fn", "torch.bfloat16"): tma_cfg})
    tuners["streamk-tma"] = Tuner({(512, 3072, 12288, False, False, True, "torch.bfloat16"): sk,
                                   (512, 3072, 12288, True, True, False, "torch.float32"): tma_cfg})
    monkeypatch.setattr(C, "_tuners", lambda: tuners)
    monkeypatch.setattr(tma, "ROUTES", {})  # what earlier tests on a GPU chose stays out
    monkeypatch.setattr(ws_gluon, "CHOICES", {})
    records = [dict(contender="tma", recipe="row", accumulation="fast", M=512, N=3072, K=12288),
               dict(contender="streamk", recipe="tensor", accumulation="precise", M=512, N=3072, K=12288),
               dict(contender="tma", recipe="tensor", accumulation="fast", M=512, N=3072, K=12288),
               dict(contender="streamk", recipe="row", accumulation="fast", M=512, N=3072, K=12288)]
    C.attach_configs(records)
    assert records[0]["config"] == host.config_dict(tma_cfg) and records[0]["config"]["EPILOGUE_HALVES"]
    assert records[1]["config"]["TMA"] and records[1]["config"]["num_stages"] == 6
    assert "config" not in records[2] and "config" not in records[3]  # a float32 output's choice is not a bf16 one


@triton.jit
def _first_program_probe(its_ptr, out_ptr, total, num_programs, n: tl.constexpr):
    offs = tl.arange(0, n)
    tl.store(out_ptr + offs, _streamk_first_program(tl.load(its_ptr + offs), total, num_programs))


def test_streamk_program_of_an_iteration_does_not_overflow():
    """Iteration numbers times the program count pass 2^31 on large problems (M = N = K = 32768
    with 128^3 tiles and 132 programs): the program of each iteration is computed in int64."""
    total, programs = 65536 * 256, 132  # 2^16 tiles of 256 K blocks
    its = torch.tensor([0, 1, total // 2, 16_300_000, total - 2, total - 1, 127 * total // programs,
                        127 * total // programs - 1], dtype=torch.int32, device=fp8.DEVICE)
    out = torch.empty_like(its)
    _first_program_probe[(1,)](its, out, total, programs, n=its.numel())
    expected = [max(p for p in range(programs) if p * total // programs <= it) for it in its.tolist()]
    assert out.tolist() == expected


def test_a_workspace_made_under_inference_mode_serves_calls_outside_it(gen, device):
    """A model run under ``torch.inference_mode`` may make the first workspace (stream-K's here);
    it is a normal tensor, which later calls outside inference mode (and a test's in-place
    fill) can write."""
    a, b, sa, sb = operands(40, 64, 56, "row", "row", gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    host.forget_workspace(device)
    with torch.inference_mode():
        out = fp8.poison(torch.empty(40, 56, dtype=torch.bfloat16, device=device))
        persistent.launch_streamk(ops, out, False, num_sms=3)
    assert not any(t.is_inference() for t in host._workspaces[host._workspace_key(out.device)])
    for _ in range(2):
        out = fp8.poison(torch.empty(40, 56, dtype=torch.bfloat16, device=device))
        persistent.launch_streamk(ops, out, False, num_sms=3)
        assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)


def test_a_failed_streamk_launch_drops_its_workspace(gen, device, monkeypatch):
    """Arrival counts are zeroed once and reset by each launch; one cut short could leave counts
    behind, so its workspace is dropped and the next launch starts from zeros."""
    a, b, sa, sb = operands(40, 64, 56, "row", "row", gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    out = fp8.poison(torch.empty(40, 56, dtype=torch.bfloat16, device=device))
    persistent.launch_streamk(ops, out, False, num_sms=3)
    key = host._workspace_key(out.device)
    host._workspaces[key][1].fill_(2)  # what an interrupted launch could leave
    real = host.launch

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(persistent, "launch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        persistent.launch_streamk(ops, out, False, num_sms=3)
    assert key not in host._workspaces
    monkeypatch.setattr(persistent, "launch", real)
    out = fp8.poison(out)
    persistent.launch_streamk(ops, out, False, num_sms=3)
    assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)


def test_streamk_tma_needs_only_aligned_operands(gen, device):
    """Stream-K stores C through pointers: an output whose rows break TMA's 16-byte rule (20 bf16
    = 40 bytes) does not keep it from loading A and W through TMA."""
    a, b, sa, sb = operands(24, 64, 20, "row", "tensor", gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    out = fp8.poison(torch.empty(24, 20, dtype=torch.bfloat16, device=device))
    assert persistent.launch_streamk(ops, out, False, tma=True).config.kwargs["TMA"]
    assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)


def test_choose_checks_the_output_dtype(gen, device):
    a, b, sa, sb = operands(16, 32, 16, "row", "row", gen, device)
    with pytest.raises(TypeError, match="out_dtype must be one of"):
        gemm.choose(a, b, sa, sb, out_dtype=torch.int32)


@pytest.mark.parametrize("change,exc,match", [
    (dict(GROUP_M=0), ValueError, "GROUP_M must be an int of at least 1"),
    (dict(BLOCK_M=24), ValueError, "BLOCK_M must be a power of two of at least 16"),
    (dict(BLOCK_K=8), ValueError, "BLOCK_K must be a power of two of at least 16"),
    (dict(BLOCK_N=32.0), ValueError, "BLOCK_N must be a power of two"),
])
@pytest.mark.parametrize("kernel", ["tiled", "persistent", "streamk", "split", "tma"])
def test_a_bad_configuration_is_refused_before_triton(kernel, change, exc, match, device):
    """A configuration given by hand that Triton could not compile, or that would leave tiles
    unwritten (GROUP_M = 0), raises a clear error instead."""
    a, b, sa, sb = _ops(device)
    ops = gemm.check_operands(a, b, sa, sb)
    base = {"tiled": tiled.INTERPRETER_CONFIG, "persistent": persistent.PERSISTENT_INTERPRETER_CONFIG,
            "streamk": persistent.STREAMK_INTERPRETER_CONFIG, "split": persistent.SPLIT_INTERPRETER_CONFIG,
            "tma": tma.TMA_INTERPRETER_CONFIG}[kernel]
    config = triton.Config(dict(base.kwargs, **change), num_warps=base.num_warps, num_stages=base.num_stages)
    out = fp8.poison(torch.empty(8, 16, dtype=torch.bfloat16, device=device))
    with pytest.raises(exc, match=match):
        LAUNCHERS[kernel](ops, out, False, config=config)


def test_bad_options_are_refused(gen, device):
    a, b, sa, sb = operands(16, 32, 16, "row", "row", gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    out = torch.empty(16, 16, dtype=torch.bfloat16, device=device)
    with pytest.raises(TypeError, match="split_k must be an int"):
        tiled.launch_tiled(ops, out, False, split_k=2.5)
    with pytest.raises(TypeError, match="precise must be True or False"):
        fp8.scaled_mm(a, b, sa, sb, precise="no")
    with pytest.raises(ValueError, match="contradicts the configuration"):
        persistent.launch_streamk(ops, out, False, config=persistent.STREAMK_INTERPRETER_CONFIG, tma=True)


def test_expanded_operands_go_through_pointers(gen, device):
    """An expanded A (row stride 0) is valid input; TMA wants distinct rows, so "auto" runs the
    persistent kernel."""
    a, b, sa, sb = operands(1, 64, 24, "tensor", "tensor", gen, device)
    for rows, expected in [(16, "swapped"), (swapped.MAX_M + 1, "persistent")]:  # swapped takes pointers
        expanded = a.expand(rows, 64)
        name, refused = gemm.choose(expanded, b, sa, sb)
        assert name == expected and (expected == "swapped" or "row stride 0" in refused["tma"])
        out = fp8.scaled_mm(expanded, b, sa, sb)
        assert fp8.rel_error(out, fp8.reference_mm(expanded, b, sa, sb)) < tolerance(torch.bfloat16, False)


SPLIT_SHAPES = [(1, 1, 1), (7, 13, 5), (40, 304, 72), (97, 257, 131)] + \
    ([(512, 12288, 3072), (1152, 3072, 12288), (1000, 1040, 1000)] if fp8.ON_GPU else [])


# TMA loads where K makes rows of a multiple of 16 bytes (test_split_refuses_tma_where_it_cannot...)
@pytest.mark.parametrize("M,K,N,tma", [(*s, False) for s in SPLIT_SHAPES] + [(*s, True) for s in SPLIT_SHAPES if s[1] % 16 == 0])
@pytest.mark.parametrize("num_sms", [None, 1, 3])
def test_split_in_step_matches_float64(M, K, N, tma, num_sms, gen, device):
    """Split-K in step with its own plan, with every tile split (2 and 3 pieces), and with whole
    tiles first; twice each, since the arrival counts must reset themselves."""
    a, b, sa, sb = operands(M, K, N, "row", "tensor", gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    base = persistent.SPLIT_CONFIGS[1 if tma else 0] if fp8.ON_GPU else persistent.SPLIT_INTERPRETER_CONFIG
    config = persistent.split_config(*(base.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")), base.num_warps,
                            base.num_stages, group_m=base.kwargs["GROUP_M"], tma=tma)
    tiles = -(-M // config.kwargs["BLOCK_M"]) * -(-N // config.kwargs["BLOCK_N"])
    k_blocks = -(-K // config.kwargs["BLOCK_K"])
    plans = {None} | {(0, s) for s in (2, 3) if s <= k_blocks} | ({(tiles - 1, 2)} if k_blocks > 1 else set())
    for plan in plans:
        for precise in (False, True):
            for _ in range(2):
                out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
                persistent.launch_split(ops, out, precise, num_sms=num_sms, config=config, plan=plan)
                assert fp8.rel_error(out, ref) < tolerance(torch.bfloat16, precise), (plan, precise, num_sms)


def test_split_refuses_tma_where_it_cannot_and_bad_plans(gen, device):
    a, b, sa, sb = operands(16, 40, 24, "row", "row", gen, device)  # rows of 40 bytes: no TMA
    ops = gemm.check_operands(a, b, sa, sb)
    out = fp8.poison(torch.empty(16, 24, dtype=torch.bfloat16, device=device))
    tma = persistent.split_config(32, 32, 32, 4, 1, group_m=4, tma=True)
    with pytest.raises(ValueError, match="16-byte aligned rows"):
        persistent.launch_split(ops, out, False, config=tma)
    persistent.launch_split(ops, out, False)  # without a configuration: through pointers
    assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)
    config = persistent.SPLIT_INTERPRETER_CONFIG  # 16 x 24 is one tile of 32 x 32; K = 40 is two blocks
    for plan, match in [((1, 1), "whole tiles must be an int from 0 to 0"), ((0, 3), "pieces must be an int from 1 to 2"),
                        ((0, 0), "pieces must be"), ((0, 1.5), "pieces must be"), ((True, 1), "whole tiles must be")]:
        with pytest.raises(ValueError, match=match):
            persistent.launch_split(ops, out, False, config=config, plan=plan)


def test_split_plan():
    """Whole waves first, at least one tile left to split, never more pieces than K blocks; one
    wave that fills the SMs is not split, and a short grid with a long K is."""
    for tiles, k_blocks, programs in [(1, 1, 132), (96, 96, 132), (132, 96, 132), (432, 96, 132), (2048, 64, 132),
                                      (7, 3, 3), (5, 200, 4)]:
        whole, split = persistent.split_plan(tiles, k_blocks, programs)
        assert 0 <= whole < tiles and whole % programs == 0 and 1 <= split <= min(8, k_blocks)
    assert persistent.split_plan(132, 96, 132) == (0, 1)
    assert persistent.split_plan(96, 96, 132) == (0, 1)  # 4 pieces: 3 rounds of 24 + 26 steps, more than 96
    assert persistent.split_plan(432, 96, 132) == (396, 3)  # 3 waves whole, the last 36 tiles in 3 pieces
    assert persistent.split_plan(8, 4, 4) == (4, 1)  # a tie: the more whole tiles
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="must be an int of at least 1"):
            persistent.split_plan(96, 96, bad)


@pytest.mark.parametrize("kernel", ["tiled", "persistent", "streamk", "split", "tma"])
def test_launches_refuse_block_wise_scales(kernel, gen, device):
    """The launch functions apply per-tensor and per-row scales only: block-wise ones raise instead
    of being read as something else (scaled_mm sends them to the reference kernel)."""
    x = torch.randn(8, 256, generator=gen).to(device)
    w = torch.randn(128, 256, generator=gen).to(device)
    a, sa = fp8.quantize(x, "1x128")
    wq, sw = fp8.quantize(w, "128x128")
    ops = gemm.check_operands(a, wq.t(), sa, sw.t())
    out = torch.empty(8, 128, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="per-tensor and per-row scales only"):
        LAUNCHERS[kernel](ops, out, False)


block_operands = checks.block_operands


BLOCK_SHAPES = [(1, 256, 256), (97, 256, 384), (65, 640, 384), (300, 4096, 512), (4097, 512, 256)]  # K blocks even and odd


@pytest.mark.skipif(not fp8.ON_GPU, reason="Gluon kernels run on a Hopper GPU only (test_gluon_needs_a_gpu)")
@pytest.mark.parametrize("M,K,N", BLOCK_SHAPES)
def test_blockwise_kernel_matches_float64(M, K, N, gen, device):
    """Both block-wise kernels: the scales copied by TMA (A's M-major as ``quantize`` makes them,
    W's K-major and N-major with rows padded to 16 bytes) and read through their strides (A's
    row-major); each configuration, one tile per program and many (3 "SMs"), every split plan's
    pieces. With the first configuration, all four layouts give the same bits, a float32 output is
    right, and precise=False changes nothing. (Few variations per configuration: each new shape
    and stride is a compilation.)"""
    a, b, sa, sb = block_operands(M, K, N, gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    kb, nb = K // 128, N // 128
    k_major = torch.empty_strided((kb, nb), (1, -(-kb // 4) * 4), device=device).copy_(sb)
    n_major = torch.empty_strided((kb, nb), (-(-nb // 4) * 4, 1), device=device).copy_(sb)
    by_tma = gemm.check_operands(a, b, sa, k_major)
    by_tma_n = gemm.check_operands(a, b, sa, n_major)
    strided = gemm.check_operands(a, b, sa.contiguous(), sb)  # A's scales row-major: no TMA
    assert ws_gluon.tma_scales_take(by_tma)["SB_K_MAJOR"] and not ws_gluon.tma_scales_take(by_tma_n)["SB_K_MAJOR"]
    assert ws_gluon.tma_scales_take(strided) is None
    tiles, k_blocks = host.tile_count(M, N, ws_gluon.GLUON_BLOCK_CONFIGS[0].kwargs), K // 128

    def run(config, operands_, precise, out_dtype=torch.bfloat16, num_sms=None, plan=None):
        out = fp8.poison(torch.empty(M, N, dtype=out_dtype, device=device))
        fitted = ws_gluon.fit_gluon_config(config, out.element_size())
        ws_gluon.launch_gluon(operands_, out, precise, config=fitted, num_sms=num_sms, plan=plan)
        assert fp8.rel_error(out, ref) < tolerance(out_dtype, True), (host.describe_config(config), plan, out_dtype)
        return out

    first = ws_gluon.GLUON_BLOCK_CONFIGS[0]
    out = run(first, by_tma, True, num_sms=3)
    for other in (by_tma_n, strided):
        assert torch.equal(out, run(first, other, True, num_sms=3))
    assert torch.equal(out, run(first, by_tma, False, num_sms=3))
    run(first, by_tma, True, torch.float32)
    for config in ws_gluon.GLUON_BLOCK_CONFIGS[1:]:
        plans = [None]
        if config.kwargs["SPLIT"]:
            plans = [(0, min(3, k_blocks)), (tiles - 1, k_blocks)] + ([(tiles // 2, 2)] if k_blocks > 1 else [])
        for plan in plans:
            for operands_ in (by_tma, strided):
                run(config, operands_, True, num_sms=3 if plan is None else None, plan=plan)


def test_which_block_wise_scales_go_by_tma(gen, device):
    """``tma_scales_take`` sends block-wise scales to the TMA kernel where TMA can read them: A's
    M-major with 16-byte rows (the Triton quantization's "1x128" layout, at any M) with W's
    K-major (the transpose of ``quantize``'s "128x128") when K is a multiple of 512, or either
    with rows padded to 16 bytes; A's row-major, A's M-major rows of 130 floats, or W's rows of 5
    floats (K = 640), go to the kernel that reads strides."""
    for M, K, N, k_major in [(97, 512, 256, True), (1, 2048, 384, True), (130, 640, 256, None)]:
        a, b, sa, sb = block_operands(M, K, N, gen, device)
        padded = fp8.quant.m_major_scales(M, K // 128, device).copy_(sa)  # as the Triton kernel lays them out
        assert padded.stride() == (1, -(-M // 4) * 4)
        how = ws_gluon.tma_scales_take(gemm.check_operands(a, b, padded, sb))
        assert (how and how["SB_K_MAJOR"]) == k_major, (M, K, N, how)
        assert ws_gluon.tma_scales_take(gemm.check_operands(a, b, sa.contiguous(), sb)) is None
    exact = sa.t().contiguous().t()  # M-major, rows of 130 floats (520 bytes)
    kb, nb = 5, 2
    k_rows = torch.empty_strided((kb, nb), (1, 8), device=device).copy_(sb)
    how = ws_gluon.tma_scales_take(gemm.check_operands(a, b, padded, k_rows))
    assert how == dict(scale_a=([kb, 130], [132, 1]), scale_b=([nb, kb], [8, 1]), SB_K_MAJOR=True)
    assert exact.stride() == (1, 130) and ws_gluon.tma_scales_take(gemm.check_operands(a, b, exact, k_rows)) is None


@pytest.mark.skipif(not fp8.ON_GPU, reason="Gluon kernels run on a Hopper GPU only (test_gluon_needs_a_gpu)")
def test_scaled_mm_runs_block_wise_scales_in_the_gluon_kernel(gen, device):
    """On a Hopper GPU "auto" takes block-wise scales to the blockwise kernel, not to the reference;
    later calls (the plan's direct launch) give the same bits, with A's scales M-major (copied by
    TMA: ``quantize``'s layout, and cuBLAS's) and row-major (read through their strides)."""
    a, b, sa, sb = block_operands(700, 3072, 1536, gen, device)
    ref = fp8.reference_mm(a, b, sa, sb)
    assert gemm.choose(a, b, sa, sb)[0] == "gluon"
    for scale_a in (sa, sa.t().contiguous().t(), sa.contiguous()):  # M-major (by TMA) twice, row-major
        first = fp8.scaled_mm(a, b, scale_a, sb)
        plan = gemm.plan_of(a, b, scale_a, sb)
        assert plan.kernel == "gluon" and plan.config.kwargs["KIND"] == "blockwise" and not plan.pack_scales
        assert fp8.rel_error(first, ref) < tolerance(torch.bfloat16, True)
        out = fp8.poison(torch.empty_like(first))
        assert fp8.scaled_mm(a, b, scale_a, sb, out=out) is out and torch.equal(out, first)
        assert torch.equal(fp8.scaled_mm(a, b, scale_a, sb), first)


def test_blockwise_refusals_say_what_is_expected(gen, device):
    """The blockwise kernel's configurations, the kernel kinds and the recipes must agree, and a
    shape that block-wise scales cannot cut says why; on a machine without a Hopper GPU the Gluon
    kernels refuse block-wise scales for that reason only."""
    G = ws_gluon.make_gluon_config
    assert all(ws_gluon.gluon_refuses(c) is None for c in ws_gluon.GLUON_BLOCK_CONFIGS)
    for bad in (G("blockwise", 128, 128, 64, 5), G("blockwise", 128, 256, 128, 3)):
        assert "one 128-wide block of the scales" in ws_gluon.gluon_refuses(bad)
    a, b, sa, sb = block_operands(8, 256, 128, gen, device)
    block = gemm.check_operands(a, b, sa, sb)
    assert (block.recipe_a, block.recipe_b) == ("block", "block")
    per_row = gemm.check_operands(a, b, torch.ones(8, 1, device=device), torch.ones(1, 128, device=device))
    with pytest.raises(ValueError, match="blockwise kernel takes block-wise scales only"):
        ws_gluon.check_kind(ws_gluon.GLUON_BLOCK_CONFIGS[0], per_row)
    with pytest.raises(ValueError, match="paired kernel takes per-tensor and per-row scales only"):
        ws_gluon.check_kind(ws_gluon.GLUON_PRECISE_CONFIGS[0], block)
    assert ws_gluon.gluon_flags(block, False) == dict(ROW_A=False, ROW_B=False, PRECISE=True)
    why = ws_gluon.gluon_takes(block, torch.empty(8, 128, dtype=torch.bfloat16, device=device))
    assert (why is None) == fp8.ON_GPU and (why is None or "scales" not in why), why
    x = torch.randn(8, 200, generator=gen).to(device)
    q = x.to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"need K and N multiples of 128: here K = 200 and N = 256"):
        fp8.scaled_mm(q, torch.zeros(256, 200, device=device).to(torch.float8_e4m3fn).t(),
                      torch.ones(8, 2, device=device), torch.ones(2, 2, device=device))


def test_split_refuses_foreign_configurations_and_plans(gen, device):
    a, b, sa, sb = operands(16, 64, 24, "row", "row", gen, device)
    ops = gemm.check_operands(a, b, sa, sb)
    out = torch.empty(16, 24, dtype=torch.bfloat16, device=device)
    with pytest.raises(ValueError, match="launch_split takes configurations"):
        persistent.launch_split(ops, out, False, config=persistent.STREAMK_INTERPRETER_CONFIG)
    for plan in (3, (0, 1, 2)):
        with pytest.raises(TypeError, match="plan must be"):
            persistent.launch_split(ops, out, False, plan=plan)


def test_a_workspace_made_during_a_capture_serves_that_capture_alone(monkeypatch):
    """What a CUDA graph's capture must allocate (its zeroing recorded in that graph only) is not
    kept for later calls, nor by a plan: each call during the capture looks again, and after it a
    lasting workspace is made, kept and reused."""
    dev = torch.device("cpu")
    host.forget_workspace(dev)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    monkeypatch.setattr(host, "_capturing", lambda device: True)
    partials, arrivals, lasting = host._lookup(dev, 64, 4)
    assert not lasting and partials.numel() == 64 and arrivals.numel() == 4 and not arrivals.any()
    assert host._workspace_key(dev) not in host._workspaces
    space = host.PlanWorkspace(dev, 64, 4)
    assert space()[1] is not space()[1]  # not kept: made again for each call of the capture
    monkeypatch.setattr(host, "_capturing", lambda device: False)
    kept = space()
    assert space()[1] is kept[1] and host.workspace(dev, 64, 4)[1] is kept[1]
    host.forget_workspace(dev)


def test_a_workspace_grows_to_twice_its_size_and_a_replaced_one_stays_alive(device):
    """A workspace that must grow doubles at least, and on a GPU the one it replaces is kept alive
    (a CUDA graph recorded with it replays into its memory)."""
    dev = torch.device(device)
    host.forget_workspace(dev)
    first, _ = host.workspace(dev, 100, 3)
    grown, counts = host.workspace(dev, 101, 3)
    assert grown.numel() == 200 and counts.numel() == 3 and int(counts.abs().sum()) == 0
    assert host.workspace(dev, 150, 3)[0] is grown
    if dev.type == "cuda":
        assert any(t is first for t in host._retired)
    host.forget_workspace(dev)


def test_streamk_and_split_share_their_workspace(gen, device):
    """Both leave the arrival counts at zero, so they can follow one another on one stream."""
    a, b, sa, sb = operands(200, 400, 264, "row", "tensor", gen, device)  # 6 tiles, 4 K blocks on a GPU
    ref = fp8.reference_mm(a, b, sa, sb)
    ops = gemm.check_operands(a, b, sa, sb)
    for launch, kw in [(persistent.launch_streamk, {}), (persistent.launch_split, dict(plan=(0, 3))), (persistent.launch_streamk, {}),
                       (persistent.launch_split, dict(plan=(1, 2)))]:
        out = fp8.poison(torch.empty(200, 264, dtype=torch.bfloat16, device=device))
        launch(ops, out, False, num_sms=3, **kw)
        assert fp8.rel_error(out, ref) < tolerance(torch.bfloat16, False), launch.__name__
    assert int(host._workspaces[host._workspace_key(out.device)][1].abs().sum()) == 0


def test_fixed_launch_returns_its_output(device):
    from fp8_tutorial.measure import contenders as C

    p = C.make_problem(40, 64, 24, "row", device=device, seed=1)
    run = C.fixed_launch(persistent.launch_persistent, p, num_sms=2)
    out = run()
    assert out.shape == (40, 24) and out.dtype == torch.bfloat16 and run() is out
    assert fp8.rel_error(out, p.reference) < tolerance(torch.bfloat16, False)


# ---- the plan per problem, the torch operator, the layout ----------------------------------------

def test_a_plan_is_kept_per_signature_and_later_calls_are_still_checked(gen, device):
    """The first call of a signature keeps a plan; the next calls of it reuse the plan and are as
    right as the first (fresh inputs, poisoned outputs); another layout, dtype or shape is another
    signature, checked in full."""
    M, K, N = (1000, 1040, 1000) if fp8.ON_GPU else (40, 64, 24)
    for recipes in [("row", "row"), ("tensor", "tensor"), ("tensor", "row")]:
        a, b, sa, sb = operands(M, K, N, *recipes, gen, device)
        for _ in range(3):
            a, b, sa, sb = operands(M, K, N, *recipes, gen, device)  # new data, same signature
            out = fp8.scaled_mm(a, b, sa, sb)
            assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)
            given = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
            assert fp8.scaled_mm(a, b, sa, sb, out=given) is given
            assert fp8.rel_error(given, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)
        plan = gemm.plan_of(a, b, sa, sb)
        assert plan is not None and plan.kernel == gemm.choose(a, b, sa, sb)[0]
    # the same shapes with what the checks refuse: each a new signature, so each is checked
    with pytest.raises(TypeError, match="float32"):
        fp8.scaled_mm(a, b, sa.double(), sb)
    with pytest.raises(ValueError, match="out must be"):
        fp8.scaled_mm(a, b, sa, sb, out=torch.empty(M, N + 1, dtype=torch.bfloat16, device=device))
    with pytest.raises(ValueError, match="share memory"):
        fp8.scaled_mm(a, b, sa, sb, out=torch.empty(1, N, dtype=torch.bfloat16, device=device).expand(M, N))
    with pytest.raises(TypeError, match="precise must be"):
        fp8.scaled_mm(a, b, sa, sb, precise=1)
    with pytest.raises(TypeError, match="a must be a torch.Tensor"):
        fp8.scaled_mm(a.tolist(), b, sa, sb)
    with pytest.raises(TypeError, match="kernel must be a name"):
        fp8.scaled_mm(a, b, sa, sb, kernel=["gluon"])


# On the H200 "auto" takes the autotuned persistent kernel for a row-major b of 1000 x 1040 x 1000,
# where Triton 3.6's flattened loop read b far outside its memory (``persistent.unflattened``).
def test_a_row_major_b_gets_a_plan_of_its_own(gen, device):
    """A row-major b (another stride) is another signature: a plan of its own, and a right answer."""
    M, K, N = (1000, 1040, 1000) if fp8.ON_GPU else (40, 64, 24)
    a, b, sa, sb = operands(M, K, N, "row", "row", gen, device)
    fp8.scaled_mm(a, b, sa, sb)
    b_rows = b.contiguous()
    for _ in range(2):
        out = fp8.scaled_mm(a, b_rows, sa, sb)
        assert fp8.rel_error(out, fp8.reference_mm(a, b_rows, sa, sb)) < tolerance(torch.bfloat16, False)
    assert gemm.plan_of(a, b_rows, sa, sb) is not gemm.plan_of(a, b, sa, sb)


def test_an_unflattened_tuner_is_the_tuner_with_flatten_off():
    """``host.unflattened_tuner``: the same kernel, keys and pruning, every configuration with
    FLATTEN off, made once; and ``host._k_major`` reads the K strides by name."""
    tuned = triton.autotune(configs=persistent.PERSISTENT_CONFIGS, key=["M", "N"],
                            prune_configs_by={"early_config_prune": host.prune})(persistent.persistent_kernel)
    u = host.unflattened_tuner(tuned)
    assert u is host.unflattened_tuner(tuned) and u.fn is tuned.fn and u.keys == ["M", "N"]
    assert u.early_config_prune is host.prune
    assert [c.kwargs["FLATTEN"] for c in u.configs] == [False] * len(persistent.PERSISTENT_CONFIGS)
    assert [dict(c.kwargs, FLATTEN=True) for c in u.configs] == [c.kwargs for c in persistent.PERSISTENT_CONFIGS]
    names = persistent.persistent_kernel.arg_names
    args = [0] * names.index("stride_cn")
    for ak, bk, k_major in [(1, 1, True), (64, 1, False), (1, 100, False)]:
        args[names.index("stride_ak")], args[names.index("stride_bk")] = ak, bk
        assert host._k_major(persistent.persistent_kernel, tuple(args)) == k_major
    assert host._k_major(tiled.tiled_kernel, ())  # no FLATTEN: nothing to turn off


@pytest.mark.parametrize("layout", ["b_row_major", "a_column_major"])
def test_operands_not_k_major_run_the_persistent_loop_unflattened(layout, gen, device):
    """FLATTEN is turned off where a or b is not K-major, for a configuration given by hand too, and
    the answer is right (K = 1040: the last K block masked)."""
    M, K, N = (1000, 1040, 1000) if fp8.ON_GPU else (40, 72, 24)
    a, b, sa, sb = operands(M, K, N, "row", "row", gen, device)
    if layout == "b_row_major":
        b = b.contiguous()
    else:
        a = a.t().contiguous().t()
    ops = gemm.check_operands(a, b, sa, sb)
    for config in [None, *(persistent.PERSISTENT_CONFIGS if fp8.ON_GPU else [])]:
        out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device=device)
        done = persistent.launch_persistent(ops, out, False, config=config)
        assert not done.config.kwargs["FLATTEN"]
        assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)


def test_a_plan_packs_strided_scales_on_every_call(gen, device):
    """Per-row scales given as strided views are packed on every call, not read from the wrong
    places by a plan made for them."""
    M, K, N = (1000, 1040, 1000) if fp8.ON_GPU else (40, 64, 24)
    for _ in range(2):
        a, b, sa, sb = operands(M, K, N, "row", "row", gen, device)
        sa_strided = torch.empty(M, 2, device=device)[:, :1]
        sa_strided.copy_(sa)
        out = fp8.scaled_mm(a, b, sa_strided, sb)
        assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)


@pytest.mark.skipif(not fp8.ON_GPU, reason="the Gluon kernels need a Hopper GPU")
@pytest.mark.parametrize("index", range(len(ws_gluon.GLUON_CONFIGS)))
def test_gluon_plans_launch_every_configuration_directly(index, gen, device):
    """The plan's direct launch (``host.Direct``) of every Gluon configuration, split tails among
    them, is as right as the JIT's: each configuration forced as the problem's choice, then called
    through scaled_mm three times with fresh inputs and poisoned outputs."""
    M, K, N = 1000, 1040, 1000 if index < 8 else 3000  # split configurations cut tiles at N = 3000
    cfg = ws_gluon.fit_gluon_config(ws_gluon.GLUON_CONFIGS[index], 2)
    for recipes, precise in [(("row", "row"), False), (("tensor", "row"), True)]:
        _check_forced_choice(cfg, M, K, N, recipes, precise, gen, device)


def _check_forced_choice(cfg, M, K, N, recipes, precise, gen, device):
    """``cfg`` forced as the problem's choice, then three calls of scaled_mm with fresh inputs
    into poisoned outputs, each right, and the plan they ran is ``cfg``'s Gluon launch."""
    a, b, sa, sb = operands(M, K, N, *recipes, gen, device)
    key = (M, N, K, recipes[0] == "row", recipes[1] == "row", precise, host.sm_count(a.device), a.dtype,
           torch.bfloat16)
    ws_gluon.CHOICES[key] = cfg
    gemm.PLANS.clear()
    for _ in range(3):
        a, b, sa, sb = operands(M, K, N, *recipes, gen, device)
        out = fp8.poison(torch.empty(M, N, dtype=torch.bfloat16, device=device))
        fp8.scaled_mm(a, b, sa, sb, precise=precise, out=out)
        assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, precise), cfg
    plan = gemm.plan_of(a, b, sa, sb, precise=precise, out=out)
    assert plan.kernel == "gluon" and plan.config is cfg
    del ws_gluon.CHOICES[key]


@pytest.mark.skipif(not fp8.ON_GPU, reason="the Gluon kernels need a Hopper GPU")
@pytest.mark.parametrize("index", range(len(ws_gluon.GLUON_PRECISE_CONFIGS)))
def test_precise_plans_launch_every_configuration_directly(index, gen, device):
    """As the test above, for the configurations precise problems are timed over."""
    # 192 tiles of 128 x 128, 144 of 192 x 128: on 132 SMs each split configuration cuts the rest
    M, K, N = 1000, 12288, 3000
    cfg = ws_gluon.fit_gluon_config(ws_gluon.GLUON_PRECISE_CONFIGS[index], 2)
    if cfg.kwargs["SPLIT"]:
        assert ws_gluon.gluon_plan(cfg, M, N, K, host.sm_count(device))[1] > 1, "the split tail is not exercised"
    for recipes in [("tensor", "row"), ("row", "tensor")]:
        _check_forced_choice(cfg, M, K, N, recipes, True, gen, device)


def _fake_direct(calls: list) -> host.Direct:
    """A ``host.Direct`` whose C launch function records its arguments: a kernel of parameters
    (a_desc, x_ptr, M, BLOCK, c_desc, y_ptr), the two descriptors of 2-D tensors."""
    from types import SimpleNamespace

    d = host.Direct.__new__(host.Direct)
    d.names, d.defaults = ["a_desc", "x_ptr", "M", "BLOCK", "c_desc", "y_ptr"], {}
    d._descriptors = {0: ([4, 8], [8, 1]), 4: ([2, 3], [3, 1])}
    d._encoded, d._metas = {0: {}, 4: {}}, {0: "meta a", 4: "meta c"}
    d._make = lambda box, meta: [("map", meta, box.base.data_ptr()), *box.shape, *box.strides]
    d._knobs = SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    d._stream, d._device, d._function, d._packed, d._flags = (lambda device: 7), 0, "function", "packed", (False, False)
    d._raw = lambda *args: calls.append(args)
    return d


def test_a_direct_launcher_lays_out_the_arguments_as_the_launch_function_takes_them():
    """``Direct.launcher`` fills a flat list laid out once: the same arguments as ``Direct.__call__``
    gives the C launch function, each pointer as its address, each descriptor encoded once per base."""
    calls = []
    d = _fake_direct(calls)
    a, x, c, y = torch.zeros(4, 8), torch.zeros(3), torch.zeros(2, 3), torch.zeros(5)
    launch = d.launcher((6,), dict(M=11, BLOCK=64), ["a_desc", "x_ptr", "c_desc", "y_ptr"])
    launch(a, x, c, y)
    d((6,), d.binder(dict(M=11, BLOCK=64), ["a_desc", "x_ptr", "c_desc", "y_ptr"])(a, x, c, y))
    fast, slow = calls
    assert fast[:13] == (6, 1, 1, 7, "function", False, False, None, None, "packed", None, None, None)
    assert fast[:13] == slow[:13]
    expected = [("map", "meta a", a.data_ptr()), 4, 8, 8, 1, x.data_ptr(), 11, 64,
                ("map", "meta c", c.data_ptr()), 2, 3, 3, 1, y.data_ptr()]
    assert list(fast[13:]) == expected
    assert [t.data_ptr() if isinstance(t, torch.Tensor) else t for t in slow[13:]] == expected
    launch(a, x, c, y)
    assert fast[13] is calls[2][13]  # the descriptor of a base address is encoded once and kept


def test_a_direct_launcher_lets_a_profilers_hooks_see_the_launch():
    """With a launch hook set, the launcher goes through Triton's own launcher (its hooks called)."""
    from types import SimpleNamespace

    calls, seen = [], []
    d = _fake_direct(calls)
    d._knobs = SimpleNamespace(launch_enter_hook=lambda meta: seen.append("enter"), launch_exit_hook=None)
    d._compiled = SimpleNamespace(launch_metadata=lambda grid, stream, *args: "metadata")
    d._run = lambda *args: seen.append(args[6])  # the metadata handed to the hooks
    a, x, c, y = torch.zeros(4, 8), torch.zeros(3), torch.zeros(2, 3), torch.zeros(5)
    d.launcher((6,), dict(M=11, BLOCK=64), ["a_desc", "x_ptr", "c_desc", "y_ptr"])(a, x, c, y)
    assert calls == [] and seen == ["metadata"]


def _fp8_mlp(device, gen, kernel="auto"):
    """A two-layer FP8 MLP as a model would write it: weights quantized per row once, the input
    quantized per row, the hidden activation with a fixed (calibrated) per-tensor scale. Every scale
    is a power of two, and the quantization multiplies by its inverse: exact in eager and compiled
    code alike, where a division or a logarithm need not be (Inductor's Triton divides and takes
    logarithms approximately), so that what is compared is the operator alone."""
    w1, w2 = torch.randn(96, 64, generator=gen).to(device), torch.randn(32, 96, generator=gen).to(device)
    (q1, s1), (q2, s2) = fp8.quantize(w1, "row"), fp8.quantize(w2, "row")
    s_h, inv_h = torch.tensor(8.0, device=device), 0.125

    def mlp(x, s_x, inv_x):
        a = (x.float() * inv_x).clamp(-448, 448).to(torch.float8_e4m3fn)
        h = torch.relu(fp8.scaled_mm(a, q1.t(), s_x, s1.t(), kernel=kernel))
        hq = (h.float() * inv_h).clamp(-448, 448).to(torch.float8_e4m3fn)
        return fp8.scaled_mm(hq, q2.t(), s_h, s2.t(), kernel=kernel)
    return mlp


def _mlp_input(gen, device):
    """An input for ``_fp8_mlp`` and its per-row power-of-two scale and inverse, made in eager torch."""
    x = torch.randn(48, 64, generator=gen).to(device, torch.bfloat16)
    s_x = torch.exp2(torch.ceil(torch.log2(x.float().abs().amax(dim=1, keepdim=True) / 448)))
    return x, s_x, 1 / s_x


def test_compiled_fp8_mlp_matches_eager_exactly(gen, device):
    """``torch.compile(fullgraph=True)`` traces scaled_mm as one operator (its fake implementation
    gives the shape), and the compiled MLP's output is the eager one, bit for bit."""
    mlp = _fp8_mlp(device, gen)
    torch._dynamo.reset()
    compiled = torch.compile(mlp, fullgraph=True)
    for _ in range(2):  # the second call with new data
        inputs = _mlp_input(gen, device)
        assert torch.equal(compiled(*inputs), mlp(*inputs))


@pytest.mark.skipif(not fp8.ON_GPU, reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("kernel", ["auto", "streamk"])
def test_reduce_overhead_captures_scaled_mm_in_a_cuda_graph(kernel, gen, device):
    """``mode="reduce-overhead"`` warms up, records and replays the operator in a CUDA graph, and
    every output matches eager's, bit for bit: the workspaces that a plan keeps (the Gluon kernels'
    split tails, stream-K's partial tiles and counts) are not allocated in the graph's pool, which
    must hold only the graph's own tensors."""
    mlp = _fp8_mlp(device, gen, kernel)
    torch._dynamo.reset()
    compiled = torch.compile(mlp, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):  # warm-up runs, then the graph is recorded and replayed
        inputs = _mlp_input(gen, device)
        assert torch.equal(compiled(*inputs).clone(), mlp(*inputs))


@pytest.mark.skipif(not fp8.ON_GPU, reason="CUDA graphs need a GPU")
def test_reduce_overhead_captures_a_split_swapped_plan(gen, device):
    """M = 16 against a 256 x 4096 weight: two to four tiles for 132 SMs, so the swapped kernel's
    plan cuts K into pieces, whose slots and counts (the plan's workspace) stay out of the graph's
    pool; every replay matches eager, bit for bit."""
    if host.capability(device) < (8, 9):
        pytest.skip("the swapped kernel needs FP8 tensor cores (compute capability 8.9)")
    M, K, N = 16, 4096, 256
    _, b, _, sb = operands(M, K, N, "row", "row", gen, device)

    def step(a, sa):
        return fp8.scaled_mm(a, b, sa, sb)
    torch._dynamo.reset()
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):  # warm-up runs, then the graph is recorded and replayed
        a, _, sa, _ = operands(M, K, N, "row", "row", gen, device)
        assert torch.equal(compiled(a, sa).clone(), step(a, sa))
    plan = gemm.plan_of(a, b, sa, sb)
    assert plan.kernel == "swapped" and plan.config.SPLIT > 1, plan


def test_the_operator_refuses_bad_input_at_trace_time(gen, device):
    """The fake implementation runs the checks that need no data, so a compiled call with a wrong
    scale fails with the same clear error as an eager one."""
    a, b, sa, sb = operands(16, 32, 16, "row", "row", gen, device)
    with pytest.raises(Exception, match="scale_a has shape"):
        torch.ops.fp8_tutorial.scaled_mm(a, b, sa[:8], sb, torch.bfloat16, "auto", False)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="scale_a has shape"):
        torch.compile(lambda a, b, sa, sb: fp8.scaled_mm(a, b, sa, sb), fullgraph=True)(a, b, sa[:8], sb)


def test_what_a_model_imports_holds_no_measuring_code():
    """``import fp8_tutorial`` (and its layers, ``fp8_tutorial.nn``) and a call of scaled_mm load
    neither the harness nor the scoreboard (``fp8_tutorial.measure``), and no kernel module imports
    the entry module. The call is made without a GPU only: on one, a problem's first call times its
    candidates with the harness."""
    import ast
    import pathlib
    import subprocess
    import sys

    code = ("import sys, torch, fp8_tutorial as fp8, fp8_tutorial.nn\n"
            "x = torch.randn(8, 32); a, s = fp8.quantize(x, 'row')\n"
            "if not fp8.ON_GPU: fp8.scaled_mm(a, a.t(), s, s.t())\n"
            "print([m for m in sys.modules if m.startswith('fp8_tutorial.measure')])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    for path in (pathlib.Path(gemm.__file__).parent / "kernels").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module not in ("gemm",) and not (node.level >= 2 and node.module == "gemm"), path


def test_what_a_plan_cannot_see_is_still_refused(gen, device):
    """Inputs that want a gradient (while autograd records), an out that shares an input's memory,
    and an out whose dtype contradicts out_dtype under torch.compile are refused with a clear
    error, on the first call of a signature and after it alike; meta tensors go through the
    operator's fake implementation (shapes only)."""
    M, K, N = 40, 64, 24
    a, b, sa, sb = operands(M, K, N, "row", "row", gen, device)
    fp8.scaled_mm(a, b, sa, sb)  # a plan for these signatures exists from here on
    wants_grad = sa.clone().requires_grad_()
    with pytest.raises(ValueError, match="no backward"):
        fp8.scaled_mm(a, b, wants_grad, sb)
    with torch.no_grad():
        out = fp8.scaled_mm(a, b, wants_grad, sb)
    assert fp8.rel_error(out, fp8.reference_mm(a, b, sa, sb)) < tolerance(torch.bfloat16, False)
    both = torch.empty(M * N + M, dtype=torch.float32, device=device)
    scale_view, out_view = both[:M].view(M, 1), both[M:].view(M, N)
    scale_view.copy_(sa)
    for _ in range(2):
        with pytest.raises(ValueError, match="shares memory with an input"):
            fp8.scaled_mm(a, b, scale_view, sb, out_dtype=torch.float32, out=out_view)
    meta = [t.to("meta") for t in (a, b, sa, sb)]
    shape = torch.ops.fp8_tutorial.scaled_mm(*meta, torch.bfloat16, "auto", False)
    assert shape.device.type == "meta" and tuple(shape.shape) == (M, N)
    torch._dynamo.reset()
    wrong = torch.empty(M, N, dtype=torch.float32, device=device)
    with pytest.raises(Exception, match="must agree"):
        torch.compile(lambda *t: fp8.scaled_mm(*t, out=wrong), fullgraph=True)(a, b, sa, sb)


def test_registering_a_kernel_forgets_the_plans(gen, device, monkeypatch):
    """A plan chose among the kernels registered when it was made: registering another clears them."""
    a, b, sa, sb = operands(40, 64, 24, "row", "row", gen, device)
    fp8.scaled_mm(a, b, sa, sb)
    assert gemm.plan_of(a, b, sa, sb) is not None
    monkeypatch.setitem(gemm.KERNELS, "reference", gemm.KERNELS["reference"])
    gemm.register_kernel("reference", gemm._reference, lambda ops, out: None, priority=0)
    assert gemm.plan_of(a, b, sa, sb) is None
