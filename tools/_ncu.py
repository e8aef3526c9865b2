"""What the tools/ncu_*.py scripts share: one profiled call after warm-up."""
import torch


def profile_once(run, warmup: int = 3):
    """Call ``run`` ``warmup`` times (compile, then steady clocks), then once between
    cudaProfilerStart and cudaProfilerStop, which is all that ncu --profile-from-start off sees;
    returns that call's result."""
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    out = run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return out
