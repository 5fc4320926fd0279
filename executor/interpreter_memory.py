"""Under Triton's CPU interpreter, a kernel's pointers reach only the tensor each was computed from.

Read by whoever maintains the executor (``server.py``) and the replay process (``replay_server.py``),
the two processes that run a submission's kernels for many tests in turn (both call
``install_if_interpreted`` before any kernel runs), and by the kit's ``conftest.py`` for runs
without ``--isolate``.

Under ``TRITON_INTERPRET=1`` a kernel's ``tl.load``, ``tl.store`` and atomics are done by Triton's C++
helpers (``triton._C.libtriton.interpreter``) on raw host addresses, with no bounds check: an
unmasked access past the end of a tensor (a block pointer loaded or stored without
``boundary_check`` on a length that is not a multiple of the tile, say) reads or writes whatever
lies there in the process's heap. A write there corrupts the process for every later request:
seen with a real submission, whose forward kernel stored rows past the end of O and L for
n_queries=40 with 16-row tiles, and whose next tests in the same executor then failed in
PyTorch's argument parser on ordinary calls (``torch.zeros(Q.shape[:-1], ...)``: "RuntimeError:
unknown parameter type", "TypeError: zeros() takes 1 positional argument but 1 was given"), or
the process aborted in ``malloc``; the replay process too ("new_empty() takes 1 positional
argument but 1 was given"); each test passed alone. A read there returns what earlier requests
left in the heap. Either way a test's verdict depended on the tests before it, and nothing set
back between requests can undo it (``triton_language.py`` restores the language, not the heap).

So, for each launch, every tensor argument's storage gets a region of its own in an address
space that exists only for the interpreter: the kernel sees a pointer into that region (the same
offset, so alignment and pointer arithmetic within a storage are as before; arguments that share
a storage share a region), and each load, store or atomic translates its addresses back to the
storage's real memory, after checking that every address where its mask is true lies inside the
storage its pointer was computed from. An access outside that storage is refused before it
happens, with an ``OutOfBoundsAccess`` that names the kernel, the access and the argument, and
the launch fails: the test that ran the kernel fails, saying why, and no later test sees anything
of it. Regions are ``2**40`` bytes apart and laid out in the order of the arguments, so whether an
access is refused depends on the launch alone, never on where the allocator put the tensors (a
check against the real addresses let an access past the end of Q through when K happened to lie
just after it). Anything inside a tensor's storage stays allowed, views' gaps and neighbours
included, as on a GPU. The message names no GPU or CUDA, which ``harness/flash_cases.py`` would
read as a refusal of CPU tensors.

Only under the interpreter: a compiled launch on a GPU never goes through these helpers, so a
GPU grade runs exactly as before.
"""

from __future__ import annotations

import os

import numpy as np

_SPACING_BITS = 40  # each storage's region: 1 TiB, far beyond any offset a kernel computes
_ORIGIN = 1 << 56  # region 0 starts here: above any real address, so none passes for a kernel's pointer
_HALF = 1 << (_SPACING_BITS - 1)


class OutOfBoundsAccess(IndexError):
    """A kernel's access outside the tensor its pointer came from, refused under the interpreter."""


class _Launch:
    """One interpreted launch: the storages of its tensor arguments, each given a region."""

    def __init__(self, kernel: str, names: dict[int, str]):
        self.kernel = kernel
        self.names = names  # real storage address -> the first argument that holds it
        self.region: dict[int, int] = {}  # real storage address -> region index
        self.bases: list[int] = []
        self.sizes: list[int] = []

    def pointer(self, tensor) -> int:
        """The address the kernel sees for ``tensor`` (a host tensor of this launch)."""
        storage = tensor.untyped_storage()
        start = storage.data_ptr()
        if start not in self.region:
            self.region[start] = len(self.bases)
            self.bases.append(start)
            self.sizes.append(storage.nbytes())
        return _ORIGIN + (self.region[start] << _SPACING_BITS) + (tensor.data_ptr() - start)

    def translate(self, what: str, ptrs, mask, itemsize: int) -> np.ndarray:
        """The real addresses of ``ptrs`` (the kernel's), or OutOfBoundsAccess if an unmasked one
        falls outside its region's storage."""
        signed = np.asarray(ptrs, dtype=np.uint64).view(np.int64) - _ORIGIN
        if signed.size:  # the usual access: every address inside one storage, mask or not (no check of it needed)
            low, high = int(signed.min()), int(signed.max())
            first = (low + _HALF) >> _SPACING_BITS
            start = first << _SPACING_BITS
            if 0 <= first < len(self.bases) and low >= start and high + itemsize <= start + self.sizes[first]:
                return (signed - start).astype(np.uint64) + np.uint64(self.bases[first])
        region = (signed + _HALF) >> _SPACING_BITS
        offset = signed - (region << _SPACING_BITS)
        known = (region >= 0) & (region < len(self.bases))
        index = np.where(known, region, 0)
        sizes = np.asarray(self.sizes, dtype=np.int64)[index] if self.bases else np.zeros_like(index)
        inside = known & (offset >= 0) & (offset + itemsize <= sizes)
        active = np.ones(inside.shape, dtype=bool) if mask is None else np.broadcast_to(
            np.asarray(mask, dtype=bool), inside.shape)
        bad = active & ~inside
        if bad.any():
            raise self._refusal(what, bad, known, region, offset, int(active.sum()))
        bases = np.asarray(self.bases or [0], dtype=np.uint64)[index]
        return np.where(inside, bases + offset.astype(np.uint64), bases).astype(np.uint64)

    def _refusal(self, what, bad, known, region, offset, active: int) -> OutOfBoundsAccess:
        first = int(np.flatnonzero(bad)[0])
        count = f"{int(bad.sum())} of its {active} unmasked elements"
        if bool(known.reshape(-1)[first]):
            index, at = int(region.reshape(-1)[first]), int(offset.reshape(-1)[first])
            name = self.names.get(self.bases[index], "a tensor argument")
            where = f"{-at} bytes before the start" if at < 0 else f"{at - self.sizes[index]} bytes past the end"
            place = f"outside the tensor its pointer came from ({name}: the first such element lies {where} of its storage)"
        else:
            place = "outside every tensor passed to the kernel"
        return OutOfBoundsAccess(
            f"{self.kernel}: a {what} reached memory {place}, at {count}. Triton's interpreter, which "
            f"runs the kernels here, would read or overwrite the memory of the process that runs the later "
            f"tests there, so the access is refused (a compiled kernel's access there is undefined: an "
            f"illegal memory access, or another tensor's data). Mask the access (tl.load/tl.store's mask=, "
            f"or boundary_check= for a block pointer)")


