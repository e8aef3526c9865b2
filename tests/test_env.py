"""fp8_tutorial._env: the execution mode and the environment report."""

import os

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
