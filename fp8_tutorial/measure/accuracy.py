"""What accumulation costs in accuracy: error against float64 as K grows, for each way of summing
(chapter 10), and a probe of how many bits the tensor cores' running sum keeps.

Every method here writes a float32 output, so that the rounding of a bf16 output (about 2^-9 of
each value) does not hide the differences between them.
"""

from __future__ import annotations

import torch

from .._env import DEVICE
from ..checks import reference_mm, rel_error
from ..gemm import check_operands, scaled_mm
from ..kernels.accumulation import INTERVALS, launch_interval
from ..quant import quantize

# The inputs: "random", standard normal values; "skewed", values of mixed magnitude (a normal
# value times a power of two from 2^-4 to 2^3) and mostly of one sign (nine in ten positive), so
# that a dot product grows with K and each new product is small beside the running sum: where a
# short accumulator loses the most.
KINDS = ("random", "skewed")
QUANTIZATION = "FP8 quantization"
RESULTS = "accumulation"  # results/accumulation_<gpu>.json


def study_inputs(kind: str, M: int, K: int, N: int, recipe: str, gen: torch.Generator, device=None,
                 unquantized: bool = False):
    """Quantized operands ``(a, b, scale_a, scale_b)`` of one kind (``KINDS``) and recipe ("tensor"
    or "row"), drawn on the CPU from ``gen`` (so that a seed gives the same values anywhere); with
    ``unquantized``, also the float32 x (M, K) and w (N, K) they were quantized from."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    device = DEVICE if device is None else device

    def draw(rows):
        x = torch.randn(rows, K, generator=gen)
        if kind == "skewed":
            sign = torch.where(torch.rand(rows, K, generator=gen) < 0.9, 1.0, -1.0)
            x = sign * x.abs() * torch.exp2(torch.randint(-4, 4, (rows, K), generator=gen).float())
        return x.to(device)

    x, w = draw(M), draw(N)
    a, sa = quantize(x, recipe)
    wq, sw = quantize(w, recipe)
    return (a, wq.t(), sa, sw.t()) + ((x, w) if unquantized else ())


# The package's kernel that the study times: the Gluon kernels on a Hopper GPU (what "auto" takes
# on large problems), else whatever "auto" takes.
PACKAGE_KERNEL = "gluon" if DEVICE.type == "cuda" and torch.cuda.get_device_capability()[0] == 9 else "auto"


def methods(include_package: bool = True) -> dict:
    """The ways of summing that chapter 10 compares, by name: each takes (a, b, scale_a, scale_b)
    and returns the float32 product. ``interval_kernel`` with each promotion interval and without
    promotion; cuBLAS (``torch._scaled_mm``) fast and precise, on a GPU; and the package's
    ``scaled_mm``, fast and precise, with ``PACKAGE_KERNEL``."""
    def interval(every):
        def run(a, b, sa, sb):
            out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32, device=a.device)
            return launch_interval(check_operands(a, b, sa, sb), out, every)
        return run

    found = {"fast (never promoted)": interval(None)}
    found.update({f"promoted every {n}": interval(n) for n in INTERVALS})
    if DEVICE.type == "cuda":
        for mode, fast in (("fast", True), ("precise", False)):
            found[f"cuBLAS {mode}"] = (lambda fast: lambda a, b, sa, sb: torch._scaled_mm(
                a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=fast))(fast)
    if include_package:
        for mode, precise in (("fast", False), ("precise", True)):
            found[f"scaled_mm {mode}"] = (lambda precise: lambda a, b, sa, sb: scaled_mm(
                a, b, sa, sb, out_dtype=torch.float32, kernel=PACKAGE_KERNEL, precise=precise))(precise)
    return found


def error_vs_k(Ks, kinds=KINDS, recipes=("tensor", "row"), M: int = 256, N: int = 256, seed: int = 0,
               chosen: dict | None = None, progress: bool = False) -> list[dict]:
    """Relative error against float64 of each method (``methods()``, or ``chosen``) at each K, on
    the same inputs for all of them: one record per (kind, recipe, K, method), and one with the
    method "FP8 quantization": the error of the exact product of the quantized inputs against the
    exact product of the unquantized ones, the price of FP8 itself, for scale."""
    chosen = methods() if chosen is None else chosen
    records = []
    for kind in kinds:
        for recipe in recipes:
            for K in Ks:
                gen = torch.Generator().manual_seed(seed + K)
                a, b, sa, sb, x, w = study_inputs(kind, M, K, N, recipe, gen, unquantized=True)
                ref = reference_mm(a, b, sa, sb)
                records.append(dict(kind=kind, recipe=recipe, K=K, M=M, N=N, method=QUANTIZATION,
                                    rel_error=rel_error(ref, x.double() @ w.double().t())))
                for name, run in chosen.items():
                    records.append(dict(kind=kind, recipe=recipe, K=K, M=M, N=N, method=name,
                                        rel_error=rel_error(run(a, b, sa, sb), ref)))
                if progress:
                    print(f"  {kind:<7} {recipe:<6} K={K:>6}: done", flush=True)
    return records


def probe(run, shifts=range(0, 19), K: int = 128, rows: int = 64) -> list[dict]:
    """How far below the running sum a product still counts. Row i of A is one 1 followed by
    K - 1 copies of 2^-j (j = ``shifts``, a product of two e4m3 values, the smallest 2^-9 each), B all ones; the exact
    sum is 1 + (K - 1) 2^-j. Each record gives the fraction of the small products' total that
    ``run`` (a, b, scale_a, scale_b -> float32) kept: 1 where all count, 0 where all are lost."""
    out = []
    for j in shifts:
        x_exp, w_exp = -(j // 2), -(j - j // 2)  # 2^-j as 2^x_exp * 2^w_exp, both e4m3 values (>= 2^-9)
        a = torch.full((rows, K), 2.0 ** x_exp, device=DEVICE)
        a[:, 0] = 1.0
        w = torch.full((rows, K), 2.0 ** w_exp, device=DEVICE)
        w[:, 0] = 1.0
        one = torch.ones((), device=DEVICE)
        a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        got = run(a8, w8.t(), one, one).double()
        small = (K - 1) * 2.0 ** -j
        kept = ((got - 1.0) / small).median().item()
        out.append(dict(shift=j, K=K, kept=kept))
    return out


def promotion_costs(M: int, K: int, N: int, recipe: str, configs=None, reps: int = 20) -> list[dict]:
    """What promoting costs, on one problem: each precise Gluon configuration (``configs``, default
    ``ws_gluon.GLUON_PRECISE_CONFIGS``) with its promotion written out ("explicit", the package's),
    left to the compiler ("compiler", ``kernels.ablation.compiler_promotion``) and with fast
    accumulation ("fast"), and cuBLAS precise and fast, timed together (``bench.benchmark``) and
    each checked against float64. Records carry TFLOP/s, ``ratio`` to cuBLAS precise and the error."""
    from ..kernels import ablation, ws_gluon
    from ..kernels.host import describe_config
    from . import bench
    from .contenders import make_problem

    p = make_problem(M, K, N, recipe, device="cuda")
    ops = check_operands(p.a, p.b, p.scale_a, p.scale_b)
    fns = {}
    for mode, fast in (("fast", True), ("precise", False)):
        fns[("cuBLAS", mode)] = (lambda fast: lambda: torch._scaled_mm(
            p.a, p.b, p.scale_a, p.scale_b, out_dtype=torch.bfloat16, use_fast_accum=fast))(fast)
    for c in ws_gluon.GLUON_PRECISE_CONFIGS if configs is None else configs:
        c = ws_gluon.fit_gluon_config(c, 2)
        if ws_gluon.gluon_refuses(c, 2) or (c.kwargs["SPLIT"] and ws_gluon.gluon_plan(c, M, N, K, 132)[1] == 1):
            continue
        for mode, precise, kernels in (("explicit", True, None), ("compiler", True, ablation.compiler_promotion),
                                       ("fast", False, None)):
            out = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
            fns[(describe_config(c), mode)] = (lambda c, precise, kernels, out: lambda: (
                ws_gluon.launch_gluon(ops, out, precise, config=c, kernels=kernels), out)[1])(c, precise, kernels, out)
    errors = {key: rel_error(fn(), p.reference) for key, fn in fns.items()}
    timed = bench.benchmark({f"{k[0]} / {k[1]}": fn for k, fn in fns.items()}, flops=p.flops, reps=reps)
    base = timed["cuBLAS / precise"].tflops
    return [dict(shape=p.shape, recipe=recipe, config=k[0], mode=k[1], tflops=timed[f"{k[0]} / {k[1]}"].tflops,
                 ratio=timed[f"{k[0]} / {k[1]}"].tflops / base, rel_error=errors[k]) for k in fns]


# ---- measured here, or recorded on the H200 ------------------------------------------------------

def _recorded(name: str) -> dict:
    from . import results
    return results.load(name)


def study_or_load(Ks, M: int = 256, N: int = 256, interpreter_Ks=(64, 200), progress: bool = False):
    """Chapter 10's error study and where it comes from. On a GPU: measured now (``error_vs_k`` and
    ``probe`` of every method) and saved to ``results/accumulation_<gpu>.json``. Elsewhere: the
    H200's records, and a run of the same code in the interpreter on a few small problems (whose
    sums are exact, so every method agrees there), returned as ``(data, where, live)``."""
    from .. import environment
    from . import results

    if DEVICE.type == "cuda":
        runs = methods()
        data = dict(environment=environment().as_dict(), records=error_vs_k(Ks, M=M, N=N, progress=progress),
                    probe={name: probe(run) for name, run in runs.items()})
        path = results.save(RESULTS, data["records"], probe=data["probe"])
        return data, f"measured now, saved to results/{path.name}", data["records"]
    saved = _recorded(RESULTS)
    live = error_vs_k(list(interpreter_Ks), M=16, N=16)
    return saved, "recorded on " + results.provenance(saved), live


def costs_or_load(shapes, reps: int = 20):
    """``promotion_costs`` on each shape and recipe: measured now on a Hopper GPU (and saved to
    ``results/precise_<gpu>.json``), else the H200's records. Returns (records, where)."""
    from . import results

    if DEVICE.type == "cuda" and torch.cuda.get_device_capability()[0] == 9:
        rows = [r for M, K, N in shapes for recipe in ("tensor", "row")
                for r in promotion_costs(M, K, N, recipe, reps=reps)]
        path = results.save("precise", rows)
        return rows, f"measured now, saved to results/{path.name}"
    saved = _recorded("precise")
    return saved["records"], "recorded on " + results.provenance(saved)


