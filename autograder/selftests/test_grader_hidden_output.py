"""What results.json shows of a failed hidden test: its name and its redacted message, nothing more.

A hidden test's message must give the shape, dtype and size of the error (harness/assertions.py
writes them), and never the hidden seed (the digits of ``seed=``, or the number anywhere),
the secret, the case labels, the hidden tests' docstrings or source lines, or a traceback.
One test grades the attack hidden_seed_in_message (wrong FlashAttention output, so the
harness's own messages name the seed) on four hidden tests with a secret of its own; the others
feed redaction.py and results.py messages that carry everything a leak could.
"""

from __future__ import annotations

import ast
import json
import re
import tempfile
from pathlib import Path

import pytest
import torch

from autograder.manifest import load_manifest
from autograder.redaction import HIDDEN_TESTS, hidden_text, redact_hidden, shown_nodeid
from autograder.results import results_json
from autograder.watchdog import Verdict
from autograder.scoring import GradedTest
from autograder.selftests.gradescope_schema import problems_with

SECRET = "selftest-secret-7d41c0aa9e"
HIDDEN_FILE = "autograder/hidden_tests/test_flash_forward_pytorch_hidden.py"
NODES = [
    f"{HIDDEN_FILE}::test_flash_forward_pytorch_hidden_shapes[3x17x100-d32-float16-causal-sliced]",
    f"{HIDDEN_FILE}::test_flash_forward_pytorch_hidden_repeat_call",
    f"{HIDDEN_FILE}::test_flash_forward_pytorch_hidden_saved_tensors",
    f"{HIDDEN_FILE}::test_flash_forward_pytorch_hidden_large_logits[full]",
]


def _labels(fill: tuple[str, ...] = ("pytorch", "triton", "True", "False")) -> list[str]:
    """Every case label the hidden tests pass to hidden_seed / hidden_case, an f-string's field
    filled with each of ``fill`` (the values its tests are parametrized with, and a few more)."""
    labels = []
    for path in sorted(HIDDEN_TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("hidden_seed", "hidden_case"):
                label = node.args[0]
                if isinstance(label, ast.Constant):
                    labels.append(label.value)
                elif isinstance(label, ast.JoinedStr):
                    prefix = "".join(part.value for part in label.values if isinstance(part, ast.Constant))
                    labels += [prefix + word for word in fill]
    return labels


def _seeds(monkeypatch, secret: str, labels: list[str] | None = None) -> set[int]:
    from autograder.hidden_tests.flash_hidden_checks import hidden_seed

    monkeypatch.setenv("CS336_HIDDEN_SEED", secret)
    return {hidden_seed(label) + offset for label in (labels or _labels()) for offset in (0, 1)}


def _never_shown() -> list[str]:
    """Docstring lines and source lines of the hidden tests that no output may contain."""
    texts = []
    for path in sorted(HIDDEN_TESTS.glob("*.py")):
        source = path.read_text()
        texts += [line.strip() for line in source.splitlines() if len(line.strip()) >= 30]
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)):
                texts += [line.strip() for line in (ast.get_docstring(node) or "").splitlines()
                          if len(line.strip()) >= 20]
    return texts


def _check_clean(text: str, seeds: set[int], secret: str) -> None:
    numbers = {int(number) for number in re.findall(r"\d+", text)}
    assert not numbers & seeds, f"hidden seeds shown: {sorted(numbers & seeds)}"
    assert re.search(r"seed\W{0,3}\d", text, re.IGNORECASE) is None, "a seed's digits are shown"
    assert secret not in text
    from autograder.hidden_tests.secret import DEFAULT_SECRET as _DEFAULT_SECRET

    assert _DEFAULT_SECRET not in text
    leaked = [line for line in _never_shown() if json.dumps(line)[1:-1] in text or line in text]
    assert not leaked, f"hidden test text shown: {leaked[:3]}"
    shown_labels = [label for label in _labels() if re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text)]
    assert not shown_labels, f"case labels shown: {shown_labels}"


def test_a_failed_hidden_test_shows_the_error_but_no_seed_or_hidden_text(monkeypatch):
    from fixtures import materialize
    from fixtures.attacks import get
    from autograder.grade import GradeOptions, grade

    seeds = _seeds(monkeypatch, SECRET)  # the grade's harness reads the secret from this environment
    root = Path(tempfile.mkdtemp(prefix="hidden-output-"))
    root.chmod(0o755)
    submission = materialize(get("hidden_seed_in_message"), root / "submission")
    report = grade(GradeOptions(submission=submission, out=root / "out", tests=NODES, quiet=True, jobs=1))
    written = json.loads((root / "out" / "results.json").read_text())
    assert problems_with(written) == [] and written == report.results
    entries = {entry["name"].rsplit("::", 1)[1]: entry for entry in written["tests"]}
    assert len(entries) == len(NODES) and all(entry["status"] == "failed" for entry in entries.values()), entries
    shapes = entries["test_flash_forward_pytorch_hidden_shapes[3x17x100-d32-float16-causal-sliced]"]["output"]
    for words in ("O mismatch", "shape (3, 17, 32), dtype torch.float16", "max abs error", "seed=<hidden>",
                  "outside tolerance"):
        assert words in shapes, f"{words!r} missing from the hidden test's message:\n{shapes}"
    _check_clean(json.dumps(written), seeds, SECRET)


