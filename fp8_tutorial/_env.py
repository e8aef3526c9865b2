"""The execution mode, decided once on import, and the environment report each chapter opens with.

Three modes picked on import and one asked for (DESIGN.md, "Execution modes"):

- ``"hopper"``: a CUDA GPU of compute capability 9.0 or newer (Hopper, and the newer GPUs that
  run its code); kernels are compiled, timings are live.
- ``"cuda"``: an older CUDA GPU; kernels run where the GPU supports them (sm89 has FP8 dots but no
  TMA or wgmma, sm80 has no FP8 tensor cores).
- ``"interpreter"``: no GPU (or ``TRITON_INTERPRET=1`` set by the user); Triton kernels run in
  Triton's interpreter on the CPU, on small shapes, and nothing is timed.
- ``"compile"``: asked for with ``FP8_TUTORIAL_MODE=compile``; kernels are compiled for a Hopper
  GPU that need not be here (``fp8_tutorial.measure.compiled``), to read what Triton makes of
  them; nothing runs.

The interpreter is chosen by setting ``TRITON_INTERPRET=1`` *before* any ``@triton.jit`` in this
package runs, which is why ``fp8_tutorial/__init__.py`` imports this module first.
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass

import torch

_DESCRIPTIONS = {
    "hopper": "Hopper-class GPU: kernels compiled, timings live",
    "cuda": "CUDA GPU older than Hopper: kernels run where the GPU supports them, timings live",
    "interpreter": "no GPU: Triton kernels run in the interpreter on small shapes, nothing is timed",
    "compile": "kernels compiled for a Hopper GPU without running them (FP8_TUTORIAL_MODE=compile)",
}


def _decide_mode() -> str:
    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    requested = os.environ.get("FP8_TUTORIAL_MODE", "")
    if requested not in ("", "compile"):
        raise ImportError(f"FP8_TUTORIAL_MODE={requested!r}: the only mode to ask for is 'compile'")
    if requested == "compile":
        if interpret:
            raise ImportError("FP8_TUTORIAL_MODE=compile compiles kernels, TRITON_INTERPRET=1 interprets them: "
                              "unset one")
        return "compile"
    if interpret:
        return "interpreter"
    if torch.cuda.is_available():
        major, _ = torch.cuda.get_device_capability()
        return "hopper" if major >= 9 else "cuda"
    if "triton" in sys.modules:
        # Triton's own @jit helpers (tl.cdiv, tl.max, ...) were built for a GPU when it was
        # imported; called from an interpreted kernel they fail with an obscure error.
        raise ImportError("no GPU here, so fp8_tutorial runs Triton in its interpreter, but triton was "
                          "imported first, without it: import fp8_tutorial before triton, or set "
                          "TRITON_INTERPRET=1 before starting Python")
    os.environ["TRITON_INTERPRET"] = "1"
    return "interpreter"


MODE: str = _decide_mode()
#: True when kernels run compiled on a CUDA GPU (modes "hopper" and "cuda").
ON_GPU: bool = MODE in ("hopper", "cuda")
#: Where the chapters put their tensors.
DEVICE: torch.device = torch.device("cuda" if ON_GPU else "cpu")


def _driver_version() -> str:
    try:
        import pynvml  # nvidia-ml-py, present on most GPU machines

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            pass
    return "unknown"


def gpu_clocks() -> dict | None:
    """The GPU's clocks, power and temperature now (NVML), or None without a GPU or NVML.

    Clocks fall under sustained load; a benchmark record keeps them from before and after.
    """
    if not torch.cuda.is_available():
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return {
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "memory_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
            "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        }
    except Exception:
        return None


@dataclass(frozen=True)
class Environment:
    """What a chapter ran on. ``str()`` gives the table each chapter prints first."""

    gpu: str
    compute_capability: str
    sms: int | None
    driver: str
    cuda: str
    torch: str
    triton: str
    numpy: str
    python: str
    mode: str
    date: str

    def rows(self) -> list[tuple[str, str]]:
        gpu = self.gpu
        if self.sms:
            gpu += f" (compute capability {self.compute_capability}, {self.sms} SMs)"
        return [
            ("GPU", gpu),
            ("driver", self.driver),
            ("CUDA (torch)", self.cuda),
            ("torch", self.torch),
            ("Triton", self.triton),
            ("numpy", self.numpy),
            ("Python", self.python),
            ("mode", f"{self.mode}: {_DESCRIPTIONS[self.mode]}"),
            ("date", self.date),
        ]

    def __str__(self) -> str:
        return "\n".join(f"{k:<13} {v}" for k, v in self.rows())

    __repr__ = __str__

    def summary(self) -> str:
        """One line: the GPU, torch, Triton, mode and date."""
        gpu = "no GPU" if self.gpu == "none" else self.gpu
        return f"{gpu}, torch {self.torch}, Triton {self.triton}, {self.mode} mode, {self.date}"

    def _repr_html_(self) -> str:
        """In a notebook and the book: the table folded under its one-line summary."""
        import html

        return (f"<details><summary>Ran on {html.escape(self.summary())}</summary>"
                f"<pre>{html.escape(str(self))}</pre></details>")

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def environment() -> Environment:
    """Report the GPU, driver, library versions, execution mode and date (UTC)."""
    import numpy
    import triton

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu, cc, sms = props.name, f"{props.major}.{props.minor}", props.multi_processor_count
        driver = _driver_version()
    else:
        gpu, cc, sms, driver = "none", "-", None, "-"
    return Environment(
        gpu=gpu,
        compute_capability=cc,
        sms=sms,
        driver=driver,
        cuda=str(torch.version.cuda or "-"),
        torch=torch.__version__,
        triton=triton.__version__,
        numpy=numpy.__version__,
        python=platform.python_version(),
        mode=MODE,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
