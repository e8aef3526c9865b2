"""Chapter 12's decoder layer and its measurement (fp8_tutorial/measure/model.py): the layer against
float64 attention and against itself (decoding a token equals prefilling it), the layers compared,
their inputs, the kernel classes, the tables and the figure."""

import math

import pytest
import torch
import torch.nn.functional as F

import fp8_tutorial as fp8
from fp8_tutorial import nn as fnn
from fp8_tutorial.measure import model

S = model.TINY


def _layer(seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    return model.DecoderLayer(S).to(dtype).eval()


def _cache(layer, x, cos, sin):
    """The keys and values that ``layer``'s attention computes for hidden states ``x`` (B, L, H), and
    a slot after them for the next token's, filled with NaN: decoding must write it before reading."""
    s, attn = S, layer.self_attn
    B, L, _ = x.shape
    _, k, v = attn.qkv_proj(layer.input_layernorm(x)).split([s.heads * s.head_dim, s.kv_heads * s.head_dim,
                                                             s.kv_heads * s.head_dim], -1)
    k = model._rotate(k.view(B, L, s.kv_heads, s.head_dim).transpose(1, 2), cos, sin)
    v = v.view(B, L, s.kv_heads, s.head_dim).transpose(1, 2)
    free = torch.full((B, s.kv_heads, 1, s.head_dim), float("nan"), dtype=x.dtype)
    return torch.cat([k, free], 2), torch.cat([v, free], 2)


def test_projection_shapes_are_llama3_8b():
    assert model.LLAMA3_8B.projections() == {"self_attn.qkv_proj": (6144, 4096), "self_attn.o_proj": (4096, 4096),
                                             "mlp.gate_up_proj": (28672, 4096), "mlp.down_proj": (4096, 14336)}
    assert model.LLAMA3_8B.gemm_flops(1) == 2 * (6144 * 4096 + 4096 * 4096 + 28672 * 4096 + 4096 * 14336)
    names = {n for n, m in model.DecoderLayer(S).named_modules() if isinstance(m, torch.nn.Linear)}
    assert names == set(S.projections())


def test_attention_matches_float64_by_hand(gen):
    """Grouped-query causal attention with rotary embeddings, written out: each query head i reads
    key and value head i // (heads / kv_heads), and position t sees positions up to t."""
    layer = _layer()
    x = torch.randn(2, 9, S.hidden, generator=gen, dtype=torch.float64)
    cos, sin = model.rope_tables(torch.arange(9), S, torch.float64)
    got = layer.self_attn(x, cos, sin)
    s, attn = S, layer.self_attn
    q, k, v = attn.qkv_proj(x).split([s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], -1)
    q = q.view(2, 9, s.heads, s.head_dim)
    k = k.view(2, 9, s.kv_heads, s.head_dim)
    v = v.view(2, 9, s.kv_heads, s.head_dim)
    half = s.head_dim // 2
    pos = torch.arange(9, dtype=torch.float64)[:, None]
    freq = s.rope_theta ** (-torch.arange(half, dtype=torch.float64) * 2 / s.head_dim)
    c, n = torch.cos(pos * freq)[None, :, None], torch.sin(pos * freq)[None, :, None]

    def rot(t):  # (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), pairs half a head apart
        x1, x2 = t[..., :half], t[..., half:]
        return torch.cat([x1 * c - x2 * n, x2 * c + x1 * n], -1)
    q, k = rot(q), rot(k)
    group = s.heads // s.kv_heads
    out = torch.empty(2, 9, s.heads, s.head_dim, dtype=torch.float64)
    for h in range(s.heads):
        scores = q[:, :, h] @ k[:, :, h // group].transpose(1, 2) / math.sqrt(s.head_dim)
        scores = scores.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf"))
        out[:, :, h] = scores.softmax(-1) @ v[:, :, h // group]
    want = attn.o_proj(out.reshape(2, 9, -1))
    # rope_tables computes the angles in float32, as Llama does: about 1e-7 off float64's
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)


def test_decoding_a_token_equals_prefilling_it(gen):
    """The layer's output for the last of L + 1 tokens, prefilled together, is what decoding that
    token gives over the cache of the first L: the rotary position, the causal mask and the cache
    all agree."""
    layer = _layer()
    L = 11
    x = torch.randn(3, L + 1, S.hidden, generator=gen, dtype=torch.float64)
    cos, sin = model.rope_tables(torch.arange(L + 1), S, torch.float64)
    whole = layer(x, cos, sin)
    past = _cache(layer, x[:, :L], cos[:L], sin[:L])
    step = layer(x[:, L:], cos[L:], sin[L:], past)
    assert torch.allclose(step, whole[:, L:], rtol=1e-10, atol=1e-10)


def test_inputs_of_each_phase():
    p = model.make_inputs(S, "prefill", 256, seq=64)
    assert p.x.shape == (4, 64, S.hidden) and p.cos.shape == (64, S.head_dim) and p.past is None
    assert p.x.dtype == torch.bfloat16 and len(p.args()) == 3
    d = model.make_inputs(S, "decode", 5, context=32)
    assert d.x.shape == (5, 1, S.hidden) and d.cos.shape == (1, S.head_dim)
    assert [t.shape for t in d.past] == [(5, S.kv_heads, 33, S.head_dim)] * 2 and len(d.args()) == 4
    loud = model.make_inputs(S, "decode", 64, outliers=True).x.float()
    channels = loud.abs().amax(dim=(0, 1))
    assert (channels > 50 * channels.median()).sum() == S.hidden // 200 or S.hidden < 200
    with pytest.raises(ValueError, match="whole sequences"):
        model.make_inputs(S, "prefill", 100, seq=64)
    with pytest.raises(ValueError, match="phase"):
        model.make_inputs(S, "train", 8)


def test_the_layers_compared_share_one_set_of_weights():
    layers = model.variants(S, device=fp8.DEVICE)
    here = [n for n, (route, _) in model.VARIANTS.items() if route != "torch" or fp8.ON_GPU]
    assert list(layers) == here
    w = layers["bf16"].mlp.down_proj.weight
    for name in ("fp8_tutorial row", "fp8_tutorial block"):
        down = layers[name].mlp.down_proj
        assert isinstance(down, fnn.FP8Linear) and down.recipe == model.VARIANTS[name][1]
        assert fp8.rel_error(fp8.dequantize(down.weight, down.weight_scale), w.float()) < 0.05
    if fp8.ON_GPU:
        for recipe in ("row", "block"):
            ours, theirs = layers[f"fp8_tutorial {recipe}"].mlp.down_proj, layers[f"torch {recipe}"].mlp.down_proj
            assert torch.equal(ours.weight, theirs.weight) and torch.equal(ours.weight_scale, theirs.weight_scale)
    with pytest.raises(ValueError, match="unknown layers"):
        model.variants(S, ["fp16"])
    with pytest.raises(ValueError, match="unknown recipe"):
        model.ScaledMMLinear(torch.nn.Linear(128, 128), "tensor")


def test_errors_against_bf16():
    """Each FP8 layer's error against the bf16 layer is FP8's: a few percent of the branches, far
    less of the output, which the input dominates; bf16's own error against float32 is far below
    FP8's on the branches, and on the update of hidden states with outliers as large as FP8's
    (what the branches are measured for)."""
    layers = model.variants(S, ["bf16", "fp8_tutorial row", "fp8_tutorial block"], device=fp8.DEVICE)
    inputs = model.make_inputs(S, "prefill", 128, seq=64)
    errors = model.errors(layers, inputs)
    assert set(errors) == {"fp8_tutorial row", "fp8_tutorial block"}
    for output, branches in errors.values():
        assert 0 < output < branches < 0.2 and branches > 0.02
    floor = model.bf16_floor(layers["bf16"], inputs)
    assert 0 < floor["branches"] < 0.01 and floor["output"] < floor["branches"]
    loud = model.bf16_floor(layers["bf16"], model.make_inputs(S, "prefill", 128, seq=64, outliers=True))
    assert loud["update"] > 0.02 > 0.01 > loud["branches"]


def _tensors(args: tuple) -> list:
    """A layer's arguments as a flat list of tensors (the cache's keys and values taken apart)."""
    return [t for a in args for t in (a if isinstance(a, tuple) else (a,))]


@pytest.mark.skipif(not fp8.ON_GPU, reason="without a GPU graphed returns the function itself, which holds it")
def test_a_graph_keeps_what_it_reads():
    """``model.graphed``'s replay holds the function and its inputs: a script that rebinds its
    names (the next layer, the next recipe) must not free the weights a recorded graph reads by
    address. The freed memory would go back to the driver (``empty_cache``) before the replay,
    which would then fault or differ."""
    import gc
    import weakref

    torch._dynamo.reset()
    mlp = fnn.convert(model.MLP(S).to(fp8.DEVICE, torch.bfloat16).eval(), "row")
    weight = weakref.ref(mlp.gate_up_proj.weight)
    fn = model.compiled(mlp)
    x = torch.randn((2, 16, S.hidden), dtype=torch.bfloat16, device=fp8.DEVICE)
    with torch.inference_mode():
        run = model.graphed(fn, (x,))
        first = run().clone()
        del mlp, fn
        gc.collect()
        torch.cuda.empty_cache()
        assert weight() is not None, "the graph's weights were freed"
        again = run()
        torch.cuda.synchronize()
        assert torch.equal(again, first)
    torch._dynamo.reset()


def test_the_converted_layer_compiles_as_eager_runs():
    """The layer traces whole under ``model.compiled`` for one token and for several, to prefill
    and to decode, and gives eager's output (traced only, in the interpreter: bit for bit); on a
    GPU also recorded in a CUDA graph (``model.graphed``), whose replays follow new inputs
    written in place."""
    torch._dynamo.reset()
    layer = model.variants(S, ["fp8_tutorial block"], device=fp8.DEVICE)["fp8_tutorial block"]
    fn = model.compiled(layer)
    with torch.inference_mode():
        for phase, M in (("decode", 1), ("decode", 4), ("prefill", 128)):
            inputs = model.make_inputs(S, phase, M, seq=64, context=16)
            run = model.graphed(fn, inputs.args())
            for seed in (1, 2):
                fresh = model.make_inputs(S, phase, M, seq=64, context=16, seed=seed)
                for t, u in zip(_tensors(inputs.args()), _tensors(fresh.args())):
                    t.copy_(u)
                got, want = run().clone(), layer(*inputs.args())
                if fp8.ON_GPU:  # Inductor fuses and rounds in other places: bf16's rounding
                    assert fp8.rel_error(got.float(), want.float()) < 2 ** -7, (phase, M, seed)
                else:
                    assert torch.equal(got, want), (phase, M, seed)
    torch._dynamo.reset()


def test_measure_s_steps_without_a_gpu(monkeypatch):
    """``measure``'s own steps, its timer replaced by one call of each layer (no GPU to time on):
    every layer of ``VARIANTS`` that runs here compiled, each case of each phase, the errors on
    both kinds of hidden states in the records. Each layer and case is a compilation of the one
    code object ``DecoderLayer.forward``; ``model.compiled`` raises Dynamo's limit, which
    ``fullgraph=True`` would otherwise turn into a hard error (here the limit is 4, and six are
    made)."""
    if fp8.ON_GPU:
        pytest.skip("on a GPU test_measure_and_breakdown_on_a_small_layer times for real")
    from fp8_tutorial.measure import bench

    def one_call_each(contenders, *, flops=None, calls=50, rounds=10, warmup=3):
        for fn in contenders.values():
            fn()
        return {n: bench.ApiRecord(n, 1.0, 1.0, 1.0, 1.0, calls, rounds, flops) for n in contenders}
    monkeypatch.setattr(bench, "require_gpu", lambda what="": None)
    monkeypatch.setattr(bench, "api_benchmark", one_call_each)
    with torch._dynamo.config.patch(recompile_limit=4):
        torch._dynamo.reset()
        records = model.measure(S, prefill=[128], decode=[3], progress=False, seq=64, context=16)
    torch._dynamo.reset()
    layers = ["bf16", "fp8_tutorial row", "fp8_tutorial block"]
    assert [(r["phase"], r["tokens"], r["layer"]) for r in records] == [
        (phase, M, n) for phase, M in (("decode", 3), ("prefill", 128)) for n in layers]
    for r in records:
        assert set(r["errors"]) == (set() if r["layer"] == "bf16" else {"plain", "outliers"})
        for e in r["errors"].values():
            assert 0 < e["output"] < e["branches"] < 0.2


def test_a_layer_that_cannot_run_is_named_with_its_error():
    class Refusing(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling x\nmore")
    got = model.refusals({"fine": torch.nn.Identity(), "refusing": Refusing()}, (torch.zeros(2),))
    assert got == {"refusing": "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling x"}

    class Failing(torch.nn.Module):  # any other error is a failure, not a refusal
        def forward(self, x):
            raise RuntimeError("an illegal memory access was encountered")
    with pytest.raises(RuntimeError, match="illegal memory access"):
        model.refusals({"failing": Failing()}, (torch.zeros(2),))


@pytest.mark.parametrize("name,kind", [
    ("gluon_blockwise_kernel", "GEMM"), ("swapped_kernel", "GEMM"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "GEMM"),
    ("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128", "GEMM"),
    ("void cutlass::device_kernel<cutlass3x_sm90_tensorop_gemm>", "GEMM"), ("quantize_groups_kernel", "quantization"),
    ("triton_tem_fused__scaled_mm_0", "GEMM"), ("triton_red_fused__softmax_cat_mul_sum_2", "rest"),
    ("triton_red_fused__to_copy_abs_amax_clamp_div_0", "quantization"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64>>", "rest"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", "rest"),
    ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_1", "rest"),
    # seen on the H200 (chapter 12's layers under torch.compile): softmax's amax, the norm that feeds
    # the book's quantize, the torch route's cast without its amax, cuBLAS's split-K reduction
    ("triton_red_fused__softmax_amax_mul_sub_4", "rest"), ("triton_red_fused__fused_rms_norm_quantize_view_0", "rest"),
    ("triton_poi_fused__to_copy_abs_clamp_clamp_min_div_eq_full_like_gt_mul_ne_scalar_tensor_silu_split_10",
     "quantization"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>", "GEMM"),
    ("triton_red_fused__to_copy_abs_amax_mul_silu_split_view_8", "quantization"),  # the torch route's amax
    ("partial_amax_kernel", "quantization")])
def test_kernels_are_sorted_by_what_they_do(name, kind):
    assert model.kind_of(name) == kind


def _records():
    """Made-up records in ``measure``'s form, to check the tables (not measurements)."""
    us = {"bf16": 100.0, "torch row": 80.0, "fp8_tutorial row": 50.0, "torch block": 90.0, "fp8_tutorial block": 60.0}
    recs = []
    for phase, M in (("decode", 1), ("decode", 64), ("prefill", 1024)):
        for n, t in us.items():
            err = {"output": 1e-3, "branches": 0.03 if n.endswith("row") else 0.02}
            recs.append(dict(phase=phase, tokens=M, layer=n, us=t * M ** 0.5, p10_us=0, p90_us=0, host_us=0,
                             errors={"plain": err, "outliers": err} if n != "bf16" else {}))
    return recs


def test_tables_and_summary():
    recs = _records()
    decode = model.table(recs, "decode")
    assert "decode" in decode and "64" in decode and "2.00x" in decode and "1.60x" in decode  # 100/50 and 80/50
    assert len(decode.splitlines()) == 5 and max(map(len, decode.splitlines())) <= 90
    errs = model.error_table(recs)
    assert "3.0e-02" in errs and "2.0e-02" in errs and "prefill" in errs
    s = model.summary(recs)
    assert s["decode row"] == dict(min_vs_bf16=2.0, min_vs_torch=1.6)
    assert s["prefill block"] == dict(min_vs_bf16=100 / 60, min_vs_torch=1.5)
    assert s["block error over row's"] == dict(plain=0.02 / 0.03, outliers=0.02 / 0.03)
    parts = [dict(phase="decode", tokens=16, layer="bf16", kind="GEMM", us=40.0, kernels=["nvjet"]),
             dict(phase="decode", tokens=16, layer="bf16", kind="rest", us=10.0, kernels=["flash"])]
    table = model.breakdown_table(parts)
    assert "40.0" in table and "50.0" in table and "quantization" in table
    assert len(model.table([], "decode").splitlines()) == 3


def test_layer_times_figure():
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure import plots

    fig = plots.layer_times(_records(), "NVIDIA H200")
    assert fig.get_size_inches()[0] <= plots.WIDTH and "H200" in fig._suptitle.get_text()
    for ax in fig.axes:
        assert ax.get_title() and ax.get_xlabel() and "microseconds" in ax.get_ylabel()
    assert len(fig.axes[0].get_lines()) == 5
    matplotlib.pyplot.close(fig)


def test_without_a_hopper_gpu_the_recorded_run_or_a_note():
    if fp8.ON_GPU:
        pytest.skip("on a GPU or_load measures")
    run = model.or_load()
    if run.records:
        assert run.where.startswith("recorded on") and run.gpu
    else:
        assert "nothing to show" in run.where and run.breakdown == [] and run.gpu == ""


@pytest.mark.skipif(not fp8.ON_GPU, reason="torch's CPU _scaled_mm takes per-tensor scales only")
@pytest.mark.parametrize("recipe", ["row", "block"])
def test_the_torch_route_matches_float64(recipe, gen):
    """``ScaledMMLinear`` against the float64 product of its quantized input and weight, at one
    token and at odd counts; compiled (fullgraph, the token count dynamic) against eager."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("cuBLAS's block-wise FP8 path needs a Hopper GPU")
    from fp8_tutorial.checks import reference_mm, tolerance

    linear = torch.nn.Linear(512, 384, bias=False).cuda()
    layer = model.ScaledMMLinear(linear, recipe)
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    with torch.inference_mode():
        for M in (1, 37, 300):
            x = torch.randn(M, 512, generator=gen).cuda().to(torch.bfloat16)
            # cuBLAS's block-wise path refuses some token counts (one and two in chapter 12's run on
            # the H200); refusals raises on any other error, and M = 300 must run
            refused = recipe == "block" and model.refusals({"torch block": layer}, (x,))
            if refused:
                assert M != 300, refused
                continue
            a, sa = fp8.quantize(x, fnn.RECIPES[recipe][0])
            want = reference_mm(a, layer.weight.t(), sa, layer.weight_scale.t())
            y = layer(x)
            assert fp8.rel_error(y, want) < tolerance(torch.bfloat16, recipe == "block"), (recipe, M)
            # Inductor divides approximately: a value may round to the FP8 neighbour of eager's
            assert fp8.rel_error(compiled(x).float(), y.float()) < 1e-2, (recipe, M)


@pytest.mark.skipif(not fp8.ON_GPU, reason="timing needs a GPU")
def test_measure_and_breakdown_on_a_small_layer():
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("torch's block-wise cuBLAS path and the Gluon kernels need a Hopper GPU")
    records = model.measure(model.SMALL, prefill=[1024], decode=[1, 8], progress=False)
    assert {(r["phase"], r["tokens"]) for r in records} == {("prefill", 1024), ("decode", 1), ("decode", 8)}
    assert all(r["us"] > 0 for r in records) and len({r["layer"] for r in records}) == 5
    for r in records:
        for e in r["errors"].values():
            assert 0 < e["output"] < e["branches"] < 0.2, r
    parts = model.breakdown(model.SMALL, tokens=[("decode", 8)], calls=3)
    kinds = {(p["layer"], p["kind"]) for p in parts}
    assert ("bf16", "GEMM") in kinds and ("fp8_tutorial row", "quantization") in kinds
    assert ("bf16", "quantization") not in kinds
