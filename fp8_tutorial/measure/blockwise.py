"""Chapter 11's measurements: block-wise scaling (1 x 128 activation groups, 128 x 128 weight
blocks) through ``scaled_mm`` against cuBLAS's block-wise path (``torch.nn.functional.scaled_mm``),
on the reference cells and on DeepSeek-V3's projection shapes for M from 1 up.

Each cell is timed two ways, as in the rest of the book: the kernel harness (``bench.benchmark``:
the GPU's work, L2 flushed, both into preallocated outputs) and back to back as a model calls them
(``bench.api_benchmark``: a new output each call, the host's work included). Errors are against
float64 of the same quantized inputs, on up to ``REFERENCE_ROWS`` rows of each output.
"""

from __future__ import annotations

import math
import re

import torch

from ..checks import rel_error
from ..quant import exactly_m_major
from . import contenders as C

#: DeepSeek-V3's projections, (N, K) of the weight; 2112 is not a multiple of 128, and block-wise
#: scales of 128 x 128 blocks do not cut it (scaled_mm refuses it, and says why).
DEEPSEEK_SHAPES = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048)]
MS = [1, 16, 64, 128, 512, 1024, 2048, 4096, 8192]
RESULTS = "blockwise"  # results/blockwise_<gpu>.json
#: Rows of each output checked against float64 (evenly spread; all of them up to this M).
REFERENCE_ROWS = 1024


def cells(ms=MS) -> list[tuple[int, int, int]]:
    """(M, K, N) of every cell: the reference shapes (chapter 03), then DeepSeek-V3's for each M."""
    return list(C.SEED_SHAPES) + [(M, K, N) for N, K in DEEPSEEK_SHAPES for M in ms]


def _try(fn):
    try:
        return fn(), None
    except (RuntimeError, ValueError) as e:
        return None, f"{type(e).__name__}: {str(e).splitlines()[0]}"


def measure(shapes, reps: int = 20, calls: int = 50, rounds: int = 5, progress: bool = True) -> list[dict]:
    """One record per cell: TFLOP/s of ``scaled_mm`` and of cuBLAS block-wise in the kernel harness,
    microseconds per call back to back, both errors against float64, the configuration the plan
    chose; a cell that one side refuses records why."""
    from .. import scaled_mm
    from ..gemm import plan_of
    from ..kernels.host import describe_config
    from .bench import api_benchmark, benchmark

    rows = []
    for M, K, N in shapes:
        row = dict(shape=C.shape_name(M, K, N), M=M, K=K, N=N)
        p, why = _try(lambda: C.make_problem(M, K, N, "block", reference_rows=REFERENCE_ROWS))
        if p is None:
            rows.append(dict(row, refused=why))
            if progress:
                print(f"{row['shape']:<17} refused: {why}", flush=True)
            continue
        out = torch.empty(M, N, dtype=torch.bfloat16, device=p.a.device)
        ours = lambda: scaled_mm(p.a, p.b, p.scale_a, p.scale_b, out=out)  # noqa: E731
        row["rel_error"] = rel_error(p.checked(ours()), p.reference)
        plan = plan_of(p.a, p.b, p.scale_a, p.scale_b, out=out)
        row["kernel"] = plan.kernel if plan.config is None else describe_config(plan.config)
        cublas = C.REGISTRY["cublas/block/precise"].build(p)
        first, why = _try(cublas)
        fns = {"scaled_mm": ours}
        if first is None:
            row["cublas_refused"] = why
        else:
            row["cublas_rel_error"] = rel_error(p.checked(first), p.reference)
            fns["cuBLAS"] = cublas
        timed = benchmark(fns, flops=p.flops, reps=reps)
        row["tflops"] = timed["scaled_mm"].tflops
        api = {"scaled_mm": lambda: scaled_mm(p.a, p.b, p.scale_a, p.scale_b)}
        if "cuBLAS" in fns:
            row["cublas_tflops"] = timed["cuBLAS"].tflops
            row["ratio"] = row["tflops"] / row["cublas_tflops"]
            api["cuBLAS"] = cublas
        calls_timed = api_benchmark(api, flops=p.flops, calls=calls, rounds=rounds)
        row["api_us"], row["host_us"] = calls_timed["scaled_mm"].median_us, calls_timed["scaled_mm"].host_us
        if "cuBLAS" in api:
            row["cublas_api_us"], row["cublas_host_us"] = calls_timed["cuBLAS"].median_us, calls_timed["cuBLAS"].host_us
            row["api_ratio"] = row["cublas_api_us"] / row["api_us"]
        rows.append(row)
        if progress:
            print(f"{row['shape']:<17} {row['tflops']:6.0f} TFLOP/s, " + (
                f"x{row['ratio']:.3f} cuBLAS; back to back x{row['api_ratio']:.3f}" if "ratio" in row
                else "cuBLAS refused it"), flush=True)
        del p, out, fns, api
        torch.cuda.empty_cache()
    return rows


