"""fp8_tutorial.measure.results: file names and round trips."""

import json

import pytest

from fp8_tutorial.measure import results


@pytest.mark.parametrize("name,slug", [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
                                       ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"), ("none", "none")])
def test_gpu_slug(name, slug):
    assert results.gpu_slug(name) == slug


def test_save_and_load(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    target = results.save("demo", [{"a": 1}], note="x")
    gpu = target.stem.split("_", 1)[1]
    data = results.load("demo", gpu)
    assert data["records"] == [{"a": 1}] and data["note"] == "x"
    assert "date" in data["environment"] and results.provenance(data)
    assert json.loads(target.read_text()) == data
    with pytest.raises(FileNotFoundError, match="no recorded results"):
        results.load("missing", "h200")


def test_read_ncu(tmp_path):
    target = tmp_path / "k.csv"
    target.write_text('==PROF== Connected to process 1\n"ID","Kernel Name","gpu__time_duration.sum"\n'
                      '"","","ns"\n"0","gemm_kernel","884,960"\nkernel error 3e-3\n')
    assert results.read_ncu(target) == {"ID": 0.0, "Kernel Name": "gemm_kernel", "gpu__time_duration.sum": 884960.0}
    target.write_text('"ID","Kernel Name"\n"",""\n"0","first"\n"1","second"\n')
    assert [k["Kernel Name"] for k in results.read_ncu_kernels(target)] == ["first", "second"]
    target.write_text("==PROF== Disconnected\n")
    with pytest.raises(ValueError, match="no profiled kernel"):
        results.read_ncu(target)


@pytest.mark.parametrize("target", sorted((results.RESULTS / "ncu").glob("*.csv")), ids=lambda p: p.stem)
def test_recorded_ncu_profiles_read(target):
    metrics = results.read_ncu(target)
    assert isinstance(metrics["Kernel Name"], str) and metrics["gpu__time_duration.sum"] > 0


def test_ncu_table_has_a_column_per_kernel_and_a_row_per_counter():
    profiles = {"a": {"t": 1.0}, "b": {"t": 2.5}}
    table = results.ncu_table("cell", profiles, [("time", lambda m: f"{m['t']:.1f}")]).splitlines()
    assert table == ["| cell | a | b |", "|---|---:|---:|", "| time | 1.0 | 2.5 |"]
    with pytest.raises(ValueError):
        results.ncu_table("cell", {}, [("time", str)])


def test_a_sweep_saves_its_records_checks_and_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    run = results.Sweep("sweep")
    run.records.append({"shape": "1x2x3", "tflops": 1.0})
    run.log("a cell")
    run.fail("a check")
    saved = json.loads(run.done().read_text())
    assert saved["records"] == [{"shape": "1x2x3", "tflops": 1.0}] and saved["failed_checks"] == 1
    assert saved["log"][:2] == ["a cell", "FAIL a check"] and saved["log"][2].startswith("done: 1 failed checks")
    assert "FAIL a check" in capsys.readouterr().out
