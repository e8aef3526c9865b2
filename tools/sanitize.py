"""Run each of the package's kernels on a few small problems and check every result against float64.

This is the workload tools/sanitize.sh runs under compute-sanitizer, one kernel per process so that a
report names one kernel. compute-sanitizer slows kernels 10 to 100x, so the shapes are tiny, but
odd (partial tiles on every side) and TMA-aligned (K a multiple of 16, N of 8), so no kernel
refuses them. Each check: fresh operands, both scale recipes (per tensor, per row), fast and
precise accumulation, the output poisoned (NaN) first, the relative error against a float64
product of the same quantized operands; through scaled_mm each problem is called twice (the first
call chooses a configuration, the second runs the plan it kept), each call checked. One line per
check; the exit status is 1 if any failed.

    python3 tools/sanitize.py [--kernels tiled persistent ...] [--small] [--repeat N] [--list]

Without a GPU the package runs Triton's interpreter: only the smallest shape, and Gluon skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # the repository's package

import torch  # noqa: E402

import fp8_tutorial  # noqa: E402  (first: it decides the execution mode before Triton is imported)
from fp8_tutorial import DEVICE, ON_GPU, quantize, scaled_mm  # noqa: E402
from fp8_tutorial.checks import poison, random_operands, reference_mm, rel_error, tolerance  # noqa: E402
from fp8_tutorial.gemm import KERNELS, check_operands  # noqa: E402
from fp8_tutorial.kernels.host import tile_count  # noqa: E402
import triton  # noqa: E402  (after fp8_tutorial)

try:
    from fp8_tutorial.kernels.ws_gluon import GLUON_CONFIGS, gluon_takes, launch_gluon  # noqa: E402
except ImportError:  # before the launchers moved into the kernel modules
    from fp8_tutorial.gemm import GLUON_CONFIGS, gluon_takes, launch_gluon  # noqa: E402

SHAPES = [(300, 704, 528), (64, 128, 128), (129, 256, 136)]  # M x K x N
SMALL_SHAPES = [(64, 128, 128)]
QUANT_SHAPES = [(300, 704), (256, 384)]  # rows x K; the 128-wide granularities need the second
SMALL_QUANT_SHAPES = [(128, 256)]
API_KERNELS = ["tiled", "persistent", "streamk", "tma", "ws", "gluon"]


def gluon_configs() -> dict:
    """The first configuration of each KIND in GLUON_CONFIGS, and every one with SPLIT (the first
    named "split", the others "split-KIND-MxN": each kind adds its pieces up in its own partitions),
    by name: the list's own values, so that this follows what the package ships."""
    found, splits = {}, 0
    for c in GLUON_CONFIGS:
        k = c.kwargs
        if not k["SPLIT"]:
            found.setdefault(k["KIND"], c)
        else:
            found[f"split-{k['KIND']}-{k['BLOCK_M']}x{k['BLOCK_N']}" if splits else "split"] = c
            splits += 1
    return found


GLUON_KINDS = list(gluon_configs())
ALL = API_KERNELS + [f"gluon-{k}" for k in GLUON_KINDS] + ["quantize"]


class Checks:
    def __init__(self):
        self.done = self.failed = self.skipped = 0

    def report(self, kernel, what, recipe, precise, err=None, tol=None, ok=True, note=""):
        self.done += 1
        self.failed += not ok
        acc = "-" if precise is None else ("precise" if precise else "fast")
        errs = f"rel {err:9.3e}  tol {tol:8.2e}" if err is not None else " " * 28
        print(f"{kernel:<18} {what:<14} {recipe:<8} {acc:<7} {errs}  {'PASS' if ok else 'FAIL'}"
              + (f"  {note}" if note else ""), flush=True)

    def skip(self, kernel, why):
        self.skipped += 1
        print(f"{kernel:<18} SKIP  {why}", flush=True)


def failure(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]}"


def operands(M, K, N, recipe, gen):
    """Quantized operands made on the CPU (no kernel of ours or torch's runs on the GPU but the one
    under test), their float64 product, and the operands on DEVICE, b still K-major."""
    a, b, sa, sb = random_operands(M, K, N, recipe, recipe, gen, device="cpu")
    ref = reference_mm(a, b, sa, sb)
    return ref, (a.to(DEVICE), b.t().contiguous().to(DEVICE).t(), sa.to(DEVICE), sb.to(DEVICE))


def check_gemm(checks, label, run, shapes, gen, note="", calls=1):
    """``run(ops, out, precise)`` on every shape, recipe and accumulation mode, ``calls`` times into
    the same (poisoned) output, each call checked."""
    for M, K, N in shapes:
        for recipe in ("tensor", "row"):
            for precise in (False, True):
                ref, (a, b, sa, sb) = operands(M, K, N, recipe, gen)
                out = torch.empty((M, N), dtype=torch.bfloat16, device=DEVICE)
                what = f"{M}x{K}x{N}"
                for call in range(calls):
                    tag = " ".join(filter(None, [note, f"call {call + 1}" if calls > 1 else ""]))
                    try:
                        run((a, b, sa, sb), poison(out), precise)
                        if ON_GPU:
                            torch.cuda.synchronize()  # a fault is reported at this check, not the next
                        err, tol = rel_error(out, ref), tolerance(torch.bfloat16, precise)
                        checks.report(label, what, recipe, precise, err, tol, err <= tol, tag)
                    except Exception as e:  # noqa: BLE001  (every check reports, whatever the others do)
                        checks.report(label, what, recipe, precise, ok=False, note=f"{failure(e)} {tag}")


