"""autograder/tools/cs336_checkout.py: a checkout of CS336's own repository becomes a kit submission.

Staff only. The fake checkouts here use the layouts seen in fifteen public ones
(records/2026-12-03-h200-real-submissions/): getters that import inside their body, getters that
rely on the adapters' top-level imports (one of which the kit cannot satisfy), a star import,
and CS336's docstrings.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder.tools.cs336_checkout import FLASH_GETTERS, convert, main
from fixtures.mutants import BASE_DIR

KIT = Path(__file__).resolve().parents[2]

MODULE = '''
import torch


class PyFlash(torch.autograd.Function):
    pass


class TritonFlash(torch.autograd.Function):
    pass
'''

ADAPTERS = {
    "inside": '''
        from __future__ import annotations
        import torch


        def get_flashattention_autograd_function_pytorch() -> type:
            """CS336's docstring."""
            from cs336_systems.deep.flash import PyFlash
            return PyFlash


        def get_flashattention_autograd_function_triton() -> type:
            """CS336's docstring."""
            from cs336_systems.deep.flash import TritonFlash
            return TritonFlash
    ''',
    "top_level": '''
        from __future__ import annotations
        from typing import Type
        import torch
        from cs336_basics.model import BasicsModel  # not in the kit: must not break the getters
        from cs336_systems.deep.flash import PyFlash, TritonFlash
        from cs336_systems import deep


        def get_flashattention_autograd_function_pytorch() -> Type:
            return PyFlash


        def get_flashattention_autograd_function_triton() -> Type:
            return deep.flash.TritonFlash


        def get_ddp(module):
            return BasicsModel(module)
    ''',
    "star": '''
        import torch
        from cs336_systems.deep.flash import *


        def get_flashattention_autograd_function_pytorch() -> type:
            """CS336's docstring."""
            return PyFlash


        def get_flashattention_autograd_function_triton() -> type:
            cls = TritonFlash
            return cls
    ''',
}


def _checkout(root: Path, adapters: str) -> Path:
    (root / "cs336_systems" / "deep").mkdir(parents=True)
    (root / "cs336_systems" / "__init__.py").write_text(
        'import importlib.metadata\n\n__version__ = importlib.metadata.version("cs336-systems")\n')
    (root / "cs336_systems" / "deep" / "__init__.py").write_text("")
    (root / "cs336_systems" / "deep" / "flash.py").write_text(MODULE)
    (root / "tests").mkdir()
    (root / "tests" / "adapters.py").write_text(textwrap.dedent(adapters))
    return root


def _getters(submission: Path) -> list[str]:
    """The class names the submission's two getters return, asked in a fresh process."""
    code = ("import sys; from pathlib import Path; from harness.submission import load_adapters; "
            f"a = load_adapters(Path(sys.argv[1])); print([getattr(a, n)().__name__ for n in {FLASH_GETTERS!r}])")
    done = subprocess.run([sys.executable, "-c", code, str(submission)], cwd=KIT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return eval(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("layout", sorted(ADAPTERS))
def test_a_cs336_checkout_becomes_a_submission_whose_flash_getters_return_its_classes(tmp_path, layout):
    checkout = _checkout(tmp_path / "checkout", ADAPTERS[layout])
    out = tmp_path / "submission"
    missing, outside = convert(checkout, out)
    assert (missing, outside) == ([], [])
    assert _getters(out) == ["PyFlash", "TritonFlash"]
    source = (out / "adapters.py").read_text()
    assert "cs336_basics" not in source and "import *" not in source
    assert "CS336's docstring" not in source  # the kit's docstrings are kept
    assert (out / "cs336_systems" / "model.py").is_file()  # the kit's provided files stay
    assert (out / "cs336_systems" / "deep" / "flash.py").read_text() == MODULE


def test_a_converted_checkout_with_cs336s_own_init_passes_an_isolated_test(tmp_path):
    """CS336's ``cs336_systems/__init__.py`` reads ``importlib.metadata.version("cs336-systems")``.
    In the isolated executor that must work (setup.sh's editable install provides the metadata),
    or every test of such a submission fails at import: a real implementation, converted, passes."""
    checkout = _checkout(tmp_path / "checkout", ADAPTERS["inside"])
    implementation = (BASE_DIR / "cs336_systems" / "flash_attention_pytorch.py").read_text()
    (checkout / "cs336_systems" / "deep" / "flash.py").write_text(
        implementation + "\n\nPyFlash = FlashAttentionPytorch\nTritonFlash = FlashAttentionPytorch\n")
    convert(checkout, tmp_path / "submission")
    environment = {**os.environ, "PYTHONPATH": str(KIT), "TRITON_INTERPRET": "1"}
    environment.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--isolate",
                           "--executor-dir", str(tmp_path / "executor"), "--submission", str(tmp_path / "submission"),
                           "tests/test_flash_forward_pytorch.py::test_flash_forward_pytorch_cs336_shape[full]"],
                          cwd=KIT, env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


def test_what_cannot_be_converted_is_named(tmp_path, capsys):
    checkout = _checkout(tmp_path / "checkout", '''
        from flash_forward import impl


        def get_flashattention_autograd_function_pytorch() -> type:
            return impl.PyFlash
    ''')
    (checkout / "flash_forward").mkdir()
    assert main([str(checkout), str(tmp_path / "out")]) == 0
    said = capsys.readouterr().out
    assert "does not define get_flashattention_autograd_function_triton" in said
    assert "its adapters import flash_forward, which is outside cs336_systems/" in said

    assert main([str(checkout), str(tmp_path / "out")]) == 2  # never overwrites
    assert "already exists" in capsys.readouterr().err
    (checkout / "tests" / "adapters.py").write_text("def get_flashattention_autograd_function_pytorch(:\n")
    assert main([str(checkout), str(tmp_path / "out2")]) == 2
    assert "does not parse" in capsys.readouterr().err
    (checkout / "tests" / "adapters.py").unlink()
    assert main([str(checkout), str(tmp_path / "out2")]) == 2
    assert "has no tests/adapters.py" in capsys.readouterr().err
    assert not (tmp_path / "out2").exists()
