"""§2.2 torch_compile: let the compiler fuse attention and the whole model.

``torch.compile(fn)`` traces ``fn`` the first time it runs, and generates fused Triton kernels
(on a GPU) or C++ loops (on a CPU) for the traced graph, both for the forward pass and for the
backward pass. The first call is slow (it compiles); later calls with the same shapes reuse the
compiled code. You compare compiled and eager attention (with ``pytorch_attention``'s sweep,
``compiled=True``) and compiled and eager models (with ``benchmarking_script``).
See handout/README.md, §2.2.

Call it as ``torch.compile(...)`` inside the functions below, at call time: the tests watch
``torch.compile`` to check that what you return is what it returned.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from cs336_systems._not_implemented import not_implemented

_SECTION = "§2.2 torch_compile"


def compiled_attention() -> Callable[..., torch.Tensor]:
    """Return ``torch.compile`` applied to ``cs336_systems.model.scaled_dot_product_attention``.

    The result is called like the eager function, ``fn(Q, K, V, mask=None)`` with Q of shape
    (..., queries, d_k), K (..., keys, d_k), V (..., keys, d_v) and an optional bool mask
    broadcastable to (..., queries, keys), and returns (..., queries, d_v) in V's dtype. Its
    outputs and the gradients it gives Q, K and V equal the eager function's up to float
    rounding (float32: within 1e-5). Return the object ``torch.compile`` returned, not a wrapper.
    """
    raise not_implemented(__file__, "compiled_attention", _SECTION)


def compile_model(model: torch.nn.Module) -> torch.nn.Module:
    """Return ``torch.compile(model)``: a module that runs ``model``'s forward compiled.

    The result shares ``model``'s parameters (training it trains ``model``); called on token ids
    of shape (batch, seq) it returns logits of shape (batch, seq, vocab) equal to
    ``model(token_ids)`` up to float rounding, and so are the gradients. Return the object
    ``torch.compile`` returned.
    """
    raise not_implemented(__file__, "compile_model", _SECTION)