# ---- tables ----------------------------------------------------------------------------------------

def interval_table(records, kind: str, recipe: str, Ks=None) -> str:
    """Markdown: relative error of each method (rows) at each K (columns), for one input kind and
    recipe, FP8 quantization's own error first."""
    mine = [r for r in records if r["kind"] == kind and r["recipe"] == recipe]
    Ks = sorted({r["K"] for r in mine}) if Ks is None else Ks
    names = list(dict.fromkeys(r["method"] for r in mine))
    names = [QUANTIZATION] + [n for n in names if n != QUANTIZATION]
    found = {(r["method"], r["K"]): r["rel_error"] for r in mine}
    lines = ["| " + " | ".join(["rel. error, K ="] + [str(K) for K in Ks]) + " |",
             "|---|" + "---:|" * len(Ks)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(f"{found[(n, K)]:.1e}" if (n, K) in found else "" for K in Ks) + " |")
    return "\n".join(lines)


def closest_interval(records, method: str = "cuBLAS precise") -> dict:
    """For each (kind, recipe): the promotion interval whose errors are nearest ``method``'s over
    every K (the largest ratio between the two, either way, smallest), with that ratio."""
    found = {}
    for kind, recipe in sorted({(r["kind"], r["recipe"]) for r in records}):
        mine = [r for r in records if r["kind"] == kind and r["recipe"] == recipe]
        theirs = {r["K"]: r["rel_error"] for r in mine if r["method"] == method}
        if not theirs:
            continue
        best = None
        for n in INTERVALS:
            ours = {r["K"]: r["rel_error"] for r in mine if r["method"] == f"promoted every {n}"}
            worst = max(max(ours[K] / theirs[K], theirs[K] / ours[K]) for K in theirs)
            if best is None or worst < best[1]:
                best = (n, worst)
        found[(kind, recipe)] = best
    return found


