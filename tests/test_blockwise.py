"""fp8_tutorial.measure.blockwise: the cells chapter 11 times, the whole step's two sides, and the
tables and summaries it prints."""

import math

import pytest
import torch

import fp8_tutorial as fp8
from fp8_tutorial.measure import blockwise as B
from fp8_tutorial.measure import contenders as C
from fp8_tutorial.measure import results


def test_step_cells_are_the_projections_block_scales_cut():
    cells = B.step_cells()
    assert len(cells) == 5 * len(B.STEP_MS) and all(N % 128 == 0 and K % 128 == 0 for _, K, N in cells)
    assert {(N, K) for _, K, N in cells} == {(N, K) for N, K in B.DEEPSEEK_SHAPES} - {(2112, 7168)}


def test_the_books_step_quantizes_then_multiplies():
    """The step's ``scaled_mm`` side is quantize(x, "1x128") then scaled_mm, bit for bit, and close to
    float64 of the bf16 activations times the dequantized weight (the activations' FP8 rounding
    apart); cuBLAS's side takes the same scales, strides (1, M), as they come or copied so."""
    M, K, N = 40, 384, 256
    p = C.make_problem(M, K, N, "block", device="cpu", seed=5)
    x = torch.randn(M, K, dtype=torch.bfloat16)
    steps = B._steps(x, p)
    assert set(steps) == {"scaled_mm step", "cuBLAS step", "quantize"}
    q, s = fp8.quantize(x, "1x128")
    out = steps["scaled_mm step"]()
    assert torch.equal(out, fp8.scaled_mm(q, p.b, s, p.scale_b))
    ref = x.double() @ fp8.dequantize(p.b, p.scale_b, torch.float64)
    assert fp8.rel_error(out, ref) < 0.05
    assert fp8.rel_error(out, -ref) > 1  # the check can fail
    for M_ in (40, 13):
        s = fp8.quantize(torch.randn(M_, K), "1x128")[1]
        t = B.exactly_m_major(s)
        assert t.stride() == (1, M_) and torch.equal(t, s) and (t is s) == (s.stride() == (1, M_))
    padded = fp8.quant.m_major_scales(13, 3, "cpu").copy_(s)  # the Triton kernel's layout at M = 13
    assert padded.stride() == (1, 16) and B.exactly_m_major(padded).stride() == (1, 13)


def _step_row(M, ratio, api_ratio, quantize_us):
    ours = 10.0
    return {"shape": f"{M}x512x256", "M": M, "K": 512, "N": 256, "quantize us": quantize_us,
            "scaled_mm step us": ours, "cuBLAS step us": ours * ratio, "scaled_mm step api us": 20.0,
            "cuBLAS step api us": 20.0 * api_ratio, "ratio": ratio, "api_ratio": api_ratio,
            "scaled_mm step rel_error": 0.02, "cuBLAS step rel_error": 0.021}


def test_step_summary_and_table():
    rows = [_step_row(16, 2.0, 4.0, 3.0), _step_row(4096, 0.5, 1.0, 1.0)]
    s = B.step_summary(rows)
    assert s["cells"] == 2 and math.isclose(s["gmean"], 1.0) and math.isclose(s["api_gmean"], 2.0)
    assert math.isclose(s["gmean_m128"], 2.0) and math.isclose(s["api_gmean_m128"], 4.0)
    assert math.isclose(s["quantize_share"], 0.3)
    lines = B.step_table(rows).splitlines()
    assert len(lines) == 4 and lines[2].startswith("| 16x512x256 | 3.0 | 10.0 | 20.0 | 2.00x |")


def test_recorded_step_holds_every_cell():
    """Chapter 11 prints the H200's record without a GPU: one record per cell, both steps timed."""
    try:
        saved = results.load(B.STEP_RESULTS)
    except FileNotFoundError:
        pytest.fail("results/blockwise_step_h200.json is missing: chapter 11 prints it")
    rows = saved["records"]
    assert [(r["M"], r["K"], r["N"]) for r in rows] == B.step_cells()
    assert all(r["scaled_mm step us"] > r["quantize us"] > 0 and r["cuBLAS step us"] > 0 for r in rows)
    B.step_table(rows), B.step_summary(rows)


def test_table_gives_refusals_short_and_keeps_every_column():
    cublas = ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling "
              "`cublasLtMatmulAlgoGetHeuristic( ltHandle, computeDesc.descriptor(), ...)`")
    assert B.short_reason(cublas) == "`CUBLAS_STATUS_NOT_SUPPORTED`"
    assert B.short_reason("ValueError: N must be a multiple of 128") == "N must be a multiple of 128"
    rows = [{"shape": "1x7168x2112", "refused": "ValueError: N must be a multiple of 128"},
            {"shape": "1x512x32768", "tflops": 3.0, "cublas_refused": cublas, "api_us": 27.0, "host_us": 24.3,
             "rel_error": 1.66e-3},
            {"shape": "16x512x32768", "tflops": 48.0, "cublas_tflops": 39.0, "ratio": 1.24, "api_us": 27.2,
             "host_us": 24.5, "cublas_api_us": 49.1, "cublas_host_us": 42.9, "api_ratio": 1.81, "rel_error": 1.66e-3,
             "cublas_rel_error": 1.66e-3}]
    lines = B.table(rows).splitlines()
    columns = lines[0].count("|")
    assert lines[2] == "| 1x7168x2112 | refused: N must be a multiple of 128 ||||||||||"
    assert "cublasLt" not in lines[3] and lines[3].count("|") == columns
    assert lines[4].count("|") == columns and "1.24x" in lines[4] and "1.81x" in lines[4]
