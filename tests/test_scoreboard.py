"""fp8_tutorial.measure.scoreboard and the bench / report commands."""

import json
import subprocess
import sys

import pytest

import fp8_tutorial as fp8
from fp8_tutorial.measure import contenders as C
from fp8_tutorial.measure import scoreboard
from fp8_tutorial.book import ROOT

RECORDED = ROOT / "results" / "h200.json"


def _cmd(*args):
    return subprocess.run([sys.executable, "-m", "fp8_tutorial", *args], capture_output=True, text=True, cwd=ROOT)


def test_parse_shape():
    assert scoreboard.parse_shape("4608x12288x3072") == (4608, 12288, 3072)
    for bad in ("12x3", "axbxc", "0x4x4", ""):
        with pytest.raises(ValueError, match="MxKxN"):
            scoreboard.parse_shape(bad)


def _synthetic():
    recs = []
    for shape in [(512, 3072, 12288), (8192, 8192, 8192)]:
        for name, tf in [("cublas", 1000.0), ("mykernel", 1100.0)]:
            recs.append({"contender": name, "recipe": "row", "accumulation": "fast", "key": f"{name}/row/fast",
                         "M": shape[0], "K": shape[1], "N": shape[2], "shape": scoreboard.shape_name(*shape),
                         "median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.1, "min_ms": 0.8, "reps": 3, "tflops": tf,
                         "rel_error": 3e-3, "ok": True})
    recs.append({"contender": "mykernel", "recipe": "block", "accumulation": "fast", "key": "mykernel/block/fast",
                 "M": 512, "K": 3072, "N": 12288, "shape": "512x3072x12288", "error": "ValueError: no"})
    scoreboard._add_ratios(recs)
    return {"environment": {"gpu": "NVIDIA H200", "date": "2026-11-29", "torch": "2.11", "triton": "3.6"},
            "records": recs}


def test_ratios_and_table():
    data = _synthetic()
    mine = [r for r in data["records"] if r["key"] == "mykernel/row/fast"]
    assert all(r["ratio"] == pytest.approx(1.1) for r in mine)
    text = scoreboard.table(data)
    assert "| 512x3072x12288 |" in text and "1100 (1.10x)" in text and "n/a" in text
    assert "Not measured:" in text and "NVIDIA H200" in text


def test_merge_replaces_only_remeasured_records():
    old = dict(_synthetic(), ceilings={"copy_gbps": 4000.0})
    new = {"environment": {"date": "later"}, "records": [dict(old["records"][0], tflops=1.0)]}
    merged = scoreboard.merge(old, new)
    assert len(merged["records"]) == len(old["records"])
    assert sum(r["tflops"] == 1.0 for r in merged["records"] if "tflops" in r) == 1
    assert merged["ceilings"] == {"copy_gbps": 4000.0} and merged["environment"]["date"] == "later"


def test_wrong_output_gets_no_ratio():
    """A contender whose error exceeds 1.5x the same-run cuBLAS error is marked wrong: no ratio,
    no bar, WRONG in the table, however fast it was."""
    data = _synthetic()
    for r in data["records"]:
        if r["key"] == "mykernel/row/fast" and r["shape"] == "512x3072x12288":
            r["rel_error"] = 3e-3 * 2.0
    scoreboard._add_ratios(data["records"])
    bad = [r for r in data["records"] if r["key"] == "mykernel/row/fast" and r["shape"] == "512x3072x12288"][0]
    assert bad["ok"] is False and bad["ratio"] is None
    assert "WRONG 6.0e-03" in scoreboard.table(data)


