"""Malformed FlashAttention-2 calls that must raise, and the check that they do.

Read by the visible forward tests (PyTorch and Triton). The contract: Q (batch, n_queries, d),
K and V (batch, n_keys, d), one dtype, d in {16, 32, 64, 128}. Anything else must raise
ValueError or TypeError naming the problem (RuntimeError is accepted too, since PyTorch raises
it for some mismatches); returning a result, or raising anything else, fails. A stub's
NotImplementedError passes through unchanged, so the failure names the file to start from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ACCEPTED = (ValueError, TypeError, RuntimeError)


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(sum(shape))
    return torch.randn(*shape, generator=generator).to(device=DEVICE, dtype=dtype)


@dataclass(frozen=True)
class BadInput:
    """One malformed call: ``make()`` returns (Q, K, V); ``what`` says what is wrong with it."""

    name: str
    what: str
    make: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


BAD_INPUTS = (
    BadInput("Q_rank2", "Q is (n_queries, d), without a batch dimension",
             lambda: (_randn(32, 16), _randn(1, 32, 16), _randn(1, 32, 16))),
    BadInput("K_rank2", "K is (n_keys, d), without a batch dimension",
             lambda: (_randn(1, 32, 16), _randn(32, 16), _randn(1, 32, 16))),
    BadInput("all_rank4", "Q, K, V are (batch, heads, seq, d): heads were not folded into batch",
             lambda: (_randn(1, 2, 32, 16), _randn(1, 2, 32, 16), _randn(1, 2, 32, 16))),
    BadInput("d_mismatch", "Q has d=16 but K and V have d=32",
             lambda: (_randn(2, 32, 16), _randn(2, 32, 32), _randn(2, 32, 32))),
    BadInput("V_d_mismatch", "V has d=32 but Q and K have d=16",
             lambda: (_randn(2, 32, 16), _randn(2, 32, 16), _randn(2, 32, 32))),
    BadInput("batch_mismatch", "Q has batch 2 but K and V have batch 3",
             lambda: (_randn(2, 32, 16), _randn(3, 32, 16), _randn(3, 32, 16))),
    BadInput("KV_length_mismatch", "K has 32 keys but V has 48",
             lambda: (_randn(2, 32, 16), _randn(2, 32, 16), _randn(2, 48, 16))),
    BadInput("d24_unsupported", "d=24 is not one of 16, 32, 64, 128",
             lambda: (_randn(1, 32, 24), _randn(1, 32, 24), _randn(1, 32, 24))),
    BadInput("d256_unsupported", "d=256 is not one of 16, 32, 64, 128",
             lambda: (_randn(1, 16, 256), _randn(1, 16, 256), _randn(1, 16, 256))),
    BadInput("dtype_mismatch", "Q is float32 but K and V are float16",
             lambda: (_randn(1, 32, 16), _randn(1, 32, 16, dtype=torch.float16), _randn(1, 32, 16, dtype=torch.float16))),
)


def assert_rejects(function: type[torch.autograd.Function], bad: BadInput) -> None:
    """Fail unless ``function.apply`` works on a valid input and raises ValueError/TypeError/RuntimeError for ``bad``.

    The valid call comes first, so that a Function that raises for every input (or, for the
    Triton Function, one that runs no Triton kernel of its own) earns nothing for its refusals.
    """
    valid = (_randn(1, 16, 16), _randn(1, 16, 16), _randn(1, 16, 16))
    try:
        function.apply(*valid, False)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001
        pytest.fail(
            f"{function.__name__}.apply(Q, K, V, False) with valid float32 inputs of shape (1, 16, 16) raised "
            f"{type(error).__name__}: {error}. Input checks count only once valid inputs work; fix that first."
        )
    Q, K, V = bad.make()
    call = (
        f"{function.__name__}.apply(Q, K, V, False) with Q {tuple(Q.shape)} {Q.dtype}, "
        f"K {tuple(K.shape)} {K.dtype}, V {tuple(V.shape)} {V.dtype}"
    )
    try:
        result = function.apply(Q, K, V, False)
    except NotImplementedError:
        raise  # a stub: let its message say which file and handout section to start from
    except ACCEPTED:
        return
    except Exception as error:  # noqa: BLE001  any other exception is the wrong kind
        pytest.fail(
            f"{call} raised {type(error).__name__}: {error}. Check the inputs before launching anything "
            f"and raise ValueError or TypeError that names the problem ({bad.what})."
        )
    shape = tuple(result.shape) if isinstance(result, torch.Tensor) else type(result).__name__
    pytest.fail(
        f"{call} returned {shape} instead of raising: {bad.what}. Check the inputs first and raise "
        "ValueError (wrong shapes, unsupported d) or TypeError (mixed dtypes) that names the problem."
    )
