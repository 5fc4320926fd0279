"""Pytest harness for the visible tests (tests/) and the hidden tests (autograder/).

Chooses the submission under test: ``--submission DIR``, else ``$CS336_SUBMISSION``, else this
directory (the student's own checkout). Tests get the submission's adapters through the
``adapters`` fixture. Tests marked ``gpu`` are skipped when no CUDA GPU is present, and Triton
kernels run under the interpreter (TRITON_INTERPRET=1) when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Must be set before triton is first imported by any test or submission module.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tests.submission import load_adapters, resolve_submission_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent


def pytest_addoption(parser):
    parser.addoption(
        "--submission",
        default=None,
        help="directory holding adapters.py and cs336_systems/ to test "
        "(default: $CS336_SUBMISSION, else the directory of this conftest.py)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped when none is present")
    config.submission_dir = resolve_submission_dir(config.getoption("--submission"), ROOT)


def pytest_report_header(config):
    return f"submission under test: {config.submission_dir}"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none found on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def submission_dir(pytestconfig) -> Path:
    """The directory of the submission under test."""
    return pytestconfig.submission_dir


@pytest.fixture(scope="session")
def adapters(submission_dir):
    """The submission's ``adapters`` module: the only way tests reach student code."""
    return load_adapters(submission_dir)
