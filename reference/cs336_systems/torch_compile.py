"""§2.2 torch_compile: let the compiler fuse attention and the whole model.

Reference solution.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from cs336_systems import model as lm


def compiled_attention() -> Callable[..., torch.Tensor]:
    """``torch.compile`` of the model's ``scaled_dot_product_attention``."""
    return torch.compile(lm.scaled_dot_product_attention)


def compile_model(model: torch.nn.Module) -> torch.nn.Module:
    """``torch.compile(model)``: a module whose forward is compiled on its first call."""
    return torch.compile(model)