def costs_table(rows) -> str:
    """Markdown: per reference cell and recipe, cuBLAS precise in TFLOP/s, and as x cuBLAS precise:
    cuBLAS fast, the best precise Gluon configuration with its promotion written out and left to
    the compiler, and the best of the same configurations with fast accumulation."""
    def best(mine, mode):
        return max((r for r in mine if r["mode"] == mode and r["config"] != "cuBLAS"), key=lambda r: r["tflops"])

    lines = ["| M x K x N | recipe | cuBLAS precise, TFLOP/s | cuBLAS fast | explicit promotion | "
             "compiler's promotion | same configurations, fast |", "|---|---|---:|---:|---:|---:|---:|"]
    for shape, recipe in dict.fromkeys((r["shape"], r["recipe"]) for r in rows):
        mine = [r for r in rows if r["shape"] == shape and r["recipe"] == recipe]
        base = next(r for r in mine if r["config"] == "cuBLAS" and r["mode"] == "precise")
        fast = next(r for r in mine if r["config"] == "cuBLAS" and r["mode"] == "fast")
        lines.append(f"| {shape} | {recipe} | {base['tflops']:.0f} | {fast['ratio']:.2f}x | "
                     + " | ".join(f"{best(mine, m)['ratio']:.2f}x" for m in ("explicit", "compiler", "fast")) + " |")
    return "\n".join(lines)


