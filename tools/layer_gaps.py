"""Where chapter 12's layers wait between kernels (a Hopper GPU is needed).

Chapter 12's profile sums each layer's kernels by kind; the layer's time per call, timed apart, is
longer by the GPU's idle time between kernels, and that time is not the same for every layer: at
prefill M = 4096 on the H200 (``results/model_h200.json``, 2026-12-06) the book's per-row layer and
the torch route's had the same kernel time (1523 and 1522 us) but took 1779 and 1727 us a call.
This replays each compiled layer's CUDA graph (``model.graphed``, as the chapter times it) under
``torch.profiler`` and prints, per layer, its kernels in the order they ran in one replay (of
``REPLAYS`` run back to back, as the chapter times them, after unprofiled ones that heat the GPU):
each one's time and the idle time before it (from the previous kernel's end to its start), then
the sums: kernel time, idle time and the replay's span, first kernel's start to last one's end; and
the period, from one replay's first kernel to the next one's, which holds the idle time between
replays too (what a model running layer after layer sees).

    python3 tools/layer_gaps.py [phase:M ...]      # default: decode:16 prefill:4096 prefill:8192

Saves ``results/layer_gaps_<gpu>.json``: per (phase, M, layer), the kernels of the median replay
(by span) with their names, times and gaps.
"""
import statistics
import sys

import torch

import fp8_tutorial  # noqa: F401

from fp8_tutorial.measure import model, results
from fp8_tutorial.measure.bench import require_gpu

NAME = "layer_gaps"
REPLAYS = 20


def replays(run, n: int = REPLAYS, heat: int = 50) -> list[list[tuple[float, float, str]]]:
    """``run()`` ``n`` times back to back under one profiler, as the chapter times a layer (calls in a
    row, no synchronization between them), after ``heat`` unprofiled calls that bring the GPU to
    the clocks of sustained work: per replay, its kernels as (start, end, name) in microseconds, in
    the order they started. The replays are told apart by their kernel count (every replay of a
    graph runs the same kernels)."""
    for _ in range(heat):
        run()
    kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in model.profiled(run, n).events()
                     if e.device_type == torch.autograd.DeviceType.CUDA)
    if not kernels or len(kernels) % n:
        raise RuntimeError(f"{len(kernels)} kernels in {n} replays: not the same number in each")
    per = len(kernels) // n
    return [kernels[i * per:(i + 1) * per] for i in range(n)]


def describe(replay: list[tuple[float, float, str]]) -> dict:
    rows, prev_end = [], None
    for start, end, name in replay:
        rows.append(dict(name=name, us=end - start, gap_us=0.0 if prev_end is None else max(0.0, start - prev_end)))
        prev_end = end
    return dict(kernels=rows, kernel_us=sum(r["us"] for r in rows), idle_us=sum(r["gap_us"] for r in rows),
                span_us=replay[-1][1] - replay[0][0] if replay else 0.0)


def main():
    require_gpu("profiling a layer's CUDA graph")
    cells = [(a.split(":")[0], int(a.split(":")[1])) for a in sys.argv[1:]] or [("decode", 16), ("prefill", 4096), ("prefill", 8192)]
    sweep = results.Sweep(NAME)
    log, records = sweep.log, sweep.records
    model._profile_graphs_later()
    prepared = model.prepare(model.LLAMA3_8B)
    with torch.inference_mode():
        for phase, M in cells:
            args = model.make_inputs(model.LLAMA3_8B, phase, M).args()
            refused = model.refusals({n: layer for n, (layer, _) in prepared.items()}, args)
            for n, (_, fn) in prepared.items():
                if n in refused:
                    log(f"{phase} M={M} {n}: refused ({refused[n]})")
                    continue
                reps = replays(model.graphed(fn, args))
                runs = [describe(r) for r in reps]
                period = (reps[-1][0][0] - reps[0][0][0]) / (len(reps) - 1)
                mid = sorted(runs, key=lambda r: r["span_us"])[len(runs) // 2]
                log(f"\n{phase} M={M} {n}: {len(runs)} replays; median span {mid['span_us']:.1f} us = kernels "
                    f"{mid['kernel_us']:.1f} + idle {mid['idle_us']:.1f} (idle over the replays: "
                    f"{statistics.median(r['idle_us'] for r in runs):.1f} us median); period {period:.1f} us")
                for k in mid["kernels"]:
                    log(f"  {k['gap_us']:7.1f} idle, {k['us']:8.1f} us  {k['name'][:100]}")
                records.append(dict(phase=phase, tokens=M, layer=n, replays=len(runs), period_us=period, **mid))
                sweep.save()
    print(f"saved to {sweep.done()}")


if __name__ == "__main__":
    main()
