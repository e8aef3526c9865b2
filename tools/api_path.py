"""The public API against the kernel behind it, on a few problems (a GPU is needed).

Per problem, ``triton.testing.do_bench`` medians (L2 flushed) of: ``fp8_tutorial.scaled_mm`` as a
model calls it (kernel "auto", a new output each call); the same kernel and configuration through
its launcher with everything fixed (the book's fixed launch); the API call captured in a CUDA
graph and replayed (the kernel alone, no host work); cuBLAS through ``torch._scaled_mm``, called
and replayed from a CUDA graph in the same way. Then the
host's time per call, the GPU kept busy far ahead, of ``scaled_mm`` and of ``torch._scaled_mm``,
and what building the descriptors costs each way Triton 3.6 offers. Prints a markdown table.

    python3 tools/api_path.py [MxKxN:recipe ...]
"""
import sys
import time

import torch
import triton

import fp8_tutorial as fp8
from fp8_tutorial import gemm
from fp8_tutorial.kernels import host, ws_gluon
from fp8_tutorial.measure import contenders as C
from fp8_tutorial.measure.bench import api_benchmark
from fp8_tutorial.measure.model import graphed

PROBLEMS = [(4096, 4096, 4096, "row"), (4096, 2112, 7168, "tensor"), (128, 7168, 16384, "row"),
            (4608, 3072, 12288, "tensor")]


def host_us(fn, calls=100, rounds=7):
    """The host's time per call, behind a GPU spin long enough that it never waits: the API
    harness's (``measure.bench.api_benchmark``)."""
    return api_benchmark({"fn": fn}, calls=calls, rounds=rounds)["fn"].host_us


def descriptor_costs(p):
    """Microseconds per call of each way to describe A, W and C to TMA: Gluon's host-side
    ``TensorDescriptor.from_tensor`` (with layouts made each call, or once), what Triton's launcher
    reads of them (``host.Box``), the driver's encoding that the launcher makes from either at each
    launch, and a plan's (``host.Direct``): each base address encoded once, then looked up."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.backends.nvidia.driver import make_tensordesc_arg

    cfg = ws_gluon.fit_gluon_config(ws_gluon.GLUON_CONFIGS[0], 2)
    out = torch.empty(p.M, p.N, dtype=torch.bfloat16, device="cuda")
    blocks, layouts = ws_gluon.gluon_blocks(cfg), ws_gluon._layouts(cfg, out.dtype)
    tensors = (p.a, p.b.t(), out)

    def from_tensor():
        return [TensorDescriptor.from_tensor(t, b, lay) for t, b, lay in zip(tensors, blocks, layouts)]

    def layouts_each_call():
        return [TensorDescriptor.from_tensor(t, b, lay) for t, b, lay in
                zip(tensors, blocks, ws_gluon._layouts(cfg, out.dtype))]

    shapes = [(list(t.shape), list(t.stride())) for t in tensors]

    def boxes():
        return [host.Box(t, *s) for t, s in zip(tensors, shapes)]

    ops = gemm.check_operands(p.a, p.b, p.scale_a, p.scale_b)
    metas = ws_gluon.launch_gluon(ops, out, False, config=cfg).kernel.metadata.tensordesc_meta
    made = boxes()

    def fill():  # what Triton's launcher does with each descriptor, at every launch
        for box, meta in zip(made, metas):
            make_tensordesc_arg(box, meta)

    names = ["a_desc", "b_desc", "c_desc"]
    direct = host.Direct(ws_gluon.GLUON_KERNELS[cfg.kwargs["KIND"]], ws_gluon.launch_gluon(
        ops, out, False, config=cfg).kernel, out.device, descriptors=dict(zip(names, shapes)))

    def encoded_once():
        for i, t in enumerate(tensors):
            direct._encode(i, t)

    costs = {}
    for name, fn in [("TensorDescriptor.from_tensor, layouts made each call", layouts_each_call),
                     ("TensorDescriptor.from_tensor, layouts made once", from_tensor),
                     ("the plan's boxes (base, shape, strides)", boxes),
                     ("the launcher's TMA descriptors from them (driver), three", fill),
                     ("a plan's: encoded once per base address, then looked up", encoded_once)]:
        for _ in range(100):
            fn()
        t0 = time.perf_counter()
        for _ in range(2000):
            fn()
        costs[name] = (time.perf_counter() - t0) / 2000 * 1e6
    return costs


def main(argv):
    problems = PROBLEMS
    if argv:
        problems = [(*map(int, s.split(":")[0].split("x")), s.split(":")[1]) for s in argv]
    rows = ["| problem | `scaled_mm` (API) | fixed launch | API replayed from a CUDA graph | cuBLAS "
            "| cuBLAS replayed from a CUDA graph | kernel alone: x cuBLAS (graphs) | API: x cuBLAS "
            "| host us: `scaled_mm` | host us: `torch._scaled_mm` |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for M, K, N, recipe in problems:
        p = C.make_problem(M, K, N, recipe, device="cuda")
        api = lambda: fp8.scaled_mm(p.a, p.b, p.scale_a, p.scale_b)  # noqa: E731
        err = fp8.rel_error(api(), p.reference)  # the first call chooses, times and compiles
        assert err < 1e-2, err
        plan = gemm.plan_of(p.a, p.b, p.scale_a, p.scale_b)
        launcher = {"gluon": ws_gluon.launch_gluon}.get(plan.kernel)
        fixed = C.fixed_launch(launcher, p, config=plan.config) if launcher else api
        out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
        replay = graphed(lambda: fp8.scaled_mm(p.a, p.b, p.scale_a, p.scale_b, out=out), ())
        replay()
        assert fp8.rel_error(out, p.reference) < 1e-2
        cublas = C.REGISTRY[f"cublas/{recipe}/fast"].build(p)
        cublas_replay = graphed(cublas, ())
        t = {name: triton.testing.do_bench(fn, warmup=25, rep=200) * 1e3
             for name, fn in [("api", api), ("fixed", fixed), ("graph", replay), ("cublas", cublas),
                              ("cublas graph", cublas_replay)]}
        h_ours = host_us(api)
        h_theirs = host_us(lambda: torch._scaled_mm(p.a, p.b, scale_a=p.scale_a, scale_b=p.scale_b,
                                                    out_dtype=torch.bfloat16, use_fast_accum=True))
        rows.append(f"| {M}x{K}x{N} per {recipe} ({plan.kernel}) | {t['api']:.0f} us | {t['fixed']:.0f} us "
                    f"| {t['graph']:.0f} us | {t['cublas']:.0f} us | {t['cublas graph']:.0f} us "
                    f"| {t['cublas graph'] / t['graph']:.2f}x | {t['cublas'] / t['api']:.2f}x "
                    f"| {h_ours:.1f} | {h_theirs:.1f} |")
        print(rows[-1], flush=True)
    print("\n".join(["", "do_bench medians (L2 flushed), fast accumulation; host us: the host's time per call, "
                     "the GPU busy far ahead", *rows]))
    print("\nDescriptors for 4096x4096x4096, us per call:")
    for name, us in descriptor_costs(C.make_problem(4096, 4096, 4096, "row", device="cuda")).items():
        print(f"  {name:<56} {us:6.2f}")
    from triton import knobs
    print(f"\nTriton launch hooks: enter {knobs.runtime.launch_enter_hook}, exit {knobs.runtime.launch_exit_hook}")


if __name__ == "__main__":
    main(sys.argv[1:])
