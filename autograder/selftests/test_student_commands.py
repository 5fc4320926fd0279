"""Every command a student is shown runs as written from a fresh shell (no activated venv).

The student's convention is the kit's virtual environment by path: ``.venv/bin/pytest`` and
``.venv/bin/python -m ...``, run at the root of the checkout. This checks the two documents a
student reads (handout/README.md and the student README, autograder/student_readme.md) name no
bare ``pytest`` or ``python``, and that the rerun line a FlashAttention failure prints runs in a
shell with an empty environment and tests the submission the tests tested (``CS336_SUBMISSION``).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch

from fixtures import materialize
from fixtures.mutants import get
from harness.flash_cases import FlashCase

KIT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("handout/README.md", "autograder/student_readme.md")
# a bare interpreter or pytest where a command starts: after a space, ;, |, &, ( or an env assignment
BARE = re.compile(r"(?:^|[\s;|&(])(pytest|python3?)(?=\s|$)")


def code_spans(text: str) -> list[str]:
    """Every fenced block's lines and every inline `code` span of a Markdown text."""
    spans, fenced = [], False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            spans.append(line.split("#", 1)[0] if line.lstrip().startswith(("bash", ".venv", "TRITON", "HYPO", "CS336"))
                         else line)
    spans += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))]
    return spans


@pytest.mark.parametrize("document", DOCUMENTS)
def test_documented_commands_name_the_venv(document):
    bare = [span for span in code_spans((KIT / document).read_text()) if BARE.search(span)
            and not span.lstrip().startswith(("import ", "from "))]
    assert not bare, (f"{document}: these commands assume an activated venv; write .venv/bin/pytest or "
                      f".venv/bin/python (run from the checkout's root) so they work from a fresh shell: {bare}")


def _fresh_shell(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp", "bash", "-c", command], cwd=KIT,
                          capture_output=True, text=True, timeout=600)


def test_the_rerun_line_runs_from_a_fresh_shell_and_tests_the_chosen_submission(tmp_path):
    case = FlashCase(batch=1, n_queries=9, n_keys=7, d=16, dtype=torch.float32, is_causal=True, layout="contiguous",
                     seed=4, device="cpu")
    command = case.command("pytorch", "forward")
    assert BARE.search(command.replace(".venv/bin/python", "")) is None, command
    reference = _fresh_shell(f"export CS336_SUBMISSION={KIT / 'reference'}; {command}")
    assert reference.returncode == 0 and reference.stdout.strip().endswith("passed"), reference.stdout + reference.stderr
    mutant = materialize(get("scale_applied_twice"), tmp_path / "mutant" / "scale_applied_twice")
    broken = _fresh_shell(f"export CS336_SUBMISSION={mutant}; {command}")
    assert broken.returncode == 1 and "failed" in broken.stdout, (
        "flash_repro must test $CS336_SUBMISSION, as the tests do: " + broken.stdout[-1500:] + broken.stderr[-1500:])
    chosen = _fresh_shell(f"{command} --submission {mutant}")
    assert chosen.returncode == 1 and "failed" in chosen.stdout, chosen.stdout[-1500:] + chosen.stderr[-1500:]
