"""The timing harness: CUDA events, L2 flushed, warm-up, median and spread, contenders interleaved
(``benchmark``: the GPU's work); and the time per call as a model sees it (``api_benchmark``).

Compare contenders only inside one ``benchmark`` call: clocks fall under sustained load, so two
numbers from two runs (or two harnesses) are not comparable, while a ratio measured in one
interleaved run is.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping

import torch

from . import schedule
from .._env import ON_GPU


class NoGPUError(RuntimeError):
    """Raised when something that only makes sense on a GPU (timing) is asked for without one."""


def require_gpu(what: str = "timing") -> None:
    if not ON_GPU:
        raise NoGPUError(
            f"{what} needs a CUDA GPU, and this machine runs the kernels in Triton's interpreter: "
            "its speed says nothing about the GPU's. The book shows timings recorded on an H200; "
            "run the notebooks on a Hopper machine to measure live.")


@dataclass
class Record:
    """One contender's timings in one run. Times in milliseconds."""

    name: str
    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    reps: int
    flops: float | None = None
    bytes: float | None = None

    @property
    def tflops(self) -> float | None:
        return None if self.flops is None else self.flops / self.median_ms / 1e9

    @property
    def gbps(self) -> float | None:
        return None if self.bytes is None else self.bytes / self.median_ms / 1e6

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the relative width of the middle 80% of the runs."""
        return (self.p90_ms - self.p10_ms) / self.median_ms

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tflops": self.tflops, "gbps": self.gbps, "spread": self.spread}

    def __str__(self) -> str:
        rate = []
        if self.tflops is not None:
            rate.append(f"{self.tflops:8.1f} TFLOP/s")
        if self.gbps is not None:
            rate.append(f"{self.gbps:8.1f} GB/s")
        return (f"{self.name:<28} {self.median_ms * 1e3:9.1f} us (p10-p90 {self.p10_ms * 1e3:.1f}-"
                f"{self.p90_ms * 1e3:.1f})  " + "  ".join(rate))


# GPU cycles per second assumed for the head start (about the H100/H200 boost clock; a slower clock
# only lengthens the pause, which stays outside the timed region).
_SPIN_CYCLES_PER_S = 2.0e9


def _quantile(sorted_values: list[float], q: float) -> float:
    i = q * (len(sorted_values) - 1)
    lo = int(i)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (i - lo)


def _per_name(value, name):
    return value.get(name) if isinstance(value, Mapping) else value


def benchmark(contenders: Mapping[str, Callable[[], Any]], *, flops: float | Mapping[str, float] | None = None,
              bytes: float | Mapping[str, float] | None = None, reps: int = 50, warmup: int = 5,
              flush_l2: bool = True) -> dict[str, Record]:
    """Time each zero-argument callable ``reps`` times, interleaved, and return a Record per name.

    Each repetition runs every contender once, the starting contender rotating, with the L2 cache
    flushed (a buffer twice its size zeroed) before each timed call. Times come from CUDA events
    around the call alone. Each round starts with the GPU spinning for about twice the host time
    the round takes to launch (measured during warm-up), so the host queues the round's calls
    before the GPU reaches them: the events time the GPU's work, not the Python that launches it.
    ``flops`` and ``bytes`` (a number, or a mapping by name) turn times into TFLOP/s and GB/s.
    """
    require_gpu()
    if not contenders:
        raise ValueError("benchmark needs at least one contender")
    names = list(contenders)
    l2 = schedule.l2_bytes()
    flush = torch.empty(max(2 * l2, 1 << 20), dtype=torch.int8, device="cuda")
    host_round = 0.0
    for name in names:  # compile, autotune, allocate; then time the host side of one call
        for _ in range(warmup):
            contenders[name]()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        flush.zero_()
        contenders[name]()
        host_round += time.perf_counter() - t0
        torch.cuda.synchronize()
    head_start = int(min(2 * host_round + 20e-6, 0.05) * _SPIN_CYCLES_PER_S)
    events = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)] for n in names}
    for r in range(reps):
        torch.cuda._sleep(head_start)
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            if flush_l2:
                flush.zero_()
            start, end = events[name][r]
            start.record()
            contenders[name]()
            end.record()
    torch.cuda.synchronize()
    records = {}
    for name in names:
        times = sorted(s.elapsed_time(e) for s, e in events[name])
        records[name] = Record(
            name=name, median_ms=statistics.median(times), p10_ms=_quantile(times, 0.1),
            p90_ms=_quantile(times, 0.9), min_ms=times[0], reps=reps,
            flops=_per_name(flops, name), bytes=_per_name(bytes, name))
    return records


@dataclass
class ApiRecord:
    """One callable called as a model calls it, in one run. Times in microseconds per call."""

    name: str
    median_us: float  # back to back: a batch of calls between two CUDA events, divided by the calls
    p10_us: float
    p90_us: float
    host_us: float    # the host's time to issue one call, the GPU kept busy (median over the rounds)
    calls: int
    rounds: int
    flops: float | None = None

    @property
    def tflops(self) -> float | None:
        return None if self.flops is None else self.flops / self.median_us / 1e6

    @property
    def spread(self) -> float:
        """(p90 - p10) / median of the back-to-back time per call."""
        return (self.p90_us - self.p10_us) / self.median_us

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tflops": self.tflops, "spread": self.spread}

    def __str__(self) -> str:
        rate = f"  {self.tflops:8.1f} TFLOP/s" if self.tflops is not None else ""
        return (f"{self.name:<28} {self.median_us:9.1f} us per call (p10-p90 {self.p10_us:.1f}-"
                f"{self.p90_us:.1f}), host {self.host_us:7.1f} us per call" + rate)


#: The most calls in a batch of ``api_benchmark``: with a few launches a call, well under the ~1000
#: pending launches at which CUDA makes the host wait.
MAX_CALLS = 200


def api_benchmark(contenders: Mapping[str, Callable[[], Any]], *,
                  flops: float | Mapping[str, float] | None = None, calls: int = 50, rounds: int = 10,
                  warmup: int = 3) -> dict[str, ApiRecord]:
    """Time each zero-argument callable as a model calls it, interleaved round by round, and return
    an ApiRecord per name.

    ``benchmark`` times the GPU's work alone (the launches queued ahead, L2 flushed): right for
    comparing kernels, blind to what the host spends per call. Here each round times ``calls`` calls
    in a row, no flush and no synchronization between them, with CUDA events around the whole batch:
    the time per call of the slower side, host or GPU, which is what a model waits for. Then the same
    batch is issued behind a long GPU spin and timed on the host clock: the host's time per call
    alone (a call that waits for the GPU shows as one as long as the spin).
    """
    require_gpu()
    if not contenders:
        raise ValueError("api_benchmark needs at least one contender")
    if calls < 1 or rounds < 1:
        raise ValueError(f"calls and rounds must be at least 1, got {calls} and {rounds}")
    if calls > MAX_CALLS:  # CUDA blocks the host once about a thousand launches are pending
        raise ValueError(f"at most {MAX_CALLS} calls a batch, got {calls}: behind the spin, a longer batch "
                         "could fill CUDA's launch queue, and the host would wait for the GPU")
    names = list(contenders)
    spin = {}
    for name in names:  # compile, tune, allocate; then time the host side of one batch
        fn = contenders[name]
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        host = time.perf_counter() - t0
        torch.cuda.synchronize()
        # Twice the batch's host time: the spin outlasts the host's launches, which queue behind it.
        spin[name] = int(min(2 * host + 1e-3, 1.0) * _SPIN_CYCLES_PER_S)
    batch_us = {n: [] for n in names}
    host_us = {n: [] for n in names}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for r in range(rounds):
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            fn = contenders[name]
            torch.cuda.synchronize()
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            batch_us[name].append(start.elapsed_time(end) * 1e3 / calls)
            torch.cuda._sleep(spin[name])
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            host_us[name].append((time.perf_counter() - t0) * 1e6 / calls)
    torch.cuda.synchronize()
    records = {}
    for name in names:
        times = sorted(batch_us[name])
        records[name] = ApiRecord(
            name=name, median_us=statistics.median(times), p10_us=_quantile(times, 0.1),
            p90_us=_quantile(times, 0.9), host_us=statistics.median(host_us[name]), calls=calls, rounds=rounds,
            flops=_per_name(flops, name))
    return records


def copy_contender(nbytes: int = 1 << 30) -> tuple[Callable[[], Any], int]:
    """A device-to-device copy of ``nbytes`` and the bytes it moves (read plus write).

    Put it among the contenders of a memory-bound benchmark: its GB/s is the bandwidth that the
    same run could reach, the ceiling to hold the others against.
    """
    require_gpu("measuring the copy bandwidth")
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), 2 * nbytes


def copy_bandwidth(nbytes: int = 1 << 30, reps: int = 30) -> Record:
    """GB/s of a device-to-device copy, counting bytes read plus bytes written."""
    fn, moved = copy_contender(nbytes)
    return benchmark({"copy": fn}, bytes=moved, reps=reps)["copy"]


@dataclass
class UnderLoad:
    """One callable run back to back for a while, and what the GPU reported meanwhile."""

    name: str
    tflops: float        # median over batches of back-to-back calls
    clock_mhz: float     # median SM clock sampled during the run
    power_w: float       # median board power
    power_capped: float  # share of the samples with the software power cap holding the clocks down

    @property
    def tflops_per_ghz(self) -> float:
        """Work per clock cycle: what is left of the speed once the clock is taken out."""
        return self.tflops / self.clock_mhz * 1e3

    def __str__(self) -> str:
        return (f"{self.name:<28} {self.tflops:7.1f} TFLOP/s at {self.clock_mhz:5.0f} MHz, {self.power_w:4.0f} W "
                f"(power cap on in {self.power_capped:.0%} of samples): {self.tflops_per_ghz:5.1f} TFLOP/s per GHz")


# nvidia-smi's clock event reasons: bit 2 is the software power cap.
_SW_POWER_CAP = 0x4


def under_load(fn: Callable[[], Any], flops: float, *, name: str = "", seconds: float = 2.0, batch: int = 20,
               sample_ms: int = 100) -> UnderLoad:
    """Run ``fn`` back to back for ``seconds`` (no cache flush, no pause), timing batches of
    ``batch`` calls with CUDA events, while nvidia-smi samples the SM clock and the power every
    ``sample_ms``. Under such load an H200 running FP8 products sits at its power limit, and the
    clock it can hold there depends on the kernel: TFLOP/s per GHz separates how much work a kernel
    does per cycle from how fast the cycles come."""
    require_gpu("measuring clocks under load")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise NoGPUError("measuring clocks under load needs nvidia-smi on the PATH")
    uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    fn()
    torch.cuda.synchronize()
    sampler = subprocess.Popen(
        [smi, f"--id={uuid}", "--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active",
         "--format=csv,noheader,nounits", f"--loop-ms={sample_ms}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    times = []
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(batch):
                fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / batch)
    finally:
        sampler.terminate()
        text, err = sampler.communicate()
    samples = parse_smi_samples(text)[2:]  # the first two while the clock settles
    if not samples:
        raise RuntimeError(f"nvidia-smi gave no samples of clock and power: {err.strip() or text.strip()!r}")
    return UnderLoad(
        name=name, tflops=flops / statistics.median(times) / 1e9,
        clock_mhz=statistics.median(clock for clock, _, _ in samples),
        power_w=statistics.median(power for _, power, _ in samples),
        power_capped=sum(bool(reasons & _SW_POWER_CAP) for _, _, reasons in samples) / len(samples))


def parse_smi_samples(text: str) -> list[tuple[float, float, int]]:
    """(SM clock in MHz, power in W, clock event reasons) from nvidia-smi lines of
    ``clocks.sm,power.draw,clocks_throttle_reasons.active`` (csv, noheader, nounits); lines that
    are not such a sample ("[N/A]", a message) are left out."""
    samples = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        try:
            samples.append((float(fields[0]), float(fields[1]), int(fields[2], 16)))
        except (IndexError, ValueError):
            continue
    return samples
