"""``harness/triton_source.py``: the one reading of which functions are a submission's Triton kernels.

The grader's launch check, its provenance rewrite and the leaderboard's kernel names all read
the source through it, so an alias it missed would cost an honest submission its Triton credit
everywhere, and a look-alike it accepted would let a CUDA kernel of another kind pass for
Triton on the leaderboard.
"""

from __future__ import annotations

from harness import kernels_only
from harness.triton_source import kernels_in_directory, kernels_in_sources

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


def test_the_kernels_only_module_keeps_kernels_and_constants_and_nothing_else():
    source = (
        "import os\nimport torch\nimport triton\nimport triton.language as tl\n"
        "SCALE = tl.constexpr(0.5)\nPATH = os.getcwd()\n"
        "@triton.autotune(configs=[triton.Config({'B': b}, num_warps=w) for b in (16, 32) for w in (4, 8)], key=['n'])\n"
        "@triton.jit\ndef kernel(x, n, B: tl.constexpr):\n    tl.store(x + tl.arange(0, B), SCALE)\n"
        "def host(x):\n    return torch.ones(3)\n"
    )
    built = kernels_only.build({"cs336_systems/k.py": source})
    text = built.modules["cs336_systems/k.py"]
    assert "def kernel" in text and "SCALE" in text
    assert "def host" not in text and "os.getcwd" not in text and "import torch" not in text and "autotune" not in text
    assert built.autotune[("cs336_systems/k.py", "kernel")] == [
        {"kwargs": {"B": b}, "num_warps": w} for b in (16, 32) for w in (4, 8)]
    assert built.config_count() == 4


def test_a_kernel_body_that_reaches_past_triton_is_left_out_with_its_reason():
    bodies = {
        "numpy": "    y = tl.load(x).handle.data\n",
        "dunder": "    y = x.__class__\n",
        "import": "    import os\n",
        "builtin": "    y = open('f')\n",
    }
    for label, body in bodies.items():
        source = f"import triton\nimport triton.language as tl\n@triton.jit\ndef kernel(x):\n{body}"
        built = kernels_only.build({"cs336_systems/k.py": source})
        assert ("cs336_systems/k.py", "kernel") in built.problems, label
        assert ("cs336_systems/k.py", "kernel") not in built.kernels, label
