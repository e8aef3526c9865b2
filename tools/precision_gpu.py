"""Chapter 10's measurements on a Hopper GPU, in one process.

1. Error against float64 as K grows (``measure.accuracy.error_vs_k``) for every way of summing,
   and the probe of the bits the tensor cores' running sum keeps.
2. The precise Gluon configurations (``accuracy.promotion_costs``) on the reference cells.
3. The scoreboard's precise records, re-measured.

Writes ``$OUT/accumulation.json``, ``$OUT/precise_sweep.json`` and ``$OUT/h200_precise.json``.

    OUT=/tmp/out python3 tools/precision_gpu.py [study] [sweep] [board]
"""
import json
import os
import sys
import time

import torch

from fp8_tutorial import environment
from fp8_tutorial.measure import accuracy
from fp8_tutorial.measure import contenders as C

OUT = os.environ.get("OUT", "/tmp/out")
KS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
SHAPES = C.SEED_SHAPES + [(8192, 8192, 8192)]


def study():
    t = time.time()
    records = accuracy.error_vs_k(KS, progress=True)
    runs = accuracy.methods()
    probes = {name: accuracy.probe(runs[name]) for name in runs}
    data = dict(environment=environment().as_dict(), records=records, probe=probes)
    with open(os.path.join(OUT, "accumulation.json"), "w") as f:
        json.dump(data, f, indent=1)
    print(f"study: {len(records)} records in {time.time() - t:.0f} s", flush=True)
    for kind in accuracy.KINDS:
        for recipe in ("tensor", "row"):
            print(f"{kind} {recipe}: " + "  ".join(
                f"{r['method'].replace('promoted every ', 'p')}@{r['K']}={r['rel_error']:.2e}"
                for r in records if r["kind"] == kind and r["recipe"] == recipe and r["K"] in (4096, 65536)))
    for name, p in probes.items():
        print(f"probe {name:<24}", " ".join(f"{x['kept']:.2f}" for x in p))


def sweep(reps=20):
    """Each precise configuration three ways (its promotion written out, left to the compiler, and
    fast accumulation) against cuBLAS, on every reference cell."""
    t = time.time()
    rows = []
    for M, K, N in SHAPES:
        for recipe in ("tensor", "row"):
            rows += accuracy.promotion_costs(M, K, N, recipe, reps=reps)
            here = [r for r in rows if r["shape"] == f"{M}x{K}x{N}" and r["recipe"] == recipe]
            best = max((r for r in here if r["mode"] == "explicit"), key=lambda r: r["tflops"])
            print(f"{M}x{K}x{N} {recipe}: best explicit {best['ratio']:.3f}x cuBLAS precise ({best['config']})",
                  flush=True)
    with open(os.path.join(OUT, "precise_sweep.json"), "w") as f:
        json.dump(dict(environment=environment().as_dict(), rows=rows), f, indent=1)
    print(f"sweep: {len(rows)} rows in {time.time() - t:.0f} s", flush=True)
    for key in sorted({(r["config"], r["mode"]) for r in rows}):
        rs = [r["ratio"] for r in rows if (r["config"], r["mode"]) == key]
        g = torch.tensor(rs).log().mean().exp().item()
        print(f"  {key[1]:<9} {key[0]:<72} gmean {g:.3f}x over {len(rs)}, min {min(rs):.3f}")


def board(reps=30):
    """The scoreboard's precise records, re-measured (``scoreboard.run``), saved after each shape."""
    from fp8_tutorial.measure import contenders as Cn, scoreboard
    t = time.time()
    data = None
    for shape in SHAPES:
        part = scoreboard.run([shape], accumulations=["precise"], reps=reps, progress=False)
        Cn.attach_configs(part["records"])
        data = part if data is None else scoreboard.merge(data, part)
        scoreboard.save(data, os.path.join(OUT, "h200_precise.json"))
        print(f"board {shape}: {time.time() - t:.0f} s", flush=True)


def merge_board():
    """Merge ``$OUT/h200_precise.json`` into ``results/h200.json`` if it holds every shape."""
    from fp8_tutorial.measure import results, scoreboard
    part = scoreboard.load(os.path.join(OUT, "h200_precise.json"))
    if {r["shape"] for r in part["records"]} != {C.shape_name(*s) for s in SHAPES}:
        print("board incomplete: not merged")
        return
    target = results.RESULTS / "h200.json"
    scoreboard.save(scoreboard.merge(scoreboard.load(target), part), target)
    print("board merged into", target)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    what = sys.argv[1:] or ["study", "sweep", "board"]
    if "study" in what:
        study()
    if "sweep" in what:
        sweep()
    if "board" in what:
        board()
    if "merge" in what:
        merge_board()

