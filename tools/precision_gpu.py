"""Chapter 10's measurements on a Hopper GPU, in one process.

1. Error against float64 as K grows (``measure.accuracy.error_vs_k``) for every way of summing,
   and the probe of the bits the tensor cores' running sum keeps.
2. The precise Gluon configurations (``ws_gluon.GLUON_PRECISE_CONFIGS`` and the candidates below),
   each launched with its configuration fixed, against cuBLAS precise and fast, timed together on
   the reference cells (``bench.benchmark``: interleaved, L2 flushed), with their errors.

Writes ``$OUT/accumulation.json`` and ``$OUT/precise_sweep.json``; prints a summary.

    OUT=/tmp/out python3 tools/precision_gpu.py [study] [sweep]
"""
import json
import os
import sys
import time

import torch

from fp8_tutorial import checks, environment
from fp8_tutorial.gemm import check_operands
from fp8_tutorial.kernels import ws_gluon as W
from fp8_tutorial.measure import accuracy, bench
from fp8_tutorial.measure import contenders as C

OUT = os.environ.get("OUT", "/tmp/out")
KS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
SHAPES = C.SEED_SHAPES + [(8192, 8192, 8192)]
G = W.make_gluon_config
EXTRA = [G("cooperative", 128, 128, 128, 6, warps=8, promote=2),
         G("cooperative", 128, 128, 128, 6, warps=8, promote=4),
         G("cooperative", 128, 128, 128, 6, warps=8, split=True, promote=2),
         G("cooperative", 128, 256, 128, 4, group_m=16, warps=8, store_n=64),
         G("pingpong", 128, 128, 128, 6, store_n=32)]


def study():
    t = time.time()
    records = accuracy.error_vs_k(KS, progress=True)
    runs = accuracy.methods()
    probes = {name: accuracy.probe(runs[name]) for name in runs}
    data = dict(environment=environment().as_dict(), records=records, probe=probes)
    with open(os.path.join(OUT, "accumulation.json"), "w") as f:
        json.dump(data, f, indent=1)
    print(f"study: {len(records)} records in {time.time() - t:.0f} s", flush=True)
    for kind in accuracy.KINDS:
        for recipe in ("tensor", "row"):
            print(f"{kind} {recipe}: " + "  ".join(
                f"{r['method'].replace('promoted every ', 'p')}@{r['K']}={r['rel_error']:.2e}"
                for r in records if r["kind"] == kind and r["recipe"] == recipe and r["K"] in (4096, 65536)))
    for name, p in probes.items():
        print(f"probe {name:<24}", " ".join(f"{x['kept']:.2f}" for x in p))


def sweep(reps=20):
    t = time.time()
    configs = W.GLUON_PRECISE_CONFIGS + EXTRA
    rows = []
    for M, K, N in SHAPES:
        for recipe in ("tensor", "row"):
            p = C.make_problem(M, K, N, recipe, device="cuda")
            ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
            fns, errors = {}, {}
            for precise in (False, True):
                name = "cublas " + ("precise" if precise else "fast")
                fns[name] = (lambda precise: lambda: torch._scaled_mm(
                    p.a, p.b, p.scale_a, p.scale_b, out_dtype=torch.bfloat16, use_fast_accum=not precise))(precise)
            for i, c in enumerate(configs):
                fitted = W.fit_gluon_config(c, 2)
                if W.gluon_refuses(fitted, 2) or (c.kwargs["SPLIT"] and W.gluon_plan(fitted, M, N, K, 132)[1] == 1):
                    continue
                out = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
                fns[f"{i}:{W.describe_config(fitted)}"] = (lambda f, out: lambda: (
                    W.launch_gluon(ops, out, True, config=f), out)[1])(fitted, out)
            for name, fn in list(fns.items()):
                try:
                    out = fn()
                    torch.cuda.synchronize()
                    errors[name] = checks.rel_error(out, p.reference)
                except Exception as e:
                    print(f"  {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                    del fns[name]
            timed = bench.benchmark(fns, flops=2 * M * N * K, reps=reps)
            base = timed["cublas precise"].tflops
            for name, r in timed.items():
                rows.append(dict(shape=f"{M}x{K}x{N}", recipe=recipe, name=name, tflops=r.tflops,
                                 median_ms=r.median_ms, ratio=r.tflops / base, rel_error=errors[name]))
            best = max((x for x in rows[-len(timed):] if not x["name"].startswith("cublas")), key=lambda x: x["tflops"])
            print(f"{M}x{K}x{N} {recipe}: cuBLAS precise {base:.0f}, fast {timed['cublas fast'].tflops:.0f}; "
                  f"best {best['ratio']:.3f}x {best['name']}", flush=True)
            del p, ops, fns
            torch.cuda.empty_cache()
    with open(os.path.join(OUT, "precise_sweep.json"), "w") as f:
        json.dump(dict(environment=environment().as_dict(), rows=rows), f, indent=1)
    print(f"sweep: {len(rows)} rows in {time.time() - t:.0f} s", flush=True)
    names = sorted({r["name"] for r in rows})
    for name in names:
        rs = [r["ratio"] for r in rows if r["name"] == name]
        g = torch.tensor(rs).log().mean().exp().item()
        print(f"  {name:<70} gmean {g:.3f}x over {len(rs)}, min {min(rs):.3f}")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    what = sys.argv[1:] or ["study", "sweep"]
    if "study" in what:
        study()
    if "sweep" in what:
        sweep()
