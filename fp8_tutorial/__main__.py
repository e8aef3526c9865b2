"""Command line: ``python -m fp8_tutorial {env,execute,convert,sync}``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fp8_tutorial", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="print the environment report (GPU, versions, execution mode)")
    p = sub.add_parser("execute", help="execute chapters into book/ (on a Hopper GPU)")
    p.add_argument("chapters", nargs="*", help="numbers or names (default: all)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per cell (default 1800)")
    p.add_argument("--allow-no-gpu", action="store_true",
                   help="execute even without a GPU (for trying the command; the book publishes GPU runs only)")
    p = sub.add_parser("convert", help="write chapters as unexecuted notebooks into a folder")
    p.add_argument("out", type=Path)
    p.add_argument("chapters", nargs="*")
    sub.add_parser("sync", help="check that book/*.ipynb hold exactly the code of notebooks/*.md")
    args = parser.parse_args(argv)

    if args.command == "env":
        from . import environment

        print(environment())
        return 0
    from . import book

    if args.command == "execute":
        from . import ON_GPU

        if not ON_GPU and not args.allow_no_gpu:
            print("make execute needs a CUDA GPU (a Hopper one for the book): without one the chapters "
                  "run in Triton's interpreter on small shapes and time nothing. `make test` runs them "
                  "that way; pass --allow-no-gpu to execute anyway.", file=sys.stderr)
            return 2
        book.execute(args.chapters, timeout=args.timeout)
        return 0
    if args.command == "convert":
        for path in book.convert(args.out, args.chapters):
            print(path)
        return 0
    problems = book.sync_problems()
    for line in problems:
        print(line, file=sys.stderr)
    print("book/ is in sync with notebooks/" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
