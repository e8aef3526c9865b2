"""fp8_tutorial.measure.schedule: the Python mirror of the tile order agrees with the Triton helper."""

import pytest
import torch
import triton
import triton.language as tl

from fp8_tutorial.measure import schedule
from fp8_tutorial.kernels.common import grouped_tile


@triton.jit
def _order_kernel(out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    t = tl.program_id(0)
    pid_m, pid_n = grouped_tile(t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    tl.store(out_ptr + 2 * t, pid_m)
    tl.store(out_ptr + 2 * t + 1, pid_n)


@pytest.mark.parametrize("M,N,bm,bn,group", [(1000, 700, 128, 64, 8), (300, 2000, 64, 128, 4), (128, 128, 128, 128, 8),
                                             (900, 130, 64, 32, 1), (5000, 900, 128, 256, 16)])
def test_mirror_matches_kernel(M, N, bm, bn, group, device):
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    out = torch.full((tiles, 2), -1, dtype=torch.int32, device=device)
    _order_kernel[(tiles,)](out, M, N, BLOCK_M=bm, BLOCK_N=bn, GROUP_M=group)
    expected = schedule.tile_order(M, N, bm, bn, group)
    assert [tuple(r) for r in out.cpu().tolist()] == [tuple(t) for t in expected]
    assert sorted(expected) == [(m, n) for m in range(triton.cdiv(M, bm)) for n in range(triton.cdiv(N, bn))]


def test_waves_and_occupancy():
    # 4608 x 12288 in 128 x 128 tiles: 36 x 96 = 3456 tiles; 264 slots give 13.09 -> 14 waves.
    occ = schedule.occupancy(4608, 12288, 128, 128, per_sm=2)
    assert (occ.tiles, occ.slots, occ.waves) == (3456, 264, 14)
    assert occ.efficiency == pytest.approx(3456 / (14 * 264))
    row_major = schedule.waves_loads(4608, 12288, 3072, 128, 128, 1, 264)
    grouped = schedule.waves_loads(4608, 12288, 3072, 128, 128, 8, 264)
    assert len(row_major) == len(grouped) == 14
    assert row_major[0].a_panels == 3 and row_major[0].b_panels == 96  # 264 tiles: rows of 96 tiles
    assert grouped[0].a_panels == 8 and grouped[0].b_panels == 33
    assert sum(w.bytes for w in grouped) < sum(w.bytes for w in row_major)
    assert schedule.programs_per_sm(schedule.pipeline_smem(128, 128, 128, 3)) == 2
    assert schedule.programs_per_sm(schedule.pipeline_smem(128, 128, 128, 6)) == 1
    assert schedule.programs_per_sm(1024, regs_per_thread=255, num_warps=8) == 1
