"""Grade, on a GPU runner, the attacks whose verdict only a GPU can give, and check each scores 0.

Run from the repo root as root: ``python3 gpu_checks/attacks_gpu.py OUTDIR [NAME ...]``. The catalog's
attacks on Triton and torch.compile credit (``GPU_ATTACKS``: on a GPU the tests run the compiled,
bf16 and large cases too) and the leaderboard's ``cheat_flex_attention`` (a "Triton" Function that
is FlexAttention, whose inductor kernels are named ``triton_*``). Each is graded on the problems
its FIXTURE.toml names; its attacked tests must earn nothing and its control problems keep every
point. Prints one line per submission and exits 1 if a verdict is wrong.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import sys
import tempfile
from pathlib import Path

KIT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(KIT))

from fixtures import materialize  # noqa: E402
from autograder.grade import GradeOptions, grade  # noqa: E402


GPU_ATTACKS = ("triton_do_nothing_kernel", "forged_launch_log", "forged_probe", "triton_is_pytorch", "triton_sentinel",
               "triton_numpy_recognises_rerun", "triton_backward_pytorch", "autotune_tally")


def _is_attacked(name: str, attacked: list[str], patterns: list[str]) -> bool:
    """Whether the test ``name`` is one the attack targets: of an attacked problem, or matching a pattern."""
    return any(f" {problem} [" in name for problem in attacked) or any(fnmatch.fnmatch(name, p) for p in patterns)


def _verdict(results: dict, attacked: list[str], patterns: list[str], control: list[str]) -> tuple[list, list]:
    """(tests of attacked problems or patterns that earned points, control tests that did not pass)."""
    earned, lost = [], []
    for test in results["tests"]:
        name = test["name"]
        if _is_attacked(name, attacked, patterns) and test["score"] > 0:
            earned.append(name)
        if any(f" {problem} [" in name for problem in control) and test["status"] != "passed":
            lost.append(name)
    return earned, lost


def main(out: Path, only: list[str] | None = None) -> int:
    """Grade each attack (only those named in ``only``, when given) and print its verdict."""
    from fixtures.attacks import ATTACKS

    root = Path(tempfile.mkdtemp(prefix="gpu-attacks-"))
    root.chmod(0o755)
    from fixtures import leaderboard

    flex = materialize(leaderboard.get("cheat_flex_attention"), root / "cheat_flex_attention")
    by_name = {attack.name: attack for attack in ATTACKS}
    cases = [(name, materialize(by_name[name], root / name), list(by_name[name].verdict.attacked), list(by_name[name].verdict.attacked_tests),
              list(by_name[name].verdict.partly_attacked), list(by_name[name].verdict.control)) for name in GPU_ATTACKS]
    cases.append(("cheat_flex_attention", flex, ["flash_forward_triton"], [], [], []))
    cases = [case for case in cases if not only or case[0] in only]
    failed = False
    for name, submission, attacked, patterns, partly, control in cases:
        report = grade(GradeOptions(submission=submission, out=out / name, problems=attacked + partly + control,
                                    quiet=True))
        earned, lost = _verdict(report.results, attacked, patterns, control)
        graded = [t for t in report.results["tests"] if _is_attacked(t["name"], attacked, patterns)]
        verdict = "ok" if not earned and not lost else "WRONG"
        failed |= verdict != "ok"
        print(f"{name}: {verdict}; {len(graded)} attacked tests, earned on {len(earned)}: {earned[:3]}; "
              f"control tests lost: {lost[:3]}; first message: {json.dumps(graded[0]['output'][:300]) if graded else ''}")
    shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
