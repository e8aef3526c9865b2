"""Where chapter 12's decode time goes, kernel by kernel (a Hopper GPU is needed).

The first run of ``model.measure`` on the H200 (2026-12-05, not in the book) timed the book's
layers at 0.90x the bf16 layer at M = 32 and 0.63x at M = 64 in decode, with the torch route at
0.89x and 1.13x bf16 there, and every layer's host time near 200 us a call (then under
``mode="reduce-overhead"``; ``model.graphed`` has replaced it since). This prints, for each layer
asked for and each M: the compiled layer's kernels by GPU time per call (``torch.profiler``, the
layer's CUDA graph replayed), the eager layer's, and the layer's four projections alone through the API
(``fp8_tutorial.scaled_mm`` after ``quantize``, and ``torch._scaled_mm`` after the torch route's
quantization), back to back.

    python3 tools/model_decode.py [M ...]      # default: 16 32 64
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import fp8_tutorial as fp8
from fp8_tutorial import nn as fnn
from fp8_tutorial.measure import model
from fp8_tutorial.measure.bench import api_benchmark

LAYERS = ["bf16", "torch row", "fp8_tutorial row"]


def kernels(fn, args, calls=20, top=14):
    """The ``top`` kernels of ``fn(*args)`` by GPU time per call, with their kind (``model.kind_of``)."""
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    rows = [(e.self_device_time_total / calls, e.count // calls, e.key) for e in prof.key_averages()
            if e.device_type == torch.autograd.DeviceType.CUDA and e.self_device_time_total > 0]
    rows.sort(reverse=True)
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


def main():
    Ms = [int(a) for a in sys.argv[1:]] or [16, 32, 64]
    model._profile_graphs_later()  # before any graph is recorded, or the profiler may not see its kernels
    prepared = model.prepare(model.LLAMA3_8B, LAYERS)
    with torch.inference_mode():
        for M in Ms:
            args = model.make_inputs(model.LLAMA3_8B, "decode", M).args()
            for name, (layer, fn) in prepared.items():
                print(f"decode M={M} {name}, compiled, replayed from a CUDA graph:", flush=True)
                kernels(model.graphed(fn, args), ())
                print(f"decode M={M} {name}, eager:", flush=True)
                kernels(layer, args)
            print(f"decode M={M}: projections alone", flush=True)
            projections(prepared["fp8_tutorial row"][0], M)


if __name__ == "__main__":
    if not fp8.ON_GPU:
        sys.exit("tools/model_decode.py needs a GPU")
    main()
