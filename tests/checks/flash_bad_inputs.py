"""Malformed FlashAttention-2 calls that must raise, and the check that they do.

Read by the visible forward tests (PyTorch and Triton). The contract: Q (batch, n_queries, d),
K and V (batch, n_keys, d), one dtype, d in {16, 32, 64, 128}. Anything else must raise
ValueError or TypeError naming the problem (RuntimeError is accepted too, since PyTorch raises
it for some mismatches); returning a result, or raising anything else, fails. A stub's
NotImplementedError passes through unchanged, so the failure names the file to start from.

An error of the right type is not enough; it must be the refusal the input deserves:

- its message names the offending argument or value: one of the ``BadInput``'s ``keywords``
  (``Q``, ``shape``, ``d``, ``dtype``, ``batch``...), matched as a word, ignoring case. The
  provided checker's messages (cs336_systems/flash_attention_inputs.py) all do. An unrelated
  error that happens to have the right type ("requires CUDA tensors", a failed autotune, an
  index error deep in a kernel) earns nothing;
- it is the submission's own check (``own_check``): the statement that raised it is a ``raise``
  in the submission's own files (``cs336_systems/``, ``adapters.py``), not an operation of torch
  that failed on the malformed tensors ("shapes cannot be multiplied", "expected scalar type",
  "dimension out of range" are torch's words, raised from inside a matmul, not a check), and it
  was not raised while handling another error (catching torch's error and raising a new one
  is not a check either). Judged from the traceback that comes back with the error;
- for the Triton Function (under ``--isolate``, where the executor records launches), it comes
  before any of the submission's ``@triton.jit`` kernels is launched: check, then launch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import re
import traceback

import pytest
import torch

from harness import gpus

DEVICE = "cuda" if gpus.count() else "cpu"
ACCEPTED = (ValueError, TypeError, RuntimeError)


def _randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(sum(shape))
    return torch.randn(*shape, generator=generator).to(device=DEVICE, dtype=dtype)


@dataclass(frozen=True)
class BadInput:
    """One malformed call: ``make()`` returns (Q, K, V); ``what`` says what is wrong with it;
    the refusal's message must contain one of ``keywords`` as a word (any case; see ``names_problem``)."""

    name: str
    what: str
    make: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    keywords: tuple[str, ...] = ()


_SHAPE_WORDS = ("shape", "shapes", "rank", "dim", "dims", "dimension", "dimensions", "ndim", "3-d", "3d")
_HEAD_DIM_WORDS = ("d", "head dim", "head_dim", "headdim", "head dimension", "head size", "dim", "dimension",
                   "last dim", "embedding", "shape")


def names_problem(message: str, keywords: tuple[str, ...]) -> bool:
    """True when ``message`` contains one of ``keywords`` as a whole word (or words), ignoring case.

    "Q" matches "expected Q of shape" and "Q.shape" but not "requires"; "dim" matches "dim" but
    not "dimensionless" (the keywords list the plural and long forms they accept).
    """
    for keyword in keywords:
        if re.search(rf"(?<![A-Za-z0-9_]){re.escape(keyword)}(?![A-Za-z0-9_])", message, re.IGNORECASE):
            return True
    return False


BAD_INPUTS = (
    BadInput("Q_rank2", "Q is (n_queries, d), without a batch dimension",
             lambda: (_randn(32, 16), _randn(1, 32, 16), _randn(1, 32, 16)),
             ("Q", "query", "queries", "batch", *_SHAPE_WORDS)),
    BadInput("K_rank2", "K is (n_keys, d), without a batch dimension",
             lambda: (_randn(1, 32, 16), _randn(32, 16), _randn(1, 32, 16)),
             ("K", "key", "keys", "batch", *_SHAPE_WORDS)),
    BadInput("all_rank4", "Q, K, V are (batch, heads, seq, d): heads were not folded into batch",
             lambda: (_randn(1, 2, 32, 16), _randn(1, 2, 32, 16), _randn(1, 2, 32, 16)),
             ("Q", "K", "V", "batch", "head", "heads", *_SHAPE_WORDS)),
    BadInput("d_mismatch", "Q has d=16 but K and V have d=32",
             lambda: (_randn(2, 32, 16), _randn(2, 32, 32), _randn(2, 32, 32)),
             ("Q", "K", "V", *_HEAD_DIM_WORDS)),
    BadInput("V_d_mismatch", "V has d=32 but Q and K have d=16",
             lambda: (_randn(2, 32, 16), _randn(2, 32, 16), _randn(2, 32, 32)),
             ("V", "value", "values", *_HEAD_DIM_WORDS)),
    BadInput("batch_mismatch", "Q has batch 2 but K and V have batch 3",
             lambda: (_randn(2, 32, 16), _randn(3, 32, 16), _randn(3, 32, 16)),
             ("batch", "batch size", "Q", "K", "V", *_SHAPE_WORDS)),
    BadInput("KV_length_mismatch", "K has 32 keys but V has 48",
             lambda: (_randn(2, 32, 16), _randn(2, 32, 16), _randn(2, 48, 16)),
             ("K", "V", "key", "keys", "n_keys", "value", "values", "length", "seq", "sequence", *_SHAPE_WORDS)),
    BadInput("d24_unsupported", "d=24 is not one of 16, 32, 64, 128",
             lambda: (_randn(1, 32, 24), _randn(1, 32, 24), _randn(1, 32, 24)),
             ("24", *_HEAD_DIM_WORDS)),
    BadInput("d256_unsupported", "d=256 is not one of 16, 32, 64, 128",
             lambda: (_randn(1, 16, 256), _randn(1, 16, 256), _randn(1, 16, 256)),
             ("256", *_HEAD_DIM_WORDS)),
    BadInput("dtype_mismatch", "Q is float32 but K and V are float16",
             lambda: (_randn(1, 32, 16), _randn(1, 32, 16, dtype=torch.float16), _randn(1, 32, 16, dtype=torch.float16)),
             ("dtype", "dtypes", "type", "types", "float16", "float32", "half", "precision")),
)


