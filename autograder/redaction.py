"""What a student may see of the hidden tests: nothing of their text, seeds or secret.

Read by ``results.py`` and ``grade.py`` (every name and message they print goes through here) and by
staff changing what a hidden test shows. What a student sees of a hidden test
(autograder/hidden_tests/) is its name and its one failure message, redacted (``redact_hidden``):
no traceback or source text (the ``text`` field is dropped), every ``seed=<digits>`` shown as
``seed=<hidden>``, and no secret, seed, case label, docstring or source line of the hidden tests,
as gathered from their files by ``hidden_text``. The message keeps what the assertion helpers
(harness/assertions.py) say about the error: what was compared, its shape, dtype and strides, the
tolerance, the largest errors and how many elements failed. A parametrize id is shown only when
it is a plain shape/dtype style word (``2x17x100-d32-float16-causal-sliced``, ``triton``). The
secret values and the hidden seeds are also taken out of every visible test's output and the
grade's output (``redact_secrets``). Redaction is the second line of defence: hidden tests run
in the harness, and the executor that runs student code never sees their text or the secret
(see autograder/README.md).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autograder.scoring import GradedTest

HIDDEN_TESTS = Path(__file__).resolve().parent / "hidden_tests"
SEED_ENV = "CS336_HIDDEN_SEED"  # read by autograder/hidden_tests/flash_hidden_checks.py
HIDDEN = "<hidden>"
_MIN_SECRET_CHARS = 6  # a shorter secret would be redacted out of ordinary numbers and words
_MIN_DOC_LINE_CHARS = 16  # docstring lines at least this long are never shown
_MIN_SOURCE_LINE_CHARS = 24  # nor are source lines at least this long
_SEED_VALUE = re.compile(r"(seed\W{0,3})(\d+)", re.IGNORECASE)  # seed=12, seed: 12, "seed": 12, manual_seed(12)
_TRACEBACK = re.compile(r'^\s*(File ".*", line \d+|Traceback \(most recent call last\)|\S+\.py:\d+(:|$)|>)')
# A frame in the submission's own files: kept (shortened to the path inside the submission), with
# its source line, so that a student can find where their code failed. Every other frame goes.
_STUDENT_FRAME = re.compile(r'^\s*File "(?:[^"]*/)?(?P<path>cs336_systems/[^"]+\.py|adapters\.py)", line (?P<line>\d+)'
                            r'(?P<rest>, in [A-Za-z_][A-Za-z0-9_<>.]*)?\s*$')
_STUDENT_FRAME_SHORT = re.compile(r'^\s*(?:[^\s"]*/)?(?P<path>cs336_systems/\S+\.py|adapters\.py):(?P<line>\d+)(?::|$)')
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.=+-]{1,80}")


@dataclass(frozen=True)
class HiddenText:
    """What no output may show of the hidden tests (see ``hidden_text``)."""

    secrets: tuple[str, ...] = ()  # secret values: $CS336_HIDDEN_SEED and the default in the source
    seeds: frozenset[int] = frozenset()  # what hidden_seed(label) gives each label found, and +1, +2
    labels: tuple[re.Pattern, ...] = ()  # the case labels passed to hidden_seed / hidden_case
    fragments: tuple[str, ...] = ()  # docstring and source lines, whitespace-collapsed, lower case


def _hidden_seed(secret: str, label: str) -> int:
    """autograder/hidden_tests/flash_hidden_checks.py's hidden_seed, for a given secret."""
    digest = hashlib.sha256(f"{secret}/{label}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _call_name(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")


