"""fp8_tutorial.results: file names and round trips."""

import json

import pytest

from fp8_tutorial import results


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
