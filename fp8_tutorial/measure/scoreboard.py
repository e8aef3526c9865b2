"""The benchmark behind ``python -m fp8_tutorial bench`` and ``report``: every selected contender
on every shape, checked against float64 and timed against cuBLAS in the same interleaved run; and,
with ``--api``, the public ``scaled_mm`` against cuBLAS as a model calls them (``run_api``)."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import torch

from . import contenders as C
from . import results
from .._env import environment, gpu_clocks
from .bench import MAX_CALLS, api_benchmark, benchmark, require_gpu
from ..checks import rel_error

#: An output this far from the float64 product is wrong, whatever its speed (FP8 GEMMs land near 3e-3).
TOLERANCE = 1e-2
#: A contender must also stay within this factor of the same-run cuBLAS error of its recipe and
#: accumulation (plus FLOOR): a "precise" kernel that accumulates like a fast one fails here.
ERROR_FACTOR, FLOOR = 1.5, 1e-4


def parse_shape(text: str) -> tuple[int, int, int]:
    """'4608x12288x3072' (M x K x N) -> (4608, 12288, 3072)."""
    parts = text.lower().replace("*", "x").split("x")
    try:
        M, K, N = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"a shape is MxKxN with three positive integers, got {text!r}") from None
    if min(M, K, N) < 1:
        raise ValueError(f"a shape is MxKxN with three positive integers, got {text!r}")
    return M, K, N


shape_name = C.shape_name

# Projections of real models: (name, K, N) for an N x K weight, and the Ms (tokens in a batch) timed.
_PROJECTIONS = [
    ("Llama-3-8B qkv", 4096, 6144, (1, 16, 128, 1024, 16384)),
    ("Llama-3-8B o", 4096, 4096, (64, 4096)),
    ("Llama-3-8B gate+up", 4096, 28672, (1, 256, 4096)),
    ("Llama-3-8B down", 14336, 4096, (16, 1024)),
    ("Llama-3-70B qkv", 8192, 10240, (1, 256, 4096)),
    ("Llama-3-70B o", 8192, 8192, (128,)),
    ("Llama-3-70B gate+up", 8192, 57344, (16, 1024)),
    ("Llama-3-70B down", 28672, 8192, (64, 1024)),
    ("DeepSeek-V3 q_a+kv_a", 7168, 2112, (1, 128, 16384)),
    ("DeepSeek-V3 q_b", 1536, 24576, (16, 4096)),
    ("DeepSeek-V3 o", 16384, 7168, (256, 4096)),
    ("DeepSeek-V3 expert gate+up", 7168, 4096, (64, 1024)),
    ("DeepSeek-V3 expert down", 2048, 7168, (256,)),
]
#: Thirty M x K x N cells of those projections, M from 1 to 16384; none takes much over a
#: millisecond on an H200, so that ``bench --api --model-shapes`` runs in minutes.
MODEL_SHAPES = [(M, K, N) for _, K, N, Ms in _PROJECTIONS for M in Ms]


class _Progress:
    """A one-line progress bar on stderr (no dependency)."""

    def __init__(self, total: int, enabled: bool = True):
        self.total, self.done, self.enabled, self.start = total, 0, enabled, time.time()

    def show(self, label: str) -> None:
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        elapsed = time.time() - self.start
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {elapsed:5.0f} s  {label:<40}",
              end="", file=sys.stderr, flush=True)

    def step(self, label: str) -> None:
        self.done += 1
        self.show(label)
        if self.enabled and self.done == self.total:
            print(file=sys.stderr, flush=True)


def run(shapes, names=None, recipes=None, accumulations=None, reps: int = 30, progress: bool = True) -> dict:
    """Measure the selected contenders (plus their cuBLAS baselines) on each shape.

    For each shape and recipe one problem is drawn; each contender's output is checked against its
    float64 product, then all contenders of the shape are timed together by ``benchmark``
    (interleaved, L2 flushed). Returns the records with the run's provenance.
    """
    require_gpu("the benchmark")
    if reps < 1:
        raise ValueError(f"reps must be at least 1, got {reps}")
    chosen = C.select(names, recipes, accumulations)
    env = environment().as_dict()
    clocks_before = gpu_clocks()
    measured = env["date"]
    records = []
    bar = _Progress(len(shapes), progress)
    for M, K, N in shapes:
        shape = shape_name(M, K, N)
        bar.show(shape)
        problems, fns, failed = {}, {}, {}
        for c in chosen:
            try:
                if c.recipe not in problems:
                    problems[c.recipe] = C.make_problem(M, K, N, c.recipe, device="cuda")
                fn = c.build(problems[c.recipe])
                err = rel_error(fn(), problems[c.recipe].reference)
                torch.cuda.synchronize()
                fns[c.key] = (c, fn, err)
            except Exception as e:  # a contender that cannot take this shape or recipe says why
                failed[c.key] = (c, _why(e))
        timed = benchmark({k: fn for k, (_, fn, _) in fns.items()}, flops=2 * M * N * K, reps=reps) if fns else {}
        for key, (c, _, err) in fns.items():
            r = timed[key]
            records.append({"contender": c.name, "recipe": c.recipe, "accumulation": c.accumulation, "key": key,
                            "M": M, "K": K, "N": N, "shape": shape, "median_ms": r.median_ms, "p10_ms": r.p10_ms,
                            "p90_ms": r.p90_ms, "min_ms": r.min_ms, "reps": r.reps, "tflops": r.tflops,
                            "rel_error": err, "measured": measured})
        for key, (c, why) in failed.items():
            records.append({"contender": c.name, "recipe": c.recipe, "accumulation": c.accumulation, "key": key,
                            "M": M, "K": K, "N": N, "shape": shape, "error": why, "measured": measured})
        del problems, fns
        torch.cuda.empty_cache()
        bar.step(shape)
    _add_ratios(records)
    return {"environment": env, "clocks": {"before": clocks_before, "after": gpu_clocks()},
            "settings": {"reps": reps, "flush_l2": True, "tolerance": TOLERANCE,
                         "harness": "fp8_tutorial.measure.bench.benchmark: CUDA events, L2 flushed, "
                                    "interleaved, median"},
            "records": records}


def _api_contenders(p: C.Problem, accumulation: str, preallocated: bool) -> dict:
    """The public ``scaled_mm`` (kernel "auto", a new output each call) and cuBLAS through torch
    (the registered baseline) on problem ``p``, by key; bf16 has the baseline only."""
    from .. import scaled_mm

    tail = f"{p.recipe}/{accumulation}"
    fns = {f"{C.BASELINE}/{tail}": C.REGISTRY[f"{C.BASELINE}/{tail}"].build(p)}
    if p.recipe == "bf16":
        return fns
    precise = accumulation == "precise"
    fns[f"scaled_mm/{tail}"] = lambda: scaled_mm(p.a, p.b, p.scale_a, p.scale_b, precise=precise)
    if preallocated:
        out = torch.empty(p.M, p.N, dtype=torch.bfloat16, device=p.a.device)
        fns[f"scaled_mm_out/{tail}"] = lambda: scaled_mm(p.a, p.b, p.scale_a, p.scale_b, precise=precise, out=out)
    return fns


API_RECIPES = ("bf16", "tensor", "row")


def run_api(shapes, recipes=None, accumulations=None, calls: int = 50, rounds: int = 10,
            preallocated: bool = False, progress: bool = True) -> dict:
    """Time the public API as a model calls it: ``fp8_tutorial.scaled_mm`` against cuBLAS through
    torch (``torch._scaled_mm``; ``torch.mm`` for bf16) on each shape, recipe and accumulation, every
    output checked against float64 first (the first call of ``scaled_mm`` on a shape also chooses its
    kernel), then all of a shape timed together by ``api_benchmark``. ``preallocated`` adds
    ``scaled_mm(..., out=)`` into one output. Returns a results file whose records are in its
    "api" block, with that run's provenance; its kernel records are none.
    """
    require_gpu("the benchmark")
    if not 1 <= calls <= MAX_CALLS or rounds < 1:
        raise ValueError(f"calls must be 1 to {MAX_CALLS} and rounds at least 1, got {calls} and {rounds}")
    C.select(None, recipes, accumulations)  # unknown names fail before any work
    recipes = [r for r in C.RECIPES if r in (recipes or API_RECIPES)]
    accumulations = [a for a in C.ACCUMULATIONS if a in (accumulations or C.ACCUMULATIONS)]
    env = environment().as_dict()
    clocks_before = gpu_clocks()
    records = []
    bar = _Progress(len(shapes), progress)
    for M, K, N in shapes:
        shape = shape_name(M, K, N)
        bar.show(shape)
        cell = {"mode": "api", "M": M, "K": K, "N": N, "shape": shape, "measured": env["date"]}
        fns, errors, failed = {}, {}, {}
        for recipe in recipes:
            accs = ("fp32",) if recipe == "bf16" else accumulations
            try:
                p = C.make_problem(M, K, N, recipe)
            except ValueError as e:  # block scales on a shape that 128 does not divide
                failed.update({f"{C.BASELINE}/{recipe}/{acc}": _why(e) for acc in accs})
                continue
            for key, fn in (kv for acc in accs for kv in _api_contenders(p, acc, preallocated).items()):
                try:
                    errors[key] = rel_error(fn(), p.reference)
                    torch.cuda.synchronize()
                    fns[key] = fn
                except Exception as e:  # a shape or recipe one side refuses: it says why
                    failed[key] = _why(e)
        timed = api_benchmark(fns, flops=2 * M * N * K, calls=calls, rounds=rounds) if fns else {}
        for key, r in timed.items():
            name, recipe, acc = key.split("/")
            records.append({**cell, "contender": name, "recipe": recipe, "accumulation": acc, "key": key,
                            "median_us": r.median_us, "p10_us": r.p10_us, "p90_us": r.p90_us,
                            "host_us": r.host_us, "calls": calls, "rounds": rounds, "tflops": r.tflops,
                            "rel_error": errors[key]})
        for key, why in failed.items():
            name, recipe, acc = key.split("/")
            records.append({**cell, "contender": name, "recipe": recipe, "accumulation": acc, "key": key,
                            "error": why})
        del fns, timed
        torch.cuda.empty_cache()
        bar.step(shape)
    _add_ratios(records)
    api = {"environment": env, "clocks": {"before": clocks_before, "after": gpu_clocks()},
           "settings": {"calls": calls, "rounds": rounds, "flush_l2": False, "tolerance": TOLERANCE,
                        "harness": "fp8_tutorial.measure.bench.api_benchmark: calls back to back, CUDA events "
                                   "around the batch, no L2 flush; host time behind a GPU spin; median of rounds"},
           "records": records}
    return {"environment": env, "records": [], "api": api}


def _why(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _add_ratios(records: list[dict]) -> None:
    """Judge each output (``ok``) and give each correct contender its ratio to the cuBLAS baseline
    of the same shape, recipe and accumulation, measured in the same run. A wrong output gets no
    ratio: its speed means nothing."""
    base = {(r["shape"], r["recipe"], r["accumulation"]): r for r in records
            if r["contender"] == C.BASELINE and "tflops" in r}
    for r in records:
        if "tflops" not in r:
            continue
        b = base.get((r["shape"], r["recipe"], r["accumulation"]))
        limit = TOLERANCE if b is None else min(TOLERANCE, ERROR_FACTOR * b["rel_error"] + FLOOR)
        r["ok"] = bool(r["rel_error"] <= limit)
        r["ratio"] = r["tflops"] / b["tflops"] if r["ok"] and b is not None and b.get("ok", True) else None


def merge(old: dict, new: dict) -> dict:
    """``new``'s records replace ``old``'s of the same contender, recipe, accumulation and shape;
    the rest of ``old`` stays. Ratios were computed within each run and stay as they were. The
    "api" blocks (``run_api``) merge the same way, each keeping its own provenance; a run without
    kernel records leaves those of ``old`` and their provenance as they were."""
    keys = {(r["key"], r["shape"]) for r in new["records"]}
    kept = [r for r in old["records"] if (r["key"], r["shape"]) not in keys]
    merged = {**old, **new} if new["records"] else {**new, **old}
    merged["records"] = kept + new["records"]
    if "api" in old and "api" in new:
        merged["api"] = merge(old["api"], new["api"])
    return merged


def save(data: dict, path: Path) -> Path:
    return results.write_json(path, data)


def load(path: Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no benchmark results at {path}")
    data = json.loads(path.read_text())
    if "records" not in data or "environment" not in data:
        raise ValueError(f"{path} is not a benchmark results file (no 'records' or 'environment')")
    return data


def _one_run(data: dict, shapes, names, recipes, accumulations) -> dict | None:
    """``data``'s records of every (contender, recipe, accumulation, shape) asked for, if all of
    them are there and come from one run (one ``measured`` stamp); else None."""
    wanted = {(n, r, a, C.shape_name(*s)) for n in names for r in recipes for a in accumulations
              for s in shapes}
    found = {(r["contender"], r["recipe"], r["accumulation"], r["shape"]): r for r in data["records"]}
    if not wanted <= found.keys() or len({found[w].get("measured") for w in wanted}) != 1:
        return None
    return {**{k: v for k, v in data.items() if k != "api"}, "records": [found[w] for w in sorted(wanted)]}


def measure_or_load(shapes, names, recipes=("tensor", "row"), accumulations=("fast", "precise"),
                    reps: int = 30, reuse: bool = False) -> tuple[dict, str]:
    """A chapter's scoreboard and where it comes from. On a GPU: ``run`` now, the configurations
    the autotuners chose attached to the records, and the records merged into this GPU's results
    file; with ``reuse``, a run already in that file that holds every record asked for (an earlier
    chapter's) is taken instead. Without a GPU: the same contenders' records from the H200's file,
    ``results/h200.json``."""
    from .._env import ON_GPU

    for what, given in (("names", names), ("recipes", recipes), ("accumulations", accumulations)):
        if isinstance(given, str):
            raise TypeError(f"{what} must be a list of strings, got the string {given!r}")
    if ON_GPU and reuse:
        target = results.RESULTS / f"{results.gpu_slug()}.json"
        earlier = _one_run(load(target), shapes, names, recipes, accumulations) if target.exists() else None
        if earlier is not None:
            when = earlier["records"][0].get("measured")
            return earlier, f"measured in one run of {when}, as recorded in results/{target.name}"
    if ON_GPU:
        from .contenders import attach_configs

        data = run(shapes, names=names, recipes=recipes, accumulations=accumulations, reps=reps, progress=False)
        attach_configs(data["records"])
        target = results.RESULTS / f"{results.gpu_slug()}.json"
        save(merge(load(target), data) if target.exists() else data, target)
        return data, "measured now"
    saved = load(results.RESULTS / "h200.json")
    wanted = {shape_name(*s) for s in shapes}
    keep = [r for r in saved["records"] if r["contender"] in names and r["recipe"] in recipes
            and r["accumulation"] in accumulations and r["shape"] in wanted]
    kernel_part = {k: v for k, v in saved.items() if k != "api"}  # a chapter's scoreboard is of kernels
    return {**kernel_part, "records": keep}, "recorded on " + results.provenance(saved)


def _shapes_in_order(records):
    seen = []
    for r in records:
        if (r["M"], r["K"], r["N"]) not in seen:
            seen.append((r["M"], r["K"], r["N"]))
    return [shape_name(*s) for s in seen]


def _columns(records):
    keys = []
    for r in records:
        if r["key"] not in keys:
            keys.append(r["key"])
    order = {k: i for i, k in enumerate(keys)}
    return sorted(keys, key=lambda k: (C.RECIPES.index(k.split("/")[1]) if k.split("/")[1] in C.RECIPES else 99,
                                       k.split("/")[2], k.split("/")[0] != C.BASELINE, order[k]))


def report(data: dict) -> str:
    """What ``report`` and ``bench`` print: the kernel records' ``table`` and, where the file holds
    API records (``run_api``), their ``api_table`` after it."""
    if not data.get("api", {}).get("records"):
        return table(data)
    return "\n\n".join(([table(data)] if data["records"] else []) + [api_table(data)])


def _filtered(records, contenders=None, recipes=None, accumulations=None) -> list[dict]:
    """The records of ``contenders`` (names), ``recipes`` and ``accumulations`` (lists; None keeps
    all). bf16's accumulation, "fp32", passes any accumulation filter, as in ``C.select``."""
    for what, given, known in [("contenders", contenders, None), ("recipes", recipes, C.RECIPES),
                               ("accumulations", accumulations, C.ACCUMULATIONS)]:
        if isinstance(given, str):
            raise TypeError(f"{what} must be a list of strings, got the string {given!r}")
        unknown = set(given or ()) - set(known or ()) if known else set()
        if unknown:
            raise ValueError(f"unknown {what[:-1]} {', '.join(sorted(unknown))}: "
                             f"expected one of {', '.join(known)}")
    if contenders is not None:
        known = {r["contender"] for r in records} | {c.name for c in C.REGISTRY.values()}
        unknown = set(contenders) - known
        if unknown:
            raise ValueError(f"unknown contender {', '.join(sorted(unknown))}: "
                             f"expected one of {', '.join(sorted(known))}")
    return [r for r in records
            if (contenders is None or r["contender"] in contenders)
            and (recipes is None or r["recipe"] in recipes)
            and (accumulations is None or r["accumulation"] in accumulations
                 or r["accumulation"] == "fp32")]


def _failures(records) -> list[str]:
    """One bullet per distinct error text: which contender columns on which shapes, and how many
    cells (nine cells refused for one reason read as one line, not nine)."""
    shapes = _shapes_in_order(records)
    groups: dict[str, dict[str, list[str]]] = {}
    for r in records:
        if "error" in r:
            groups.setdefault(r["error"], {}).setdefault(r["key"], []).append(r["shape"])
    lines = []
    for error, by_key in sorted(groups.items(), key=lambda g: sorted(g[1])):
        where = []
        for key, on in sorted(by_key.items()):
            on = [s for s in shapes if s in set(on)]
            where.append(f"{key} on all {len(on)} shapes" if len(on) == len(shapes) > 1
                         else f"{key} on {', '.join(on)}")
        cells = sum(len(set(on)) for on in by_key.values())
        lines.append(f"- {'; '.join(where)}: {error}" + (f" ({cells} cells)" if cells > 1 else ""))
    return lines


def table_caption(data: dict) -> str:
    """The line above a ``table``: where and how it was measured, and what each cell holds."""
    env = data["environment"]
    return (f"Measured on {env['gpu']} ({env['date']}; torch {env['torch']}, Triton {env['triton']}). "
            "Each cell: TFLOP/s (x cuBLAS of the same recipe and accumulation, same run) and relative "
            "error against float64.")


def table(data: dict, contenders=None, recipes=None, accumulations=None, caption: bool = True) -> str:
    """A markdown table: one row per shape, one column per contender; TFLOP/s, x cuBLAS, rel. error.
    ``contenders`` (names), ``recipes`` and ``accumulations`` (lists) keep only those columns; the
    cells that could not be measured follow, one line per reason. ``caption=False`` leaves out the
    line above the table that says where and how it was measured (``table_caption``; for a page
    of several tables). Where every column has one recipe and accumulation, its heading is the
    contender's name alone."""
    records = _filtered(data["records"], contenders, recipes, accumulations)
    cols = _columns(records)
    by = {(r["shape"], r["key"]): r for r in records}
    lines = [table_caption(data), ""] if caption else []
    if not records:
        return "\n".join(lines + ["(no records of this selection in these results)"])
    one = len({tuple(key.split("/")[1:]) for key in cols}) == 1  # one recipe and accumulation
    heads = [key.split("/")[0] if one else key for key in cols]
    lines += ["| M x K x N | " + " | ".join(heads) + " |",
              "|---|" + "---:|" * len(cols)]
    for shape in _shapes_in_order(records):
        cells = []
        for key in cols:
            r = by.get((shape, key))
            if r is None:
                cells.append("")
            elif "error" in r:
                cells.append("n/a")
            elif not r.get("ok", True):
                cells.append(f"WRONG {r['rel_error']:.1e}")
            else:
                ratio = f" ({r['ratio']:.2f}x)" if r.get("ratio") is not None and r["contender"] != C.BASELINE else ""
                cells.append(f"{r['tflops']:.0f}{ratio}<br>{r['rel_error']:.1e}")
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    failures = _failures(records)
    if failures:
        lines += ["", "Not measured:"] + failures
    return "\n".join(lines)


def api_table(data: dict) -> str:
    """A markdown table of the API records (``run_api``): one row per shape, recipe and
    accumulation; per contender its time per call back to back (x cuBLAS: its speed over cuBLAS's,
    same run) and the host's time per call; the geometric mean of each contender's ratios below."""
    api = data["api"]
    env, settings, records = api["environment"], api["settings"], api["records"]
    heads = {name: [f"{name}: us/call", "x cuBLAS", "host us/call"] for name in dict.fromkeys(
        r["contender"] for r in records if r["contender"] != C.BASELINE)}
    heads[C.BASELINE] = ["cuBLAS: us/call", "host us/call"]
    columns = [h for head in heads.values() for h in head]
    shapes = _shapes_in_order(records)
    rows = sorted({(r["shape"], r["recipe"], r["accumulation"]) for r in records},
                  key=lambda row: (shapes.index(row[0]), C.RECIPES.index(row[1]), row[2]))
    by = {(r["shape"], r["key"]): r for r in records}
    lines = [f"As a model calls it, measured on {env['gpu']} ({env['date']}; torch {env['torch']}, Triton "
             f"{env['triton']}): {settings['calls']} calls back to back, no L2 flush, median of "
             f"{settings['rounds']} batches. us/call: time per call of the batch (CUDA events); host "
             "us/call: the host's time to issue one call, the GPU kept busy; cuBLAS: torch._scaled_mm "
             "(torch.mm for bf16).",
             "", "| M x K x N | recipe | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * len(columns)]
    for shape, recipe, acc in rows:
        cells = []
        for name, head in heads.items():
            r = by.get((shape, f"{name}/{recipe}/{acc}"))
            if r is None or "error" in r or not r.get("ok", True):
                first = "" if r is None else "n/a" if "error" in r else f"WRONG {r['rel_error']:.1e}"
                cells += [first] + [""] * (len(head) - 1)
            else:
                ratio = "" if r.get("ratio") is None else f"{r['ratio']:.2f}x"
                cells += [f"{r['median_us']:.1f}"] + ([] if name == C.BASELINE else [ratio]) + [f"{r['host_us']:.1f}"]
        lines.append(f"| {shape} | {recipe}/{acc} | " + " | ".join(cells) + " |")
    ratios = {}
    for r in records:
        if r.get("ratio") is not None and r["contender"] != C.BASELINE:
            ratios.setdefault(r["key"], []).append(r["ratio"])
    if ratios:
        lines += [""] + [f"- {key}: {gmean(v):.2f}x cuBLAS (geometric mean over {len(v)} cells), at least "
                         f"cuBLAS's speed on {sum(x >= 1.0 for x in v)}" for key, v in ratios.items()]
    failures = _failures(records)
    if failures:
        lines += ["", "Not measured:"] + failures
    return "\n".join(lines)


def best_of(data: dict, contenders, recipe: str, accumulation: str = "fast") -> dict[str, dict]:
    """Per shape, the record of the fastest right contender among ``contenders`` (names) for one
    recipe and accumulation, its ratio measured against cuBLAS in the same run."""
    best = {}
    for r in data["records"]:
        if (r["contender"] in contenders and r["recipe"] == recipe and r["accumulation"] == accumulation
                and r.get("ratio") is not None and r["ratio"] > best.get(r["shape"], {}).get("ratio", 0)):
            best[r["shape"]] = r
    return {shape: best[shape] for shape in _shapes_in_order(data["records"]) if shape in best}


def gmean(values) -> float:
    values = list(values)
    if not values:
        raise ValueError("the geometric mean of nothing")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def best_table(data: dict, contenders, recipes=("tensor", "row"), accumulation: str = "fast") -> str:
    """A markdown table: per shape and recipe, the best of ``contenders`` against cuBLAS (ratio, and
    which contender), with the geometric mean of the ratios in the last row."""
    best = {recipe: best_of(data, contenders, recipe, accumulation) for recipe in recipes}
    shapes = [s for s in _shapes_in_order(data["records"]) if any(s in b for b in best.values())]
    lines = ["| M x K x N | " + " | ".join(f"{recipe}: best / cuBLAS | kernel" for recipe in recipes) + " |",
             "|---|" + "---:|---|" * len(recipes)]
    for shape in shapes:
        cells = []
        for recipe in recipes:
            r = best[recipe].get(shape)
            cells += [f"{r['ratio']:.2f}x", r["contender"]] if r else ["", ""]
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    means = []
    for recipe in recipes:
        ratios = [r["ratio"] for r in best[recipe].values()]
        means += [f"**{gmean(ratios):.2f}x**" if ratios else "", ""]
    lines.append("| geometric mean | " + " | ".join(means) + " |")
    return "\n".join(lines)


def headline(contenders, what: str, data: dict | None = None, accumulation: str = "fast") -> str:
    """The one number of a kernel chapter, as a markdown line: the best of ``contenders`` (names)
    per reference shape against cuBLAS, geometric mean per recipe, read from the records (the H200's,
    ``results/h200.json``, unless ``data`` is given)."""
    if data is None:
        from . import results

        data = load(results.RESULTS / "h200.json")
    parts, counts, stamps = [], set(), set()
    for recipe, label in (("tensor", "per tensor"), ("row", "per row")):
        best = best_of(data, contenders, recipe, accumulation)
        if best:
            parts.append(f"**{gmean(r['ratio'] for r in best.values()):.2f}x** {label}")
            counts.add(len(best))
            stamps |= {r.get("measured") or data["environment"]["date"] for r in best.values()}
    if not parts:
        raise ValueError(f"no records of {', '.join(contenders)} with a ratio against cuBLAS")
    shapes = "/".join(map(str, sorted(counts)))
    when = " to ".join(sorted(stamps)[::len(stamps) - 1] if len(stamps) > 1 else sorted(stamps))
    return (f"{what} against cuBLAS: {' and '.join(parts)}, the geometric mean over {shapes} reference "
            f"shapes of the best configuration per shape ({accumulation} accumulation; recorded on "
            f"{data['environment']['gpu']}, {when}).")


def figure(data: dict, path: Path | None = None, title: str | None = None, contenders=None):
    """The best of ``contenders`` (names; default every contender but cuBLAS) against cuBLAS: one
    panel per recipe, per shape a bar for each accumulation, its height the best right
    contender's throughput over cuBLAS's in the same run, its kernel named on it; a line at 1.0
    is cuBLAS. Where no contender has a ratio (cuBLAS alone), cuBLAS's TFLOP/s instead. Saved to
    ``path`` if given."""
    import matplotlib.pyplot as plt
    import numpy as np

    from .plots import WIDTH, finish, grouped_bars

    records = [r for r in data["records"] if "tflops" in r and r.get("ok", True)]  # wrong: no bar
    ours = sorted({r["contender"] for r in records} - {C.BASELINE}) if contenders is None else contenders
    recipes = [p for p in C.RECIPES if any(r["recipe"] == p and r.get("ratio") is not None
                                           and r["contender"] in ours for r in records)]
    ratios = bool(recipes)
    if not ratios:  # nothing to compare: cuBLAS's throughput per recipe
        recipes = [p for p in C.RECIPES if any(r["recipe"] == p for r in records)]
    shapes = _shapes_in_order(records)
    accs = [a for a in ("fp32",) + C.ACCUMULATIONS if any(r["accumulation"] == a for r in records)]
    fig, axes = plt.subplots(max(len(recipes), 1), 1, figsize=(WIDTH, 1.2 + 2.6 * max(len(recipes), 1)),
                             sharex=True, squeeze=False)
    xs = np.arange(len(shapes))
    colors = {"fast": "tab:blue", "precise": "tab:orange", "fp32": "tab:gray"}
    top = 0.0
    for ax, recipe in zip(axes[:, 0], recipes):
        here = [a for a in accs if any(r["recipe"] == recipe and r["accumulation"] == a for r in records)]
        series, names = {}, {}
        for acc in here:
            label = f"{acc} accumulation"
            if ratios:
                best = best_of(data, ours, recipe, acc)
                series[label] = [best[s]["ratio"] if s in best else 0.0 for s in shapes]
                names[label] = [best[s]["contender"] if s in best else "" for s in shapes]
            else:
                by = {r["shape"]: r["tflops"] for r in records
                      if r["recipe"] == recipe and r["accumulation"] == acc and r["contender"] == C.BASELINE}
                series[label], names[label] = [by.get(s, 0.0) for s in shapes], [""] * len(shapes)
        placed = grouped_bars(ax, series, colors={f"{a} accumulation": colors.get(a, "tab:green") for a in here})
        for label, ys in series.items():
            for xi, y, name in zip(placed[label], ys, names[label]):
                if name:  # the kernel on its bar, the ratio above it
                    ax.text(xi, 0.04, name, rotation=90, ha="center", va="bottom", fontsize=7,
                            color="white")
                    ax.text(xi, y + 0.01, f"{y:.2f}", ha="center", va="bottom", fontsize=6.5)
            top = max([top, *ys])
        if ratios:
            ax.axhline(1.0, color="black", lw=0.8, label="cuBLAS (same run)")
        ylabel = "best / cuBLAS (ratio)" if ratios else "TFLOP/s (median)"
        finish(ax, "bf16 (torch.mm)" if recipe == "bf16" else f"per {recipe}", "", ylabel, legend=False)
    for ax in axes[:, 0]:
        ax.set_ylim(0, max(1.35, top + 0.3) if ratios else top * 1.2 or 1)
    last = axes[-1, 0]
    last.set_xticks(xs, shapes, rotation=30, ha="right", fontsize=8)
    last.set_xlabel("M x K x N")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    for ax in axes[1:, 0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    axes[0, 0].legend(handles, labels, fontsize=8, ncol=len(labels), loc="upper center")
    env = data["environment"]
    what = ("The best of the book's kernels against cuBLAS, throughput ratio" if ratios
            else "cuBLAS's throughput")
    fig.suptitle(title or f"{what} ({env['gpu']}, {env['date']})", fontsize=11)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    return fig


def k_sweep(M: int, N: int, Ks, builders: dict, recipe: str = "tensor", reps: int = 20) -> dict[str, dict]:
    """Separate the time that grows with K from the time that does not: each contender timed on
    M x K x N for every K in ``Ks`` (one interleaved ``benchmark`` per K, each output checked
    against float64 first), then ``time = intercept + K / rate`` fitted by least squares.
    ``builders`` maps a name to ``build(problem) -> callable``. Returns, per name, the median
    times (ms), the K loop's rate (TFLOP/s) and the intercept (µs)."""
    import numpy as np

    require_gpu("a K sweep")
    times = {name: [] for name in builders}
    for K in Ks:
        p = C.make_problem(M, K, N, recipe)
        fns = {name: build(p) for name, build in builders.items()}
        for name, fn in fns.items():
            err = rel_error(fn(), p.reference)
            if not err < 1e-2:
                raise AssertionError(f"{name} on {p.shape}: relative error {err:.2e}")
        for name, r in benchmark(fns, flops=p.flops, reps=reps).items():
            times[name].append(r.median_ms)
        del p, fns
    fits = {}
    for name, ts in times.items():
        slope, intercept = np.polyfit(list(Ks), ts, 1)
        fits[name] = {"times_ms": ts, "rate_tflops": 2 * M * N / (slope * 1e-3) / 1e12,
                      "intercept_us": intercept * 1e3}
    return fits


def plot_k_sweep(ax, M: int, N: int, Ks, fits: dict, recipe: str = "tensor") -> None:
    """The measured times of ``k_sweep`` as points and its fitted lines, on ``ax``."""
    import numpy as np

    from .plots import finish

    for name, f in fits.items():
        ax.plot(Ks, f["times_ms"], "o", label=f"{name}: {f['rate_tflops']:.0f} TFLOP/s + {f['intercept_us']:.1f} µs")
        slope = 2 * M * N / (f["rate_tflops"] * 1e12) * 1e3
        ax.plot(Ks, np.polyval([slope, f["intercept_us"] * 1e-3], Ks), "--", lw=1, color=ax.lines[-1].get_color())
    finish(ax, f"{M} x K x {N}, per {recipe}, fast accumulation: time against K", "K", "median time (ms)",
           grid="both")
