"""How output tiles are ordered and spread over the GPU: the numbers behind the chapters' figures.

A Python mirror of the kernels' ``grouped_tile`` (a test checks that the two agree), what each
wave of programs loads, and how many waves a grid needs. Pure Python: it runs anywhere. The
shared memory numbers are the kernels' own (``kernels.host``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..kernels import host

#: The kernels' own shared-memory numbers (``kernels.host``), which the chapters read here.
SMEM_PER_SM, SMEM_PER_PROGRAM_MAX = host.SMEM_PER_SM, host.SMEM_PER_PROGRAM_MAX
pipeline_smem = host.pipeline_smem

#: The H200's streaming multiprocessors.
H200_SMS = 132
#: 50 MiB, the L2 of an H100 SXM: the reference line of chapter 04's figure. ``l2_bytes()`` is the
#: size of the GPU at hand.
L2_BYTES = 50 * 1024 * 1024


def l2_bytes() -> int | None:
    """The L2 cache of this machine's GPU, as the driver reports it (None without a GPU)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return None


def grouped_tile(tile_id: int, num_m: int, num_n: int, group_m: int) -> tuple[int, int]:
    """(pid_m, pid_n) of ``tile_id``: the same arithmetic as ``kernels.common.grouped_tile``."""
    per_group = group_m * num_n
    first_m = (tile_id // per_group) * group_m
    rows = min(num_m - first_m, group_m)
    return first_m + (tile_id % per_group) % rows, (tile_id % per_group) // rows


def tile_order(M: int, N: int, block_m: int, block_n: int, group_m: int) -> list[tuple[int, int]]:
    """Every output tile in launch order; ``group_m = 1`` is plain row-major order."""
    num_m, num_n = math.ceil(M / block_m), math.ceil(N / block_n)
    return [grouped_tile(t, num_m, num_n, group_m) for t in range(num_m * num_n)]


@dataclass(frozen=True)
class Wave:
    """One wave of concurrently running programs: which operand panels they read."""

    a_panels: int  # distinct BLOCK_M-row panels of A (each BLOCK_M x K)
    b_panels: int  # distinct BLOCK_N-column panels of B (each K x BLOCK_N)
    bytes: int     # FP8 bytes of those panels: what the wave must bring from HBM at least once


def waves_loads(M: int, N: int, K: int, block_m: int, block_n: int, group_m: int, slots: int) -> list[Wave]:
    """Split the launch order into waves of ``slots`` programs and count each wave's panels."""
    order = tile_order(M, N, block_m, block_n, group_m)
    out = []
    for start in range(0, len(order), slots):
        wave = order[start:start + slots]
        a, b = {m for m, _ in wave}, {n for _, n in wave}
        out.append(Wave(len(a), len(b), (len(a) * block_m + len(b) * block_n) * K))
    return out


def programs_per_sm(shared_bytes: int, regs_per_thread: int | None = None, num_warps: int = 4) -> int:
    """How many programs of a kernel fit on one SM at once, by shared memory and registers."""
    fit = SMEM_PER_SM // max(shared_bytes, 1)
    if regs_per_thread:
        fit = min(fit, 65536 // (regs_per_thread * 32 * num_warps))
    return max(1, min(fit, 32))


@dataclass(frozen=True)
class Occupancy:
    tiles: int
    slots: int        # programs that run at once: SMs x programs per SM
    waves: int
    efficiency: float  # tiles / (waves x slots): the share of the last wave's slots that work


def occupancy(M: int, N: int, block_m: int, block_n: int, per_sm: int, sms: int = H200_SMS) -> Occupancy:
    tiles = math.ceil(M / block_m) * math.ceil(N / block_n)
    slots = sms * per_sm
    waves = math.ceil(tiles / slots)
    return Occupancy(tiles, slots, waves, tiles / (waves * slots))
