import pytest
import torch

import fp8_tutorial as fp8


@pytest.fixture
def device():
    """Where kernels run: the GPU when there is one, else the CPU under Triton's interpreter."""
    return fp8.DEVICE


@pytest.fixture
def gen():
    """A fresh, differently seeded generator per test: no check depends on one lucky draw."""
    g = torch.Generator()
    g.seed()
    return g
