"""The FP8 inference layer (fp8_tutorial/nn.py): FP8Linear and convert, against float64 products of
the same quantized operands, at odd shapes and with any leading dimensions; its refusals; under
torch.compile and in CUDA graphs."""

import copy

import pytest
import torch

import fp8_tutorial as fp8
from fp8_tutorial import gemm, nn as fnn
from fp8_tutorial.checks import reference_mm, tolerance

# (tokens, in_features, out_features): odd token counts, a single token, widths under one tile
ROW_SHAPES = [(1, 64, 48), (7, 200, 136), (33, 96, 257), (130, 512, 384)]
BLOCK_SHAPES = [(1, 128, 128), (5, 256, 384), (77, 384, 256), (130, 512, 640)]


def _expected(layer: fnn.FP8Linear, x2: torch.Tensor) -> torch.Tensor:
    """The float64 product of what the layer multiplies: ``x2`` quantized as the layer quantizes
    it (the same bits: quantize's kernels and its torch reference agree), the layer's FP8 weight,
    plus the bias."""
    a, sa = fp8.quantize(x2, fnn.RECIPES[layer.recipe][0])
    out = reference_mm(a, layer.weight.t(), sa, layer.weight_scale.t())
    return out if layer.bias is None else out + layer.bias.double()


def _spread(t: torch.Tensor, rows: int, cols: int, gen) -> torch.Tensor:
    """``t`` with each (rows x cols) block (the last ones cut short) multiplied by its own power of
    two, 2^-6 to 2^5: a scale applied to the wrong row or block then shows as a large error."""
    R, C = t.shape
    powers = 2.0 ** torch.randint(-6, 6, (-(-R // rows), -(-C // cols)), generator=gen)
    return t * powers.repeat_interleave(rows, 0)[:R].repeat_interleave(cols, 1)[:, :C]


@pytest.mark.parametrize("recipe,shapes", [("row", ROW_SHAPES), ("block", BLOCK_SHAPES)])
@pytest.mark.parametrize("bias", [False, True])
def test_fp8_linear_matches_float64(recipe, shapes, bias, gen, device):
    """Weights whose rows (per row) or 128 x 128 blocks (block-wise) and inputs whose rows or
    1 x 128 groups each have their own magnitude, odd shapes, against float64."""
    group = 128 if recipe == "block" else None
    for M, K, N in shapes:
        linear = torch.nn.Linear(K, N, bias=bias).to(device)
        with torch.no_grad():
            linear.weight.copy_(_spread(torch.randn(N, K, generator=gen), group or 1, group or K, gen))
            if bias:
                linear.bias.copy_(torch.randn(N, generator=gen))
        layer = fnn.FP8Linear.from_linear(linear, recipe, out_dtype=torch.bfloat16)
        assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight.is_contiguous()
        x = _spread(torch.randn(M, K, generator=gen), 1, group or K, gen).to(device, torch.bfloat16)
        with torch.inference_mode():
            y = layer(x)
        assert y.shape == (M, N) and y.dtype == torch.bfloat16
        # two roundings to bf16 with a bias: the product's and the sum's
        assert fp8.rel_error(y, _expected(layer, x)) < 2 * tolerance(torch.bfloat16, recipe == "block"), (M, K, N)


def test_leading_dimensions_and_dtypes(gen, device):
    """(batch, sequence, features) inputs of any float dtype come out (batch, sequence, N) in
    ``out_dtype``, the same as the flattened call; an empty batch gives an empty output."""
    linear = torch.nn.Linear(160, 96).to(device)
    layer = fnn.FP8Linear.from_linear(linear, "row", out_dtype=torch.float32)
    x = torch.randn(2, 3, 5, 160, generator=gen).to(device)
    with torch.no_grad():
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            y = layer(x.to(dtype))
            assert y.shape == (2, 3, 5, 96) and y.dtype == torch.float32
            assert torch.equal(y.reshape(30, 96), layer(x.to(dtype).reshape(30, 160)))
        strided = x.transpose(1, 2)  # a non-contiguous input
        assert torch.equal(layer(strided), layer(strided.contiguous()))
        assert layer(torch.empty(0, 4, 160, device=device)).shape == (0, 4, 96)
    # by default the output keeps the linear's dtype, so the layers after it get what they got
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        made = fnn.FP8Linear.from_linear(torch.nn.Linear(160, 96).to(device, dtype))
        assert made.out_dtype == dtype and made.bias.dtype == dtype


def test_precise_per_row_and_choose(gen, device):
    linear = torch.nn.Linear(256, 128, bias=False).to(device)
    layer = fnn.FP8Linear.from_linear(linear, "row", precise=True)
    x = torch.randn(40, 256, generator=gen).to(device)
    with torch.no_grad():
        assert fp8.rel_error(layer(x), _expected(layer, x)) < tolerance(torch.bfloat16, True)
    name, refused = layer.choose(40)
    a, sa = fp8.quantize(x, "row")
    assert (name, refused) == gemm.choose(a, layer.weight.t(), sa, layer.weight_scale.t())


def test_dtype_conversions_of_the_model_leave_the_layer_as_it_is(gen, device):
    """``model.to(torch.bfloat16)`` and ``.half()`` convert every floating-point tensor of a model,
    FP8 ones among them; the layer keeps its FP8 weight, float32 scales and bias, and its output.
    Moves apply."""
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.Linear(256, 128)).to(device)
    fnn.convert(model, "block")  # float32 linears: float32 out and bias
    x = torch.randn(5, 128, generator=gen).to(device)
    with torch.no_grad():
        before = model(x)
        for convert in (lambda m: m.to(torch.bfloat16), lambda m: m.half(), lambda m: m.float()):
            convert(model)
            assert [b.dtype for b in model[0].buffers()] == [torch.float8_e4m3fn, torch.float32, torch.float32]
            assert torch.equal(model(x), before)
    model.to("cpu")
    assert all(b.device.type == "cpu" for b in model.buffers())


def test_from_an_fp8_checkpoint(gen, device):
    """An FP8 checkpoint's weight and block scales (DeepSeek-V3's ``weight_scale_inv``) make the
    layer directly; the recipe follows the scale's shape."""
    w = torch.randn(256, 384, generator=gen).to(device)
    q, s = fp8.quantize(w, "128x128")
    layer = fnn.FP8Linear(q, s)
    assert layer.recipe == "block" and layer.bias is None
    q, s = fp8.quantize(w, "row")
    assert fnn.FP8Linear(q, s).recipe == "row"


def test_refusals_say_what_was_expected(device):
    linear = torch.nn.Linear(256, 128).to(device)
    layer = fnn.FP8Linear.from_linear(linear, "block")
    q, s = layer.weight, layer.weight_scale
    cases = [
        (TypeError, "FP8 tensor", lambda: fnn.FP8Linear(q.float(), s)),
        (ValueError, "2-D", lambda: fnn.FP8Linear(q[0], s)),
        (ValueError, "must be contiguous", lambda: fnn.FP8Linear(q.t(), s)),
        (TypeError, "float32", lambda: fnn.FP8Linear(q, s.double())),
        (ValueError, "weight_scale has shape", lambda: fnn.FP8Linear(q, s[:, :1])),
        (ValueError, "bias must be", lambda: fnn.FP8Linear(q, s, torch.zeros(3, device=device))),
        (TypeError, "out_dtype", lambda: fnn.FP8Linear(q, s, out_dtype=torch.int8)),
        (TypeError, "precise", lambda: fnn.FP8Linear(q, s, precise=1)),
        (TypeError, "fuse_quantization", lambda: fnn.FP8Linear(q, s, fuse_quantization="yes")),
        (ValueError, "NaN or infinite", lambda: fnn.FP8Linear(q, torch.full_like(s, float("inf")))),
        (ValueError, "at least 1", lambda: layer.choose(0)),
        (ValueError, "multiples of 128", lambda: fnn.FP8Linear.from_linear(torch.nn.Linear(200, 128), "block")),
        (ValueError, "unknown recipe", lambda: fnn.FP8Linear.from_linear(linear, "tensor")),
        (TypeError, "torch.nn.Linear", lambda: fnn.FP8Linear.from_linear(torch.nn.ReLU())),
        (ValueError, "in_features = 256", lambda: layer(torch.randn(4, 100, device=device))),
        (ValueError, "in_features = 256", lambda: layer(torch.tensor(1.0, device=device))),
        (TypeError, "float32, bfloat16 or float16",
         lambda: layer(torch.ones(4, 256, dtype=torch.int32, device=device))),
        (TypeError, "torch.Tensor", lambda: layer([1.0] * 256)),
    ]
    for error, words, call in cases:
        with pytest.raises(error, match=words):
            call()
    if device.type == "cuda":
        with pytest.raises(ValueError, match="the input is on cpu"):
            layer(torch.randn(4, 256))


def test_asked_for_a_gradient_it_refuses(device):
    """With autograd recording, an input that wants a gradient is refused (none could flow back);
    under no_grad or inference_mode, and for inputs that want none, the layer runs."""
    layer = fnn.FP8Linear.from_linear(torch.nn.Linear(64, 32).to(device))
    x = torch.randn(8, 64, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="no backward"):
        layer(x)
    with torch.no_grad():
        assert not layer(x).requires_grad
    with torch.inference_mode():
        layer(x.detach())
    assert not layer(x.detach()).requires_grad
    assert all(not b.requires_grad for b in layer.buffers()) and not list(layer.parameters())


def test_convert_replaces_linear_layers_in_place(gen, device):
    model = torch.nn.Sequential(torch.nn.Linear(256, 384), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(384, 200), torch.nn.Linear(200, 256))).to(device)
    x = torch.randn(9, 256, generator=gen).to(device)
    with torch.no_grad():
        before = model(x)
        assert fnn.convert(model, "row") is model
        assert [type(m).__name__ for m in (model[0], model[2][0], model[2][1])] == ["FP8Linear"] * 3
        assert fp8.rel_error(model(x).float(), before) < 0.1  # FP8's own error through three layers
    model = torch.nn.Sequential(torch.nn.Linear(256, 384), torch.nn.Linear(384, 200)).to(device)
    with pytest.raises(ValueError, match=r"^layer '1' \(weight 200 x 384\): block-wise"):
        fnn.convert(model, "block")
    assert all(isinstance(m, torch.nn.Linear) for m in model)  # refused before any change
    fnn.convert(model, "block", filter=lambda name, m: m.out_features % 128 == 0)
    assert isinstance(model[0], fnn.FP8Linear) and model[0].recipe == "block" and isinstance(model[1], torch.nn.Linear)
    root = torch.nn.Linear(128, 128).to(device)
    assert isinstance(fnn.convert(root), fnn.FP8Linear)
    shared = torch.nn.Linear(128, 128).to(device)
    twice = torch.nn.Sequential(shared, torch.nn.ReLU(), shared)  # one layer under two names: one replacement
    fnn.convert(twice)
    assert isinstance(twice[0], fnn.FP8Linear) and twice[0] is twice[2]
    attention = torch.nn.TransformerEncoderLayer(128, 4, dim_feedforward=256, batch_first=True).to(device)
    with pytest.raises(ValueError, match="self_attn.out_proj.*reads this projection's weight directly"):
        fnn.convert(attention)
    assert isinstance(attention.linear1, torch.nn.Linear)  # refused before any change
    fnn.convert(attention, filter=lambda name, m: not name.startswith("self_attn"))
    assert isinstance(attention.linear1, fnn.FP8Linear) and isinstance(attention.self_attn.out_proj, torch.nn.Linear)
    kept = fnn.convert(torch.nn.Sequential(torch.nn.Linear(128, 128)), fuse_quantization=False)
    assert not kept[0].fuse_quantization and "fuse_quantization=False" in repr(kept)
    assert fnn.convert(root).fuse_quantization and "fuse" not in repr(fnn.convert(root))
    with pytest.raises(TypeError, match="torch.nn.Module"):
        fnn.convert("model")
    with pytest.raises(ValueError, match="unknown recipe"):
        fnn.convert(model, "tensor")


def test_compiled_fullgraph_matches_eager_at_every_m(gen, device):
    """``torch.compile(fullgraph=True, dynamic=True)`` traces the layer whole for every number of
    tokens. With ``fuse_quantization=False`` the graph holds the two operators, quantize and
    scaled_mm, and matches eager bit for bit (the bias add rounds as eager's does). By default
    the quantization is traced as torch operations for Inductor to fuse: no quantize operator in
    the graph, and the same rule, so the output matches eager's (on a GPU, where Inductor's
    division is approximate, to a value rounded to its FP8 neighbour; on the CPU bit for bit). Traced
    alone, it is one graph for every number of tokens: nothing in it sets a bound on the tokens
    (below and above N and K; Inductor's code may add bounds of its own)."""
    from torch._dynamo.utils import counters

    linear = torch.nn.Linear(256, 128).to(device)
    for fuse in (False, True):
        layer = fnn.FP8Linear.from_linear(linear, "block", fuse_quantization=fuse)
        graphs = []

        def keep(gm, example_inputs):
            graphs.append(gm)
            return gm

        for backend in ("inductor", "aot_eager", keep):
            torch._dynamo.reset()
            # compiled afresh: a cached compilation can bring the bounds of another one
            counters.clear()
            compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend=backend)
            with (torch.inference_mode(), torch._inductor.config.patch(fx_graph_cache=False),
                  torch._functorch.config.patch(enable_autograd_cache=False)):
                for M in (3, 17, 40, 150):
                    x = torch.randn(2, M, 256, generator=gen).to(device, torch.bfloat16)
                    got, want = compiled(x), layer(x)
                    if fuse and device.type == "cuda":  # as in test_cuda_graphs_replay_the_layer
                        assert fp8.rel_error(got.float(), want.float()) < 1e-2, (backend, M)
                    else:
                        assert torch.equal(got, want), (fuse, backend, M)
            assert counters["stats"]["unique_graphs"] == 1, (fuse, backend)
        ops = {str(n.target) for g in graphs for n in g.graph.nodes if n.op in ("call_function", "call_method")}
        assert any("scaled_mm" in op for op in ops), ops
        assert any("fp8_tutorial.quantize" in op for op in ops) != fuse, (fuse, ops)
        assert any("amax" in op for op in ops) == fuse, (fuse, ops)