def _measured_or_recorded(name: str, measure, shapes, **kw) -> tuple[list[dict], str]:
    """``measure(shapes, **kw)`` now on a Hopper GPU (saved to ``results/<name>_<gpu>.json``),
    else the H200's records of ``name``. Returns (records, where they come from)."""
    from . import results
    from .._env import DEVICE

    if DEVICE.type == "cuda" and torch.cuda.get_device_capability()[0] == 9:
        rows = measure(shapes, **kw)
        path = results.save(name, rows)
        return rows, f"measured now on {torch.cuda.get_device_name()}, saved to results/{path.name}"
    saved = results.load(name)
    return saved["records"], "recorded on " + results.provenance(saved)


def or_load(shapes, **kw) -> tuple[list[dict], str]:
    """``measure`` now on a Hopper GPU (saved to ``results/blockwise_<gpu>.json``), else the H200's
    records. Returns (records, where they come from)."""
    return _measured_or_recorded(RESULTS, measure, shapes, **kw)


def _gmean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def summary(rows) -> dict:
    """The issue's measures: geometric means of the ratios to cuBLAS (kernel harness and back to
    back) over the cells both sides ran, the lowest ratio at M >= 1024, the geometric mean at
    M <= 128, and the TFLOP/s of 4096 x 16384 x 7168."""
    both = [r for r in rows if "ratio" in r]
    big = [r for r in both if r["M"] >= 1024]
    small = [r for r in both if r["M"] <= 128]
    anchor = next((r for r in rows if (r["M"], r["K"], r["N"]) == (4096, 16384, 7168) and "tflops" in r), None)
    return {"cells": len(both), "gmean": _gmean(r["ratio"] for r in both),
            "api_gmean": _gmean(r["api_ratio"] for r in both),
            "lowest_m1024": min((r["ratio"] for r in big), default=math.nan),
            "gmean_m128": _gmean(r["ratio"] for r in small),
            "api_gmean_m128": _gmean(r["api_ratio"] for r in small),
            "tflops_4096x16384x7168": anchor["tflops"] if anchor else math.nan,
            "largest_error": max((r["rel_error"] for r in both), default=math.nan),
            "largest_cublas_error": max((r["cublas_rel_error"] for r in both), default=math.nan),
            "worse_than_cublas": sum(r["rel_error"] > r["cublas_rel_error"] * (1 + 1e-3) for r in both)}


def short_reason(reason: str) -> str:
    """A refusal as a table cell: cuBLAS's status name alone (its message quotes a whole call), an
    exception's message without its type."""
    status = re.search(r"CUBLAS_STATUS_[A-Z_]+", reason)
    if status:
        return f"`{status.group(0)}`"
    return re.sub(r"^[A-Za-z]+Error: ", "", reason)


def table(rows) -> str:
    """Markdown: per cell, both sides' TFLOP/s in the kernel harness and their ratio; back to back,
    each side's time per call and the host's time to issue one, and the ratio; both errors;
    refusals with their reason (the records keep the whole message)."""
    lines = ["| M x K x N | `scaled_mm`, TFLOP/s | cuBLAS block-wise, TFLOP/s | x cuBLAS, kernel "
             "| `scaled_mm` back to back, us/call | its host us | cuBLAS back to back, us/call | its host us "
             "| x cuBLAS, back to back | rel. error | cuBLAS's |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['shape']} | refused: {short_reason(r['refused'])} ||||||||||")
            continue
        ours = f"| {r['api_us']:.1f} | {r['host_us']:.1f} "
        if "ratio" not in r:
            lines.append(f"| {r['shape']} | {r['tflops']:.0f} | refused: {short_reason(r['cublas_refused'])} | "
                         + ours + f"| | | | {r['rel_error']:.2e} | |")
            continue
        lines.append(f"| {r['shape']} | {r['tflops']:.0f} | {r['cublas_tflops']:.0f} | {r['ratio']:.2f}x " + ours
                     + f"| {r['cublas_api_us']:.1f} | {r['cublas_host_us']:.1f} | {r['api_ratio']:.2f}x "
                     f"| {r['rel_error']:.2e} | {r['cublas_rel_error']:.2e} |")
    return "\n".join(lines)


# ---- the whole step: quantize the activations, then the GEMM -------------------------------------

#: M of the step's cells: decode to prefill (cuBLAS block-wise refuses M = 1).
STEP_MS = [16, 128, 1024, 4096]
STEP_RESULTS = "blockwise_step"  # results/blockwise_step_<gpu>.json


def step_cells(ms=STEP_MS) -> list[tuple[int, int, int]]:
    """(M, K, N) of DeepSeek-V3's projections that block-wise scales cut (N a multiple of 128)."""
    return [(M, K, N) for N, K in DEEPSEEK_SHAPES if N % 128 == 0 for M in ms]