_FILE_LINE = re.compile(r'^\s*File "(?P<path>[^"]*)", line (?P<line>\d+)')
_OWN_FILE = re.compile(r"(?:^|/)(?:cs336_systems/[^/]+(?:/[^/]+)*\.py|adapters\.py)$")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_NOTE = "raised in the submission's process"


def _raising_frame(error: BaseException) -> tuple[str, str, bool] | None:
    """(file, source line, raised while handling another error) of the statement that raised
    ``error``: from the submission's traceback that an error from the executor carries as a note,
    else from the error's own traceback (the submission imported in this process). None if unknown."""
    for note in getattr(error, "__notes__", ()) or ():
        if _NOTE not in note:
            continue
        lines = note.splitlines()
        chained = any(marker in note for marker in _CHAINED)
        last = None
        for index, line in enumerate(lines):
            match = _FILE_LINE.match(line)
            if match:
                following = lines[index + 1].strip() if index + 1 < len(lines) else ""
                last = (match["path"], following if not _FILE_LINE.match(following) else "")
        return None if last is None else (*last, chained)
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return None
    chained = error.__cause__ is not None or (error.__context__ is not None and not error.__suppress_context__)
    return frames[-1].filename, (frames[-1].line or "").strip(), chained


def own_check(error: BaseException) -> str | None:
    """None when ``error`` was raised by a check the submission wrote: a ``raise`` statement in its
    own files, not while handling another error. Otherwise, why it does not count."""
    frame = _raising_frame(error)
    if frame is None:
        return "where it was raised is unknown (no traceback came back with it)"
    path, source, chained = frame
    shown = path.rsplit("/submission/", 1)[-1]
    if not _OWN_FILE.search(path.replace("\\", "/")):
        return (f"it was raised inside {shown}, not by a check in your own files: the malformed tensors "
                "reached an operation that failed on them")
    if not source.startswith("raise"):
        return (f"it was raised by `{source[:120]}` ({shown}), an operation that failed on the malformed "
                "tensors, not by a `raise` of your own check")
    if chained:
        return (f"it was raised while handling another error ({shown}): the malformed tensors reached an "
                "operation first, and its error was caught and replaced")
    return None


def _launches(function) -> list | None:
    """The kernel launches the executor holding ``function`` recorded so far in this test, or None
    when ``function`` runs in this process (plain ``pytest`` without ``--isolate``: not recorded)."""
    from harness.proxies import recorded_launches

    return recorded_launches(function)


def assert_rejects(function: type[torch.autograd.Function], bad: BadInput, *, triton: bool = False) -> None:
    """Fail unless ``function.apply`` works on a valid input and refuses ``bad`` the right way.

    The valid call comes first, so that a Function that raises for every input (or, for the
    Triton Function, one that runs no Triton kernel of its own) earns nothing for its refusals.
    The refusal must be ValueError/TypeError/RuntimeError whose message names the problem (one
    of ``bad.keywords``), and with ``triton`` it must come before any kernel of the submission
    is launched (checked where launches are recorded, under ``--isolate``).
    """
    from harness.flash_cases import explain_device_refusal

    valid = (_randn(1, 16, 16), _randn(1, 16, 16), _randn(1, 16, 16))
    try:
        function.apply(*valid, False)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001
        explain_device_refusal(error, DEVICE, f"{function.__name__}.apply(Q, K, V, False) with valid inputs",
                               triton=triton)
        pytest.fail(
            f"{function.__name__}.apply(Q, K, V, False) with valid float32 inputs of shape (1, 16, 16) raised "
            f"{type(error).__name__}: {error}. Input checks count only once valid inputs work; fix that first."
        )
    Q, K, V = bad.make()
    call = (
        f"{function.__name__}.apply(Q, K, V, False) with Q {tuple(Q.shape)} {Q.dtype}, "
        f"K {tuple(K.shape)} {K.dtype}, V {tuple(V.shape)} {V.dtype}"
    )
    before = _launches(function)
    try:
        result = function.apply(Q, K, V, False)
    except NotImplementedError:
        raise  # a stub: let its message say which file and handout section to start from
    except ACCEPTED as error:
        message = str(error)
        why_not = own_check(error)
        if why_not is not None:
            pytest.fail(
                f"{call} raised {type(error).__name__}: {message[:300]}\nThat is not your own input check: "
                f"{why_not}. Check the shapes, d and dtypes first thing in forward and raise ValueError or "
                f"TypeError that names the problem ({bad.what}); "
                "cs336_systems/flash_attention_inputs.py's check_flash_attention_inputs does."
            )
        if not names_problem(message, bad.keywords):
            pytest.fail(
                f"{call} raised {type(error).__name__}: {message[:500]}\nThat error does not name the problem "
                f"({bad.what}): its message mentions none of {', '.join(repr(k) for k in bad.keywords[:8])}. "
                "An unrelated error of the right type earns nothing. Check the inputs first thing in forward "
                "(cs336_systems/flash_attention_inputs.py does) and say which argument or value is wrong."
            )
        after = _launches(function)
        if triton and before is not None and after is not None and len(after) > len(before):
            kernels = ", ".join(sorted({name for name, _ in after[len(before):]}))
            pytest.fail(
                f"{call} raised {type(error).__name__} ({message[:300]}), but only after launching the kernel(s) "
                f"{kernels}. Check the inputs before launching anything: a malformed call must never reach a "
                f"kernel ({bad.what})."
            )
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