def gmeans(rows) -> dict:
    """Geometric mean over the cells of the best ratio to cuBLAS precise, per mode."""
    out = {}
    cells = list(dict.fromkeys((r["shape"], r["recipe"]) for r in rows))
    for mode in ("explicit", "compiler", "fast"):
        ratios = [max(r["ratio"] for r in rows if (r["shape"], r["recipe"]) == c and r["mode"] == mode
                      and r["config"] != "cuBLAS") for c in cells]
        out[mode] = (torch.tensor(ratios).log().mean().exp().item(), min(ratios))
    return out


VARIANTS = "precise_variants"  # results/precise_variants_<gpu>.json: tools/precise_variants.py


def variants_summary(records) -> list[dict]:
    """Per way of hiding the promotion (``tools/precise_variants.py``'s families; a family's split
    and unsplit configurations count as one, the better on each cell): the geometric mean and the
    lowest of its ratio to cuBLAS precise over the cells, how many cells it was the fastest of the
    Gluon kernels on, the cells it has records for, and its largest relative error. In the order
    the records first name them."""
    cells = list(dict.fromkeys((r["shape"], r["recipe"]) for r in records))
    families = [f for f in dict.fromkeys(r["variant"] for r in records) if not f.startswith("cuBLAS")]

    def best(family, cell):  # None where the family has no record (a variant that failed there)
        return max((r["ratio"] for r in records if r["variant"] == family and (r["shape"], r["recipe"]) == cell),
                   default=None)
    ratios = {f: [best(f, c) for c in cells] for f in families}
    wins = [max((f for f in families if ratios[f][i] is not None), key=lambda f: ratios[f][i])
            for i in range(len(cells))]
    out = []
    for f in families:
        had = [x for x in ratios[f] if x is not None]
        out.append(dict(variant=f, gmean=torch.tensor(had).log().mean().exp().item(), lowest=min(had),
                        fastest_on=wins.count(f), cells=len(had),
                        rel_error=max(r["rel_error"] for r in records if r["variant"] == f)))
    return out


STACKED = "precise_stacked"  # results/precise_stacked_<gpu>.json: tools/stacked_precise.py
OVERLAP = "precise_overlap"  # results/precise_overlap_<gpu>.json: tools/stacked_precise.py overlap


def variants_or_load(name: str = VARIANTS) -> dict:
    """The recorded run of ``tools/precise_variants.py`` (or, with ``name=STACKED``, of
    ``tools/stacked_precise.py``: the stacked kernel's 192-row tile against the paired kernel's;
    with ``name=OVERLAP``, of its ``overlap`` mode: the paired kernel's K loop waiting for each
    step against ``ws_gluon.overlapped_tile``),
    experiments not re-run with the chapter: ``records`` and ``where`` they come from."""
    from . import results

    saved = _recorded(name)
    return dict(records=saved["records"], where="recorded on " + results.provenance(saved))


def variants_table(records) -> str:
    """Markdown of ``variants_summary``."""
    lines = ["| way of summing | geometric mean, x cuBLAS precise | lowest | fastest on | largest rel. error |",
             "|---|---:|---:|---:|---:|"]
    for s in variants_summary(records):
        lines.append(f"| {s['variant']} | {s['gmean']:.3f}x | {s['lowest']:.3f}x | {s['fastest_on']} of {s['cells']} "
                     f"| {s['rel_error']:.2e} |")
    return "\n".join(lines)
