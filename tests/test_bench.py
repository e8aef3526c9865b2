"""fp8_tutorial.bench: the timing harness (live on a GPU, a clear refusal without one)."""

import pytest
import torch

import fp8_tutorial as fp8


@pytest.mark.skipif(fp8.ON_GPU, reason="checks the refusal on a machine without a GPU")
def test_refuses_without_gpu():
    with pytest.raises(fp8.NoGPUError, match="needs a CUDA GPU"):
        fp8.benchmark({"noop": lambda: None})
    with pytest.raises(fp8.NoGPUError):
        fp8.copy_bandwidth()


@pytest.mark.skipif(not fp8.ON_GPU, reason="timing needs a GPU")
def test_benchmark_orders_work_and_reports_rates():
    a = torch.randn(4096, 4096, device="cuda")
    small, big = a[:1024], a
    recs = fp8.benchmark({"small": lambda: small @ small.t(), "big": lambda: big @ big.t()},
                         flops={"small": 2 * 1024**2 * 4096, "big": 2 * 4096**3}, reps=20)
    assert set(recs) == {"small", "big"}
    assert recs["big"].median_ms > 4 * recs["small"].median_ms
    for r in recs.values():
        assert 0 < r.min_ms <= r.p10_ms <= r.median_ms <= r.p90_ms and r.reps == 20
        assert 1 < r.tflops < 2000 and r.gbps is None
        assert "TFLOP/s" in str(r)


@pytest.mark.skipif(not fp8.ON_GPU, reason="timing needs a GPU")
def test_copy_bandwidth_is_plausible():
    r = fp8.copy_bandwidth(1 << 28, reps=10)
    assert 100 < r.gbps < 10_000  # GB/s, read plus write


def test_benchmark_needs_contenders():
    if fp8.ON_GPU:
        with pytest.raises(ValueError, match="at least one"):
            fp8.benchmark({})
    else:
        with pytest.raises(fp8.NoGPUError):
            fp8.benchmark({})


@pytest.mark.skipif(not fp8.ON_GPU, reason="timing needs a GPU")
def test_host_overhead_stays_out_of_the_timing():
    """A call that spends 1 ms in Python before launching a tiny kernel is timed as the kernel."""
    import time

    x = torch.randn(1024, device="cuda")

    def slow_launch():
        time.sleep(1e-3)
        x.mul_(1.0)

    r = fp8.benchmark({"slow launch": slow_launch}, reps=10)["slow launch"]
    assert r.median_ms < 0.2


def test_parse_smi_samples_keeps_samples_only():
    text = "1470, 687.12, 0x0000000000000004\n1980, 120.50, 0x0000000000000000\n[N/A], [N/A], [N/A]\nsome message\n"
    assert fp8.bench.parse_smi_samples(text) == [(1470.0, 687.12, 4), (1980.0, 120.5, 0)]


@pytest.mark.skipif(fp8.ON_GPU, reason="checks the refusal on a machine without a GPU")
def test_under_load_refuses_without_gpu():
    with pytest.raises(fp8.bench.NoGPUError, match="clocks under load"):
        fp8.bench.under_load(lambda: None, 1.0)


@pytest.mark.skipif(not fp8.ON_GPU, reason="clocks under load need a GPU")
def test_under_load_reports_clock_power_and_rate():
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    load = fp8.bench.under_load(lambda: a @ a, 2 * 4096**3, name="bf16", seconds=1.0)
    assert 100 < load.tflops < 2000 and 200 < load.clock_mhz < 2500 and 50 < load.power_w < 1500
    assert 0 <= load.power_capped <= 1 and load.tflops_per_ghz == pytest.approx(load.tflops / load.clock_mhz * 1e3)
    assert "TFLOP/s per GHz" in str(load)
