"""fp8_tutorial._env: the execution mode and the environment report."""

import os
import subprocess
import sys

import pytest
import torch

import fp8_tutorial as fp8


def test_mode_is_consistent():
    assert fp8.MODE in ("hopper", "cuda", "interpreter")
    assert fp8.ON_GPU == (fp8.MODE != "interpreter")
    if fp8.MODE == "interpreter":
        assert os.environ["TRITON_INTERPRET"] == "1"
        assert fp8.DEVICE.type == "cpu"
    else:
        assert torch.cuda.is_available() and fp8.DEVICE.type == "cuda"
        major, _ = torch.cuda.get_device_capability()
        assert (fp8.MODE == "hopper") == (major >= 9)


def test_environment_report():
    env = fp8.environment()
    text = str(env)
    assert env.mode == fp8.MODE
    for label in ("GPU", "driver", "torch", "Triton", "numpy", "mode", "date"):
        assert label in text
    assert env.torch == torch.__version__
    if fp8.ON_GPU:
        assert env.gpu == torch.cuda.get_device_name(0) and env.sms > 0
        assert env.driver != "unknown"
    else:
        assert env.gpu == "none"
    assert set(env.as_dict()) >= {"gpu", "driver", "torch", "triton", "numpy", "mode", "date"}


@pytest.mark.skipif(fp8.ON_GPU, reason="the import order matters only where the interpreter is chosen")
def test_triton_imported_first_without_gpu_is_a_clear_error():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", "import triton, fp8_tutorial"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "import fp8_tutorial before triton" in run.stderr, run.stderr[-2000:]
    env["TRITON_INTERPRET"] = "1"
    ok = subprocess.run([sys.executable, "-c", "import triton, fp8_tutorial"], env=env,
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-2000:]


def test_mode_requests_are_checked():
    base = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "FP8_TUTORIAL_MODE")}
    for extra, message in [({"FP8_TUTORIAL_MODE": "fast"}, "the only mode to ask for is 'compile'"),
                           ({"FP8_TUTORIAL_MODE": "compile", "TRITON_INTERPRET": "1"}, "unset one")]:
        run = subprocess.run([sys.executable, "-c", "import fp8_tutorial"], env={**base, **extra},
                             capture_output=True, text=True, timeout=300)
        assert run.returncode != 0 and message in run.stderr, run.stderr[-2000:]
    ok = subprocess.run([sys.executable, "-c", "import fp8_tutorial as f; print(f.MODE, f.ON_GPU)"],
                        env={**base, "FP8_TUTORIAL_MODE": "compile"}, capture_output=True, text=True, timeout=300)
    assert ok.stdout.split() == ["compile", "False"], ok.stderr[-2000:]


def test_the_environment_folds_under_a_one_line_summary():
    env = fp8.environment()
    shown = env._repr_html_()
    assert shown.startswith("<details><summary>Ran on ") and env.summary() in shown
    assert f"Triton {env.triton}" in env.summary() and env.mode in env.summary()
    assert "<pre>" in shown and "driver" in shown  # the whole table, folded