def test_figure(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from fp8_tutorial.measure.plots import WIDTH

    fig = scoreboard.figure(_synthetic(), tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000
    assert fig.get_size_inches()[0] <= WIDTH and "against cuBLAS" in fig._suptitle.get_text()
    (ax,) = fig.axes  # one panel: the only recipe with a contender beside cuBLAS
    assert ax.get_title() == "per row" and ax.get_xlabel() == "M x K x N"
    assert ax.get_ylabel() == "best / cuBLAS (ratio)"
    assert [round(p.get_height(), 2) for p in ax.patches] == [1.1, 1.1]  # mykernel, both shapes
    assert {t.get_text() for t in ax.texts} == {"mykernel", "1.10"}
    cublas = {**_synthetic(), "records": [r for r in _synthetic()["records"] if r["contender"] == "cublas"]}
    fig = scoreboard.figure(cublas, title="cuBLAS alone")
    assert fig.axes[0].get_ylabel() == "TFLOP/s (median)" and fig._suptitle.get_text() == "cuBLAS alone"


def test_figure_of_the_recorded_h200_file():
    import matplotlib

    matplotlib.use("Agg")
    data = scoreboard.load(RECORDED)
    fig = scoreboard.figure(data)
    assert [ax.get_title() for ax in fig.axes] == ["per tensor", "per row", "per block"]  # block-wise: the Gluon kernel
    assert len(fig.axes[0].get_legend().get_texts()) <= 4  # not one entry per contender


def test_load_rejects_other_files(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"a": 1}))
    with pytest.raises(ValueError, match="not a benchmark results file"):
        scoreboard.load(tmp_path / "x.json")
    with pytest.raises(FileNotFoundError):
        scoreboard.load(tmp_path / "missing.json")


def test_recorded_h200_results_cover_every_cublas_contender_on_nine_shapes():
    data = scoreboard.load(RECORDED)
    assert data["environment"]["gpu"].startswith("NVIDIA H200")
    shapes = {(r["M"], r["K"], r["N"]) for r in data["records"]}
    assert shapes >= set(C.SEED_SHAPES) | {(8192, 8192, 8192)}
    for key in (k for k in C.REGISTRY if k.startswith("cublas/")):
        for shape in C.SEED_SHAPES + [(8192, 8192, 8192)]:
            rec = [r for r in data["records"] if r["key"] == key and (r["M"], r["K"], r["N"]) == shape]
            assert len(rec) == 1, f"{key} {shape}"
            if key == "cublas/block/fast":  # cuBLAS refuses block-wise scaling with fast accumulation
                assert "error" in rec[0] and "fast accum" in rec[0]["error"]
            else:
                assert "error" not in rec[0], rec[0]
                assert rec[0]["ok"] and rec[0]["tflops"] > 0 and rec[0]["ratio"] == pytest.approx(1.0)


def test_report_command_on_recorded_file(tmp_path):
    out = _cmd("report", str(RECORDED), "--figure", str(tmp_path / "h200.png"))
    assert out.returncode == 0, out.stderr
    assert "| M x K x N |" in out.stdout and "4608x12288x3072" in out.stdout
    assert (tmp_path / "h200.png").exists()
    bad = _cmd("report", str(tmp_path / "missing.json"))
    assert bad.returncode == 2 and "no benchmark results" in bad.stderr


@pytest.mark.skipif(fp8.ON_GPU, reason="checks the refusal on a machine without a GPU")
def test_bench_command_refuses_without_gpu():
    out = _cmd("bench", "--shape", "256x256x256")
    assert out.returncode == 2 and "needs a CUDA GPU" in out.stderr


def test_bench_command_rejects_bad_options():
    for args in (["--recipes", "mxfp4"], ["--shape", "1x2"], ["--contenders", "nope"]):
        out = _cmd("bench", *args)
        assert out.returncode == 2 and "bench:" in out.stderr


@pytest.mark.skipif(not fp8.ON_GPU, reason="timing needs a GPU")
def test_bench_command_on_gpu(tmp_path):
    target = tmp_path / "small.json"
    out = _cmd("bench", "--shape", "256x256x256", "384x512x256", "--reps", "3", "--output", str(target))
    assert out.returncode == 0, out.stderr
    data = scoreboard.load(target)
    assert data["clocks"]["before"] and data["settings"]["reps"] == 3
    measured = [r for r in data["records"] if "error" not in r]
    assert {r["recipe"] for r in measured} >= {"bf16", "tensor", "row"}
    for r in measured:
        assert r["ok"] and r["rel_error"] < scoreboard.TOLERANCE and r["tflops"] > 0
        if r["contender"] == "cublas":
            assert r["ratio"] == pytest.approx(1.0)


