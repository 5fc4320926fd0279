"""The submission contract, checked on the two submissions this repo ships.

(a) The reference (``reference/``) passes every visible and hidden test.
(b) The stubs (this repo's root) fail every test, and only with the NotImplementedError of
    ``cs336_systems/_not_implemented.py``, whose message names the file and the handout section;
    nothing errors, nothing fails at collection. Exceptions: tests of the provided model
    (``tests/test_provided_*.py``) pass on the stubs, and GPU tests are skipped without a GPU.
(c) Stub modules and reference modules are the same files, and every public name of a stub
    (function, class, method, constant) exists in the reference with the same signature or
    value. The reference may have more public names: its helpers (Triton kernels, launchers)
    are not part of what students must write.

(a) and (b) run the whole of ``tests/`` and ``autograder/hidden_tests/`` in subprocesses, so
they cover every problem's tests, whichever file adds them. The two runs go in parallel.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.gpu_marker import SKIP_REASON

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "reference"
SUITES = ("tests", "autograder/hidden_tests")
PROVIDED_TESTS = re.compile(r"^tests/test_provided_\w*\.py$")
STUB_ERROR = ("NotImplementedError", re.compile(r"cs336_systems/\w+\.py"), re.compile(r"§\d+\.\d+"))
RUN_TIMEOUT_S = 1800


@dataclass
class Case:
    file: str
    name: str
    outcome: str  # passed, failed, error, skipped
    message: str  # the one-line message pytest reports (for a failure: "ErrorType: text")
    details: str = ""  # the traceback

    def __str__(self) -> str:
        return f"{self.file}::{self.name} [{self.outcome}] {self.message[:300]}"


@dataclass
class SuiteRun:
    returncode: int
    cases: list[Case]
    output: str


def _start(submission: Path, junit: Path) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "pytest", *SUITES,
        "--submission", str(submission),
        "-p", "no:cacheprovider",
        f"--junitxml={junit}",
        "-o", "junit_family=xunit1",  # keeps file paths in the report
        "-q", "-W", "ignore::DeprecationWarning",
    ]
    env = {key: value for key, value in os.environ.items() if key != "CS336_SUBMISSION"}
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _parse(junit: Path) -> list[Case]:
    cases = []
    for testcase in ET.parse(junit).getroot().iter("testcase"):
        file = testcase.get("file") or testcase.get("classname", "").replace(".", "/") + ".py"
        outcome, message, details = "passed", "", ""
        for kind in ("failure", "error", "skipped"):
            element = testcase.find(kind)
            if element is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                message, details = element.get("message") or "", element.text or ""
                break
        cases.append(Case(file, testcase.get("name", ""), outcome, message.strip(), details))
    return cases


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, SuiteRun]:
    """Run both suites on the reference and on the stubs, in parallel; parse their JUnit reports."""
    directory = tmp_path_factory.mktemp("contract")
    started = {
        name: (_start(submission, directory / f"{name}.xml"), directory / f"{name}.xml")
        for name, submission in (("reference", REFERENCE), ("stubs", ROOT))
    }
    results = {}
    for name, (process, junit) in started.items():
        output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
        cases = _parse(junit) if junit.exists() else []
        results[name] = SuiteRun(process.returncode, cases, output)
    return results


def test_reference_passes_every_test(runs):
    run = runs["reference"]
    assert run.cases, f"no test ran on the reference:\n{run.output[-3000:]}"
    bad = [case for case in run.cases if case.outcome in ("failed", "error")]
    assert not bad and run.returncode == 0, (
        f"the reference must pass every visible and hidden test; {len(bad)} did not:\n"
        + "\n".join(map(str, bad[:20]))
        + f"\n\npytest exit status {run.returncode}; first traceback:\n{bad[0].details[-2000:] if bad else run.output[-2000:]}"
    )
    skipped = [case for case in run.cases if case.outcome == "skipped" and SKIP_REASON not in case.message]
    assert not skipped, "only GPU tests may be skipped:\n" + "\n".join(map(str, skipped))


def test_stubs_fail_every_test_with_not_implemented(runs):
    run = runs["stubs"]
    assert run.returncode == 1, (
        f"on the stubs pytest must exit with 1 (tests failed), not {run.returncode} (2: interrupted, e.g. a "
        f"collection error; 3: internal error; 4: usage; 5: nothing collected). Output tail:\n{run.output[-3000:]}"
    )
    reference_names = {(case.file, case.name) for case in runs["reference"].cases}
    stub_names = {(case.file, case.name) for case in run.cases}
    assert stub_names == reference_names, (
        "both submissions must collect the same tests; only on the stubs: "
        f"{sorted(stub_names - reference_names)[:10]}, only on the reference: {sorted(reference_names - stub_names)[:10]}"
    )
    wrong = []
    for case in run.cases:
        if PROVIDED_TESTS.match(case.file):
            if case.outcome != "passed":
                wrong.append(case)  # tests of the provided model must pass on the stubs too
        elif case.outcome == "skipped":
            if SKIP_REASON not in case.message:
                wrong.append(case)
        elif case.outcome != "failed" or not _names_stub_error(case.message):
            wrong.append(case)
    assert not wrong, (
        f"on the stubs every test must fail with the stubs' NotImplementedError (naming file, function and "
        f"section); {len(wrong)} of {len(run.cases)} did something else:\n" + "\n".join(map(str, wrong[:25]))
    )


def _names_stub_error(message: str) -> bool:
    """Whether a failure's one-line message is the stubs' error: NotImplementedError, the file, the section."""
    name, file, section = STUB_ERROR
    return name in message and bool(file.search(message)) and bool(section.search(message))


# ----------------------------------------------------------------------------- (c) signatures


def _public_api(directory: str) -> dict[str, dict[str, str]]:
    """{module: {public name: signature or repr}} for every student module of the submission in ``directory``.

    Runs in a subprocess (one submission per process). Provided modules (``model.py`` and the
    like, which reference/ links to the stubs' copies) are skipped: they are the same file.
    """
    sys.path.insert(0, str(ROOT))
    from harness.submission import load_adapters

    load_adapters(Path(directory))
    import importlib

    api: dict[str, dict[str, str]] = {}
    for path in sorted((Path(directory) / "cs336_systems").glob("*.py")):
        if path.name.startswith("_") or (REFERENCE / "cs336_systems" / path.name).is_symlink():
            continue
        module = importlib.import_module(f"cs336_systems.{path.stem}")
        entries: dict[str, str] = {}
        for name, value in vars(module).items():
            if name.startswith("_") or inspect.ismodule(value):
                continue
            if getattr(value, "__module__", module.__name__) != module.__name__:
                continue  # imported from elsewhere
            entries[name] = _describe(value)
            if inspect.isclass(value):
                for attribute, member in vars(value).items():
                    if not attribute.startswith("_") or attribute == "__init__":
                        entries[f"{name}.{attribute}"] = _describe(inspect.getattr_static(value, attribute))
        api[path.stem] = entries
    print(json.dumps(api))
    return api


def _describe(value) -> str:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if callable(value):
        try:
            return f"{type(value).__name__}{inspect.signature(value)}"
        except (TypeError, ValueError):
            return type(value).__name__
    return repr(value)


def _start_api_dump(directory: Path) -> subprocess.Popen:
    env = dict(os.environ)
    env.setdefault("TRITON_INTERPRET", "1")
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from autograder.selftests.test_submission_contract import _public_api; _public_api(sys.argv[2])"
    )
    return subprocess.Popen(
        [sys.executable, "-c", script, str(ROOT), str(directory)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _api_of(process: subprocess.Popen, directory: Path) -> dict[str, dict[str, str]]:
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, f"could not import the modules of {directory}:\n{stderr[-3000:]}"
    return json.loads(stdout.strip().splitlines()[-1])


def test_stubs_and_reference_have_the_same_public_api():
    dumps = {directory: _start_api_dump(directory) for directory in (ROOT, REFERENCE)}
    stubs, reference = (_api_of(process, directory) for directory, process in dumps.items())
    assert sorted(stubs) == sorted(reference), (
        f"stub modules {sorted(stubs)} and reference modules {sorted(reference)} must be the same files"
    )
    differences = []
    for module in sorted(stubs):
        for name in sorted(stubs[module]):
            stub, solved = stubs[module][name], reference[module].get(name, "<missing>")
            if stub != solved:
                differences.append(f"{module}.{name}:\n    stub:      {stub}\n    reference: {solved}")
    assert not differences, (
        "every public name of a stub module is part of the contract: the reference must define it with the "
        "same signature (or, for a constant, the same value):\n" + "\n".join(differences)
    )