def _steps(x: torch.Tensor, p: C.Problem) -> dict:
    """The step from bf16 activations ``x`` to a bf16 output, each way: ``quantize(x, "1x128")``
    then ``scaled_mm``; and the same quantization then cuBLAS block-wise, which takes the scales
    M-major, as ``quantize`` gives them (``exactly_m_major``). The weight ``p.b`` and its 128 x 128
    block scales were quantized once, beforehand."""
    from torch.nn.functional import ScalingType, scaled_mm as torch_scaled_mm

    from .. import quantize, scaled_mm

    def ours():
        q, s = quantize(x, "1x128")
        return scaled_mm(q, p.b, s, p.scale_b)

    def cublas():
        q, s = quantize(x, "1x128")
        return torch_scaled_mm(q, p.b, exactly_m_major(s), ScalingType.BlockWise1x128, p.scale_b,
                               ScalingType.BlockWise128x128, output_dtype=torch.bfloat16, use_fast_accum=False)

    return {"scaled_mm step": ours, "cuBLAS step": cublas, "quantize": lambda: quantize(x, "1x128")}


def measure_step(shapes, reps: int = 20, calls: int = 50, rounds: int = 5, progress: bool = True) -> list[dict]:
    """One record per cell: the microseconds of each step (``_steps``) in the kernel harness and
    back to back, the quantization's alone in the harness, and each step's
    error against float64 of the bf16 activations times the dequantized weight (both quantize
    the activations the same way, so the errors should agree)."""
    from ..quant import dequantize
    from .bench import api_benchmark, benchmark

    rows = []
    for M, K, N in shapes:
        p = C.make_problem(M, K, N, "block", reference_rows=1)  # its reference is not used
        x = torch.randn(M, K, device=p.a.device, dtype=torch.bfloat16)
        fns = _steps(x, p)
        picked = torch.linspace(0, M - 1, min(M, REFERENCE_ROWS), device=x.device).round().long()
        ref = x[picked].double() @ dequantize(p.b, p.scale_b, torch.float64)
        row = dict(shape=C.shape_name(M, K, N), M=M, K=K, N=N)
        for name in ("scaled_mm step", "cuBLAS step"):
            row[f"{name} rel_error"] = rel_error(fns[name]()[picked], ref)
        timed = benchmark(fns, reps=reps)
        for name, r in timed.items():
            row[f"{name} us"] = r.median_ms * 1e3
        calls_timed = api_benchmark({k: fns[k] for k in ("scaled_mm step", "cuBLAS step")}, calls=calls,
                                    rounds=rounds)
        for name, r in calls_timed.items():
            row[f"{name} api us"] = r.median_us
        row["ratio"] = row["cuBLAS step us"] / row["scaled_mm step us"]
        row["api_ratio"] = row["cuBLAS step api us"] / row["scaled_mm step api us"]
        rows.append(row)
        if progress:
            print(f"{row['shape']:<17} step x{row['ratio']:.3f} cuBLAS's; back to back x{row['api_ratio']:.3f}",
                  flush=True)
        del p, x, fns
        torch.cuda.empty_cache()
    return rows


def step_or_load(shapes, **kw) -> tuple[list[dict], str]:
    """``measure_step`` now on a Hopper GPU (saved to ``results/blockwise_step_<gpu>.json``), else
    the H200's records. Returns (records, where they come from)."""
    return _measured_or_recorded(STEP_RESULTS, measure_step, shapes, **kw)


def step_table(rows) -> str:
    """Markdown: per cell, the quantization alone, each step in the kernel harness and back to back
    (microseconds), the ratios, and both steps' errors."""
    lines = ["| M x K x N | quantize, us | `scaled_mm` step, us | cuBLAS step, us | x cuBLAS "
             "| back to back: `scaled_mm` step, us | cuBLAS step, us | x cuBLAS | rel. error | cuBLAS's |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['quantize us']:.1f} "
                     f"| {r['scaled_mm step us']:.1f} | {r['cuBLAS step us']:.1f} | {r['ratio']:.2f}x "
                     f"| {r['scaled_mm step api us']:.1f} | {r['cuBLAS step api us']:.1f} | {r['api_ratio']:.2f}x "
                     f"| {r['scaled_mm step rel_error']:.2e} | {r['cuBLAS step rel_error']:.2e} |")
    return "\n".join(lines)


def step_summary(rows) -> dict:
    """Geometric means of cuBLAS's step time over the book's, in the harness and back to back,
    overall and at M <= 128; the largest share of the book's step the quantization takes."""
    small = [r for r in rows if r["M"] <= 128]
    return {"cells": len(rows), "gmean": _gmean(r["ratio"] for r in rows),
            "api_gmean": _gmean(r["api_ratio"] for r in rows),
            "gmean_m128": _gmean(r["ratio"] for r in small), "api_gmean_m128": _gmean(r["api_ratio"] for r in small),
            "quantize_share": max((r["quantize us"] / r["scaled_mm step us"] for r in rows), default=math.nan)}
