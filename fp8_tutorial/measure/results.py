"""Benchmark records kept in ``results/``: measured on a GPU, read back anywhere.

A file is ``results/<name>_<gpu>.json`` (``quantize_h200.json``) holding the environment it was
measured in (GPU, driver, versions, date) and one dictionary per measurement. Chapters save when
they run on a GPU and, without one, plot what was recorded, labelled with where and when.
"""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path

from .._env import environment

RESULTS = Path(__file__).resolve().parents[2] / "results"


def gpu_slug(name: str | None = None) -> str:
    """A short file-name form of a GPU name: 'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    if name is None:
        name = environment().gpu
    name = name.lower().replace("nvidia", "").strip()
    for token in name.split():
        if re.fullmatch(r"[a-z]+\d+", token):
            return token
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "cpu"


def path(name: str, gpu: str) -> Path:
    return RESULTS / f"{name}_{gpu}.json"


def write_json(target: Path, data: dict) -> Path:
    """Write a results file (folders created as needed); returns its path."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=1) + "\n")
    return target


def save(name: str, records: list[dict], **extra) -> Path:
    """Write records with the current environment as provenance; returns the file's path."""
    env = environment()
    return write_json(path(name, gpu_slug(env.gpu)), {"environment": env.as_dict(), **extra, "records": records})


class Sweep:
    """A measuring run of one of ``tools/``: its records, its failed checks and its log, all saved
    to ``results/<name>_<gpu>.json`` by ``save`` (after each cell, so that a run cut short keeps
    what it measured) and by ``done``, which logs the count of failed checks and the time taken."""

    def __init__(self, name: str):
        self.name, self.records, self.lines, self.failed = name, [], [], 0
        self.started = time.time()

    def log(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)

    def fail(self, line: str) -> None:
        """Count a failed check and log it, after "FAIL"."""
        self.failed += 1
        self.log(f"FAIL {line}")

    def save(self) -> Path:
        return save(self.name, self.records, failed_checks=self.failed, log=self.lines)

    def done(self) -> Path:
        self.log(f"done: {self.failed} failed checks, {time.time() - self.started:.0f} s")
        return self.save()


def load(name: str, gpu: str = "h200") -> dict:
    """Read a recorded file; raises FileNotFoundError with the path when there is none."""
    target = path(name, gpu)
    if not target.exists():
        raise FileNotFoundError(f"no recorded results at {target}: run the chapter on a {gpu.upper()} to make them")
    return json.loads(target.read_text())


def provenance(data: dict) -> str:
    """'NVIDIA H200, 2026-11-29 23:50 UTC, torch 2.11.0, Triton 3.6.0' for figure titles."""
    env = data["environment"]
    return f"{env['gpu']}, {env['date']}, torch {env['torch']}, Triton {env['triton']}"


def read_ncu_kernels(target: Path | str) -> list[dict]:
    """Every kernel profiled in an Nsight Compute CSV (``ncu --csv --page raw``, as the scripts in
    ``tools/`` write), in the order profiled: metric name -> value, numbers as floats (ncu's
    thousands commas dropped), the rest (kernel name, ...) as text. Lines that ncu or the script
    print around the table are skipped."""
    target = Path(target)
    rows = list(csv.reader(line for line in target.read_text().splitlines() if line.startswith('"')))
    if len(rows) < 3:
        raise ValueError(f"{target} holds no profiled kernel: expected the output of ncu --csv --page raw "
                         "(a header, a line of units, a line per kernel)")

    def value(text: str):
        try:
            return float(text.replace(",", ""))
        except ValueError:
            return text
    return [{name: value(text) for name, text in zip(rows[0], row)} for row in rows[2:]]


def read_ncu(target: Path | str) -> dict:
    """The first kernel of ``read_ncu_kernels(target)``."""
    return read_ncu_kernels(target)[0]


def ncu_table(title: str, profiles: dict, rows) -> str:
    """A markdown table of Nsight Compute counters: one column per profiled kernel (``profiles``:
    label -> ``read_ncu``'s dictionary), one row per ``(label, value)`` in ``rows``, ``value``
    taking a kernel's counters and returning the cell's text."""
    rows = list(rows)
    if not profiles or not rows:
        raise ValueError("ncu_table needs at least one profile and one row")
    head = [f"| {title} | " + " | ".join(profiles) + " |", "|---|" + "---:|" * len(profiles)]
    return "\n".join(head + [f"| {what} | " + " | ".join(value(m) for m in profiles.values()) + " |"
                             for what, value in rows])
