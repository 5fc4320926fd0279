"""The staff Gluon backward's submission builder (benchmarks/gluon/staff_submission.py) stays usable.

Its kernels run only on an sm_90 GPU, on a tight device budget, so a broken builder must show here
first: the folder it writes is the reference with one adapter replaced, whose Function is a
module-level ``torch.autograd.Function`` calling the staff forward and backward (torch.compile
refused one calling another Function's static methods), with the variant asked for; an unknown
variant or an existing folder is refused with a message, and nothing there is touched.

Each check runs in a subprocess: the builder imports the reference's ``cs336_systems``, which must
not replace the submission this test process has imported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

KIT = Path(__file__).resolve().parents[2]
BUILD_AND_LOAD = """
import inspect, sys, torch
from pathlib import Path
from benchmarks.gluon.staff_submission import build
out = build(Path(sys.argv[1]), "ws3_alt4_l2_kv")
for name in [m for m in sys.modules if m == "cs336_systems" or m.startswith("cs336_systems.")]:
    del sys.modules[name]  # the builder imported the reference's; the copy must import its own
sys.path.insert(0, str(out))
import adapters
assert adapters.__file__ == str(out / "adapters.py"), adapters.__file__
fn = adapters.get_flashattention_autograd_function_triton()
assert issubclass(fn, torch.autograd.Function), fn
assert fn.__qualname__ == "StaffGluonFlashAttention", fn.__qualname__
assert list(inspect.signature(fn.forward).parameters) == ["ctx", "Q", "K", "V", "is_causal"]
print(inspect.getsource(fn.forward))
"""
REFUSALS = """
import sys
from pathlib import Path
from benchmarks.gluon.staff_submission import build
for out, variant in ((Path(sys.argv[1]) / "a", "no_such_variant"), (Path(sys.argv[1]) / "b", "ws3_alt4_l2_kv")):
    try:
        build(out, variant)
        print("built", out)
    except SystemExit as refusal:
        print("refused:", refusal)
"""


def _python(code: str, folder: Path) -> subprocess.CompletedProcess:
    """Run ``code`` with ``folder`` as its argument, in a fresh interpreter at the kit's root."""
    return subprocess.run([sys.executable, "-c", code, str(folder)], cwd=KIT, capture_output=True, text=True,
                          timeout=120, env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"})


def test_builds_the_reference_with_the_staff_function(tmp_path):
    done = _python(BUILD_AND_LOAD, tmp_path / "staff")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'ws3_alt4_l2_kv'" in done.stdout, done.stdout
    assert (tmp_path / "staff" / "cs336_systems" / "flash_attention_triton.py").read_text() == (
        KIT / "reference" / "cs336_systems" / "flash_attention_triton.py").read_text()


def test_refuses_an_unknown_variant_and_an_existing_folder(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    done = _python(REFUSALS, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused: unknown variant 'no_such_variant'" in done.stdout, done.stdout
    assert f"refused: {tmp_path / 'b'} exists" in done.stdout, done.stdout
    assert not (tmp_path / "a").exists()
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["notes.txt"]