def _assert_close_message(monkeypatch) -> str:
    """The message harness.assertions.assert_close writes for a hidden case, as the harness would."""
    from autograder.hidden_tests.flash_hidden_checks import hidden_case
    from harness.assertions import assert_close

    monkeypatch.setenv("CS336_HIDDEN_SEED", SECRET)
    case = hidden_case("fp-b", batch=3, n_queries=17, n_keys=100, d=32, dtype=torch.float16, is_causal=True,
                       layout="sliced", device="cpu")
    Q, _, _ = case.make_inputs()
    with pytest.raises(AssertionError) as caught:
        assert_close(Q * 1.5, Q, atol=1e-3, rtol=1e-3, what="O", context=case.repro("FlashAttentionPytorch"))
    return f"AssertionError: {caught.value}"


def test_a_leaking_message_is_redacted_and_keeps_the_error(monkeypatch):
    """A message that carries the secret, seeds, labels, docstrings, source and a traceback
    (what a submission running in the harness's process could have gathered)."""
    from autograder.hidden_tests import flash_hidden_checks, secret
    from autograder.hidden_tests.flash_hidden_checks import hidden_seed

    seeds = _seeds(monkeypatch, SECRET)
    source = (HIDDEN_TESTS / "test_flash_forward_pytorch_hidden.py").read_text()
    module = ast.parse(source)
    leak = "\n".join([
        _assert_close_message(monkeypatch),
        f"LOOT secret={SECRET} default={secret.DEFAULT_SECRET}",
        f"labels: fp-b fp-large-True b-causal-triton; seeds {hidden_seed('fp-b')} and {hidden_seed('fp-saved') + 1}",
        f"docstring: {ast.get_docstring(module)}",
        f"checks: {flash_hidden_checks.__doc__}",
        "Traceback (most recent call last):",
        '  File "/autograder/source/autograder/hidden_tests/test_flash_forward_pytorch_hidden.py", line 43, in test',
        "    check_forward(adapters.get_flashattention_autograd_function_pytorch(), case)",
        "source: " + " ".join(source.splitlines()[25:40]),
    ])
    manifest = load_manifest()
    problem = manifest.by_name["flash_forward_pytorch"]
    nodeid = f"{HIDDEN_FILE}::test_flash_forward_pytorch_hidden_shapes[3x17x100-d32-float16-causal-sliced]"
    test = GradedTest(problem, "hidden", nodeid, Verdict(nodeid, "failed", leak, text=source), max_score=1.0)
    results = results_json([test], manifest, execution_time=1.0, output=f"grade output {SECRET}")
    assert problems_with(results) == []
    _check_clean(json.dumps(results), seeds, SECRET)
    shown = results["tests"][0]["output"]
    for words in ("O mismatch", "shape (3, 17, 32), dtype torch.float16", "max abs error", "outside tolerance",
                  "seed=<hidden>"):
        assert words in shown, f"{words!r} missing:\n{shown}"
    assert results["tests"][0]["name"].endswith("[3x17x100-d32-float16-causal-sliced]")


def test_the_secret_and_the_seeds_leave_visible_outputs_too(monkeypatch):
    from autograder.hidden_tests.flash_hidden_checks import hidden_seed

    monkeypatch.setenv("CS336_HIDDEN_SEED", SECRET)
    manifest = load_manifest()
    problem = manifest.by_name["flash_forward_pytorch"]
    nodeid = "tests/test_flash_forward_pytorch.py::test_x"
    message = f"boom {SECRET} {hidden_seed('fp-a')} seed=7 (a visible seed stays)"
    test = GradedTest(problem, "visible", nodeid, Verdict(nodeid, "failed", message, text="trace"), max_score=1.0)
    output = results_json([test], manifest, execution_time=1.0, output="x")["tests"][0]["output"]
    assert SECRET not in output and str(hidden_seed("fp-a")) not in output and "seed=7" in output


@pytest.mark.parametrize(("param", "kept"), [
    ("3x17x100-d32-float16-causal-sliced", True), ("full", True), ("triton-2x64", True), ("batch_size=0", True),
    ("fp-b", False), ("seed=123", False), ("case <lambda> at 0x7f", False), ("b-causal-pytorch", False),
])
def test_hidden_parametrize_ids_are_shown_only_when_plain(param, kept):
    nodeid = f"{HIDDEN_FILE}::test_flash_forward_pytorch_hidden_shapes[{param}]"
    shown = shown_nodeid(nodeid, "hidden", hidden_text())
    assert (shown == nodeid) is kept, shown
    assert shown_nodeid(nodeid, "visible", hidden_text()) == nodeid


def test_the_grader_knows_every_hidden_seed(monkeypatch):
    """redaction.py recomputes hidden_seed from the hidden tests' source; it must agree with it."""
    constant = [label for label in _labels(fill=()) if label]
    in_use = [f"{kind}-{implementation}" for kind in ("b-causal", "b-sum", "b-repeat", "b-large")
              for implementation in ("pytorch", "triton")]
    in_use += [f"{prefix}-large-{flag}" for prefix in ("fp", "ft") for flag in (True, False)]
    seeds = _seeds(monkeypatch, SECRET, constant + in_use)
    assert len(constant) > 40 and seeds <= hidden_text(secret=SECRET).seeds
    assert SECRET in hidden_text(secret=SECRET).secrets


def test_redaction_leaves_ordinary_messages_alone():
    message = ("AssertionError: dQ mismatch [batch=2, n=17]\n  actual: shape (2, 17, 16), dtype torch.float32\n"
               "  34 of 1048576 elements (6.25%) outside tolerance")
    assert redact_hidden(message, hidden_text()) == message
