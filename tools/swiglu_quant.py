"""What chapter 12's MLP spends quantizing SwiGLU's product, and what one kernel of ours would.

In chapter 12's layers the down projection's input is ``silu(gate) * up`` of the gate-and-up
projection's output (M, 2 x 14336), quantized for the next GEMM. Under ``torch.compile`` Inductor
fuses the product with the quantization (amax, scale, clamp, cast) into one kernel, on both FP8
routes alike. This times that kernel against ``swiglu_quantize_kernel`` below, which reads the
gate and up halves, forms the product in float32 and quantizes it (per row: a row's 14336 values
held in registers, so read once; "1x128": one group of 128 columns per program row), in the
kernel harness (``bench.benchmark``, interleaved, L2 flushed), with a copy of the same bytes for
the bandwidth. Both are checked first against the float32 definition. Then the MLP as a model
calls it (``bench.api_benchmark``, compiled, replayed from CUDA graphs, as chapter 12 times its
layers): the chapter's converted MLP against ``FusedMLP``, which quantizes the down projection's
input with this kernel.

    python3 tools/swiglu_quant.py [M ...]        # default: 1024 4096 16384

Saves ``results/swiglu_quant_<gpu>.json``. Without a GPU it runs the checks only, in Triton's
interpreter, at small sizes.
"""
import sys

import torch
import torch.nn.functional as F

import fp8_tutorial  # noqa: F401  (first: it sets Triton's interpreter up where there is no GPU)

import triton  # noqa: I001
import triton.language as tl

from fp8_tutorial._env import ON_GPU
from fp8_tutorial.kernels.quantize import cast_fp8, group_amax, scales_from_amax
from fp8_tutorial.quant import AMAX_FLOOR, FP8_MAX, GROUP, m_major_scales, quantize

NAME = "swiglu_quant"
INTERMEDIATE = 14336


