"""Where chapter 12's layer time goes, kernel by kernel, and what fusing the input's quantization
into Inductor's kernels buys (a Hopper GPU is needed).

The first run of ``model.measure`` on the H200 (``results/model_reduce_overhead_h200.json``, not
in the book) timed the book's layers at 0.90x the bf16 layer at M = 32 and 0.62 to 0.63x at M = 64
in decode, with the torch route at 1.13x and 0.88x bf16 there, and every layer's host time at 120
to 320 us a call (then under ``mode="reduce-overhead"``; ``model.graphed`` has replaced it
since); in prefill the book's per-row layer was 0.98x the torch route's at M = 4096 and 16384. Since then ``FP8Linear`` under
``torch.compile`` quantizes its input with torch operations that Inductor fuses into the kernel
before it (``fuse_quantization``), as the torch route's layer does. This prints:

1. each layer's time per call back to back (``model.measure``: compiled, replayed from a CUDA
   graph), the book's layers both with the quantization fused (``FP8Linear``'s default) and with
   its own kernel (``fuse_quantization=False``, "kernel q."), at the decode M asked for and at
   prefill M = 1024 and 16384;
2. for each layer at the largest decode M: the compiled layer's kernels by GPU time per call
   (``torch.profiler``, the layer's CUDA graph replayed), and the eager layer's;
3. the four projections alone through the API at that M (``FP8Linear``, eager, after its
   quantization; ``torch._scaled_mm`` after the torch route's), back to back.

    python3 tools/model_decode.py [M ...]      # decode M; default: 1 16 32 64

On the H200 (2026-12-05, the attention over a cache with a free slot; log only, no results file),
time per layer call in us, fused quantization (the default) against the quantization kernel ("kernel
q."): per row, decode M = 1, 16, 64: 126 / 126, 121 / 122, 185 / 187; prefill 1024 and 16384: 446 /
433, 6744 / 6808. Block-wise: decode 127 / 124, 127 / 125, 198 / 195; prefill 529 / 522, 8447 /
8365: the kernel was the faster on all five block-wise cells, by 1 to 2.4%, and on one of five per
row (prefill 1024, by 2.9%). bf16 154, 160, 221, 710, 11537; the torch route 165, 148, 203, 477,
6848 per row and -, 141, 215, 530, 8268 block-wise. At decode M = 64 the bf16 layer's kernels took
228 us a call, cuDNN's attention kernel 77 of them, its four GEMMs 136.
"""
import copy
import sys

import torch

import fp8_tutorial as fp8
from fp8_tutorial import nn as fnn
from fp8_tutorial.measure import model
from fp8_tutorial.measure.bench import api_benchmark

LAYERS = ["bf16", "torch row", "fp8_tutorial row", "torch block", "fp8_tutorial block"]
PREFILL = [1024, 16384]


def kernels(fn, args, calls=20, top=14):
    """The ``top`` kernels of ``fn(*args)`` by GPU time per call (``model.kernel_times``, after three
    calls unprofiled), with their kind (``model.kind_of``)."""
    for _ in range(3):
        fn(*args)
    rows = model.kernel_times(lambda: fn(*args), calls)
    total = sum(r[0] for r in rows)
    print(f"    GPU time per call {total:.1f} us")
    for us, count, key in rows[:top]:
        print(f"    {us:8.1f} us {count:3d}x {model.kind_of(key):<12} {key[:110]}")


def projections(layer, M):
    """The layer's projections alone, back to back: the book's route and the torch route's GEMM."""
    x = {n: torch.randn(M, lin.in_features, device="cuda", dtype=torch.bfloat16)
         for n, lin in layer.named_modules() if isinstance(lin, (torch.nn.Linear, fnn.FP8Linear))}
    fns = {}
    for n, m in layer.named_modules():
        if isinstance(m, fnn.FP8Linear):
            fns[f"{n} fp8_tutorial"] = (lambda m=m, n=n: m(x[n]))
            ref = model.ScaledMMLinear.__new__(model.ScaledMMLinear)
            torch.nn.Module.__init__(ref)
            ref.recipe, ref.weight, ref.weight_scale, ref.bias = m.recipe, m.weight, m.weight_scale, m.bias
            fns[f"{n} torch"] = (lambda ref=ref, n=n: ref(x[n]))
    with torch.inference_mode():
        timed = api_benchmark(fns, calls=50, rounds=5)
    for name, r in timed.items():
        print(f"    {name:<32} {r.median_us:7.1f} us  host {r.host_us:6.1f} us")


def with_kernel_quantization(prepared: dict) -> dict:
    """``prepared`` with, beside each of the book's layers, a copy whose ``FP8Linear`` layers keep
    the quantization kernel under ``torch.compile`` (``fuse_quantization=False``)."""
    out = dict(prepared)
    for name, (layer, _) in prepared.items():
        if name.startswith("fp8_tutorial"):
            twin = copy.deepcopy(layer)
            for m in twin.modules():
                if isinstance(m, fnn.FP8Linear):
                    m.fuse_quantization = False
            out[f"{name}, kernel q."] = (twin, model.compiled(twin))
    return out


def main():
    Ms = [int(a) for a in sys.argv[1:]] or [1, 16, 32, 64]
    model._profile_graphs_later()  # before any graph is recorded, or the profiler may not see its kernels
    prepared = with_kernel_quantization(model.prepare(model.LLAMA3_8B, LAYERS))
    print("1. time per layer call (us), back to back, each layer compiled and replayed from a CUDA graph",
          flush=True)
    records = model.measure(model.LLAMA3_8B, prefill=PREFILL, decode=Ms, prepared=prepared)
    names = list(prepared)
    print(f"{'phase':>8} {'M':>6} " + " ".join(f"{n.replace('fp8_tutorial', 'fp8_tut.'):>24}" for n in names))
    by = {(r["phase"], r["tokens"], r["layer"]): r["us"] for r in records}
    for phase, ms in (("decode", Ms), ("prefill", PREFILL)):
        for M in ms:
            print(f"{phase:>8} {M:>6} " + " ".join(f"{by[(phase, M, n)]:24.1f}" if (phase, M, n) in by
                                                   else f"{'-':>24}" for n in names))
    M = max(Ms)
    with torch.inference_mode():
        args = model.make_inputs(model.LLAMA3_8B, "decode", M).args()
        refused = model.refusals({n: layer for n, (layer, _) in prepared.items()}, args)
        for name, (layer, fn) in prepared.items():
            if name in refused:
                continue
            print(f"2. decode M={M} {name}, compiled, replayed from a CUDA graph:", flush=True)
            kernels(model.graphed(fn, args), ())
            print(f"2. decode M={M} {name}, eager:", flush=True)
            kernels(layer, args)
        print(f"3. decode M={M}: projections alone", flush=True)
        projections(prepared["fp8_tutorial row"][0], M)


if __name__ == "__main__":
    if not fp8.ON_GPU:
        sys.exit("tools/model_decode.py needs a GPU")
    main()
