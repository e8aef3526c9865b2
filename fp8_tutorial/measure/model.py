"""A Llama-3-8B decoder layer, and what chapter 12 measures on it: time per layer against tokens,
in bf16, with ``torch._scaled_mm`` and with the book's ``FP8Linear``, each under ``torch.compile``;
the output's error per recipe; where the time goes.

The layer is written here in plain torch (``DecoderLayer``): Llama 3's architecture (RMSNorm,
grouped-query attention with rotary embeddings, a SwiGLU MLP) at Llama-3-8B's sizes, with random
weights. Its projections are ``nn.Linear`` modules, fused the way inference engines hold them
(``qkv_proj``, ``gate_up_proj``), so ``fp8_tutorial.nn.convert`` treats it as it treats a model
from a library: it finds and replaces the linear layers.

The layers compared (``VARIANTS``), all made from the same bf16 weights:

- ``bf16``: the layer as it is (cuBLAS bf16 GEMMs);
- ``torch row``, ``torch block``: the route of PyTorch's own float8 inference, ``ScaledMMLinear``:
  the input quantized with torch operations (which ``torch.compile`` fuses with its neighbours),
  then cuBLAS through ``torch._scaled_mm`` (per row with fast accumulation; block-wise without,
  the input's scales M-major first);
- ``fp8_tutorial row``, ``fp8_tutorial block``: ``FP8Linear`` (``quantize``, then ``scaled_mm``;
  under ``torch.compile`` the quantization is torch operations that Inductor fuses, as the torch
  route's).

The weights of both FP8 routes are the same bits (``quantize``'s), and their inputs are quantized
by the same rule, so their errors differ by the GEMM alone (and, compiled, where Inductor rounds).
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from .. import nn as fnn
from .._env import ON_GPU
from ..quant import quantize


@dataclass(frozen=True)
class LlamaShape:
    """A decoder layer's sizes: Llama-3-8B's by default."""

    hidden: int = 4096
    intermediate: int = 14336
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    rope_theta: float = 500000.0
    eps: float = 1e-5

    def projections(self) -> dict[str, tuple[int, int]]:
        """(N, K) of each projection, by its name in ``DecoderLayer``."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {"self_attn.qkv_proj": (q + 2 * kv, self.hidden), "self_attn.o_proj": (self.hidden, q),
                "mlp.gate_up_proj": (2 * self.intermediate, self.hidden),
                "mlp.down_proj": (self.hidden, self.intermediate)}

    def gemm_flops(self, tokens: int) -> int:
        """The FLOPs of the layer's four projections for ``tokens`` tokens (2 M N K each)."""
        return sum(2 * tokens * n * k for n, k in self.projections().values())


LLAMA3_8B = LlamaShape()
#: A layer small enough for Triton's interpreter (the chapters' CPU runs and the tests).
TINY = LlamaShape(hidden=256, intermediate=512, heads=4, kv_heads=2, head_dim=64)
#: The smallest layer cuBLAS's block-wise path takes (it wants K/128 a multiple of 4): the GPU tests'.
SMALL = LlamaShape(hidden=512, intermediate=1024, heads=4, kv_heads=2, head_dim=128)


