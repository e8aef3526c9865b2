"""Run pytest over the given paths in several processes at once, the tests dealt out round-robin.

On the GPU machine most of the test time is Triton compiling kernels one at a time on one core;
processes side by side share the GPU and the on-disk cache. Each process's output goes to
$OUT/tests-<n>.log (or /tmp); the summary lines and the failures are printed at the end, and the exit
status is non-zero if any process failed.

    python3 .ci/parallel_pytest.py --workers 8 tests

Run it from the repository root, with test paths inside the repository: the test ids that pytest
collects are relative to it. Tests that time the GPU (``--alone``, default test_bench.py) run
afterwards in one process of their own, so that no other process shares the GPU with them.
"""

import argparse
import os
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--alone", default="test_bench.py",
                        help="tests whose id contains this run afterwards, in one process (timings)")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args()
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *args.paths],
                               capture_output=True, text=True)
    ids = [line.strip() for line in collected.stdout.splitlines() if "::" in line]
    if collected.returncode != 0 or not ids:  # a module that fails to import must fail the run
        print(collected.stdout[-3000:], collected.stderr[-3000:])
        print(f"collection failed (exit {collected.returncode}): no test was run", flush=True)
        return 1
    alone = [i for i in ids if args.alone and args.alone in i]
    shared = [i for i in ids if i not in alone]
    out_dir = os.environ.get("OUT", "/tmp")
    start = time.time()
    status = 0
    for phase in (shared, alone):
        status |= run_phase(phase, args.workers if phase is shared else 1, out_dir, "alone" if phase is alone else "")
    print(f"{len(ids)} tests ({len(alone)} alone afterwards), {time.time() - start:.0f} s", flush=True)
    return status


def run_phase(ids, workers, out_dir, tag) -> int:
    procs = []
    for w in range(workers):
        chunk = ids[w::workers]
        if chunk:
            log = open(os.path.join(out_dir, f"tests-{tag or w}.log"), "w")
            procs.append((w, log, subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                                    "--durations=5", *chunk], stdout=log, stderr=subprocess.STDOUT)))
    status = 0
    for w, log, proc in procs:
        code = proc.wait()
        log.close()
        lines = open(log.name).read().splitlines()
        summary = next((line for line in reversed(lines) if " in " in line and ("passed" in line or "failed" in line
                                                                                 or "error" in line)), "no summary")
        print(f"process {tag or w}: exit {code}: {summary}", flush=True)
        if code:
            status = 1
            print("\n".join(line for line in lines if line.startswith(("FAILED", "ERROR"))), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
