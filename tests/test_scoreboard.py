"""fp8_tutorial.scoreboard and the bench / report commands."""

import json
import subprocess
import sys

import pytest

import fp8_tutorial as fp8
from fp8_tutorial import contenders as C
from fp8_tutorial import scoreboard
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
    fig = scoreboard.figure(_synthetic(), tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000
    assert fig.axes[0].get_ylabel() == "TFLOP/s (median)"


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