def rope_tables(positions: torch.Tensor, shape: LlamaShape, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary embedding at ``positions``, (len(positions), head_dim), in float32
    and then ``dtype``, as Llama computes them."""
    d = shape.head_dim
    inv = 1.0 / shape.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=positions.device) / d)
    angles = positions.float()[:, None] * inv[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(torch.nn.Module):
    """Grouped-query attention: ``heads`` query heads share ``kv_heads`` key and value heads."""

    def __init__(self, s: LlamaShape):
        super().__init__()
        self.s = s
        q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
        self.qkv_proj = torch.nn.Linear(s.hidden, q + 2 * kv, bias=False)
        self.o_proj = torch.nn.Linear(q, s.hidden, bias=False)

    def forward(self, x, cos, sin, past=None):
        s = self.s
        B, S, _ = x.shape
        q, k, v = self.qkv_proj(x).split([s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], -1)
        q = _rotate(q.view(B, S, s.heads, s.head_dim).transpose(1, 2), cos, sin)
        k = _rotate(k.view(B, S, s.kv_heads, s.head_dim).transpose(1, 2), cos, sin)
        v = v.view(B, S, s.kv_heads, s.head_dim).transpose(1, 2)
        if past is None:  # prefill: each sequence's tokens attend to those before them
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            o = _decode_attention(q, k, v, past)
        return self.o_proj(o.transpose(1, 2).reshape(B, S, s.heads * s.head_dim))


def _decode_attention(q, k, v, past):
    """One new token per sequence (``q``, ``k``, ``v``: (B, heads or kv_heads, 1, head_dim)) attends
    to its cache and to itself. ``past`` is each sequence's cache, keys and values, (B, kv_heads,
    context + 1, head_dim): the cached tokens, then a free slot, where the new key and value are
    written in place, as an inference engine writes its cache, before attention reads it all. The
    query heads that share a key and value head (head i reads head i // (heads / kv_heads)) go to
    ``scaled_dot_product_attention`` as that head's queries, so the cache is read once per key and
    value head, by the one attention kernel that PyTorch picks, not copied per query head."""
    B, kv_heads, slots, d = past[0].shape
    past[0][:, :, slots - 1:].copy_(k)
    past[1][:, :, slots - 1:].copy_(v)
    o = F.scaled_dot_product_attention(q.reshape(B, kv_heads, -1, d), past[0], past[1])
    return o.reshape(q.shape)


class MLP(torch.nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``, gate and up in one projection."""

    def __init__(self, s: LlamaShape):
        super().__init__()
        self.gate_up_proj = torch.nn.Linear(s.hidden, 2 * s.intermediate, bias=False)
        self.down_proj = torch.nn.Linear(s.intermediate, s.hidden, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(torch.nn.Module):
    """One Llama decoder layer: ``h = x + attn(norm(x))``, ``out = h + mlp(norm(h))``. ``forward``
    takes hidden states (batch, sequence, hidden), the rotary tables of their positions and, to
    decode, ``past``: each sequence's cached keys and values, (batch, kv_heads, context + 1, head_dim),
    the last slot free for the new token's (``_decode_attention``)."""

    def __init__(self, s: LlamaShape = LLAMA3_8B):
        super().__init__()
        self.input_layernorm = torch.nn.RMSNorm(s.hidden, eps=s.eps)
        self.self_attn = Attention(s)
        self.post_attention_layernorm = torch.nn.RMSNorm(s.hidden, eps=s.eps)
        self.mlp = MLP(s)

    def forward(self, x, cos, sin, past=None):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, past)
        return h + self.mlp(self.post_attention_layernorm(h))


# ---- the torch._scaled_mm route -------------------------------------------------------------------

class ScaledMMLinear(torch.nn.Module):
    """An FP8 linear layer the way PyTorch's own float8 inference builds one: the weight quantized
    once, the input quantized on every call with torch operations (an amax, a division, a clamp, a
    cast), which ``torch.compile`` fuses with the operations around them, and cuBLAS through
    ``torch._scaled_mm``: per row with fast accumulation, block-wise without (cuBLAS refuses it),
    the input's "1x128" scales M-major, strides (1, M), as cuBLAS wants them and ``quantize``'s torch
    form gives them. The quantization is
    ``quantize``'s own rule, in its torch form (``impl="torch"``), so that both FP8 routes multiply
    the same bits. Runs on a CUDA GPU only: torch's CPU ``_scaled_mm`` takes per-tensor scales
    only. (``torch.nn.functional.scaled_mm``, chapter 11's block-wise contender, calls an operator
    that Dynamo does not trace.)"""

    def __init__(self, linear: torch.nn.Linear, recipe: str):
        super().__init__()
        if recipe not in fnn.RECIPES:
            raise ValueError(f"unknown recipe {recipe!r}: expected one of {', '.join(map(repr, fnn.RECIPES))}")
        self.recipe = recipe
        q, s = quantize(linear.weight.detach(), fnn.RECIPES[recipe][1])
        self.register_buffer("weight", q)
        self.register_buffer("weight_scale", s)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().to(torch.bfloat16))

    def forward(self, x):
        lead, K = x.shape[:-1], x.shape[-1]
        q, scale = quantize(x.reshape(-1, K), fnn.RECIPES[self.recipe][0], impl="torch")
        out = torch._scaled_mm(q, self.weight.t(), scale, self.weight_scale.t(), bias=self.bias,
                               out_dtype=torch.bfloat16, use_fast_accum=self.recipe == "row")
        return out.reshape(*lead, out.shape[-1])