_LAUNCHES: list[_Launch] = []  # the launches running now, innermost last


class _CheckedHelpers:
    """Triton's ``triton._C.libtriton.interpreter`` with the kernel's addresses checked and translated."""

    def __init__(self, helpers) -> None:
        self._helpers = helpers

    def __getattr__(self, name):
        return getattr(self._helpers, name)

    @staticmethod
    def _real(what, ptrs, mask, itemsize):
        return _LAUNCHES[-1].translate(what, ptrs, mask, itemsize) if _LAUNCHES else ptrs

    def load(self, ptrs, mask, other, dtype):
        return self._helpers.load(self._real("load", ptrs, mask, np.dtype(dtype).itemsize), mask, other, dtype)

    def store(self, ptrs, value, mask):
        return self._helpers.store(self._real("store", ptrs, mask, np.asarray(value).dtype.itemsize), value, mask)

    def atomic_rmw(self, op, ptrs, value, mask, sem):
        real = self._real("atomic", ptrs, mask, np.asarray(value).dtype.itemsize)
        return self._helpers.atomic_rmw(op, real, value, mask, sem)

    def atomic_cas(self, ptrs, cmp, value, sem):
        return self._helpers.atomic_cas(self._real("atomic_cas", ptrs, None, np.asarray(value).dtype.itemsize),
                                        cmp, value, sem)


def install() -> None:
    """Check and translate every memory access of interpreted launches in this process (idempotent)."""
    from triton.runtime import interpreter

    if isinstance(interpreter._interpreter, _CheckedHelpers):
        return
    interpreter._interpreter = _CheckedHelpers(interpreter._interpreter)
    implicit_cvt = interpreter._implicit_cvt
    executor = interpreter.GridExecutor
    init_args, call = executor._init_args_hst, executor.__call__

    def _implicit_cvt(arg):
        converted = implicit_cvt(arg)  # tuples and descriptors come back here for their tensors
        if _LAUNCHES and not isinstance(arg, (int, tuple)) and hasattr(arg, "data_ptr"):
            tensor = interpreter._unwrap_tensor(arg)
            converted.handle.data = np.array([_LAUNCHES[-1].pointer(tensor)], dtype=np.uint64)
        return converted

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        names: dict[int, str] = {}
        for name, value in [*zip(self.arg_names, args_hst), *kwargs_hst.items()]:
            value = interpreter._unwrap_tensor(getattr(value, "base", None) if hasattr(value, "block_shape") else value)
            if hasattr(value, "untyped_storage"):
                names.setdefault(value.untyped_storage().data_ptr(), name)
        _LAUNCHES.append(_Launch(getattr(self.fn, "__name__", "a kernel"), names))
        return args_hst, kwargs_hst

    def __call__(self, *args, **kwargs):
        depth = len(_LAUNCHES)
        try:
            return call(self, *args, **kwargs)
        finally:
            del _LAUNCHES[depth:]

    interpreter._implicit_cvt = _implicit_cvt
    executor._init_args_hst, executor.__call__ = _init_args_hst, __call__


def install_if_interpreted() -> bool:
    """``install()`` under ``TRITON_INTERPRET=1`` (where kernels touch host memory directly); True if installed."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    install()
    return True
