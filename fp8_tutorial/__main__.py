"""Command line: ``python -m fp8_tutorial {env,bench,report,execute,convert,sync}``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fp8_tutorial", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="print the environment report (GPU, versions, execution mode)")
    p = sub.add_parser("bench", help="time registered contenders against cuBLAS (needs a GPU)",
                       description="Check every selected contender against float64 and time it against the cuBLAS "
                                   "contender of the same recipe and accumulation, interleaved in one run; with "
                                   "--api, time fp8_tutorial.scaled_mm against cuBLAS as a model calls them.")
    p.add_argument("--seed-shapes", action="store_true",
                   help="the eight reference shapes (default when no shape option is given)")
    p.add_argument("--square", type=int, nargs="*", default=[], metavar="S",
                   help="square shapes S x S x S (default with no shape option: 8192)")
    p.add_argument("--shape", nargs="*", default=[], metavar="MxKxN", help="explicit shapes, e.g. 4608x12288x3072")
    p.add_argument("--model-shapes", action="store_true",
                   help="30 cells of the projections of Llama-3-8B, Llama-3-70B and DeepSeek-V3, M from 1 to "
                        "16384 (scoreboard.MODEL_SHAPES)")
    p.add_argument("--api", action="store_true",
                   help="time the public API as a model calls it: fp8_tutorial.scaled_mm against "
                        "torch._scaled_mm (torch.mm for bf16), calls back to back, and the host's time per call")
    p.add_argument("--preallocated", action="store_true",
                   help="with --api, also time scaled_mm(..., out=) into one preallocated output")
    p.add_argument("--calls", type=int, help="with --api, calls back to back per batch (default 50)")
    p.add_argument("--recipes", nargs="*", help="bf16 tensor row block (default: all; with --api: bf16 tensor row)")
    p.add_argument("--contenders", nargs="*", help="registered contender names (default: all)")
    p.add_argument("--accumulation", nargs="*", help="fast precise (default: both)")
    p.add_argument("--reps", type=int,
                   help="timed repetitions per contender (default 30); with --api, batches (default 10)")
    p.add_argument("--output", type=Path, help="results file (default: results/<gpu>.json)")
    p.add_argument("--replace", action="store_true",
                   help="overwrite the output file (default: merge, replacing only the records measured now)")
    p.add_argument("--list", action="store_true", help="list the registered contenders and exit")
    p = sub.add_parser("report", help="print a markdown table of a results file and write a figure")
    p.add_argument("file", type=Path)
    p.add_argument("--figure", type=Path, help="figure path (default: FILE with .png)")
    p = sub.add_parser("execute", help="execute chapters into book/ (on a Hopper GPU)")
    p.add_argument("chapters", nargs="*", help="numbers or names (default: all)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per cell (default 1800)")
    p.add_argument("--allow-no-gpu", action="store_true",
                   help="execute even without a GPU (for trying the command; the book publishes GPU runs only)")
    p = sub.add_parser("convert", help="write chapters as unexecuted notebooks into a folder")
    p.add_argument("out", type=Path)
    p.add_argument("chapters", nargs="*")
    p = sub.add_parser("sync", help="check that book/*.ipynb hold exactly the code and prose of notebooks/*.md")
    p.add_argument("--prose", action="store_true",
                   help="first copy edited prose into executed notebooks whose code is unchanged")
    args = parser.parse_args(argv)

    if args.command == "env":
        from . import environment

        print(environment())
        return 0
    if args.command == "bench":
        try:
            return _bench(args)
        except ValueError as e:  # unknown names, malformed shapes: say what was expected
            print(f"bench: {e}", file=sys.stderr)
            return 2
    if args.command == "report":
        return _report(args)
    from . import book

    if args.command == "execute":
        from . import ON_GPU

        if not ON_GPU and not args.allow_no_gpu:
            print("make execute needs a CUDA GPU (a Hopper one for the book): without one the chapters "
                  "run in Triton's interpreter on small shapes and time nothing. `make test` runs them "
                  "that way; pass --allow-no-gpu to execute anyway.", file=sys.stderr)
            return 2
        try:
            book.execute(args.chapters, timeout=args.timeout)
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
        return 0
    if args.command == "convert":
        try:
            for path in book.convert(args.out, args.chapters):
                print(path)
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
        return 0
    if args.prose:
        try:
            for path in book.refresh_prose():
                print(f"prose updated: {path.relative_to(book.ROOT)}")
        except ValueError as e:
            print(e, file=sys.stderr)
            return 1
    problems = book.sync_problems()
    for line in problems:
        print(line, file=sys.stderr)
    print("book/ is in sync with notebooks/" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def _bench(args) -> int:
    from . import ON_GPU
    from .measure import contenders, results, scoreboard
    from .measure.bench import MAX_CALLS

    if args.list:
        for c in contenders.REGISTRY.values():
            print(f"{c.key:<32} {c.description}")
        return 0
    shapes = [scoreboard.parse_shape(s) for s in args.shape]
    shapes += [(s, s, s) for s in args.square]
    if args.model_shapes:
        shapes += scoreboard.MODEL_SHAPES
    if args.seed_shapes or not shapes:
        shapes = contenders.SEED_SHAPES + shapes
    if not (args.shape or args.square or args.seed_shapes or args.model_shapes):
        shapes.append((8192, 8192, 8192))
    contenders.select(args.contenders, args.recipes, args.accumulation)  # unknown names fail before any work
    if args.api and args.contenders:
        raise ValueError("--api times fp8_tutorial.scaled_mm against cuBLAS: it takes no --contenders")
    if not args.api and (args.preallocated or args.calls is not None):
        raise ValueError("--preallocated and --calls go with --api")
    reps = args.reps if args.reps is not None else 10 if args.api else 30
    calls = args.calls if args.calls is not None else 50
    if reps < 1 or not 1 <= calls <= MAX_CALLS:
        raise ValueError(f"--reps must be at least 1 and --calls 1 to {MAX_CALLS}, got {reps} and {calls}")
    if not ON_GPU:
        print("bench needs a CUDA GPU: this machine has none, and timing Triton's interpreter on a CPU would say "
              "nothing about the kernels. `python -m fp8_tutorial report results/h200.json` shows the recorded "
              "H200 results.", file=sys.stderr)
        return 2
    output = args.output or results.RESULTS / f"{results.gpu_slug()}.json"
    if args.api:
        data = scoreboard.run_api(shapes, args.recipes, args.accumulation, calls=calls, rounds=reps,
                                  preallocated=args.preallocated)
    else:
        data = scoreboard.run(shapes, args.contenders, args.recipes, args.accumulation, reps=reps)
    if not args.replace and output.exists():
        data = scoreboard.merge(scoreboard.load(output), data)
    scoreboard.save(data, output)
    print(scoreboard.report(data))
    print(f"\nwrote {output}")
    return 0


def _report(args) -> int:
    from .measure import scoreboard

    try:
        data = scoreboard.load(args.file)
    except (FileNotFoundError, ValueError) as e:
        print(e, file=sys.stderr)
        return 2
    print(scoreboard.report(data))
    if not data["records"]:  # API records only: the figure is of kernel records
        return 0
    figure = args.figure or args.file.with_suffix(".png")
    import matplotlib

    matplotlib.use("Agg")
    scoreboard.figure(data, figure)
    print(f"\nfigure: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