# ---- the layers compared ----------------------------------------------------------------------------

#: The layers of the comparison, by name: (route, recipe); the bf16 layer has neither.
VARIANTS = {"bf16": (None, None), "torch row": ("torch", "row"), "fp8_tutorial row": ("fp8_tutorial", "row"),
            "torch block": ("torch", "block"), "fp8_tutorial block": ("fp8_tutorial", "block")}


def variants(shape: LlamaShape = LLAMA3_8B, names=None, device=None, seed: int = 0) -> dict[str, torch.nn.Module]:
    """The layers of ``names`` (default: every one of ``VARIANTS`` that runs here; the torch route
    needs a CUDA GPU), each a copy of one bf16 layer with random weights (``seed``), its
    projections converted, in eval mode."""
    device = torch.device(device or ("cuda" if ON_GPU else "cpu"))
    if names is None:
        names = [n for n, (route, _) in VARIANTS.items() if route != "torch" or device.type == "cuda"]
    names = list(names)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown layers {unknown}: expected some of {list(VARIANTS)}")
    torch.manual_seed(seed)
    base = DecoderLayer(shape).to(device, torch.bfloat16).eval()
    layers = {}
    for name in names:
        route, recipe = VARIANTS[name]
        layer = copy.deepcopy(base)
        if route == "fp8_tutorial":
            fnn.convert(layer, recipe)
        elif route == "torch":
            fnn.replace_linears(layer, lambda m, r=recipe: ScaledMMLinear(m, r),
                                refusal=fnn.block_refusal if recipe == "block" else None)
        layers[name] = layer
    return layers


#: Tokens of each sequence to prefill, and of each sequence's cache to decode over. At the
#: chapter's smallest M (1024) prefill is two sequences: with one, the batch size would be 1, which
#: torch.compile specializes, and a layer would take a compilation more (each takes seconds).
SEQ, CONTEXT = 512, 1024


@dataclass(frozen=True)
class Inputs:
    """What a layer is called with for ``tokens`` tokens: prefill, ``tokens // seq`` sequences of
    ``seq`` tokens; decode, ``tokens`` sequences of one new token each, with ``context`` cached."""

    phase: str
    tokens: int
    x: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    past: tuple[torch.Tensor, torch.Tensor] | None

    def args(self) -> tuple:
        return (self.x, self.cos, self.sin) + ((self.past,) if self.past is not None else ())


