"""The promotion-interval kernel and the accuracy study (chapter 10): right against float64 in
the interpreter, and on a GPU each interval's error where the H200 measured it."""

import dataclasses
import math

import pytest
import torch

import fp8_tutorial as fp8
from fp8_tutorial.checks import poison, random_operands, reference_mm, rel_error
from fp8_tutorial.gemm import check_operands
from fp8_tutorial.kernels.accumulation import INTERVALS, launch_interval
from fp8_tutorial.measure import accuracy, results

GPU = pytest.mark.skipif(not fp8.ON_GPU, reason="Hopper's accumulation error shows only on a GPU")


@pytest.mark.parametrize("M,K,N", [(1, 300, 17), (33, 257, 45), (64, 1000, 8), (5, 16, 3)])
@pytest.mark.parametrize("recipe", ["tensor", "row"])
@pytest.mark.parametrize("interval", [None, *INTERVALS])
def test_interval_kernel_against_float64(M, K, N, recipe, interval):
    gen = torch.Generator().manual_seed(M * K + N)
    a, b, sa, sb = random_operands(M, K, N, recipe, recipe, gen)
    out = poison(torch.empty((M, N), dtype=torch.float32, device=a.device))
    launch_interval(check_operands(a, b, sa, sb), out, interval)
    assert rel_error(out, reference_mm(a, b, sa, sb)) < (1e-5 if not fp8.ON_GPU else 1e-2)


def test_interval_kernel_refuses_what_it_cannot_do():
    gen = torch.Generator().manual_seed(0)
    a, b, sa, sb = random_operands(4, 64, 4, "tensor", "tensor", gen)
    out = torch.empty((4, 4), dtype=torch.float32, device=a.device)
    with pytest.raises(ValueError, match="interval must be None"):
        launch_interval(check_operands(a, b, sa, sb), out, 100)
    with pytest.raises(ValueError, match="per-tensor and per-row"):
        ops = dataclasses.replace(check_operands(a, b, sa, sb), recipe_a="block", recipe_b="block")
        launch_interval(ops, out, 128)


@pytest.mark.parametrize("kind", accuracy.KINDS)
def test_study_inputs_are_what_they_say(kind):
    gen = torch.Generator().manual_seed(1)
    a, b, sa, sb, x, w = accuracy.study_inputs(kind, 64, 512, 32, "row", gen, unquantized=True)
    assert a.shape == (64, 512) and b.shape == (512, 32) and x.shape == (64, 512) and w.shape == (32, 512)
    positive = (x > 0).float().mean().item()
    assert (0.85 < positive < 0.95) if kind == "skewed" else (0.4 < positive < 0.6)
    with pytest.raises(ValueError, match="kind must be one of"):
        accuracy.study_inputs("ones", 4, 4, 4, "tensor", gen)


def test_error_study_records_every_method_and_the_quantization():
    chosen = {k: v for k, v in accuracy.methods(include_package=False).items() if "cuBLAS" not in k}
    records = accuracy.error_vs_k([64, 200], kinds=["skewed"], recipes=["tensor"], M=8, N=8, chosen=chosen)
    methods = {r["method"] for r in records}
    assert methods == set(chosen) | {accuracy.QUANTIZATION}
    assert len(records) == 2 * len(methods)
    quant = [r["rel_error"] for r in records if r["method"] == accuracy.QUANTIZATION]
    assert all(0.005 < e < 0.2 for e in quant)  # e4m3 keeps 3 mantissa bits: a few percent
    if not fp8.ON_GPU:  # exact sums: every method within float32 rounding of float64
        assert all(r["rel_error"] < 1e-5 for r in records if r["method"] != accuracy.QUANTIZATION)


def test_probe_sees_an_exact_sum_in_the_interpreter():
    run = accuracy.methods(include_package=False)["fast (never promoted)"]
    found = accuracy.probe(run, shifts=[0, 9, 18], K=64, rows=2)
    assert [p["shift"] for p in found] == [0, 9, 18]
    if not fp8.ON_GPU:
        assert all(abs(p["kept"] - 1) < 1e-6 for p in found)


def _records(errors):  # (kind, recipe, K, method) -> error
    return [dict(kind=k, recipe=r, K=K, method=m, rel_error=e) for (k, r, K, m), e in errors.items()]


def test_closest_interval_picks_the_matching_one():
    errors = {}
    for K in (512, 4096):
        for n in INTERVALS:
            errors[("random", "tensor", K, f"promoted every {n}")] = 1e-4 * n / 128
        errors[("random", "tensor", K, "cuBLAS precise")] = 2.02e-4
    found = accuracy.closest_interval(_records(errors))
    assert found[("random", "tensor")][0] == 256
    assert math.isclose(found[("random", "tensor")][1], 1.01)


def test_tables_read_their_records():
    errors = {("skewed", "tensor", 512, m): 1e-3 for m in ("fast (never promoted)", accuracy.QUANTIZATION)}
    table = accuracy.interval_table(_records(errors), "skewed", "tensor")
    assert table.splitlines()[2].startswith("| FP8 quantization | 1.0e-03")
    rows = [dict(shape="8x8x8", recipe="row", config=c, mode=m, tflops=t, ratio=t / 100, rel_error=1e-3)
            for c, m, t in [("cuBLAS", "precise", 100), ("cuBLAS", "fast", 110), ("a", "explicit", 90),
                            ("b", "explicit", 95), ("a", "compiler", 80), ("a", "fast", 120)]]
    assert "| 8x8x8 | row | 100 | 1.10x | 0.95x | 0.80x | 1.20x |" in accuracy.costs_table(rows)
    assert accuracy.gmeans(rows)["explicit"] == pytest.approx((0.95, 0.95))