def refusal(name, shapes, gen) -> str | None:
    """Why kernel ``name`` refuses the first problem, or None; a refusal skips the kernel off a
    Hopper GPU (Triton's interpreter, no Gluon) and fails its checks on one."""
    (M, K, N), recipe = shapes[0], "row"
    _, (a, b, sa, sb) = operands(M, K, N, recipe, gen)
    out = torch.empty((M, N), dtype=torch.bfloat16, device=DEVICE)
    ops = check_operands(a, b, sa, sb)
    return gluon_takes(ops, out) if name.startswith("gluon") else KERNELS[name].refuses(ops, out)


def run_api(name):
    # The first call of a problem chooses (Triton's autotuner, or the Gluon launcher's timing: every
    # candidate runs, instrumented too); the next ones take the plan it kept (for Gluon a direct
    # launch with descriptors the package builds itself: another path to check).
    def run(t, out, precise):
        scaled_mm(*t, kernel=name, precise=precise, out=out)
    return run


def run_gluon_kind(cfg, num_sms, split):
    def run(t, out, precise):
        ops = check_operands(*t)
        plan = None
        if split:  # half the tiles whole, the rest in two pieces: the split path whatever the GPU
            plan = (tile_count(ops.M, ops.N, cfg.kwargs) // 2, min(2, triton.cdiv(ops.K, cfg.kwargs["BLOCK_K"])))
        launch_gluon(ops, out, precise, config=cfg, num_sms=num_sms, plan=plan)
    return run


def quantize_once(x, granularity) -> tuple[float, str]:
    """The Triton kernels' quantization of ``x`` against the package's torch reference: (the relative
    error of what they dequantize to, what differs from the reference, "" if nothing)."""
    q, s = (t.cpu() for t in quantize(x.to(DEVICE), granularity, impl="triton"))
    q_ref, s_ref = quantize(x, granularity, impl="torch")
    differs = [name for name, same in (("values", torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))),
                                       ("scales", torch.equal(s, s_ref))) if not same]
    err = rel_error(fp8_tutorial.dequantize(q, s, torch.float64), x.double())
    return err, " and ".join(differs) + " differ from the torch reference" if differs else ""


def check_quantize(checks, shapes, gen):
    """The quantization kernels, bit for bit against the torch reference; FP8 e4m3 keeps 3 mantissa
    bits, so no element moves by more than 2^-4 of itself."""
    for M, K in shapes:
        for granularity in ("tensor", "row", "1x128", "128x128"):
            if granularity in ("1x128", "128x128") and (K % 128 or granularity == "128x128" and M % 128):
                continue
            for dtype in (torch.float32, torch.bfloat16):
                x = (torch.randn(M, K, generator=gen) * 4).to(dtype)
                what = f"{M}x{K} {'f32' if dtype == torch.float32 else 'bf16'}"
                try:
                    err, differs = quantize_once(x, granularity)
                    checks.report("quantize", what, granularity, None, err, 2.0 ** -4,
                                  not differs and err <= 2.0 ** -4, differs)
                except Exception as e:  # noqa: BLE001  (every check reports, whatever the others do)
                    checks.report("quantize", what, granularity, None, ok=False, note=failure(e))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", nargs="+", default=ALL, metavar="K", help=f"any of {' '.join(ALL)}")
    parser.add_argument("--small", action="store_true", help="the smallest shape only (always without a GPU)")
    parser.add_argument("--repeat", type=int, default=2,
                        help="calls per problem through scaled_mm, each checked (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--list", action="store_true", help="print the kernels' names and exit (sanitize.sh)")
    args = parser.parse_args()
    if args.list:
        print("\n".join(ALL))
        return 0
    unknown = [k for k in args.kernels if k not in ALL]
    if unknown:
        parser.error(f"unknown kernel(s) {unknown}: choose from {' '.join(ALL)}")
    if fp8_tutorial.MODE == "compile":
        parser.error("FP8_TUTORIAL_MODE=compile compiles kernels without running them: unset it")
    small = args.small or not ON_GPU
    shapes = SMALL_SHAPES if small else SHAPES
    gen = torch.Generator().manual_seed(args.seed)
    print(f"sanitize.py: mode {fp8_tutorial.MODE}, shapes {shapes}, kernels {' '.join(args.kernels)}",
          flush=True)
    checks, start = Checks(), time.time()
    configs = gluon_configs()
    for name in args.kernels:
        if name == "quantize":
            check_quantize(checks, SMALL_QUANT_SHAPES if small else QUANT_SHAPES, gen)
            continue
        why = refusal(name, shapes, gen)
        if why and not (ON_GPU and torch.cuda.get_device_capability()[0] == 9):
            checks.skip(name, why)
            continue
        if name in API_KERNELS:
            check_gemm(checks, name, run_api(name), shapes, gen, calls=args.repeat)
            continue
        kind = name.removeprefix("gluon-")
        cfg = configs[kind]
        k = cfg.kwargs
        print(f"{name}: {k['KIND']} {k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']}, STORE_N {k['STORE_N']}, "
              f"{cfg.num_warps} warps, {cfg.num_stages} stages", flush=True)
        # The GPU's SM count gives every program at most one tile here; two SMs make each program
        # walk several, which the ring's phases and ping-pong's second consumer group need.
        for num_sms in (None, 2):
            check_gemm(checks, name, run_gluon_kind(cfg, num_sms, k["SPLIT"]), shapes, gen,
                       note="" if num_sms is None else f"num_sms={num_sms}")
    print(f"sanitize.py: {checks.done} checks, {checks.failed} failed, {checks.skipped} kernels skipped, "
          f"{time.time() - start:.1f} s", flush=True)
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