def make_inputs(shape: LlamaShape, phase: str, tokens: int, *, seq: int = SEQ, context: int = CONTEXT,
                outliers: bool = False, device=None, seed: int = 0) -> Inputs:
    """Random bf16 hidden states (and, to decode, a random cache) for ``tokens`` tokens. With
    ``outliers``, as a trained model's residual stream has them: tokens whose magnitudes differ
    by up to 30x, and one channel in 200 a hundred to a thousand times louder than the rest (the
    activations of chapters 02 and 11)."""
    device = torch.device(device or ("cuda" if ON_GPU else "cpu"))
    g = torch.Generator().manual_seed(seed)
    if phase == "prefill":
        if tokens % seq:
            raise ValueError(f"prefill takes whole sequences of {seq} tokens, got {tokens} tokens")
        batch, length, positions, past = tokens // seq, seq, torch.arange(seq), None
    elif phase == "decode":
        batch, length, positions = tokens, 1, torch.tensor([context])
        cache = (tokens, shape.kv_heads, context + 1, shape.head_dim)  # and a slot for the new token
        past = tuple(torch.randn(cache, generator=g).to(device, torch.bfloat16) for _ in range(2))
    else:
        raise ValueError(f"phase is 'prefill' or 'decode', got {phase!r}")
    x = torch.randn(batch, length, shape.hidden, generator=g)
    if outliers:
        x *= 10 ** (torch.rand(batch, length, 1, generator=g) * 1.5 - 0.75)
        loud = torch.randperm(shape.hidden, generator=g)[: max(1, shape.hidden // 200)]
        x[..., loud] *= 10 ** (2 + torch.rand(len(loud), generator=g))
    cos, sin = rope_tables(positions.to(device), shape, torch.bfloat16)
    return Inputs(phase, tokens, x.to(device, torch.bfloat16), cos, sin, past)


def compiled(layer: torch.nn.Module):
    """``layer`` under ``torch.compile(fullgraph=True)``, the number of tokens a dynamic size (one
    compilation for every case, not for every M). In Triton's interpreter, traced only
    (``backend="aot_eager"``): Inductor's code would add nothing to what is checked there.
    ``graphed`` records it in a CUDA graph per M.

    Dynamo keeps one compilation of ``DecoderLayer.forward`` per layer and per case (one token
    or many, prefill or decode), all under the one code object; five layers make about twenty,
    past its default limit of 8 (with ``fullgraph=True`` a hard error), so the limit is raised,
    for the whole process; and Inductor's GEMMs are kept to ATen's (cuBLAS), also for the
    process."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    # Inductor would tune Triton templates in place of cuBLAS's per-row _scaled_mm at every
    # compilation (minutes for the twenty); the torch route stays on cuBLAS, as it is described
    torch._inductor.config.max_autotune_gemm_backends = "ATEN"
    if ON_GPU:
        return torch.compile(layer, fullgraph=True, dynamic=True)
    return torch.compile(layer, fullgraph=True, dynamic=True, backend="aot_eager")


def graphed(fn, args: tuple, warmup: int = 3):
    """``fn(*args)`` as inference engines run a compiled model: recorded once in a CUDA graph (on
    a GPU), then replayed, so that a call costs the host one graph launch, not Dynamo's guards and
    the launches of every kernel. The graph reads ``args`` where they are and writes its output
    in its own memory. The first ``warmup`` calls run first, on a side stream: they compile, and
    choose ``scaled_mm``'s kernels and configurations (timing them), which a graph cannot record.
    Returns a function of no arguments that runs it again (its output, the graph's, is
    overwritten by the next call). It holds ``fn`` and ``args``: the graph reads the layer's
    weights and the inputs by address, and were they freed while it lives, a replay would read
    memory given to other tensors, or unmapped by the next capture's ``empty_cache`` (an illegal
    memory access). Without a GPU, ``fn(*args)`` itself."""
    if not ON_GPU:
        return lambda: fn(*args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)

    def replay():
        graph.replay()
        return out
    replay.holds = (fn, args)
    return replay


def prepare(shape: LlamaShape = LLAMA3_8B, names=None) -> dict[str, tuple]:
    """``variants``' layers, each with its ``compiled`` form: (layer, compiled), by name. ``measure``
    and ``breakdown`` take them, so that what one compiled the other reuses. Dynamo's compilations
    so far are dropped first: they count towards its limit (``compiled``)."""
    torch._dynamo.reset()
    return {n: (layer, compiled(layer)) for n, layer in variants(shape, names).items()}


#: The projections whose outputs are the layer's two branches: attention's and the MLP's, before
#: the residual adds.
BRANCHES = ("self_attn.o_proj", "mlp.down_proj")


def with_branches(layer: torch.nn.Module, args: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """``layer(*args)``, and its branches' outputs (``BRANCHES``, taken by forward hooks), flattened
    and joined, in float32."""
    got = {}
    hooks = [layer.get_submodule(n).register_forward_hook(lambda m, i, o, n=n: got.__setitem__(n, o))
             for n in BRANCHES]
    try:
        out = layer(*args)
    finally:
        for h in hooks:
            h.remove()
    return out.float(), torch.cat([got[n].float().reshape(-1) for n in BRANCHES])


def errors(layers: dict, inputs: Inputs, reference: str = "bf16") -> dict[str, tuple[float, float]]:
    """Each layer's relative (Frobenius) error against the ``reference`` layer, eager, on the same
    inputs: of its output, and of its branches (``with_branches``). The output carries the input
    through the residual connections, and its rounding to bf16 can be as large as what the layer
    adds (``bf16_floor`` measures it); the branches show the layer's own error."""
    from ..checks import rel_error

    with torch.inference_mode():
        ref, ref_branches = with_branches(layers[reference], inputs.args())
        out = {}
        for n, layer in layers.items():
            if n != reference:
                y, branches = with_branches(layer, inputs.args())
                out[n] = (rel_error(y, ref), rel_error(branches, ref_branches))
        return out


def bf16_floor(layer: torch.nn.Module, inputs: Inputs) -> dict[str, float]:
    """What bf16 itself costs the measures of ``errors``: the bf16 ``layer``'s relative error
    against a float32 copy of it on the same inputs, of its output, of its update (output less
    input) and of its branches."""
    from ..checks import rel_error

    wide = copy.deepcopy(layer).float()
    args32 = tuple(tuple(t.float() for t in a) if isinstance(a, tuple) else a.float() for a in inputs.args())
    with torch.inference_mode():
        y, branches = with_branches(layer, inputs.args())
        y32, branches32 = with_branches(wide, args32)
    x = inputs.x.float()
    return dict(output=rel_error(y, y32), update=rel_error(y - x, y32 - x), branches=rel_error(branches, branches32))


def refusals(layers: dict, args: tuple) -> dict[str, str]:
    """The layers that cuBLAS refuses to run on ``args`` (``CUBLAS_STATUS_NOT_SUPPORTED``), each
    with the first line of its error: its block-wise FP8 path refused one and two tokens on the
    H200, so the torch route's block-wise layer has no time at M = 1 and 2 there. Each layer is
    called once, eagerly; any other error is raised."""
    out = {}
    with torch.inference_mode():
        for n, layer in layers.items():
            try:
                layer(*args)
            except RuntimeError as e:
                if "CUBLAS_STATUS_NOT_SUPPORTED" not in str(e):
                    raise
                out[n] = str(e).strip().splitlines()[0][:160]
    return out


# ---- timing ---------------------------------------------------------------------------------------

PREFILL_TOKENS = [1024, 2048, 4096, 8192, 16384]
DECODE_TOKENS = [1, 2, 4, 8, 16, 32, 64]
RESULTS = "model"  # results/model_<gpu>.json


def _calls(tokens: int, phase: str) -> tuple[int, int]:
    """(calls a batch, rounds) of ``api_benchmark``: fewer calls a batch where a call takes
    milliseconds, and more rounds, whose median then holds against the clock's swings under load
    (with 5 rounds, a layer's 10th and 90th percentiles were up to 7% apart at prefill 4096)."""
    return (50, 10) if phase == "decode" or tokens <= 2048 else (10, 15)


def measure(shape: LlamaShape = LLAMA3_8B, prefill=PREFILL_TOKENS, decode=DECODE_TOKENS, names=None,
            progress: bool = True, seq: int = SEQ, context: int = CONTEXT, prepared: dict | None = None) -> list[dict]:
    """One record per phase, M (tokens) and layer: its time per call back to back
    (``bench.api_benchmark``: each layer compiled and replayed from a CUDA graph recorded for that
    M, ``graphed``, as inference engines run a compiled model; the layers interleaved round by
    round), and its errors against the bf16 layer (``errors``) on plain random hidden states and
    on hidden states with outliers (``make_inputs``: sequences of ``seq`` tokens to prefill, a
    cache of ``context`` to decode). A layer that cuBLAS refuses at some M (``refusals``) has no
    record there. ``prepared``: ``prepare(shape, names)``'s layers, made here where not given."""
    from .bench import api_benchmark, require_gpu

    require_gpu("timing a model's layer")
    _profile_graphs_later()
    prepared = prepared or prepare(shape, names)
    layers = {n: layer for n, (layer, _) in prepared.items()}
    fns = {n: fn for n, (_, fn) in prepared.items()}
    records = []
    with torch.inference_mode():
        for phase, ms in (("decode", decode), ("prefill", prefill)):
            for M in ms:
                inputs = make_inputs(shape, phase, M, seq=seq, context=context)
                args = inputs.args()
                refused = refusals(layers, args)
                if progress and refused:
                    print("\n".join(f"{phase:<8} M={M:<6} {n} left out: {why}" for n, why in refused.items()),
                          flush=True)
                here = {n: layer for n, layer in layers.items() if n not in refused}
                calls, rounds = _calls(M, phase)
                runs = {n: graphed(f, args) for n, f in fns.items() if n in here}
                timed = api_benchmark(runs, calls=calls, rounds=rounds, flops=shape.gemm_flops(M))
                errs = {kind: errors(here, make_inputs(shape, phase, M, seq=seq, context=context,
                                                       outliers=kind == "outliers"))
                        for kind in ("plain", "outliers")}
                for n, r in timed.items():
                    records.append(dict(phase=phase, tokens=M, layer=n, us=r.median_us, p10_us=r.p10_us,
                                        p90_us=r.p90_us, host_us=r.host_us,
                                        errors={kind: dict(zip(("output", "branches"), e[n]))
                                                for kind, e in errs.items() if n in e}))
                if progress:
                    print(f"{phase:<8} M={M:<6} " + "  ".join(f"{n} {timed[n].median_us:7.0f} us" for n in timed),
                          flush=True)
                del inputs, args, runs  # the graphs and their memory
    return records


#: Kernel names by what they do: the GEMMs (the book's kernels, cuBLAS's, with its split-K
#: reduction, and CUTLASS's); the quantization of the input: the book's kernels (``quantize_*``,
#: ``partial_amax_kernel``) and, on the torch route, Inductor's kernels that take the input's amax
#: or clamp it to FP8's range (a norm or SwiGLU's product may be fused in). Other Inductor kernels
#: are the rest, also softmax's, whose names hold ``amax`` too, and those whose names hold
#: ``quantize`` (Inductor names a kernel after the operations it feeds as well: the norm before
#: the book's quantization), as seen on the H200. Attention's kernels (FlashAttention's, cuDNN's)
#: come first: their names can hold a GEMM's words.
ATTENTION_NAMES = ("flash", "sdpa", "attention", "fmha")
GEMM_NAMES = ("gluon_", "swapped", "tma_", "persistent", "tiled", "streamk", "ws_kernel", "gemm", "nvjet", "cutlass",
              "xmma", "triton_tem", "splitkreduce")


def kind_of(kernel: str) -> str:
    """"GEMM", "quantization" or "rest", from a kernel's name (``ATTENTION_NAMES``, ``GEMM_NAMES``;
    the quantization's as said above)."""
    low = kernel.lower()
    if any(k in low for k in ATTENTION_NAMES):
        return "rest"
    if any(k in low for k in GEMM_NAMES):
        return "GEMM"
    if low.startswith(("quantize", "partial_amax")):
        return "quantization"
    if low.startswith("triton_") and ("clamp" in low or ("amax" in low and "softmax" not in low)):
        return "quantization"
    return "rest"


def profiled(run, calls: int):
    """``torch.profiler``'s record of the GPU's work in ``calls`` calls of ``run()`` back to back
    (a function of no arguments, a CUDA graph's replay or a layer's call)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    return prof


def kernel_times(run, calls: int = 20) -> list[tuple[float, int, str]]:
    """The GPU kernels of ``run()`` (``profiled``) over ``calls`` calls: (microseconds per call,
    launches per call, name) for each kernel, the longest first."""
    prof = profiled(run, calls)
    return sorted(((e.self_device_time_total / calls, e.count // calls, e.key) for e in prof.key_averages()
                   if e.device_type == torch.autograd.DeviceType.CUDA and e.self_device_time_total > 0),
                  reverse=True)


def breakdown(shape: LlamaShape = LLAMA3_8B, tokens=((("decode", 16), ("prefill", 4096))), names=None,
              calls: int = 20, prepared: dict | None = None) -> list[dict]:
    """Where each compiled layer's GPU time goes, from ``torch.profiler``: the kernels' time per
    call, replayed from the layer's CUDA graph (``graphed``), summed by ``kind_of``, one record per
    (phase, M, layer, kind), with the kernels' names; a layer that cuBLAS refuses at that M
    (``refusals``) has none. ``prepared`` as ``measure`` takes it."""
    from .bench import require_gpu

    require_gpu("profiling a model's layer")
    _profile_graphs_later()
    prepared = prepared or prepare(shape, names)
    records = []
    with torch.inference_mode():
        for phase, M in tokens:
            args = make_inputs(shape, phase, M).args()
            refused = refusals({n: layer for n, (layer, _) in prepared.items()}, args)
            for n, (_, fn) in prepared.items():
                if n in refused:
                    continue
                kinds: dict[str, dict] = {}
                for us, _, key in kernel_times(graphed(fn, args), calls):
                    k = kinds.setdefault(kind_of(key), dict(us=0.0, kernels=[]))
                    k["us"] += us
                    k["kernels"].append(key)
                if not kinds:
                    raise RuntimeError(f"the profiler saw no kernel of {n} ({phase}, M = {M})")
                for kind, k in kinds.items():
                    records.append(dict(phase=phase, tokens=M, layer=n, kind=kind, us=k["us"],
                                        kernels=sorted(set(k["kernels"]))))
    return records


class Run(NamedTuple):
    """What ``or_load`` returns: the timing records, the breakdown's, where they come from, and the
    GPU they were measured on ("" where none was)."""

    records: list
    breakdown: list
    where: str
    gpu: str


def _profile_graphs_later() -> None:
    """Let the profiler see the kernels of CUDA graphs recorded from here on: graphs recorded
    before the profiler's first use in a process may not show their kernels to it."""
    from torch.profiler import _utils

    if torch.cuda.is_available():
        _utils._init_for_cuda_graphs()


def or_load(shape: LlamaShape = LLAMA3_8B, names=None) -> Run:
    """``measure`` and ``breakdown`` now on a Hopper GPU (saved to ``results/model_<gpu>.json``),
    else the H200's recorded run; without either, empty records and a note saying so."""
    from . import results

    if ON_GPU and torch.cuda.get_device_capability()[0] == 9:
        prepared = prepare(shape, names)
        records = measure(shape, names=names, prepared=prepared)
        results.save(RESULTS, records, breakdown=[], shape=asdict(shape))  # kept, should the profile fail
        parts = breakdown(shape, names=names, prepared=prepared)
        path = results.save(RESULTS, records, breakdown=parts, shape=asdict(shape))
        gpu = results.load(RESULTS, results.gpu_slug())["environment"]["gpu"]
        return Run(records, parts, f"measured now, saved to results/{path.name}", gpu)
    try:
        saved = results.load(RESULTS)
    except FileNotFoundError as e:
        return Run([], [], f"nothing to show: no Hopper GPU here, and {e}", "")
    return Run(saved["records"], saved["breakdown"], "recorded on " + results.provenance(saved),
               saved["environment"]["gpu"])


# ---- tables -------------------------------------------------------------------------------------

def _by(records: list[dict]) -> dict:
    return {(r["phase"], r["tokens"], r["layer"]): r for r in records}


def table(records: list[dict], phase: str) -> str:
    """Microseconds per layer call at each M of ``phase``: bf16's, and for each recipe the torch
    route's and the book's, with the book's speed-up over bf16 and over the torch route."""
    by = _by(records)

    def us(M, name):
        r = by.get((phase, M, name))
        return None if r is None else r["us"]

    def cell(value, width, fmt, unit=""):
        return f"{'-':>{width}}" if value is None else f"{value:>{width - len(unit)}{fmt}}{unit}"

    groups = "".join(f"  {'--- ' + recipe + ' ---':^33}" for recipe in ("per row", "block-wise"))
    lines = [f"{phase}: microseconds per layer call; x: the book's layer's speed-up", f"{'':>15}{groups}".rstrip(),
             f"{'M':>6} {'bf16':>8}" + f"   {'torch':>8} {'fp8_tut.':>8} {'x bf16':>7} {'x torch':>7}" * 2]
    for M in sorted({k[1] for k in by if k[0] == phase}):
        line = f"{M:>6} {cell(us(M, 'bf16'), 8, '.0f')}"
        for recipe in ("row", "block"):
            ours, torch_, bf16 = us(M, f"fp8_tutorial {recipe}"), us(M, f"torch {recipe}"), us(M, "bf16")
            line += (f"   {cell(torch_, 8, '.0f')} {cell(ours, 8, '.0f')}"
                     f" {cell(bf16 / ours if bf16 and ours else None, 7, '.2f', 'x')}"
                     f" {cell(torch_ / ours if torch_ and ours else None, 7, '.2f', 'x')}")
        lines.append(line)
    return "\n".join(lines)


def error_table(records: list[dict], inputs: str = "outliers") -> str:
    """Each FP8 layer's error against the bf16 layer at each M, on ``inputs`` ("plain" or
    "outliers"): of the output, and of the layer's branches (``with_branches``)."""
    by = _by(records)
    layers = [n for n in VARIANTS if n != "bf16" and any(k[2] == n for k in by)]
    lines = [f"relative error against the bf16 layer, {inputs} hidden states:",
             "of the output | of the branches (attention's and the MLP's outputs, before the residual adds)",
             f"{'phase':>7} {'M':>5}" + "".join(f" {n.replace('fp8_tutorial', 'fp8_tut.'):>17}" for n in layers)]
    for phase, M in sorted({k[:2] for k in by}, key=lambda k: (k[0] != "decode", k[1])):
        cells = []
        for n in layers:
            e = by.get((phase, M, n), {}).get("errors", {}).get(inputs)
            cells.append(f" {e['output']:>8.1e}|{e['branches']:>8.1e}" if e else f" {'-':>17}")
        lines.append(f"{phase:>7} {M:>5}" + "".join(cells))
    return "\n".join(lines)


def summary(records: list[dict]) -> dict:
    """Against the chapter's targets: for each FP8 layer of the book, the lowest speed-up over bf16
    and over the torch route of its recipe, per phase; and, for each kind of hidden states, the
    largest ratio of block-wise's error to per row's over the M measured (of the branches, the
    layer's own error; at most 1 where block-wise's is at most per row's at every M)."""
    by = _by(records)
    out = {}
    for phase in ("prefill", "decode"):
        for recipe in ("row", "block"):
            ours = [(k[1], r["us"]) for k, r in by.items() if k[0] == phase and k[2] == f"fp8_tutorial {recipe}"]
            if not ours:
                continue
            vs_bf16 = [by[(phase, M, "bf16")]["us"] / us for M, us in ours if (phase, M, "bf16") in by]
            vs_torch = [by[(phase, M, f"torch {recipe}")]["us"] / us for M, us in ours
                        if (phase, M, f"torch {recipe}") in by]
            out[f"{phase} {recipe}"] = dict(min_vs_bf16=min(vs_bf16, default=math.nan),
                                            min_vs_torch=min(vs_torch, default=math.nan))
    ratios: dict[str, list[float]] = {}
    for k, r in by.items():
        row = by.get((k[0], k[1], "fp8_tutorial row"))
        if k[2] == "fp8_tutorial block" and row:
            for kind, e in r["errors"].items():
                ratios.setdefault(kind, []).append(e["branches"] / row["errors"][kind]["branches"])
    out["block error over row's"] = {kind: max(v) for kind, v in ratios.items()}
    return out


def breakdown_table(parts: list[dict]) -> str:
    """Microseconds per call by kind of kernel, for each (phase, M) profiled and layer."""
    rows: dict = {}
    for p in parts:
        rows.setdefault((p["phase"], p["tokens"], p["layer"]), {})[p["kind"]] = p["us"]
    kinds = ["GEMM", "quantization", "rest"]
    lines = ["GPU time per layer call by kind of kernel (microseconds)",
             f"{'phase':>8} {'M':>6} {'layer':>20} " + " ".join(f"{k:>13}" for k in kinds) + f" {'total':>9}"]
    for (phase, M, layer), k in rows.items():
        lines.append(f"{phase:>8} {M:>6} {layer:>20} " + " ".join(f"{k.get(kind, 0.0):13.1f}" for kind in kinds)
                     + f" {sum(k.values()):9.1f}")
    return "\n".join(lines)