@triton.jit
def swiglu_quantize_kernel(gu_ptr, q_ptr, s_ptr, M, I, stride_gm, stride_qm, stride_sm, stride_sk,
                           FP8_MAX: tl.constexpr, AMAX_FLOOR: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_K: tl.constexpr):
    """``silu(gu[:, :I]) * gu[:, I:]`` quantized in groups of BLOCK_K columns (a whole row where
    BLOCK_K >= I) and one row: program (i, j) takes BLOCK_M rows of the j-th group, read once."""
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < M)[:, None] & (cols < I)[None, :]
    g_ptrs = gu_ptr + rows[:, None] * stride_gm + cols[None, :]
    g = tl.load(g_ptrs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(g_ptrs + I, mask=mask, other=0.0).to(tl.float32)
    h = g * tl.sigmoid(g) * u
    scale, inv = scales_from_amax(group_amax(h, 1), FP8_MAX, AMAX_FLOOR)
    tl.store(s_ptr + rows * stride_sm + tl.program_id(1) * stride_sk, scale, mask=rows < M)
    q = cast_fp8(h, inv[:, None], FP8_MAX, q_ptr.dtype.element_ty)
    tl.store(q_ptr + rows[:, None] * stride_qm + cols[None, :], q, mask=mask)


def swiglu_quantize(gu: torch.Tensor, granularity: str, dtype=torch.float8_e4m3fn):
    M, I = gu.shape[0], gu.shape[1] // 2
    q = torch.empty((M, I), dtype=dtype, device=gu.device)
    if granularity == "row":
        s = torch.empty((M, 1), dtype=torch.float32, device=gu.device)
        BLOCK_M, BLOCK_K, warps = 1, triton.next_power_of_2(I), 16
    else:
        s = m_major_scales(M, I // GROUP, gu.device)
        BLOCK_M, BLOCK_K, warps = 32, GROUP, 8
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(I, BLOCK_K))
    swiglu_quantize_kernel[grid](gu, q, s, M, I, gu.stride(0), q.stride(0), s.stride(0), s.stride(1),
                                 FP8_MAX=FP8_MAX[dtype], AMAX_FLOOR=AMAX_FLOOR, BLOCK_M=BLOCK_M,
                                 BLOCK_K=BLOCK_K, num_warps=warps)
    return q, s


@torch.library.custom_op("swiglu_quant_tool::swiglu_quantize", mutates_args=())
def swiglu_quantize_op(gu: torch.Tensor, granularity: str) -> tuple[torch.Tensor, torch.Tensor]:
    return swiglu_quantize(gu, granularity)


@swiglu_quantize_op.register_fake
def _(gu, granularity):
    M, I = gu.shape[0], gu.shape[1] // 2
    s = (m_major_scales(M, I // GROUP, gu.device, gu.new_empty_strided) if granularity == "1x128"
         else gu.new_empty((M, 1), dtype=torch.float32))
    return gu.new_empty((M, I), dtype=torch.float8_e4m3fn), s


class FusedMLP(torch.nn.Module):
    """A converted ``model.MLP`` whose down projection's input is quantized by
    ``swiglu_quantize`` (an operator of its own) from the gate-and-up output."""

    def __init__(self, mlp, recipe):
        super().__init__()
        self.gate_up_proj, self.down_proj, self.recipe = mlp.gate_up_proj, mlp.down_proj, recipe

    def forward(self, x):
        from fp8_tutorial import scaled_mm
        from fp8_tutorial.nn import RECIPES
        gu = self.gate_up_proj(x)
        lead = gu.shape[:-1]
        q, s = swiglu_quantize_op(gu.reshape(-1, gu.shape[-1]), RECIPES[self.recipe][0])
        d = self.down_proj
        out = scaled_mm(q, d.weight.t(), s, d._scale_b(), out_dtype=d.out_dtype)
        return out.reshape(*lead, out.shape[-1])


def mlp_times(M: int, say, records):
    """Chapter 12's MLP at M tokens, converted, compiled and replayed from a CUDA graph as the
    chapter times its layers: as the chapter runs it, and with ``FusedMLP``; per recipe."""
    import copy

    from fp8_tutorial import nn as fnn
    from fp8_tutorial.measure import bench, model
    shape = model.LLAMA3_8B
    torch.manual_seed(0)
    base = model.MLP(shape).to("cuda", torch.bfloat16).eval()
    x = torch.randn((M // model.SEQ, model.SEQ, shape.hidden), dtype=torch.bfloat16, device="cuda")
    runs, outs = {}, {}
    with torch.inference_mode():
        for recipe in ("row", "block"):
            mlp = fnn.convert(copy.deepcopy(base), recipe)
            for name, m in ((f"chapter {recipe}", mlp), (f"fused {recipe}", FusedMLP(mlp, recipe))):
                fn = model.compiled(m)
                outs[name] = fn(x).float()
                runs[name] = model.graphed(fn, (x,))
        for recipe in ("row", "block"):
            a, b = outs[f"chapter {recipe}"], outs[f"fused {recipe}"]
            say(f"M={M:<6} MLP {recipe}: fused against the chapter's, relative difference "
                f"{((a - b).norm() / a.norm()).item():.1e}")
        flops = 2 * M * shape.hidden * 3 * shape.intermediate
        timed = bench.api_benchmark(runs, calls=10 if M > 2048 else 50, rounds=15, flops=flops)
    for n, r in timed.items():
        say(f"    {r}")
        records.append(dict(M=M, part="mlp", contender=n, **r.as_dict()))
    for recipe in ("row", "block"):
        say(f"    MLP {recipe}: chapter / fused {timed[f'chapter {recipe}'].median_us / timed[f'fused {recipe}'].median_us:.3f}x")


def definition(gu: torch.Tensor, granularity: str):
    gate, up = gu.float().chunk(2, dim=-1)
    return quantize(F.silu(gate) * up, granularity, impl="torch")


def inductor(granularity: str):
    """The layer's step as both FP8 routes run it: torch operations, which Inductor fuses."""
    def step(gu):
        gate, up = gu.chunk(2, dim=-1)
        return quantize(F.silu(gate) * up, granularity, impl="torch")
    return torch.compile(step, fullgraph=True, dynamic=False) if ON_GPU else step


def check(gu: torch.Tensor, granularity: str, fn) -> float:
    """The relative difference of ``fn``'s dequantized output from the definition's; its scales
    within 8e-3 of the definition's (torch's eager operations round SwiGLU's product to bfloat16,
    2^-8 apart, where the definition and Inductor keep float32)."""
    q, s = fn(gu)
    rq, rs = definition(gu, granularity)
    if not torch.allclose(s, rs, rtol=8e-3, atol=0):
        raise AssertionError(f"{granularity}: scales differ by up to {((s - rs).abs() / rs).max().item():.2e}")
    width = gu.shape[1] // 2 if granularity == "row" else GROUP
    d = (q.float() * s.repeat_interleave(width, 1)) - (rq.float() * rs.repeat_interleave(width, 1))
    ref = rq.float() * rs.repeat_interleave(width, 1)
    err = (d.norm() / ref.norm()).item()
    if err > 2e-2:
        raise AssertionError(f"{granularity}: relative difference {err:.2e}")
    return err


def main():
    sizes = [int(a) for a in sys.argv[1:]] or ([1024, 4096, 16384] if ON_GPU else [3, 64])
    I = INTERMEDIATE if ON_GPU else 384
    records, log = [], []

    def say(line):
        print(line, flush=True)
        log.append(line)

    for M in sizes:
        gu = torch.randn((M, 2 * I), dtype=torch.bfloat16, device="cuda" if ON_GPU else "cpu")
        gu[:, :: 97] *= 40  # a few loud channels
        for gran in ("row", "1x128"):
            ours = lambda x, g=gran: swiglu_quantize(x, g)  # noqa: E731
            theirs = inductor(gran)
            errs = {n: check(gu, gran, f) for n, f in (("ours", ours), ("inductor", theirs))}
            say(f"M={M:<6} {gran:<6} checked against the float32 definition: ours {errs['ours']:.1e}, "
                f"inductor {errs['inductor']:.1e}")
            if not ON_GPU:
                continue
            from fp8_tutorial.measure import bench
            nbytes = gu.numel() * 2 + M * I + M * (I // GROUP if gran == "1x128" else 1) * 4
            copy_src = torch.empty(nbytes // 2, dtype=torch.int8, device="cuda")
            copy_dst = torch.empty_like(copy_src)
            timed = bench.benchmark({"inductor": lambda: theirs(gu), "ours": lambda: ours(gu),
                                     "copy": lambda: copy_dst.copy_(copy_src)}, bytes=nbytes)
            for n, r in timed.items():
                say(f"    {r}")
                records.append(dict(M=M, I=I, granularity=gran, contender=n, **r.as_dict()))
            say(f"    ours / inductor: {timed['inductor'].median_ms / timed['ours'].median_ms:.2f}x")
        if ON_GPU and M >= 1024:
            mlp_times(M, say, records)
    if ON_GPU:
        from fp8_tutorial.measure import results
        print("saved to", results.save(NAME, records, log=log))


if __name__ == "__main__":
    main()
