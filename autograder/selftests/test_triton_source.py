"""``tests/executor/triton_source.py``: the one reading of which functions are a submission's Triton kernels.

The grader's launch check, its provenance rewrite and the leaderboard's kernel names all read
the source through it, so an alias it missed would cost an honest submission its Triton credit
everywhere, and a look-alike it accepted would let a CUDA kernel of another kind pass for
Triton on the leaderboard.
"""

from __future__ import annotations

from tests.executor.provenance import drop_kernel_stores
from tests.executor.triton_source import kernels_in_directory, kernels_in_sources

ALIASES = b'''
import triton
import triton as t
import triton.language as tl
from triton import jit as J
from numba import cuda
j = triton.jit
jj = j
tt = t


@triton.jit
def plain(x):
    tl.store(x, 1)


@triton.autotune(configs=[], key=[])
@triton.jit(do_not_specialize=["n"])
def tuned(x, n):
    pass


@t.jit
def module_alias(x):
    pass


@tl.jit
def language_alias(x):
    pass


@J
def imported(x):
    pass


@jj
def assigned_twice(x):
    pass


@tt.jit
def assigned_module(x):
    pass


def body(x):
    tl.store(x, 2)


wrapped = triton.jit(body)


@cuda.jit
def numba_kernel(x):
    pass


def jit(f):
    return f


@jit
def own_decorator(x):
    pass
'''


def test_every_alias_of_triton_jit_is_read_and_look_alikes_are_not():
    found = kernels_in_sources({"cs336_systems/k.py": ALIASES, "cs336_systems/broken.py": b"def (:", "notes.txt": b"@triton.jit"})
    assert found == {"cs336_systems/k.py": {"plain", "tuned", "module_alias", "language_alias", "imported",
                                            "assigned_twice", "assigned_module", "body"}}


def test_a_directory_is_read_with_posix_relative_paths(tmp_path):
    (tmp_path / "cs336_systems").mkdir()
    (tmp_path / "cs336_systems" / "k.py").write_bytes(ALIASES)
    (tmp_path / "adapters.py").write_text("import torch\n")
    assert set(kernels_in_directory(tmp_path)) == {"cs336_systems/k.py"}


def test_the_provenance_rewrite_removes_the_stores_of_exactly_those_kernels():
    source = ALIASES.decode() + "\n\ndef host(x):\n    x.store(3)\n"
    rewritten, dropped = drop_kernel_stores(source)
    assert dropped == 2  # plain's and body's (bound by triton.jit(body)); the host function keeps its own
    assert "tl.store(x, 1)" not in rewritten and "tl.store(x, 2)" not in rewritten
    assert "x.store(3)" in rewritten