def _label_forms(node: ast.expr, words: list[str]) -> tuple[re.Pattern | None, list[str]]:
    """A label argument as a pattern and its possible values (an f-string's fields are filled
    with ``words``, the short constants of its module)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        pieces = [[node.value]]
    elif isinstance(node, ast.JoinedStr):
        pieces = [[part.value] if isinstance(part, ast.Constant) else words for part in node.values]
    else:
        return None, []
    pattern = "".join(re.escape(piece[0]) if piece is not words else r"[\w.+-]*" for piece in pieces)
    values = ["".join(combo) for combo in itertools.islice(itertools.product(*pieces), 10_000)]
    return re.compile(rf"(?<![\w-]){pattern}(?![\w-])"), values


def hidden_text(folder: Path = HIDDEN_TESTS, secret: str | None = None) -> HiddenText:
    """Gather from the hidden tests' files (``*.py`` in ``folder``) what must never be shown.

    ``secret`` is the seed secret in use (default: ``$CS336_HIDDEN_SEED``, else the default that
    the source assigns to a ``*SECRET*`` name). Files that cannot be read or parsed add nothing.
    Read once per folder and secret.
    """
    return _hidden_text(Path(folder), secret if secret is not None else os.environ.get(SEED_ENV, ""))


@functools.lru_cache(maxsize=8)
def _hidden_text(folder: Path, secret: str) -> HiddenText:
    defaults, label_nodes, fragments = [], [], set()
    for path in sorted(Path(folder).glob("*.py")):
        try:
            source = path.read_text()
            tree = ast.parse(source)
        except (OSError, SyntaxError, ValueError):
            continue
        for line in source.splitlines():
            line = " ".join(line.split())
            if len(line) >= _MIN_SOURCE_LINE_CHARS:
                fragments.add(line.lower())
        words = sorted({str(constant.value) for node in ast.walk(tree) if isinstance(node, (ast.Tuple, ast.List))
                        for constant in node.elts if isinstance(constant, ast.Constant)
                        and isinstance(constant.value, (str, bool, int)) and len(str(constant.value)) <= 24})
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                for line in (ast.get_docstring(node) or "").splitlines():
                    if len(line.strip()) >= _MIN_DOC_LINE_CHARS:
                        fragments.add(" ".join(line.split()).lower())
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                names = [target.id for target in node.targets if isinstance(target, ast.Name)]
                if any("SECRET" in name.upper() for name in names) and isinstance(node.value.value, str):
                    defaults.append(node.value.value)
            elif isinstance(node, ast.Call) and _call_name(node) in ("hidden_seed", "hidden_case") and node.args:
                label_nodes.append(_label_forms(node.args[0], words))
    in_use = secret or (defaults[0] if defaults else "")
    secrets = {value for value in (secret, *defaults) if value and len(value) >= _MIN_SECRET_CHARS}
    labels, seeds = [], set()
    for pattern, values in label_nodes:
        if pattern is not None:
            labels.append(pattern)
        for value in values if in_use else ():
            seed = _hidden_seed(in_use, value)
            seeds.update((seed, seed + 1, seed + 2))
    return HiddenText(tuple(sorted(secrets, key=len, reverse=True)), frozenset(seeds),
                      tuple({pattern.pattern: pattern for pattern in labels}.values()),
                      tuple(sorted(fragments, key=len, reverse=True)))


def redact_secrets(text: str, hidden: HiddenText) -> str:
    """``text`` with every secret value and every hidden seed replaced by ``<hidden>``."""
    for secret in hidden.secrets:
        text = text.replace(secret, HIDDEN)
    if hidden.seeds:
        text = re.sub(r"(?<!\d)\d{4,10}(?!\d)",
                      lambda match: HIDDEN if int(match.group()) in hidden.seeds else match.group(), text)
    return text


def redact_hidden(message: str, hidden: HiddenText) -> str:
    """A hidden test's failure message as a student may see it (see the module docstring).

    Traceback lines go, except the frames in the submission's own files (``cs336_systems/...``,
    ``adapters.py``: shown as that path, line and function, with the line of their code); then the secrets and seeds, any docstring or source line of the hidden
    tests (matched ignoring case and spacing), the case labels and the digits after ``seed``
    are replaced by ``<hidden>``. Everything else is kept, so the assertion helpers' account of
    the error (shape, dtype, tolerance, largest errors, count of bad elements) survives.
    """
    lines, after_file, after_student = [], False, False
    for line in message.splitlines():
        is_file = bool(re.match(r'^\s*File ".*", line \d+', line))
        student = _STUDENT_FRAME.match(line)
        short = _STUDENT_FRAME_SHORT.match(line)
        if student:
            lines.append(f'  File "{student["path"]}", line {student["line"]}{student["rest"] or ""}')
            after_file, after_student = False, True
            continue
        if short:
            lines.append(f'  {short["path"]}:{short["line"]}')
            after_file = after_student = False
            continue
        if after_student and line.startswith("    ") and not _TRACEBACK.match(line):
            lines.append("    " + line.strip())  # the submission's own source line
            after_student = False
            continue
        after_student = False
        if _TRACEBACK.match(line) or (after_file and line.startswith("    ")):
            after_file = is_file
            continue
        after_file = False
        lines.append(line)
    text = redact_secrets("\n".join(lines), hidden)
    for fragment in hidden.fragments:
        if fragment in " ".join(text.split()).lower():
            pattern = r"\s+".join(re.escape(word) for word in fragment.split())
            text = re.sub(pattern, HIDDEN, text, flags=re.IGNORECASE)
    for label in hidden.labels:
        text = label.sub(HIDDEN, text)
    return _SEED_VALUE.sub(lambda match: match.group(1) + HIDDEN, text)


def shown_key(test: GradedTest, hidden: HiddenText) -> str:
    """The test's ``file::name[id]`` as shown: a hidden test's parametrize id only when it is a
    plain word that gives nothing hidden away, else ``[<hidden>]``."""
    return shown_nodeid(test.key, "hidden" if test.suite == "hidden" else test.suite, hidden)


def shown_nodeid(nodeid: str, suite: str, hidden: HiddenText) -> str:
    """``nodeid`` as it may be printed for a test of ``suite`` (see ``shown_key``)."""
    if not suite.startswith("hidden") or not nodeid.endswith("]") or "[" not in nodeid:
        return nodeid
    base, _, param = nodeid[:-1].partition("[")
    plain = _PLAIN_ID.fullmatch(param) and redact_hidden(param, hidden) == param
    return nodeid if plain else f"{base}[{HIDDEN}]"