def test_quantize_is_an_operator(gen, device):
    """``quantize`` is ``torch.ops.fp8_tutorial.quantize`` under torch.compile: its fake
    implementation gives each granularity's shapes and runs the checks at trace time."""
    for granularity, scale in [("tensor", ()), ("row", (256, 1)), ("1x128", (256, 3)), ("128x128", (2, 3))]:
        q, s = torch.ops.fp8_tutorial.quantize(torch.empty(256, 384, device="meta"), granularity,
                                               torch.float8_e4m3fn, "auto")
        assert q.shape == (256, 384) and q.dtype == torch.float8_e4m3fn and tuple(s.shape) == scale
    x = torch.randn(64, 256, generator=gen).to(device)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: fp8.quantize(x, "1x128"), fullgraph=True, backend="aot_eager")
    for got, want in zip(compiled(x), fp8.quantize(x, "1x128")):
        assert torch.equal(got, want)
    torch._dynamo.reset()  # impl="torch": the torch operations traced as they are, the same bits
    traced = torch.compile(lambda x: fp8.quantize(x, "row", impl="torch"), fullgraph=True, backend="aot_eager")
    for got, want in zip(traced(x), fp8.quantize(x, "row", impl="torch")):
        assert torch.equal(got, want)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="divisible by 128"):
        torch.compile(lambda x: fp8.quantize(x, "1x128"), fullgraph=True, backend="aot_eager")(x[:, :100])


