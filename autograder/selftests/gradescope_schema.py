"""Check a results dict against the fields Gradescope reads, so a grade can never be rejected.

Read by the grader's selftests. Gradescope's autograder specification (its "Autograder
Specifications" page): top level ``score``, ``execution_time``, ``output``, ``tests``, and the
optional ``visibility``, ``stdout_visibility`` (each one of ``VISIBILITIES``) and ``extra_data``
(stored, never shown to students); each test ``name``, ``score``, ``max_score``, ``status``
("passed" or "failed"), ``output``, ``visibility``; an optional ``leaderboard`` list of
``{name, value[, order]}``. ``visibility``: "hidden" never shows a test to students,
"after_due_date" after the due date, "after_published" once grades are published, "visible"
at once (the default). ``hidden_shown_early`` checks this kit's rule on top: a hidden test
(``[hidden]`` in its name) never shows before publication.
"""

from __future__ import annotations

import json
import numbers

VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}


def problems_with(results: dict) -> list[str]:
    """Everything wrong with ``results``; empty when Gradescope will accept it."""
    errors = []
    try:
        json.dumps(results, allow_nan=False)
    except (TypeError, ValueError) as error:
        errors.append(f"not strict JSON: {error}")
    for key, kind in (("score", numbers.Real), ("execution_time", numbers.Real), ("output", str), ("tests", list)):
        if not isinstance(results.get(key), kind) or isinstance(results.get(key), bool):
            errors.append(f"top-level {key!r} missing or not {kind.__name__}")
    for index, test in enumerate(results.get("tests", []) or []):
        where = f"tests[{index}] ({test.get('name', '?')!r})"
        for key, kind in (("name", str), ("score", numbers.Real), ("max_score", numbers.Real), ("status", str),
                          ("output", str), ("visibility", str)):
            if not isinstance(test.get(key), kind) or isinstance(test.get(key), bool):
                errors.append(f"{where}: {key!r} missing or not {kind.__name__}")
        if errors:
            continue
        if test["status"] not in ("passed", "failed"):
            errors.append(f"{where}: status {test['status']!r} is not passed/failed")
        if test["visibility"] not in VISIBILITIES:
            errors.append(f"{where}: visibility {test['visibility']!r} is not one of {sorted(VISIBILITIES)}")
        if not 0 <= test["score"] <= test["max_score"] + 1e-9:
            errors.append(f"{where}: score {test['score']} outside [0, max_score={test['max_score']}]")
        if test["status"] == "failed" and test["score"] > 0:
            errors.append(f"{where}: failed but scored {test['score']}")
    if not errors and results["tests"]:
        total = sum(test["score"] for test in results["tests"])
        if abs(total - results["score"]) > 1e-3:
            errors.append(f"score {results['score']} is not the sum of the tests' scores {total}")
    for key in ("visibility", "stdout_visibility"):
        if key in results and results[key] not in VISIBILITIES:
            errors.append(f"top-level {key} {results[key]!r} is not one of {sorted(VISIBILITIES)}")
    if "extra_data" in results and not isinstance(results["extra_data"], dict):
        errors.append("top-level 'extra_data' is not an object")
    for index, entry in enumerate(results.get("leaderboard", []) or []):
        if not isinstance(entry, dict) or "name" not in entry or "value" not in entry:
            errors.append(f"leaderboard[{index}] needs name and value")
        elif entry.get("order", "asc") not in ("asc", "desc"):
            errors.append(f"leaderboard[{index}]: order must be asc or desc")
    return errors


def hidden_shown_early(results: dict) -> list[str]:
    """Names of hidden tests whose visibility shows them before grades are published."""
    return [test["name"] for test in results.get("tests", []) if "[hidden]" in test.get("name", "")
            and test.get("visibility") not in ("hidden", "after_published")]