@GPU
def test_each_interval_errs_as_the_h200_measured():
    """On a Hopper GPU, every interval's error at each K within 1.5x of what chapter 10 recorded,
    and the package's precise kernels never above cuBLAS precise's (5% allowed for the draw)."""
    saved = results.load(accuracy.RESULTS)["records"]
    Ks = [512, 4096, 16384]
    live = accuracy.error_vs_k(Ks, kinds=["skewed"], recipes=["tensor"])
    recorded = {(r["K"], r["method"]): r["rel_error"] for r in saved
                if r["kind"] == "skewed" and r["recipe"] == "tensor"}
    for r in live:
        if r["method"].startswith(("promoted", "fast", "cuBLAS precise")):
            want = recorded[(r["K"], r["method"])]
            assert want / 1.5 < r["rel_error"] < want * 1.5, (r, want)
    for K in Ks:
        ours = next(r["rel_error"] for r in live if r["K"] == K and r["method"] == "scaled_mm precise")
        theirs = next(r["rel_error"] for r in live if r["K"] == K and r["method"] == "cuBLAS precise")
        assert ours <= theirs * 1.05, (K, ours, theirs)


def test_variants_summary_counts_the_best_of_each_family():
    """A family's split and unsplit records count as one (the better); a cell a family has no
    record for (a variant that failed there) is left out of its numbers, not an error."""
    def rec(shape, variant, ratio, split=False):
        return dict(shape=shape, recipe="tensor", variant=variant, split=split, ratio=ratio, rel_error=1e-3)
    records = [rec("a", "cuBLAS precise", 1.0), rec("a", "x", 0.5), rec("a", "x", 0.9, split=True),
               rec("a", "y", 0.8), rec("b", "cuBLAS precise", 1.0), rec("b", "y", 0.4)]
    got = {s["variant"]: s for s in accuracy.variants_summary(records)}
    assert set(got) == {"x", "y"}
    assert (got["x"]["cells"], got["x"]["fastest_on"], got["x"]["lowest"]) == (1, 1, 0.9)
    assert (got["y"]["cells"], got["y"]["fastest_on"]) == (2, 1)
    assert math.isclose(got["y"]["gmean"], math.sqrt(0.8 * 0.4), rel_tol=1e-6)
    assert "| x | 0.900x | 0.900x | 1 of 1 |" in accuracy.variants_table(records)


def test_recorded_sweep_covers_every_cell():
    """The H200's record of tools/precise_variants.py: every family on all 18 reference cells,
    each checked against float64 with cuBLAS precise's error or less."""
    records = accuracy.variants_or_load()["records"]
    base = max(r["rel_error"] for r in records if r["variant"] == "cuBLAS precise")
    for s in accuracy.variants_summary(records):
        assert s["cells"] == 18, s
        assert s["rel_error"] <= base * 1.01, s
    assert max(accuracy.variants_summary(records), key=lambda s: s["gmean"])["variant"] == "paired"


def test_recorded_stacked_run_covers_every_cell_and_checked_first():
    """The H200's record of tools/stacked_precise.py: its checks passed before it timed anything;
    the package's two precise kernels (paired, and stacked with 160 registers a group) and the
    stacked kernel as first written on all 18 reference cells, each with cuBLAS precise's error or
    less; the stacked kernel the faster on some cells and the paired one on others (the reason the
    package keeps both)."""
    from fp8_tutorial.measure import results

    saved = results.load(accuracy.STACKED)
    assert saved["failed_checks"] == 0
    records = accuracy.variants_or_load(accuracy.STACKED)["records"]
    base = max(r["rel_error"] for r in records if r["variant"] == "cuBLAS precise")
    summary = {s["variant"]: s for s in accuracy.variants_summary(records)}
    assert set(summary) == {"paired", "stacked, 160 registers a group", "stacked, 128 registers a group"}
    for s in summary.values():
        assert s["cells"] == 18 and s["rel_error"] <= base * 1.01, s
    assert summary["paired"]["fastest_on"] > 0 and summary["stacked, 160 registers a group"]["fastest_on"] > 0
    # block-wise: the nine DeepSeek-V3 cells the run reached (chapter 11 says nine), each with all three
    block_cells = {}
    for r in saved["block_records"]:
        block_cells.setdefault(r["shape"], set()).add(r["variant"])
    assert len(block_cells) == 9 and all(v == {"cuBLAS precise", "paired", "stacked"} for v in block_cells.values())


def test_recorded_overlap_run_is_what_chapter_10_says():
    """The H200's record of tools/stacked_precise.py overlap, made before the package took
    ``overlapped_tile``: checks passed first, all 18 cells for each kernel with cuBLAS precise's
    error or less, and the overlapped paired kernel faster than the waiting one by the geometric
    mean and on 17 of the 18 cells (chapter 10 says so)."""
    from fp8_tutorial.measure import results

    assert results.load(accuracy.OVERLAP)["failed_checks"] == 0
    records = accuracy.variants_or_load(accuracy.OVERLAP)["records"]
    base = max(r["rel_error"] for r in records if r["variant"] == "cuBLAS precise")
    summary = {s["variant"]: s for s in accuracy.variants_summary(records)}
    for s in summary.values():
        assert s["cells"] == 18 and s["rel_error"] <= base * 1.01, s
    overlapped, waiting = summary["paired, overlapped"], summary["paired"]
    assert round(overlapped["gmean"] / waiting["gmean"] - 1, 3) == 0.047
    assert overlapped["fastest_on"] == 11

    def best(variant):
        cells = {}
        for r in records:
            if r["variant"] == variant:
                cells[(r["shape"], r["recipe"])] = max(cells.get((r["shape"], r["recipe"]), 0), r["ratio"])
        return cells
    faster = best("paired, overlapped")
    assert sum(faster[c] > x for c, x in best("paired").items()) == 17