@pytest.mark.skipif(not fp8.ON_GPU, reason="timing needs a GPU")
def test_bench_api_command_on_gpu(tmp_path):
    target = tmp_path / "api.json"
    out = _cmd("bench", "--api", "--shape", "256x256x256", "16x512x256", "--reps", "2", "--calls", "5",
               "--preallocated", "--output", str(target))
    assert out.returncode == 0, out.stderr
    data = scoreboard.load(target)
    assert data["records"] == [] and data["api"]["settings"]["calls"] == 5 and "As a model calls it" in out.stdout
    measured = [r for r in data["api"]["records"] if "error" not in r]
    assert {r["contender"] for r in measured} == {"scaled_mm", "scaled_mm_out", "cublas"}
    for r in measured:
        assert r["ok"] and r["median_us"] > 0 and 0 < r["host_us"] < 1e5 and r["ratio"] > 0


def test_best_of_and_best_table():
    data = _synthetic()
    for r in list(data["records"]):
        if r["key"] == "mykernel/row/fast":
            data["records"].append(dict(r, contender="other", key="other/row/fast", tflops=r["tflops"] * 0.5))
    scoreboard._add_ratios(data["records"])
    best = scoreboard.best_of(data, ["mykernel", "other"], "row")
    assert list(best) == ["512x3072x12288", "8192x8192x8192"]
    assert all(r["contender"] == "mykernel" and r["ratio"] == pytest.approx(1.1) for r in best.values())
    assert scoreboard.best_of(data, ["other"], "row")["8192x8192x8192"]["ratio"] == pytest.approx(0.55)
    text = scoreboard.best_table(data, ["mykernel", "other"], recipes=("row",))
    assert "| 512x3072x12288 | 1.10x | mykernel |" in text and "| geometric mean | **1.10x** |" in text
    assert scoreboard.gmean([1.0, 4.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        scoreboard.gmean([])


def test_recorded_h200_results_hold_every_kernel_of_part_two():
    """Chapters 04 to 06 recorded each kernel on the nine shapes, per tensor and per row, fast and
    precise, every output right (ok) and timed against the same run's cuBLAS."""
    data = scoreboard.load(RECORDED)
    for name in ("tiled", "persistent", "tma", "streamk"):
        for recipe in ("tensor", "row"):
            for accumulation in ("fast", "precise"):
                key = f"{name}/{recipe}/{accumulation}"
                found = {(r["M"], r["K"], r["N"]): r for r in data["records"] if r["key"] == key}
                assert set(found) == set(C.SEED_SHAPES) | {(8192, 8192, 8192)}, key
                assert all(r["ok"] and r["ratio"] > 0 for r in found.values()), key


def test_measure_or_load_without_a_gpu_reads_the_h200_records():
    if fp8.ON_GPU:
        pytest.skip("on a GPU it measures: the chapters exercise that branch")
    shapes = [(512, 3072, 12288), (8192, 8192, 8192)]
    data, label = scoreboard.measure_or_load(shapes, ["cublas", "tiled"], accumulations=["fast"])
    assert label.startswith("recorded on ")
    assert {r["shape"] for r in data["records"]} == {"512x3072x12288", "8192x8192x8192"}
    assert {r["contender"] for r in data["records"]} == {"cublas", "tiled"}
    assert {r["accumulation"] for r in data["records"]} == {"fast"}
    assert {r["recipe"] for r in data["records"]} == {"tensor", "row"}
    with pytest.raises(TypeError, match="names must be a list of strings"):
        scoreboard.measure_or_load(shapes, "tiled")


def test_model_shapes_are_real_projections_that_run_in_minutes():
    shapes = scoreboard.MODEL_SHAPES
    assert 25 <= len(shapes) <= 35 and len(set(shapes)) == len(shapes)
    assert {M for M, _, _ in shapes} == {1, 16, 64, 128, 256, 1024, 4096, 16384}
    for M, K, N in shapes:
        assert M >= 1 and K % 16 == 0 and N % 16 == 0 and 1024 <= min(K, N) and max(K, N) <= 57344, (M, K, N)
        assert 2 * M * N * K <= 1.0e12, (M, K, N)  # about a millisecond of FP8 on an H200: the run stays short


def _api_block():
    """API records as ``run_api`` writes them: a large and a small cell, per row, fast accumulation."""
    recs = []
    for shape, ours, theirs in [((4096, 4096, 4096), (110.0, 40.0), (100.0, 30.0)),
                                ((16, 4096, 6144), (320.0, 300.0), (32.0, 30.0))]:
        for name, (us, host) in (("scaled_mm", ours), ("cublas", theirs)):
            recs.append({"mode": "api", "contender": name, "recipe": "row", "accumulation": "fast",
                         "key": f"{name}/row/fast", "M": shape[0], "K": shape[1], "N": shape[2],
                         "shape": scoreboard.shape_name(*shape), "median_us": us, "p10_us": us, "p90_us": us,
                         "host_us": host, "calls": 50, "rounds": 10, "tflops": 2 * shape[0] * shape[1] * shape[2] / us / 1e6,
                         "rel_error": 3e-3, "measured": "2026-12-02"})
    recs.append({"mode": "api", "contender": "cublas", "recipe": "bf16", "accumulation": "fp32", "key": "cublas/bf16/fp32",
                 "M": 16, "K": 4096, "N": 6144, "shape": "16x4096x6144", "median_us": 40.0, "p10_us": 40.0,
                 "p90_us": 40.0, "host_us": 20.0, "calls": 50, "rounds": 10, "tflops": 0.02, "rel_error": 1e-3})
    recs.append({"mode": "api", "contender": "scaled_mm", "recipe": "tensor", "accumulation": "fast",
                 "key": "scaled_mm/tensor/fast", "M": 16, "K": 4096, "N": 6144, "shape": "16x4096x6144",
                 "error": "RuntimeError: no"})
    scoreboard._add_ratios(recs)
    env = {"gpu": "NVIDIA H200", "date": "2026-12-02", "torch": "2.11", "triton": "3.6"}
    return {"environment": env, "clocks": {}, "settings": {"calls": 50, "rounds": 10}, "records": recs}


def test_api_table():
    data = {**_synthetic(), "api": _api_block()}
    assert "As a model calls it" not in scoreboard.table(data)  # the chapters' kernel tables stay as they were
    kernel, api = scoreboard.report(data).split("As a model calls it")
    assert "| 512x3072x12288 |" in kernel and "1100 (1.10x)" in kernel
    assert "50 calls back to back" in api and "median of 10 batches" in api
    assert "| M x K x N | recipe | scaled_mm: us/call | x cuBLAS | host us/call | cuBLAS: us/call | host us/call |" in api
    assert "| 4096x4096x4096 | row/fast | 110.0 | 0.91x | 40.0 | 100.0 | 30.0 |" in api
    assert "| 16x4096x6144 | bf16/fp32 |  |  |  | 40.0 | 20.0 |" in api
    assert "| 16x4096x6144 | tensor/fast | n/a |  |  |  |  |" in api
    assert api.index("4096x4096x4096") < api.index("16x4096x6144")
    assert "scaled_mm/row/fast: 0.30x cuBLAS (geometric mean over 2 cells), at least cuBLAS's speed on 0" in api
    assert "- scaled_mm/tensor/fast on 16x4096x6144: RuntimeError: no" in api
    only_api = scoreboard.report({"environment": data["environment"], "records": [], "api": _api_block()})
    assert only_api.startswith("As a model calls it") and "TFLOP/s (x cuBLAS" not in only_api
    assert scoreboard.report(_synthetic()) == scoreboard.table(_synthetic())


def test_api_table_marks_wrong_outputs():
    api = _api_block()
    for r in api["records"]:
        if r["key"] == "scaled_mm/row/fast" and r["M"] == 16:
            r["rel_error"] = 0.5
    scoreboard._add_ratios(api["records"])
    assert "| 16x4096x6144 | row/fast | WRONG 5.0e-01 |  |  | 32.0 | 30.0 |" in scoreboard.api_table({"api": api})


def test_merge_keeps_kernel_and_api_records_apart():
    kernel = _synthetic()
    api_run = {"environment": {"date": "api run"}, "records": [], "api": _api_block()}
    merged = scoreboard.merge(kernel, api_run)
    assert merged["records"] == kernel["records"] and merged["environment"] == kernel["environment"]
    assert merged["api"]["records"] == api_run["api"]["records"]
    later = _api_block()
    later["environment"] = dict(later["environment"], date="later")
    later["records"] = [dict(later["records"][0], median_us=1.0)]
    merged = scoreboard.merge(merged, {"environment": {"date": "x"}, "records": [], "api": later})
    assert len(merged["api"]["records"]) == len(api_run["api"]["records"])
    assert sorted(r.get("median_us") or 0 for r in merged["api"]["records"])[1] == 1.0
    assert merged["api"]["environment"]["date"] == "later" and merged["environment"] == kernel["environment"]
    rerun = {"environment": {"date": "kernel run"}, "records": kernel["records"][:1]}
    again = scoreboard.merge(merged, rerun)
    assert again["api"] == merged["api"] and again["environment"] == {"date": "kernel run"}


def test_report_command_on_an_api_only_file(tmp_path):
    target = tmp_path / "api.json"
    scoreboard.save({"environment": _api_block()["environment"], "records": [], "api": _api_block()}, target)
    out = _cmd("report", str(target))
    assert out.returncode == 0, out.stderr
    assert "As a model calls it" in out.stdout and "| 4096x4096x4096 | row/fast |" in out.stdout
    assert not target.with_suffix(".png").exists()


@pytest.mark.skipif(fp8.ON_GPU, reason="checks the refusal on a machine without a GPU")
def test_bench_api_command_refuses_without_gpu():
    out = _cmd("bench", "--api", "--model-shapes")
    assert out.returncode == 2 and "needs a CUDA GPU" in out.stderr


def test_bench_api_command_rejects_bad_options():
    for args in (["--api", "--contenders", "tiled"], ["--preallocated"], ["--calls", "5"],
                 ["--api", "--calls", "0"], ["--api", "--calls", "1000"], ["--api", "--reps", "0"],
                 ["--api", "--recipes", "mxfp4"]):
        out = _cmd("bench", *args)
        assert out.returncode == 2 and "bench:" in out.stderr, args


def test_bench_command_picks_the_harness_and_the_shapes(tmp_path, monkeypatch):
    """``bench --api`` calls ``run_api`` (``bench`` calls ``run``) with the shapes and counts asked
    for, and merges into the output file; the GPU and the measurement are stood in for."""
    from fp8_tutorial.__main__ import main

    seen = []

    def run_api(shapes, recipes, accumulations, calls, rounds, preallocated):
        seen.append(("api", shapes, recipes, accumulations, calls, rounds, preallocated))
        return {"environment": _api_block()["environment"], "records": [], "api": _api_block()}

    def run(shapes, names, recipes, accumulations, reps):
        seen.append(("kernel", shapes, names, recipes, accumulations, reps))
        return _synthetic()

    monkeypatch.setattr(fp8, "ON_GPU", True)
    monkeypatch.setattr(scoreboard, "run_api", run_api)
    monkeypatch.setattr(scoreboard, "run", run)
    target = tmp_path / "r.json"
    assert main(["bench", "--api", "--model-shapes", "--recipes", "row", "--accumulation", "fast",
                 "--output", str(target)]) == 0
    assert seen[-1] == ("api", scoreboard.MODEL_SHAPES, ["row"], ["fast"], 50, 10, False)
    assert main(["bench", "--api", "--shape", "64x7168x2112", "--calls", "20", "--reps", "3", "--preallocated",
                 "--output", str(target)]) == 0
    assert seen[-1] == ("api", [(64, 7168, 2112)], None, None, 20, 3, True)
    assert main(["bench", "--model-shapes", "--output", str(target)]) == 0
    assert seen[-1] == ("kernel", scoreboard.MODEL_SHAPES, None, None, None, 30)
    data = scoreboard.load(target)
    assert data["records"] == _synthetic()["records"] and data["api"]["records"] == _api_block()["records"]


def test_run_api_builds_records_on_cpu(monkeypatch):
    """``run_api``'s own work (problems, contenders, checks, records, ratios), on a tiny shape in
    the interpreter, with the harness stood in for: cuBLAS at 10 us a call, scaled_mm at 20."""
    from fp8_tutorial.measure import bench

    def fake_api_benchmark(fns, flops, calls, rounds):
        for fn in fns.values():
            fn()
        return {key: bench.ApiRecord(key, *(3 * [20.0 if key.startswith("scaled_mm") else 10.0]), host_us=5.0,
                                     calls=calls, rounds=rounds, flops=flops) for key in fns}

    monkeypatch.setattr(bench, "ON_GPU", True)
    monkeypatch.setattr(scoreboard, "api_benchmark", fake_api_benchmark)
    monkeypatch.setattr(scoreboard.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(scoreboard.torch.cuda, "empty_cache", lambda: None)
    data = scoreboard.run_api([(16, 64, 48)], ["bf16", "tensor"], ["fast"], calls=7, rounds=2, preallocated=True,
                              progress=False)
    assert data["records"] == [] and data["api"]["settings"]["calls"] == 7
    by = {r["key"]: r for r in data["api"]["records"]}
    assert set(by) == {"cublas/bf16/fp32", "cublas/tensor/fast", "scaled_mm/tensor/fast", "scaled_mm_out/tensor/fast"}
    for r in by.values():
        assert r["mode"] == "api" and r["shape"] == "16x64x48" and r["ok"] and r["rel_error"] < 1e-2
        assert r["calls"] == 7 and r["host_us"] == 5.0 and r["measured"] == data["environment"]["date"]
    assert by["scaled_mm/tensor/fast"]["ratio"] == pytest.approx(0.5) and by["cublas/bf16/fp32"]["ratio"] == 1.0
    assert "| 16x64x48 | tensor/fast | 20.0 | 0.50x | 5.0 | 20.0 | 0.50x | 5.0 | 10.0 | 5.0 |" in scoreboard.report(data)


def test_measure_or_load_leaves_api_records_out(monkeypatch):
    if fp8.ON_GPU:
        pytest.skip("on a GPU it measures: the chapters exercise that branch")
    monkeypatch.setattr(scoreboard, "load", lambda path: {**_synthetic(), "api": _api_block()})
    data, _ = scoreboard.measure_or_load([(512, 3072, 12288)], ["cublas"], recipes=["row"])
    assert "api" not in data and {r["key"] for r in data["records"]} == {"cublas/row/fast"}


def _with_failures():
    """_synthetic plus one error repeated on both shapes and a second, different one."""
    data = _synthetic()
    for shape in ("512x3072x12288", "8192x8192x8192"):
        M, K, N = scoreboard.parse_shape(shape)
        data["records"].append({"contender": "cublas", "recipe": "block", "accumulation": "fast",
                                "key": "cublas/block/fast", "M": M, "K": K, "N": N, "shape": shape,
                                "error": "RuntimeError: no fast accum"})
    data["records"].append({"contender": "cublas", "recipe": "tensor", "accumulation": "fast",
                            "key": "cublas/tensor/fast", "M": 8192, "K": 8192, "N": 8192,
                            "shape": "8192x8192x8192", "error": "RuntimeError: no fast accum"})
    return data


def test_table_summarises_identical_failures():
    text = scoreboard.table(_with_failures())
    failures = text.split("Not measured:\n")[1].splitlines()
    assert failures == [
        "- cublas/block/fast on all 2 shapes; cublas/tensor/fast on 8192x8192x8192: "
        "RuntimeError: no fast accum (3 cells)",
        "- mykernel/block/fast on 512x3072x12288: ValueError: no"]


def test_table_filters_contenders_and_recipes():
    data = _with_failures()
    assert scoreboard.table(data, None, None) == scoreboard.table(data)
    only = scoreboard.table(data, contenders=["mykernel"], recipes=["row"])
    assert "| M x K x N | mykernel |" in only and "cublas" not in only
    assert "Not measured" not in only
    block = scoreboard.table(data, recipes=["block"])
    assert "| M x K x N | cublas | mykernel |" in block  # one recipe and accumulation: names
    assert "cublas/block/fast on all 2 shapes: RuntimeError: no fast accum (2 cells)" in block
    assert "row/fast" not in block
    assert "cublas/row/fast" not in scoreboard.table(data, accumulations=["precise"])
    assert "no records of this selection" in scoreboard.table(data, recipes=["bf16"])
    with pytest.raises(TypeError, match="list of strings"):
        scoreboard.table(data, recipes="row")
    with pytest.raises(ValueError, match="unknown recipe rwo"):
        scoreboard.table(data, recipes=["rwo"])
    with pytest.raises(ValueError, match="unknown contender nobody"):
        scoreboard.table(data, contenders=["nobody"])


def test_table_of_the_recorded_h200_file():
    """The recorded file's refusals read as one line per reason (cuBLAS's nine block/fast cells)."""
    data = scoreboard.load(RECORDED)
    reasons = {r["error"] for r in data["records"] if "error" in r}
    text = scoreboard.table(data)
    failures = text.split("Not measured:\n")[1].splitlines() if reasons else []
    assert len(failures) == len(reasons)
    tensor = scoreboard.table(scoreboard.load(RECORDED), contenders=["cublas", "gluon"], recipes=["tensor"])
    assert "| M x K x N | cublas/tensor/fast | gluon/tensor/fast | cublas/tensor/precise |" in tensor


def test_table_without_caption():
    data = _synthetic()
    assert scoreboard.table(data, caption=False).startswith("| M x K x N |")
    assert scoreboard.table(data).endswith(scoreboard.table(data, caption=False))


def test_table_of_one_recipe_and_accumulation_names_contenders():
    data = _with_failures()
    assert "| M x K x N | cublas | mykernel |" in scoreboard.table(data, recipes=["row"])
    assert scoreboard.table(data).startswith(scoreboard.table_caption(data))


def test_a_chapter_s_headline_is_the_geometric_mean_of_the_best_per_shape():
    from fp8_tutorial.measure import scoreboard as sb

    data = sb.load(sb.Path(__file__).resolve().parent.parent / "results" / "h200.json")
    line = sb.headline(["tiled"], "The tiled kernel", data)
    for recipe in ("tensor", "row"):
        best = sb.best_of(data, ["tiled"], recipe)
        assert f"**{sb.gmean(r['ratio'] for r in best.values()):.2f}x**" in line
    assert line.startswith("The tiled kernel against cuBLAS") and data["environment"]["gpu"] in line
    with pytest.raises(ValueError, match="no records of nothing"):
        sb.headline(["nothing"], "x", data)


def test_a_chapter_can_reuse_one_earlier_run_instead_of_measuring_again(tmp_path, monkeypatch):
    """``reuse``: on a GPU, records of one earlier run that hold everything asked for are taken
    as they are; anything less (a missing record, two runs mixed) measures again."""
    from fp8_tutorial import _env
    from fp8_tutorial.measure import results
    from fp8_tutorial.measure import scoreboard as sb

    saved = json.loads((ROOT / "results" / "h200.json").read_text())
    for r in saved["records"]:  # cublas and gluon as one run made them
        if r["contender"] in ("cublas", "gluon"):
            r["measured"] = "one run"
    (tmp_path / "h200.json").write_text(json.dumps(saved))
    monkeypatch.setattr(_env, "ON_GPU", True)
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(results, "gpu_slug", lambda name=None: "h200")
    measured = []
    monkeypatch.setattr(sb, "run", lambda *a, **k: measured.append(a) or {"records": [], "environment": {}})
    monkeypatch.setattr(C, "attach_configs", lambda records: None)
    shapes = C.SEED_SHAPES[:2]
    data, label = sb.measure_or_load(shapes, ["cublas", "gluon"], reuse=True)
    assert not measured and label.startswith("measured in one run of ")
    assert len(data["records"]) == 2 * 2 * 2 * 2 and len({r["measured"] for r in data["records"]}) == 1
    saved = json.loads((tmp_path / "h200.json").read_text())
    first = next(r for r in saved["records"] if r["contender"] == "gluon")
    first["measured"] = "another run"
    (tmp_path / "h200.json").write_text(json.dumps(saved))
    sb.measure_or_load([sb.parse_shape(first["shape"])], [first["contender"]], reuse=True)
    assert measured, "records of two runs are not one run: measured again"