@pytest.mark.skipif(not fp8.ON_GPU, reason="CUDA graphs need a GPU")
def test_cuda_graphs_replay_the_layer(gen, device):
    """``mode="reduce-overhead"``: the first calls of each M choose the kernels, a graph is
    recorded and replayed, and each replay matches eager: bit for bit with the quantization
    kernel; with the quantization fused by Inductor (whose division is approximate, so a value
    may round to its FP8 neighbour), closer to eager than eager is to the float64 product of the
    unquantized model (on the H200: 1.2e-2 against eager at one token)."""
    for fuse in (False, True):
        model = torch.nn.Sequential(torch.nn.Linear(512, 1024, bias=False), torch.nn.Linear(1024, 512)).to(device)
        exact = copy.deepcopy(model).double()
        fnn.convert(model, "block", filter=lambda name, m: name == "0", fuse_quantization=fuse)
        fnn.convert(model, "row", fuse_quantization=fuse)
        torch._dynamo.reset()
        compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True, dynamic=True)
        with torch.inference_mode():
            for M in (1, 16, 300):
                for _ in range(4):
                    x = torch.randn(M, 512, generator=gen).to(device, torch.bfloat16)
                    got, want = compiled(x).clone(), model(x)
                    err = fp8.rel_error(got.float(), want.float())
                    if fuse:
                        quantized = fp8.rel_error(want.double(), exact(x.double()))
                        assert err < quantized, (M, fuse, err, quantized)
                    else:
                        assert torch.equal(got, want), (M, fuse, err)
