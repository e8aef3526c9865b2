"""fp8_tutorial.measure.bench: the timing harness (live on a GPU, a clear refusal without one)."""

import pytest
import torch

import fp8_tutorial as fp8
from fp8_tutorial.measure import bench


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
    assert bench.parse_smi_samples(text) == [(1470.0, 687.12, 4), (1980.0, 120.5, 0)]


@pytest.mark.skipif(fp8.ON_GPU, reason="checks the refusal on a machine without a GPU")
def test_under_load_refuses_without_gpu():
    with pytest.raises(bench.NoGPUError, match="clocks under load"):
        bench.under_load(lambda: None, 1.0)


@pytest.mark.skipif(not fp8.ON_GPU, reason="clocks under load need a GPU")
def test_under_load_reports_clock_power_and_rate():
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    load = bench.under_load(lambda: a @ a, 2 * 4096**3, name="bf16", seconds=1.0)
    assert 100 < load.tflops < 2000 and 200 < load.clock_mhz < 2500 and 50 < load.power_w < 1500
    assert 0 <= load.power_capped <= 1 and load.tflops_per_ghz == pytest.approx(load.tflops / load.clock_mhz * 1e3)
    assert "TFLOP/s per GHz" in str(load)


@pytest.mark.skipif(fp8.ON_GPU, reason="checks the refusal on a machine without a GPU")
def test_api_benchmark_refuses_without_gpu():
    with pytest.raises(fp8.NoGPUError, match="needs a CUDA GPU"):
        fp8.api_benchmark({"noop": lambda: None})


class _FakeGPU:
    """Stands in for torch.cuda: each contender's call adds its kernel time to the GPU's clock,
    which the events read; the spins are recorded."""

    def __init__(self):
        self.now_ms, self.spins = 0.0, []
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = gpu.now_ms

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return other.t - self.t

        self.Event = Event

    def kernel(self, us, log, name):
        def call():
            self.now_ms += us / 1e3
            log.append(name)
        return call


@pytest.fixture
def fake_gpu(monkeypatch):
    gpu = _FakeGPU()
    monkeypatch.setattr(bench, "ON_GPU", True)
    monkeypatch.setattr(torch.cuda, "Event", gpu.Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "_sleep", gpu.spins.append)
    return gpu


def test_api_benchmark_times_batches_and_the_host(fake_gpu):
    """The harness's bookkeeping, run against a fake GPU: per-call times of whole batches, calls
    counted, contenders interleaved round by round, the host timed behind a spin that outlasts it."""
    import time

    log = []
    slow_host = fake_gpu.kernel(10.0, log, "slow host")
    recs = bench.api_benchmark(
        {"fast": fake_gpu.kernel(30.0, log, "fast"),
         "slow host": lambda: (time.sleep(200e-6), slow_host())},
        flops={"fast": 3e9, "slow host": 1e9}, calls=8, rounds=4, warmup=2)
    assert log.count("fast") == log.count("slow host") == 2 + 8 + 4 * 2 * 8
    batches = log[2 * (2 + 8):][::8]  # the contender of each batch: back to back, then behind the spin
    assert batches[:4] == ["fast", "fast", "slow host", "slow host"]
    assert batches[4:8] == ["slow host", "slow host", "fast", "fast"]
    fast, slow = recs["fast"], recs["slow host"]
    assert fast.median_us == pytest.approx(30.0) and slow.median_us == pytest.approx(10.0)
    assert fast.tflops == pytest.approx(3e9 / 30e-6 / 1e12) and fast.spread == pytest.approx(0.0)
    assert slow.host_us >= 200 > fast.host_us and (fast.calls, fast.rounds) == (8, 4)
    assert len(fake_gpu.spins) == 2 * 4 and min(fake_gpu.spins) >= 1e-3 * bench._SPIN_CYCLES_PER_S
    assert "us per call" in str(slow) and "host" in str(slow) and "TFLOP/s" in str(slow)


def test_api_benchmark_checks_its_arguments(fake_gpu):
    with pytest.raises(ValueError, match="at least one"):
        bench.api_benchmark({})
    with pytest.raises(ValueError, match="at least 1"):
        bench.api_benchmark({"noop": lambda: None}, calls=0)
    with pytest.raises(ValueError, match="launch queue"):
        bench.api_benchmark({"noop": lambda: None}, calls=bench.MAX_CALLS + 1)


@pytest.mark.skipif(not fp8.ON_GPU, reason="timing needs a GPU")
def test_api_benchmark_sees_the_host():
    """A call that spends 1 ms in Python before a tiny kernel costs about 1 ms per call back to back,
    and its host time says so; the kernel harness times the kernel alone."""
    import time

    x = torch.randn(1024, device="cuda")

    def slow_launch():
        time.sleep(1e-3)
        x.mul_(1.0)

    r = fp8.api_benchmark({"slow launch": slow_launch, "fast launch": lambda: x.mul_(1.0)}, calls=20, rounds=5)
    assert r["slow launch"].median_us > 900 and r["slow launch"].host_us > 900
    assert r["fast launch"].host_us < 200 and r["fast launch"].median_us < 200
