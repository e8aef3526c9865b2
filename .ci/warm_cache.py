"""Compile every configuration of every kernel into Triton's on-disk cache, in parallel processes.

A chapter or a benchmark compiles each configuration it meets one at a time (about 3 s each on the
H200 machine); this runs those compilations side by side first, so that the chapters and the
benchmark command then find them in the cache. It launches each configuration once on a
256 x 256 x 256 problem, whose sizes specialize the kernels as the book's shapes do (multiples of
16 and of every BLOCK_K), per tensor and per row, fast and precise. Timings are not affected: the
autotuner and the benchmark time only compiled kernels.

    python3 .ci/warm_cache.py [--workers 14]
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from fp8_tutorial import gemm  # noqa: E402
from fp8_tutorial.kernels import host, persistent, tiled, tma, ws, ws_gluon  # noqa: E402
from fp8_tutorial.measure import contenders as C

S, T, P = persistent.streamk_config, tma.tma_config, persistent.persistent_config


def jobs():
    """(label, call(ops, out, precise)) for every configuration, in a fixed order."""
    out = []
    lists = [("tiled", tiled.launch_tiled, tiled.TILED_CONFIGS), ("persistent", persistent.launch_persistent, persistent.PERSISTENT_CONFIGS),
             ("streamk", persistent.launch_streamk, persistent.STREAMK_CONFIGS),
             ("streamk", persistent.launch_streamk, persistent.STREAMK_TMA_CONFIGS), ("tma", tma.launch_tma, tma.TMA_CONFIGS),
             ("ws", ws.launch_ws, ws.WS_CONFIGS)]
    for name, launch, configs in lists:
        for c in configs:
            for precise in (False, True):
                out.append((f"{name} {host.describe_config(c)}", precise,
                            lambda o, y, p, launch=launch, c=c: launch(o, y, p, config=c)))
    for c in tma.TMA_CONFIGS:  # launch_tma times host-side descriptors with each configuration
        for precise in (False, True):
            out.append((f"tma host descriptors {host.describe_config(c)}", precise,
                        lambda o, y, p, c=c: tma.launch_tma(o, y, p, config=c, host_descriptors=True)))
    for c in ws_gluon.GLUON_CONFIGS:  # launch_gluon times each for every new problem
        for precise in (False, True):
            out.append((f"gluon {host.describe_config(c)}", precise,
                        lambda o, y, p, c=c: ws_gluon.launch_gluon(o, y, p, config=ws_gluon.fit_gluon_config(c, 2))))
    # configurations the chapters time by name (fast accumulation only)
    extra = [("tiled split-K 2", lambda o, y, p: tiled.launch_tiled(o, y, p, split_k=2, config=tiled.SPLIT_K_CONFIGS[0])),
             ("persistent 64x128", lambda o, y, p: persistent.launch_persistent(o, y, p, config=P(64, 128, 128, 4, 4, 2))),
             ("streamk 128x128 s6", lambda o, y, p: persistent.launch_streamk(o, y, p, config=S(128, 128, 128, 4, 6))),
             ("streamk tma 128x128 s6", lambda o, y, p: persistent.launch_streamk(o, y, p, config=S(128, 128, 128, 8, 6, tma=True))),
             ("tma 128x256 s3", lambda o, y, p: tma.launch_tma(o, y, p, config=T(128, 256, 128, 8, 3, 1)))]
    out += [(label, False, call) for label, call in extra]
    return out


def run_slice(worker: int, workers: int) -> int:
    failures = 0
    problems = {r: C.make_problem(256, 256, 256, r, device="cuda") for r in ("tensor", "row")}
    todo = [(j, r) for j in jobs() for r in problems]
    for (label, precise, call), recipe in todo[worker::workers]:
        p = problems[recipe]
        ops = gemm.check_operands(p.a, p.b, p.scale_a, p.scale_b)
        y = torch.empty((p.M, p.N), dtype=torch.bfloat16, device="cuda")
        try:
            call(ops, y, precise)
            torch.cuda.synchronize()
        except Exception as e:  # report, go on: the chapters and tests say what fails
            failures += 1
            print(f"warm: {label} {recipe} {'precise' if precise else 'fast'}: {type(e).__name__}: "
                  f"{str(e).splitlines()[0][:120] if str(e) else ''}", flush=True)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(14, os.cpu_count() or 1))
    parser.add_argument("--slice", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.slice:
        worker, workers = map(int, args.slice.split("/"))
        return 1 if run_slice(worker, workers) else 0
    start = time.time()
    procs = [subprocess.Popen([sys.executable, __file__, "--slice", f"{w}/{args.workers}"])
             for w in range(args.workers)]
    codes = [p.wait() for p in procs]
    print(f"warm: {2 * len(jobs())} compilations in {args.workers} processes, {time.time() - start:.0f} s; "
          f"{sum(1 for c in codes if c)} processes reported failures", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
