"""Grade, on a GPU runner, the attacks whose verdict only a GPU can give, and check each scores 0.

Run from the repo root as root: ``python3 gpu_checks/attacks_gpu.py OUTDIR``. Two submissions:
``triton_is_pytorch`` (the PyTorch Function handed in as the Triton one; on a GPU the tests run
the compiled, bf16 and large cases too) and the leaderboard's ``cheat_flex_attention`` (a
"Triton" Function that is FlexAttention, whose inductor kernels are named ``triton_*``). Each is
graded on flash_forward_triton (and flash_forward_pytorch as a control, which must keep every
point for triton_is_pytorch). Prints one line per submission and exits 1 if an attacked test
earned anything.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT))

from autograder.fixtures.attacks.catalog import materialize  # noqa: E402
from autograder.grade import GradeOptions, grade  # noqa: E402


def main(out: Path) -> int:
    root = Path(tempfile.mkdtemp(prefix="gpu-attacks-"))
    root.chmod(0o755)
    flex = root / "cheat_flex_attention"
    shutil.copytree(KIT / "leaderboard" / "fixtures" / "cheat_flex_attention", flex, symlinks=False)
    cases = [("triton_is_pytorch", materialize("triton_is_pytorch", root / "triton_is_pytorch"),
              ["flash_forward_triton", "flash_forward_pytorch"]),
             ("cheat_flex_attention", flex, ["flash_forward_triton"])]
    failed = False
    for name, submission, problems in cases:
        report = grade(GradeOptions(submission=submission, out=out / name, problems=problems, quiet=True))
        triton = [t for t in report.results["tests"] if " flash_forward_triton [" in t["name"]]
        earned = [t["name"] for t in triton if t["score"] > 0]
        control = [t for t in report.results["tests"] if " flash_forward_pytorch [" in t["name"]]
        lost = [t["name"] for t in control if t["status"] != "passed"]
        verdict = "ok" if not earned and (name != "triton_is_pytorch" or not lost) else "WRONG"
        failed |= verdict != "ok"
        print(f"{name}: {verdict}; flash_forward_triton {len(triton)} tests, earned on {len(earned)}: {earned[:3]}; "
              f"control tests lost: {lost[:3]}; first message: {json.dumps(triton[0]['output'][:300]) if triton else ''}")
    shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
